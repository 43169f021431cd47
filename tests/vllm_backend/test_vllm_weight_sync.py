"""Weight sync into the ``vllm`` backend after optimizer steps: full models and LoRA, twice in a row, and
the engine is stale without it (so these tests fail when the sync is skipped)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

pytestmark = pytest.mark.vllm

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from stratagym.agents.backends import HFGenerator, SamplingConfig  # noqa: E402
from stratagym.agents.llm import LLMPolicy  # noqa: E402
from stratagym.agents.policy import GenerationRequest  # noqa: E402
from tests.vllm_backend.test_vllm_generation import ENV_KWARGS, SFT, STOPS, searchqa_prompts  # noqa: E402


@pytest.fixture(scope="module")
def sft_policy() -> LLMPolicy:
    return LLMPolicy.from_pretrained(SFT)


# ---- weight sync -------------------------------------------------------------------------------------


def _train_towards(policy: LLMPolicy, prompts: list[list[int]], target: list[int], lr: float) -> None:
    """One AdamW step raising the log-prob of ``target`` after every prompt (changes greedy outputs)."""
    payloads = [{"prompt_ids": torch.tensor(p), "response_ids": torch.tensor(target),
                 "sampling_logprobs": torch.zeros(len(target))} for p in prompts]
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    policy.train()
    res = policy.sequence_log_probs(payloads)
    (-(res.logprobs * res.mask).sum()).backward()
    opt.step()
    opt.zero_grad()
    policy.eval()
    policy.after_optimizer_step()


def _greedy_ids(policy: LLMPolicy, prompts, n=16):
    return [g.response_ids for g in policy.backend.generate(prompts, (), SamplingConfig(max_new_tokens=n), greedy=True)]


def test_weight_sync_full_model_twice_and_without_sync_the_engine_is_stale(sft_policy):
    policy = LLMPolicy.from_pretrained(SFT, backend="vllm", vllm={"max_model_len": 1024})
    prompts = searchqa_prompts(sft_policy, 3)
    hf = HFGenerator(policy.tokenizer, lambda: policy.model)
    cfg = SamplingConfig(max_new_tokens=16)

    def hf_ids():
        return [g.response_ids for g in hf.generate(prompts, (), cfg, greedy=True)]

    policy.generate([])  # nothing to do
    policy.backend.sync_weights(policy.model)
    start = _greedy_ids(policy, prompts)
    assert start == hf_ids()
    seen = [start]
    for target in ([17, 18, 19, 20], [30, 31, 32, 33]):
        _train_towards(policy, prompts, target, lr=0.05)
        assert policy._dirty  # the policy syncs before its next generation
        stale = _greedy_ids(policy, prompts)  # the engine directly, no sync: the old weights
        assert stale == seen[-1] and stale != hf_ids()
        policy.backend.sync_weights(policy.model)
        policy._dirty = False
        now = _greedy_ids(policy, prompts)
        assert now == hf_ids() and now != seen[-1]
        seen.append(now)
    assert policy.backend.syncs == 3 and policy.weight_sync_seconds > 0
    policy.close()


def test_weight_sync_through_policy_generate_with_lora(sft_policy):
    policy = LLMPolicy.from_pretrained(SFT, backend="vllm", vllm={"max_model_len": 1024},
                                       lora={"r": 4, "alpha": 16, "target_modules": ["q_proj", "v_proj", "down_proj"]})
    assert policy.is_lora
    prompts = searchqa_prompts(sft_policy, 3)
    reqs = []
    env = gym.make("stratagym/SearchQA-v0", **ENV_KWARGS)
    for i in range(3):
        obs, info = env.reset(seed=0, options={"task_id": env.unwrapped.task_ids()[i]})
        reqs.append(GenerationRequest(env_id="stratagym/SearchQA-v0", observation=obs, info=info, history=[]))
    env.close()
    hf = HFGenerator(policy.tokenizer, lambda: policy.model)

    def hf_texts():
        return [g.text for g in hf.generate(prompts, STOPS, policy.sampling, greedy=True)]

    before = [g.text for g in policy.generate(reqs, greedy=True)]  # syncs the (zero) adapters
    assert before == hf_texts()
    _train_towards(policy, prompts, [17, 18, 19, 20], lr=0.2)
    after = [g.text for g in policy.generate(reqs, greedy=True)]  # syncs the merged adapters
    assert after == hf_texts() and after != before
    # unmerged again after the sync: the LoRA model still trains through its adapters
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    policy.close()
