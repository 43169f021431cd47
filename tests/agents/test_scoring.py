"""Re-scoring layouts agree: the right-padded, mask-free scoring (causal attention alone) gives the same
log-probs, entropies and gradients as the left-padded, masked one, for prompts and responses of different
lengths, and both match a one-sequence-at-a-time forward."""

from __future__ import annotations

import pytest
import torch

import stratagym.agents.inference.scoring as scoring
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
    path = tiny_lm_path()  # the transformers layouts (the fused forward is compared in test_fused_score.py)
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), temperature=0.7, fused_scoring=False))
    pays = _payloads()
    results = {}
    for right in (True, False):
        monkeypatch.setattr(scoring, "per_row_logits_to_keep", lambda r=right: r)
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


def _group_payloads() -> list[dict]:
    """Three groups sharing a prompt each (1, 9 and 20 tokens: one with nothing before its last token),
    responses of different lengths within a group."""
    g = torch.Generator().manual_seed(1)
    out = []
    for n_p in (1, 9, 20):
        prompt = torch.randint(3, 700, (n_p,), generator=g)
        for n_r in (1, 7, 15, 4):
            out.append({"prompt_ids": prompt.clone(), "response_ids": torch.randint(3, 700, (n_r,), generator=g),
                        "sampling_logprobs": torch.zeros(n_r)})
    return out


@pytest.mark.parametrize("fused", [False, True], ids=["transformers", "fused"])
def test_shared_prompt_scoring_matches_whole_rows(fused):
    """Each distinct prompt scored once, its KV cache reused by the rows sharing it: the same log-probs,
    entropies and gradients (including those flowing back through the shared prompt pass) as scoring
    every row whole, and the path is really taken (with the transformers forward and the fused one)."""
    path = tiny_lm_path()
    pays = _group_payloads()
    results = {}
    for shared in (True, False):
        pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), temperature=0.7,
                                                               shared_prompt_scoring=shared, fused_scoring=fused))
        assert (pol.scoring.shared_prompts(pays) is not None) == shared
        res = pol.sequence_log_probs(pays, with_entropy=True)
        (res.logprobs * res.mask).sum().backward()
        results[shared] = (res, [p.grad.clone() for p in pol.parameters()])
    (a, ga), (b, gb) = results[True], results[False]
    assert torch.equal(a.mask, b.mask) and a.mask.sum(1).tolist() == [1, 7, 15, 4] * 3
    assert torch.isfinite(a.logprobs).all() and torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert torch.allclose(a.entropy, b.entropy, atol=1e-5)
    assert float(a.logprobs.detach()[~a.mask].abs().sum()) == 0.0
    assert all(torch.allclose(x, y, atol=1e-5, rtol=1e-4) for x, y in zip(ga, gb))


def test_shared_prompt_scoring_only_when_prompts_repeat():
    """Distinct prompts (nothing to share), or a wrapped model, score rows whole."""
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path)))
    assert pol.scoring.shared_prompts(_payloads()) is None
    assert pol.scoring.shared_prompts(_group_payloads()) is not None

    class Wrapped(torch.nn.Module):  # the shape of a DDP / accelerate wrapper: the model under .module
        def __init__(self, module: torch.nn.Module):
            super().__init__()
            self.module = module

    pol.model = Wrapped(pol.model)
    assert pol.scoring.shared_prompts(_group_payloads()) is None


def _lora_policy(**options) -> LLMPolicy:
    """The tiny model with the same random, non-zero LoRA adapters (so that the policy and its reference
    view differ), built with ``options``."""
    path = str(tiny_lm_path())
    torch.manual_seed(0)
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(
        model=path, lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, **options))
    for p in pol.parameters():
        torch.nn.init.normal_(p, std=0.05)
    return pol


def test_shared_prompt_scoring_with_lora_and_its_reference():
    """A LoRA policy (peft wrapper) and its reference view (adapters disabled) take the shared path too,
    with the same log-probs and adapter gradients as whole rows."""
    pays = _group_payloads()
    results = {}
    for shared in (True, False):
        pol = _lora_policy(shared_prompt_scoring=shared)
        assert (pol.scoring.shared_prompts(pays) is not None) == shared
        res = pol.sequence_log_probs(pays)
        (res.logprobs * res.mask).sum().backward()
        with torch.no_grad():
            ref = pol.frozen_copy().sequence_log_probs(pays)
        results[shared] = (res.logprobs.detach(), ref.logprobs, [p.grad.clone() for p in pol.parameters()])
    (a, ra, ga), (b, rb, gb) = results[True], results[False]
    assert float((a - ra).abs().max()) > 1e-3  # the adapters matter
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(ra, rb, atol=1e-5)
    assert len(ga) == 8 and all(torch.allclose(x, y, atol=1e-5, rtol=1e-4) for x, y in zip(ga, gb))


