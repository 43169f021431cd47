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

``rollout.parity_max`` stops the run at the first token whose difference exceeds it, naming the step,
the turn, the task and both values (:class:`ParityError`); ``rollout.parity_mean_max`` stops it when the
step's mean difference exceeds that. Both default to ``auto``: the bounds of :data:`DEFAULT_BOUNDS` for the
dtype the policy computes in, set from measured healthy runs with room to spare (``docs/training.md``,
"Log-prob parity"), so that a healthy run never trips them and a broken sampler (other weights, another
temperature, another model) does. ``null`` turns a bound off.

A run that stops on a bound leaves the evidence beside its checkpoints (:func:`write_parity_evidence`:
``parity-failure-step-<N>.json``, the worst turns' token ids, texts and both log-prob rows), so the turn
can be scored again, e.g. in float32 by :func:`rescore_parity_evidence`, to tell bf16 noise on one token
from a sampler fault before a bound is raised; ``--resume`` with another ``rollout.parity_max`` then
continues from the last checkpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from stratagym.atomic import write_json_atomic
from stratagym.errors import ConfigError
from stratagym.precision import dtype_name

__all__ = ["DEFAULT_BOUNDS", "ParityReport", "ParityError", "logprob_parity", "check_parity", "parity_bounds",
           "write_parity_evidence", "rescore_parity_evidence"]

#: (max_abs, mean_abs) bounds in nats per compute dtype for ``parity_max`` / ``parity_mean_max: auto``.
#: Measured healthy runs (docs/training.md): float32, hf fused decoder vs scoring ~1e-5 max, vLLM (CPU)
#: 8.6e-6 max; bfloat16, SmolLM2 LoRA hf sampling vs scoring up to 0.4 max and 0.005 mean per step,
#: vLLM bf16 vs hf bf16 scoring 0.6 max / 0.03 mean. A sampler on other weights or another temperature
#: is off by 0.1-1 nats on average.
DEFAULT_BOUNDS: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (0.05, 0.002),
    torch.bfloat16: (2.0, 0.06),
    torch.float16: (1.0, 0.03),
}


def parity_bounds(parity_max: Any, parity_mean_max: Any, dtype: torch.dtype) -> tuple[Optional[float], Optional[float]]:
    """The (max_abs, mean_abs) bounds a run applies: ``auto`` takes :data:`DEFAULT_BOUNDS` of ``dtype``
    (the policy's compute dtype), a number is used as given, None is off."""
    auto = DEFAULT_BOUNDS.get(dtype, DEFAULT_BOUNDS[torch.float32])
    return tuple(auto[i] if v == "auto" else (None if v is None else float(v))  # type: ignore[return-value]
                 for i, v in enumerate((parity_max, parity_mean_max)))


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


def _turn_diffs(sampled: Sequence[Optional[torch.Tensor]],
                scored: Sequence[Optional[torch.Tensor]]) -> list[tuple[int, torch.Tensor]]:
    """(sample index, |engine - trainer| per token) of every comparable turn."""
    out = []
    for i, (a, b) in enumerate(zip(sampled, scored)):
        if a is None or b is None:
            continue
        a, b = a.detach().float().cpu().reshape(-1), b.detach().float().cpu().reshape(-1)
        n = min(a.numel(), b.numel())
        out.append((i, (a[:n] - b[:n]).abs()))
    return out


def logprob_parity(sampled: Sequence[Optional[torch.Tensor]], scored: Sequence[Optional[torch.Tensor]], *,
                   tol: float = 0.1, response_ids: Optional[Sequence[Sequence[int]]] = None,
                   tokenizer: Any = None) -> Optional[ParityReport]:
    """Compare per-turn sampling log-probs with the trainer's log-probs of the same tokens.

    ``sampled[i]`` / ``scored[i]``: 1-D tensors over turn i's response tokens (None where a turn has no
    sampling log-probs, e.g. a scorer policy's payload: such turns are left out). ``response_ids`` and
    ``tokenizer``, when given, measure ``retokenized``. Returns None when no turn can be compared.
    """
    per_turn = _turn_diffs(sampled, scored)
    owners = [i for i, _ in per_turn]
    diffs = [d for _, d in per_turn]
    turns = len(per_turn)
    mismatched = sum(sampled[i].numel() != scored[i].numel() for i in owners)
    retok = 0
    if tokenizer is not None and response_ids is not None:
        retok = sum(_retokenizes_differently(tokenizer, [int(t) for t in response_ids[i]])
                    for i in owners if len(response_ids[i]))
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
                 describe: Any = None, parity_mean_max: Optional[float] = None) -> None:
    """Raise :class:`ParityError` when ``report`` breaks a bound (or any turn's length differs).

    ``describe(i)`` names sample i for the message (e.g. "turn 2 of task 'nq-17'")."""
    if report is None:
        return
    name = (lambda i: f"sample {i}") if describe is None else describe
    if report.length_mismatch > 0:
        raise ParityError(
            f"log-prob parity failed at step {step}: {report.length_mismatch:.0%} of turns were scored with another "
            "number of tokens than were sampled (the trainer must score the sampled token ids)"
        )
    if parity_max is not None and report.worst is not None and report.max_abs > parity_max:
        i, k, engine, trainer = report.worst
        raise ParityError(
            f"log-prob parity failed at step {step}: {name(i)}, token {k}: the sampler reported log-prob {engine:.6f}, "
            f"the trainer computes {trainer:.6f} (|difference| {abs(engine - trainer):.4g} > rollout.parity_max "
            f"{parity_max}). The engine that sampled and the trainer disagree: check the weight sync, dtype and "
            "temperature, or raise rollout.parity_max (null turns the check off)."
        )
    if parity_mean_max is not None and report.tokens and report.mean_abs > parity_mean_max:
        raise ParityError(
            f"log-prob parity failed at step {step}: the sampler's log-probs differ from the trainer's by "
            f"{report.mean_abs:.4g} nats on average over {report.tokens} tokens (> rollout.parity_mean_max "
            f"{parity_mean_max}). The engine that sampled and the trainer disagree: check the weight sync, dtype "
            "and temperature, or raise rollout.parity_mean_max (null turns the check off)."
        )


