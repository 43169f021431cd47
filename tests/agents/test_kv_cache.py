"""The transformers KV cache is passed back under the keyword the installed transformers declares, so the
cache is really used (a dropped cache would change the next token's logits), and the transformers-loop
generation and shared-prompt scoring never use the deprecated ``past_key_values`` keyword, whose removal
(transformers 5.40) would otherwise drop the cache silently."""

from __future__ import annotations

import inspect
import warnings

import torch

from stratagym.agents.backends import HFGenerator, SamplingConfig
from stratagym.agents.inference.kv_cache import returned_cache
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.tiny_lm import tiny_lm_path


def _tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=61, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1)).eval()


def test_returned_cache_is_passed_back_under_the_declared_keyword_and_used():
    model = _tiny_llama()
    ids = torch.tensor([[5, 9, 14, 3]])
    with torch.no_grad():
        out = model(input_ids=ids[:, :3], use_cache=True)
        keyword, cache = returned_cache(out)
        assert keyword in inspect.signature(type(model).forward).parameters
        step = model(input_ids=ids[:, 3:], **{keyword: cache}, use_cache=True).logits[0, -1]
        alone = model(input_ids=ids[:, 3:]).logits[0, -1]  # what a dropped cache would give
        whole = model(input_ids=ids).logits[0, -1]
    assert torch.allclose(step, whole, atol=1e-5)
    assert not torch.allclose(step, alone, atol=1e-3)


def test_transformers_paths_use_no_deprecated_cache_keyword():
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), temperature=0.7, fused_scoring=False))
    prompt = pol.tokenizer("put a clean apple in fridge")["input_ids"]
    g = torch.Generator().manual_seed(0)
    pays = [{"prompt_ids": torch.tensor(prompt), "response_ids": torch.randint(3, 700, (n,), generator=g),
             "sampling_logprobs": torch.zeros(n)} for n in (2, 5)]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*")
        gens = HFGenerator(pol.tokenizer, lambda: pol.model, fused=False).generate(
            [prompt] * 2, [], SamplingConfig(max_new_tokens=6), greedy=True)
        assert pol.scoring.shared_prompts(pays) is not None  # the prefix-cache scoring path is the one run
        with torch.no_grad():
            res = pol.sequence_log_probs(pays)
    assert all(len(x.response_ids) > 0 for x in gens)
    assert torch.isfinite(res.logprobs).all()
