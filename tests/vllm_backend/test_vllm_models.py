"""The ``vllm`` backend on a Qwen2 model (biases, grouped KV heads, EOS) and on folders vLLM cannot load."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.vllm

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from stratagym.agents.backends import SamplingConfig, VLLMGenerator  # noqa: E402
from stratagym.agents.llm import LLMPolicy  # noqa: E402
from stratagym.errors import ConfigError  # noqa: E402
from tests.vllm_backend.test_vllm_generation import SFT, hf_generate, searchqa_prompts  # noqa: E402


@pytest.fixture(scope="module")
def sft_policy() -> LLMPolicy:
    return LLMPolicy.from_pretrained(SFT)


def _tiny_qwen2(tok) -> torch.nn.Module:
    """A Qwen2 model with q/k/v biases and grouped KV heads (4 query heads, 2 KV heads), random weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(3)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=None)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)  # biases start at zero: make them matter
    return model.eval()


def test_greedy_ids_equal_hf_for_qwen2_with_biases_grouped_kv_stop_and_eos(tmp_path, sft_policy):
    """Random weights never pick the EOS id by themselves, so the test renames a token: the first prompt's
    greedy output is computed, then the embedding and output rows of one of its later tokens are swapped
    with EOS's. Every computation is unchanged but that token is now EOS, so the first row ends there."""
    tok = sft_policy.tokenizer
    model = _tiny_qwen2(tok)
    prompts = searchqa_prompts(sft_policy, 4)
    eos = tok.eos_token_id
    with torch.no_grad():
        first = model.generate(torch.tensor([prompts[0]]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                               pad_token_id=tok.pad_token_id)[0, len(prompts[0]):].tolist()
        in_prompts = {t for p in prompts for t in p} | {eos}
        k, c = next((k, t) for k, t in enumerate(first) if k >= 2 and t not in in_prompts and t not in first[:k])
        for w in (model.model.embed_tokens.weight, model.lm_head.weight):
            w[[c, eos]] = w[[eos, c]]
    folder = tmp_path / "qwen2-tiny"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    policy = LLMPolicy.from_pretrained(folder)
    engine = VLLMGenerator(str(folder), dtype="float32", max_model_len=1024)
    stop_text = tok.decode(first[1:2])
    for stop in ((), (stop_text,)):  # EOS alone, then a stop string that ends the second token
        cfg = SamplingConfig(max_new_tokens=24)
        a = hf_generate(policy, prompts, stop, cfg)
        b = engine.generate(prompts, stop, cfg, greedy=True)
        assert [g.response_ids for g in a] == [g.response_ids for g in b]
        assert [g.text for g in a] == [g.text for g in b]
        assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    b = engine.generate(prompts, (), SamplingConfig(max_new_tokens=24), greedy=True)
    assert b[0].finish_reason == "eos" and b[0].response_ids == first[:k] + [eos]
    stopped = engine.generate(prompts, (stop_text,), SamplingConfig(max_new_tokens=24), greedy=True)
    assert stopped[0].finish_reason == "stop" and stopped[0].response_ids == first[:2]
    engine.close()


def test_a_model_vllm_cannot_load_is_a_config_error(tmp_path):
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "no-such-architecture", "architectures": ["NoSuchLM"]}))
    with pytest.raises(ConfigError, match="vLLM could not load the model .*not-a-model.*backend: hf"):
        VLLMGenerator(str(bad), dtype="float32")




def test_a_model_the_cpu_kernels_cannot_run_is_refused_at_load():
    """vLLM's CPU attention has no kernel for head_dim 16 (the tiny test model's); without the warm-up
    generation at load this surfaced as a RuntimeError at the first rollout."""
    from stratagym.agents.tiny_lm import tiny_lm_path

    with pytest.raises(ConfigError, match="vLLM could not load the model .*head_dim=16.*backend: hf"):
        VLLMGenerator(str(tiny_lm_path()), dtype="float32", max_model_len=512)


def test_eval_cli_with_a_max_model_len_shorter_than_the_prompt(tmp_path):
    """The engine loads, the first prompt does not fit: exit 2 with the fix, no traceback, no record."""
    import subprocess
    import sys

    from tests.vllm_backend.test_vllm_generation import ENV_KWARGS

    out = tmp_path / "r.json"
    args = ["eval", str(SFT), "--env", "stratagym/SearchQA-v0", "-n", "1", "-P", "backend=vllm",
            "-P", "vllm={max_model_len: 64}", "--out", str(out), "-q"]
    args += [x for k, v in ENV_KWARGS.items() if k != "split" for x in ("-E", f"{k}={json.dumps(v)}")]
    res = subprocess.run([sys.executable, "-c", f"from stratagym.cli import main; main({args!r})"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path,
                         env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                              "PYTHONPATH": str(SFT.parents[2])})
    text = res.stdout + res.stderr
    assert res.returncode == 2, text[-3000:]
    assert "Traceback" not in text
    assert "does not fit vLLM's max_model_len 64: raise policy.vllm.max_model_len" in text
    assert not out.exists()
