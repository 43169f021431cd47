"""Re-scoring layouts agree: the right-padded, mask-free scoring (causal attention alone) gives the same
log-probs, entropies and gradients as the left-padded, masked one, for prompts and responses of different
lengths, and both match a one-sequence-at-a-time forward."""

from __future__ import annotations

import torch

import stratagym.agents.llm as llm
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.tiny_lm import tiny_lm_path


def _payloads() -> list[dict]:
    g = torch.Generator().manual_seed(0)
    out = []
    for n_p, n_r in [(3, 9), (17, 1), (8, 5), (12, 12)]:
        out.append({"prompt_ids": torch.randint(3, 700, (n_p,), generator=g),
                    "response_ids": torch.randint(3, 700, (n_r,), generator=g),
                    "sampling_logprobs": torch.zeros(n_r)})
    return out


def test_right_and_left_padded_scoring_agree(monkeypatch):
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), temperature=0.7))
    pays = _payloads()
    results = {}
    for right in (True, False):
        monkeypatch.setattr(llm, "_per_row_logits_to_keep", lambda r=right: r)
        pol.model.zero_grad(set_to_none=True)
        res = pol.sequence_log_probs(pays, with_entropy=True)
        (res.logprobs * res.mask).sum().backward()
        plain = pol.sequence_log_probs(pays)  # the log_softmax path (no entropy)
        grads = [p.grad.clone() for p in pol.parameters()]
        results[right] = (res, plain, grads)
    (a, pa, ga), (b, pb, gb) = results[True], results[False]
    assert torch.equal(a.mask, b.mask) and a.mask.sum(1).tolist() == [9, 1, 5, 12]
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5) and torch.allclose(a.entropy, b.entropy, atol=1e-5)
    assert torch.allclose(pa.logprobs, a.logprobs, atol=1e-5) and torch.allclose(pb.logprobs, b.logprobs, atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(ga, gb))
    with torch.no_grad():  # one sequence at a time, no padding at all
        for i, p in enumerate(pays):
            seq = torch.cat([p["prompt_ids"], p["response_ids"]])[None]
            logits = pol.model(input_ids=seq).logits[0, :-1] / 0.7
            ref = torch.log_softmax(logits, -1).gather(-1, seq[0, 1:, None])[:, 0][-p["response_ids"].numel():]
            assert torch.allclose(a.logprobs[i, : ref.numel()], ref, atol=1e-5)
            assert float(a.logprobs[i, ref.numel():].abs().sum()) == 0.0
    pol.model.zero_grad(set_to_none=True)