def _trajectory_payloads() -> list[dict]:
    """Three 3-turn trajectories whose prompts keep the history verbatim (turn t's prompt = turn t-1's
    prompt + response + an observation), one whose later prompt drops its oldest tokens (a sliding
    window: nothing to share), and a one-turn row; responses of different lengths."""
    g = torch.Generator().manual_seed(2)
    rand = lambda n: torch.randint(3, 700, (n,), generator=g)  # noqa: E731
    out = []
    for n_p, lens in [(6, (3, 8, 2)), (1, (5, 1, 9)), (14, (7, 4, 4))]:
        prompt = rand(n_p)
        for n_r in lens:
            resp = rand(n_r)
            out.append({"prompt_ids": prompt.clone(), "response_ids": resp, "sampling_logprobs": torch.zeros(n_r)})
            prompt = torch.cat([prompt, resp, rand(5)])
    first = {"prompt_ids": rand(10), "response_ids": rand(6), "sampling_logprobs": torch.zeros(6)}
    out.append(first)
    slid = torch.cat([first["prompt_ids"], first["response_ids"], rand(4)])[3:]
    out.append({"prompt_ids": slid, "response_ids": rand(3), "sampling_logprobs": torch.zeros(3)})
    out.append({"prompt_ids": rand(4), "response_ids": rand(11), "sampling_logprobs": torch.zeros(11)})
    return out


def test_shared_history_scoring_matches_whole_rows():
    """Earlier turns read out of their trajectory's last row: the same log-probs, entropies and gradients
    as scoring every row whole, and only verbatim histories are shared."""
    path = tiny_lm_path()
    pays = _trajectory_payloads()
    results = {}
    for shared in (True, False):
        pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), temperature=0.7,
                                                               shared_history_scoring=shared))
        hosts = pol.scoring.history_hosts(pays, pol.scoring.shared_prompts(pays))
        if shared:  # each 3-turn trajectory is read out of its third row; the sliding window is not shared
            assert hosts == [2, 2, 2, 5, 5, 5, 8, 8, 8, 9, 10, 11]
        else:
            assert hosts is None
        res = pol.sequence_log_probs(pays, with_entropy=True)
        (res.logprobs * res.mask).sum().backward()
        results[shared] = (res, [p.grad.clone() for p in pol.parameters()])
    (a, ga), (b, gb) = results[True], results[False]
    assert torch.equal(a.mask, b.mask) and a.mask.sum(1).tolist() == [3, 8, 2, 5, 1, 9, 7, 4, 4, 6, 3, 11]
    assert torch.isfinite(a.logprobs).all() and torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert torch.allclose(a.entropy, b.entropy, atol=1e-5)
    assert float(a.logprobs.detach()[~a.mask].abs().sum()) == 0.0
    assert all(torch.allclose(x, y, atol=1e-5, rtol=1e-4) for x, y in zip(ga, gb))


def test_shared_history_scoring_with_lora_and_its_reference(monkeypatch):
    """A LoRA policy, which the fused forward does not cover (peft replaces the linear layers), reads earlier
    turns out of their trajectory's last row through the model's own forward: the same log-probs,
    entropies and adapter gradients as whole rows, for the policy and its reference view."""
    pays = _trajectory_payloads()
    results = {}
    for shared in (True, False):
        pol = _lora_policy(temperature=0.7, shared_history_scoring=shared)
        assert pol.scoring.fused_scorer() is None
        calls, real = [], scoring.LayoutScorer._host_logits
        monkeypatch.setattr(scoring.LayoutScorer, "_host_logits", lambda self, *a: calls.append(1) or real(self, *a))
        res = pol.sequence_log_probs(pays, with_entropy=True)
        (res.logprobs * res.mask).sum().backward()
        with torch.no_grad():
            ref = pol.frozen_copy().sequence_log_probs(pays)
        assert (len(calls) == 2) == shared  # the policy's pass and the reference's
        results[shared] = (res, ref.logprobs, [p.grad.clone() for p in pol.parameters()])
    (a, ra, ga), (b, rb, gb) = results[True], results[False]
    assert float((a.logprobs.detach() - ra).abs().max()) > 1e-3  # the adapters matter
    assert torch.equal(a.mask, b.mask) and torch.isfinite(a.logprobs).all()
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5) and torch.allclose(ra, rb, atol=1e-5)
    assert torch.allclose(a.entropy, b.entropy, atol=1e-5)
    assert float(a.logprobs.detach()[~a.mask].abs().sum()) == 0.0
    assert len(ga) == 8 and all(torch.allclose(x, y, atol=1e-5, rtol=1e-4) for x, y in zip(ga, gb))


def test_shared_history_scoring_only_when_it_saves_tokens():
    """Rows with nothing to share, or sharing too little, keep the other layouts (a LoRA policy, without the
    fused forward, shares through its own: test_shared_history_scoring_with_lora_and_its_reference)."""
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path)))
    assert pol.scoring.history_hosts(_payloads(), None) is None
    assert pol.scoring.history_hosts(_group_payloads(), pol.scoring.shared_prompts(_group_payloads())) is None
    g = torch.Generator().manual_seed(3)
    long_row = {"prompt_ids": torch.randint(3, 700, (40,), generator=g), "response_ids": torch.randint(3, 700, (2,), generator=g),
                "sampling_logprobs": torch.zeros(2)}
    # a 2-token history inside one of four 42-token rows: one row of five saved is less than a quarter
    short = {"prompt_ids": long_row["prompt_ids"][:1], "response_ids": long_row["prompt_ids"][1:2], "sampling_logprobs": torch.zeros(1)}
    others = [{"prompt_ids": torch.randint(3, 700, (40,), generator=g), "response_ids": torch.randint(3, 700, (2,), generator=g),
               "sampling_logprobs": torch.zeros(2)} for _ in range(3)]
    assert pol.scoring.history_hosts([short, long_row, *others], None) is None
    assert pol.scoring.history_hosts([short, long_row, *others[:2]], None) == [1, 1, 2, 3]
