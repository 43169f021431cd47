"""Log-prob parity: the engine that sampled a turn and the trainer that scores it must agree.

The importance ratio of every policy loss is ``exp(logp_trainer - logp_old)``, and on the first update
of a step ``logp_old`` is what the sampler saw. When the engine that sampled (vLLM, or the ``hf``
backend's fused decoder) and the trainer's scoring forward disagree -- other weights (a skipped or
broken weight sync), another dtype, another temperature, text re-tokenised into other ids -- the
ratios are off from the first token and nothing crashes: the most reported silent failure of multi-turn
RL frameworks. So every step compares, token by token, the log-prob the sampler reported for each
sampled token with the trainer's log-prob of the same token id under the same weights, and logs:

* ``parity/mean_abs``, ``parity/max_abs``: mean and largest ``|engine - trainer|`` over the step's tokens;
* ``parity/frac_over``: the share of tokens over ``rollout.parity_tol`` (default 0.1 nats);
* ``parity/retokenized``: the share of turns whose sampled ids do NOT come back from decoding them to
  text and encoding that text again. The trainer never re-encodes (it scores the sampled ids, carried
  in the payload), so this is what a text-based pipeline would have got wrong, not an error here;
* ``parity/length_mismatch``: the share of turns whose scored length differs from the sampled one.
  It must be 0 (the trainer scores exactly the sampled ids); any other value stops the run.

``rollout.parity_max`` (off by default) stops the run at the first token whose difference exceeds it,
naming the step, the turn, the task and both values (:class:`ParityError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from stratagym.errors import ConfigError

__all__ = ["ParityReport", "ParityError", "logprob_parity", "check_parity"]


class ParityError(ConfigError):
    """The sampler's and the trainer's log-probs of the same tokens differ by more than ``rollout.parity_max``."""


@dataclass
class ParityReport:
    """Token-level comparison of sampling and scoring log-probs for one step's samples."""

    tokens: int
    turns: int
    mean_abs: float
    max_abs: float
    frac_over: float
    retokenized: float
    length_mismatch: float
    #: (sample index, token index, engine log-prob, trainer log-prob) of the largest difference
    worst: Optional[tuple[int, int, float, float]] = None

    def metrics(self) -> dict[str, float]:
        return {
            "parity/mean_abs": self.mean_abs,
            "parity/max_abs": self.max_abs,
            "parity/frac_over": self.frac_over,
            "parity/retokenized": self.retokenized,
            "parity/length_mismatch": self.length_mismatch,
        }


def _retokenizes_differently(tokenizer: Any, ids: list[int]) -> bool:
    text = tokenizer.decode(ids, skip_special_tokens=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) != ids


def logprob_parity(sampled: Sequence[Optional[torch.Tensor]], scored: Sequence[Optional[torch.Tensor]], *,
                   tol: float = 0.1, response_ids: Optional[Sequence[Sequence[int]]] = None,
                   tokenizer: Any = None) -> Optional[ParityReport]:
    """Compare per-turn sampling log-probs with the trainer's log-probs of the same tokens.

    ``sampled[i]`` / ``scored[i]``: 1-D tensors over turn i's response tokens (None where a turn has no
    sampling log-probs, e.g. a scorer policy's payload: such turns are left out). ``response_ids`` and
    ``tokenizer``, when given, measure ``retokenized``. Returns None when no turn can be compared.
    """
    diffs: list[torch.Tensor] = []
    owners: list[int] = []
    turns = mismatched = retok = 0
    for i, (a, b) in enumerate(zip(sampled, scored)):
        if a is None or b is None:
            continue
        turns += 1
        a = a.detach().float().cpu().reshape(-1)
        b = b.detach().float().cpu().reshape(-1)
        if a.numel() != b.numel():
            mismatched += 1
            n = min(a.numel(), b.numel())
            a, b = a[:n], b[:n]
        diffs.append((a - b).abs())
        owners.append(i)
        if tokenizer is not None and response_ids is not None and len(response_ids[i]):
            retok += _retokenizes_differently(tokenizer, [int(t) for t in response_ids[i]])
    if not turns:
        return None
    flat = torch.cat(diffs) if diffs else torch.zeros(0)
    worst = None
    if flat.numel():
        k = int(flat.argmax())
        for d, i in zip(diffs, owners):
            if k < d.numel():
                worst = (i, k, float(sampled[i].reshape(-1)[k]), float(scored[i].reshape(-1)[k]))
                break
            k -= d.numel()
    return ParityReport(
        tokens=int(flat.numel()),
        turns=turns,
        mean_abs=float(flat.mean()) if flat.numel() else 0.0,
        max_abs=float(flat.max()) if flat.numel() else 0.0,
        frac_over=float((flat > tol).float().mean()) if flat.numel() else 0.0,
        retokenized=retok / turns,
        length_mismatch=mismatched / turns,
        worst=worst,
    )


def check_parity(report: Optional[ParityReport], *, step: int, parity_max: Optional[float],
                 describe: Any = None) -> None:
    """Raise :class:`ParityError` when ``report`` breaks the bound (or any turn's length differs).

    ``describe(i)`` names sample i for the message (e.g. "turn 2 of task 'nq-17'")."""
    if report is None:
        return
    name = (lambda i: f"sample {i}") if describe is None else describe
    if report.length_mismatch > 0:
        raise ParityError(
            f"log-prob parity failed at step {step}: {report.length_mismatch:.0%} of turns were scored with another "
            "number of tokens than were sampled (the trainer must score the sampled token ids)"
        )
    if parity_max is None or report.worst is None or report.max_abs <= parity_max:
        return
    i, k, engine, trainer = report.worst
    raise ParityError(
        f"log-prob parity failed at step {step}: {name(i)}, token {k}: the sampler reported log-prob {engine:.6f}, "
        f"the trainer computes {trainer:.6f} (|difference| {abs(engine - trainer):.4g} > rollout.parity_max "
        f"{parity_max}). The engine that sampled and the trainer disagree: check the weight sync, dtype and "
        "temperature, or raise rollout.parity_max (null turns the check off)."
    )