def write_parity_evidence(path: str | os.PathLike[str], error: ParityError, *, step: int,
                          payloads: Sequence[Any], scored: Sequence[Optional[torch.Tensor]],
                          describe: Any = None, tokenizer: Any = None, dtype: Optional[torch.dtype] = None,
                          worst_turns: int = 3) -> Path:
    """Write what a parity stop needs to be judged: the ``worst_turns`` turns with the largest token
    difference, each with its prompt and response token ids (and their text when ``tokenizer`` is given),
    the sampler's and the trainer's log-prob rows, and every turn's mean and max difference.

    ``payloads[i]``: sample i's ``{"prompt_ids", "response_ids", "sampling_logprobs"}``; ``scored[i]``: the
    trainer's log-probs of its response tokens (None where not compared). Why: a bound trips on one token
    of one step, and resuming replays that step; without the turn itself nobody can tell whether the
    sampler or the trainer (or neither: bf16 rounding) was off."""
    name = (lambda i: f"sample {i}") if describe is None else describe
    sampled = [p.get("sampling_logprobs") if isinstance(p, dict) else None for p in payloads]
    per_turn = _turn_diffs(sampled, scored)
    summary = sorted(({"sample": i, "turn": name(i), "tokens": int(d.numel()),
                       "mean_abs": float(d.mean()) if d.numel() else 0.0,
                       "max_abs": float(d.max()) if d.numel() else 0.0} for i, d in per_turn),
                     key=lambda r: -r["max_abs"])
    turns = []
    for row in summary[:worst_turns]:
        i = row["sample"]
        pay = payloads[i]
        prompt_ids = [int(t) for t in pay["prompt_ids"].tolist()]
        response_ids = [int(t) for t in pay["response_ids"].tolist()]
        turn = dict(row, prompt_ids=prompt_ids, response_ids=response_ids,
                    sampler_logprobs=[float(x) for x in pay["sampling_logprobs"].reshape(-1).tolist()],
                    trainer_logprobs=[float(x) for x in scored[i].detach().float().reshape(-1).tolist()])
        if tokenizer is not None:
            turn["prompt"] = tokenizer.decode(prompt_ids, skip_special_tokens=False)
            turn["response_tokens"] = [tokenizer.decode([t], skip_special_tokens=False) for t in response_ids]
        turns.append(turn)
    return write_json_atomic(path, {"schema": "stratagym.parity_failure/1", "step": step, "error": str(error),
                                    "dtype": None if dtype is None else dtype_name(dtype),
                                    "turns_compared": len(per_turn), "worst_turns": turns, "every_turn": summary})


def rescore_parity_evidence(path: str | os.PathLike[str], policy: Any) -> list[dict[str, Any]]:
    """Score the worst turns of a :func:`write_parity_evidence` file again with ``policy`` (e.g. the run's
    last checkpoint loaded in float32: the checkpoint before the failing step holds the weights that
    sampled it) and say, per turn, how far the sampler and the trainer each are from that score.

    Returns one row per turn: ``max_abs_sampler`` / ``max_abs_trainer`` (largest token difference of each
    side from the new score), ``mean_abs_sampler`` / ``mean_abs_trainer``, and ``worst_token`` with the
    three log-probs of the token that tripped. Both sides near the new score on average, with one token
    apart, is rounding; a side far from it on average is the faulty one."""
    data = json.loads(Path(path).read_text())
    out = []
    for turn in data["worst_turns"]:
        pay = {"prompt_ids": torch.tensor(turn["prompt_ids"], dtype=torch.long),
               "response_ids": torch.tensor(turn["response_ids"], dtype=torch.long),
               "sampling_logprobs": torch.tensor(turn["sampler_logprobs"], dtype=torch.float32)}
        with torch.no_grad():
            res = policy.sequence_log_probs([pay])
        again = res.logprobs[0][res.mask[0].bool()].float().cpu()
        eng = torch.tensor(turn["sampler_logprobs"])
        trn = torch.tensor(turn["trainer_logprobs"])
        n = min(again.numel(), eng.numel(), trn.numel())
        again, eng, trn = again[:n], eng[:n], trn[:n]
        k = int((eng - trn).abs().argmax()) if n else 0
        out.append({"turn": turn["turn"], "tokens": n,
                    "mean_abs_sampler": float((eng - again).abs().mean()) if n else 0.0,
                    "mean_abs_trainer": float((trn - again).abs().mean()) if n else 0.0,
                    "max_abs_sampler": float((eng - again).abs().max()) if n else 0.0,
                    "max_abs_trainer": float((trn - again).abs().max()) if n else 0.0,
                    "worst_token": {"index": k, "sampler": float(eng[k]) if n else None,
                                    "trainer": float(trn[k]) if n else None, "rescored": float(again[k]) if n else None}})
    return out
