"""The fused training/scoring forward reproduces the transformers forward: logits at the kept positions,
log-probs, entropies and gradients (Qwen2 and Llama, biases, grouped-query and multi-head attention,
tied and untied heads, right-padded whole rows and left-padded shared prompts), and is skipped where
it does not apply (LoRA, switched off, wrapped models, attention dropout, autocast)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from stratagym.agents.inference.fused_score import FusedScorer, fused_scorer_for, scoring_unsupported_reason
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.tiny_lm import tiny_lm_path
from tests.agents.test_scoring import _group_payloads

SFT = Path(__file__).resolve().parents[2] / "data" / "checkpoints" / "sft-searchqa"


def _tiny_llama(attention_bias: bool, mlp_bias: bool, kv_heads: int, tie: bool = False) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=800, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, attention_bias=attention_bias, mlp_bias=mlp_bias,
                      max_position_embeddings=128, tie_word_embeddings=tie, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():  # biases and norms start at 0 / 1: make them matter
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _tiny_qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen2Config(vocab_size=800, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True, pad_token_id=0)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _tiny_lm() -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_lm_path())


MODELS = {
    "qwen2-gqa-tied": _tiny_qwen2,
    "llama-mha": lambda: _tiny_llama(False, False, 4),
    "llama-gqa-all-biases": lambda: _tiny_llama(True, True, 2),
    "llama-tied": lambda: _tiny_llama(False, False, 2, tie=True),
    "tiny-lm": _tiny_lm,
}


def _tokenizer():
    return LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer  # ids < 800, a pad token


def _whole_payloads() -> list[dict]:
    g = torch.Generator().manual_seed(0)
    out = []
    for n_p, n_r in [(3, 9), (17, 1), (8, 5), (12, 12)]:
        out.append({"prompt_ids": torch.randint(3, 700, (n_p,), generator=g),
                    "response_ids": torch.randint(3, 700, (n_r,), generator=g), "sampling_logprobs": torch.zeros(n_r)})
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_fused_logits_equal_transformers_forward(name):
    """Both layouts, straight against the model: right-padded rows at per-row positions, and left-padded
    shared prompts continued by rows at their own positions."""
    model = MODELS[name]().eval()
    assert scoring_unsupported_reason(model) is None
    sc = FusedScorer(model)
    g = torch.Generator().manual_seed(2)
    lens = [(4, 6), (9, 2), (1, 8)]
    L = max(a + b for a, b in lens)
    ids = torch.zeros(len(lens), L, dtype=torch.long)
    for i, (a, b) in enumerate(lens):
        ids[i, : a + b] = torch.randint(3, 700, (a + b,), generator=g)
    keep = torch.stack([torch.arange(a - 1, a - 1 + 6).clamp(max=L - 2) for a, _ in lens])
    with torch.no_grad():
        got = sc.whole_rows(ids, keep)
        ref = model(input_ids=ids).logits.gather(1, keep[:, :, None].expand(-1, -1, model.config.vocab_size))
    assert float((got - ref).abs().max()) < 1e-5
    # shared prompts: 3 prompts (left-padded, one empty), rows in any order
    prompts = [torch.randint(3, 700, (n,), generator=g) for n in (5, 0, 11)]
    P = max(p.numel() for p in prompts)
    pre = torch.zeros(3, P, dtype=torch.long)
    pre_attn = torch.zeros(3, P, dtype=torch.long)
    for u, p in enumerate(prompts):
        pre[u, P - p.numel():], pre_attn[u, P - p.numel():] = p, 1
    expand = torch.tensor([2, 0, 1, 2, 0])
    S = 7
    suf = torch.randint(3, 700, (5, S), generator=g)
    pos = torch.stack([prompts[int(e)].numel() + torch.arange(S) for e in expand])
    with torch.no_grad():
        got = sc.shared_prompts(pre, pre_attn, expand, suf, pos)
        for b, e in enumerate(expand.tolist()):
            seq = torch.cat([prompts[e], suf[b]])[None]
            ref = model(input_ids=seq).logits[0, -S:]
            assert float((got[b] - ref).abs().max()) < 1e-5


@pytest.mark.parametrize("name", ["qwen2-gqa-tied", "llama-gqa-all-biases", "llama-mha"])
@pytest.mark.parametrize("layout", ["whole", "shared"])
def test_policy_scoring_fused_equals_transformers(name, layout):
    """Through the policy, as the trainer calls it (train mode, temperature, entropy): the same log-probs,
    entropies and parameter gradients with the fused forward as with the transformers forward."""
    pays = _whole_payloads() if layout == "whole" else _group_payloads()
    tok = _tokenizer()
    results = {}
    for fused in (True, False):
        model = MODELS[name]().train()
        pol = LLMPolicy(model, tok, LLMConfig(model="x", temperature=0.7, fused_scoring=fused))
        assert (pol.scoring.fused_scorer() is not None) == fused
        assert (pol.scoring.shared_prompts(pays) is not None) == (layout == "shared")
        res = pol.sequence_log_probs(pays, with_entropy=True)
        (res.logprobs * res.mask).sum().backward()
        with torch.no_grad():
            plain = pol.sequence_log_probs(pays)
        results[fused] = (res, plain, {n: p.grad.clone() for n, p in model.named_parameters()})
    (a, pa, ga), (b, pb, gb) = results[True], results[False]
    assert torch.equal(a.mask, b.mask)
    assert float((a.logprobs - b.logprobs).detach().abs().max()) < 1e-5
    assert float((a.entropy - b.entropy).detach().abs().max()) < 1e-5
    assert float((pa.logprobs - pb.logprobs).abs().max()) < 1e-5
    assert set(ga) == set(gb)
    for n in ga:
        assert torch.allclose(ga[n], gb[n], atol=1e-5, rtol=1e-4), n
        assert float(gb[n].abs().max()) > 0, n  # every parameter gets a gradient (biases, norms, head)


@pytest.mark.skipif(not (SFT / "config.json").exists(), reason="SFT checkpoint not present")
def test_sft_llama_checkpoint_takes_the_fused_path():
    pol = LLMPolicy.from_pretrained(str(SFT), config=LLMConfig(model=str(SFT)))
    assert pol.scoring.fused_scorer() is not None
    pays = _group_payloads()
    with torch.no_grad():
        res = pol.sequence_log_probs(pays)
        pol.config.fused_scoring = False
        ref = pol.sequence_log_probs(pays)
    assert float((res.logprobs - ref.logprobs).abs().max()) < 1e-5


def test_fallbacks():
    path = str(tiny_lm_path())
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=path, lora={"r": 4, "alpha": 8}))
    assert pol.scoring.fused_scorer() is None  # peft wrapper: the transformers forward (adapters included)
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=path, fused_scoring=False))
    assert pol.scoring.fused_scorer() is None
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=path))
    assert pol.scoring.fused_scorer() is not None

    class Wrapped(torch.nn.Module):  # the shape of a DDP / accelerate wrapper: the model under .module
        def __init__(self, module: torch.nn.Module):
            super().__init__()
            self.module = module

    bare = pol.model
    pol.model = Wrapped(bare)
    assert pol.scoring.fused_scorer() is None
    pol.model = bare
    bare.config.attention_dropout = 0.1
    assert "dropout" in scoring_unsupported_reason(bare.train())
    assert scoring_unsupported_reason(bare.eval()) is None  # no dropout at eval
    bare.config.attention_dropout = 0.0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused_scorer_for(bare) is None
    handle = bare.model.layers[0].register_forward_hook(lambda *a: None)
    assert "hooks" in scoring_unsupported_reason(bare)
    handle.remove()
    assert fused_scorer_for(bare) is not None
    with torch.device("meta"):  # off the CPU (GPU kernels need no materialised scores): transformers
        off_cpu = _tiny_llama(False, False, 2)
    assert "device" in scoring_unsupported_reason(off_cpu)


def test_batches_too_large_for_the_score_budget_use_the_transformers_forward(monkeypatch):
    """Batches whose additive mask would pass ``max_mask_bytes`` are scored by the transformers forward,
    with the same results."""
    path = str(tiny_lm_path())
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=path))
    sc = pol.scoring.fused_scorer()
    assert sc.fits(16, 64, 128) and not sc.fits(64, 4096, 4096)
    calls = []
    real = FusedScorer.whole_rows, FusedScorer.shared_prompts
    monkeypatch.setattr(FusedScorer, "whole_rows", lambda self, *a: calls.append("whole") or real[0](self, *a))
    monkeypatch.setattr(FusedScorer, "shared_prompts", lambda self, *a: calls.append("shared") or real[1](self, *a))
    results = []
    for budget in (1 << 28, 1):
        monkeypatch.setattr(FusedScorer, "max_mask_bytes", budget)
        with torch.no_grad():
            results.append((pol.sequence_log_probs(_whole_payloads()).logprobs,
                            pol.sequence_log_probs(_group_payloads()).logprobs))
    assert calls == ["whole", "shared"]  # the second round went to the transformers forward
    for a, b in zip(*results):
        assert float((a - b).abs().max()) < 1e-5
