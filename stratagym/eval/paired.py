"""Paired comparisons of two agents on the same tasks: is the difference real or seed noise?

Two arms evaluated on the same questions (and, in a study, trained with the same seeds) are compared
question by question, not as two independent means, because most of the variance is in the questions:

* :func:`mcnemar_exact` -- the exact two-sided McNemar test on 0/1 outcomes: only discordant pairs
  (one arm right, the other wrong) carry information, and under the null hypothesis each is a fair
  coin, so ``p = 2 * P(Binomial(wins + losses, 1/2) <= min(wins, losses))``, capped at 1;
* :func:`sign_flip_test` -- the paired permutation test on any per-pair differences: under the null
  hypothesis each difference is as likely to have the other sign, so the p-value is the share of sign
  assignments whose |mean| is at least the observed one (every assignment when there are at most
  ``exact_up_to`` pairs, else a seeded Monte Carlo sample that counts the observed assignment);
* :func:`compare` -- both, plus the mean difference and its percentile-bootstrap interval
  (:func:`stratagym.eval.stats.bootstrap_interval`), for one seed's pair of records;
* :func:`compare_seeds` -- several seeds: each question's difference averaged over the seeds (the unit
  that is resampled and sign-flipped), McNemar over every (seed, question) pair, and the per-seed
  differences, so a reader sees whether every seed points the same way.

:func:`decide` turns a comparison and a pre-registered threshold into ``reproduced`` / ``refuted`` /
``undecided``. The method is the one ``docs/llm-learning.md`` used for the SmolLM2 runs (a script then);
here it lives in the package with hand-computed tests (``tests/eval/test_paired.py``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from stratagym.errors import UserError
from stratagym.eval.stats import bootstrap_interval

__all__ = [
    "PairedError", "PairedComparison", "mcnemar_exact", "sign_flip_test", "outcomes_by_task", "compare",
    "compare_seeds", "decide",
]


class PairedError(UserError, ValueError):
    """Two records that cannot be paired (no common task, a metric neither has)."""


def mcnemar_exact(wins: int, losses: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (``wins``: only the new arm right,
    ``losses``: only the baseline right); 1.0 when there is none."""
    if wins < 0 or losses < 0:
        raise ValueError(f"counts must be >= 0, got wins={wins}, losses={losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2.0 * tail / 2.0**n)


def sign_flip_test(diffs: Sequence[float], *, exact_up_to: int = 16, n_perm: int = 20_000, seed: int = 0) -> float:
    """Two-sided paired permutation (sign-flip) p-value of the mean of ``diffs``.

    With ``n <= exact_up_to`` differences every one of the 2**n sign assignments is enumerated (so 3
    seeds can never give p below 2/8 = 0.25: a test across 3 seeds alone cannot be significant).
    Beyond, ``n_perm`` random assignments plus the observed one: ``p = (1 + hits) / (1 + n_perm)``."""
    x = np.asarray(diffs, dtype=np.float64)
    n = x.size
    if n == 0 or not np.any(x != 0):
        return 1.0
    observed = abs(x.mean())
    tol = 1e-12 * max(1.0, observed)
    if n <= exact_up_to:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        means = np.abs(signs @ x) / n
        return float(np.mean(means >= observed - tol))
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, min(n_perm, 2_000_000 // n))
    for start in range(0, n_perm, chunk):
        m = min(chunk, n_perm - start)
        signs = rng.integers(0, 2, size=(m, n)) * 2.0 - 1.0
        hits += int(np.sum(np.abs(signs @ x) / n >= observed - tol))
    return (1.0 + hits) / (1.0 + n_perm)


@dataclass(frozen=True)
class PairedComparison:
    """New arm minus baseline on the paired tasks: means, the mean difference with its 95% bootstrap
    interval, discordant counts with McNemar's p, the sign-flip p, and (several seeds) each seed's
    difference."""

    n: int
    base: float
    new: float
    diff: float
    ci_low: float
    ci_high: float
    wins: int
    losses: int
    mcnemar_p: float
    permutation_p: float
    per_seed: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def p(self, test: str) -> float:
        """The p-value of ``test`` (``mcnemar`` or ``permutation``)."""
        if test == "mcnemar":
            return self.mcnemar_p
        if test == "permutation":
            return self.permutation_p
        raise ValueError(f"unknown test {test!r}; tests: mcnemar, permutation")


def outcomes_by_task(record: Mapping[str, Any], metric: str, *, by_seed: bool = False) -> dict[str, float]:
    """``task_id -> metric`` of an eval record's episodes (``metric`` read from the episode, then its
    ``extra``: ``em`` for SearchQA, ``won`` for any env). A task played under several seeds is averaged,
    or with ``by_seed`` each episode is its own unit, keyed ``task_id#seed`` (two arms evaluated with the
    same seeds meet the same episode randomness, so those episodes pair)."""
    values: dict[str, list[float]] = {}
    for ep in record.get("episodes", []):
        v = ep.get(metric, ep.get("extra", {}).get(metric))
        if v is None:
            continue
        key = f"{ep['task_id']}#{ep.get('seed', 0)}" if by_seed else str(ep["task_id"])
        values.setdefault(key, []).append(float(v))
    if not values:
        raise PairedError(f"no episode of the record has {metric!r}; use a metric its episodes carry "
                          "(e.g. em for SearchQA, won for every env)")
    return {t: float(np.mean(v)) for t, v in values.items()}


def _common(base: Mapping[str, float], new: Mapping[str, float]) -> list[str]:
    ids = sorted(set(base) & set(new))
    if not ids:
        raise PairedError("the two records share no task: evaluate both on the same split and questions")
    return ids


def _discordant(base: Sequence[float], new: Sequence[float]) -> tuple[int, int]:
    wins = sum(1 for b, a in zip(base, new) if a > b)
    losses = sum(1 for b, a in zip(base, new) if a < b)
    return wins, losses


def compare(base: Mapping[str, float], new: Mapping[str, float], *, seed: int = 0,
            n_boot: int = 5000) -> PairedComparison:
    """One seed: ``new - base`` over the tasks both hold (``task_id -> outcome`` maps, e.g. from
    :func:`outcomes_by_task`)."""
    ids = _common(base, new)
    b = [base[i] for i in ids]
    a = [new[i] for i in ids]
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    lo, hi = bootstrap_interval(d, n_boot=n_boot, seed=seed)
    wins, losses = _discordant(b, a)
    return PairedComparison(n=len(ids), base=float(np.mean(b)), new=float(np.mean(a)), diff=float(d.mean()),
                            ci_low=lo, ci_high=hi, wins=wins, losses=losses,
                            mcnemar_p=mcnemar_exact(wins, losses), permutation_p=sign_flip_test(d, seed=seed),
                            per_seed=[float(d.mean())])


def compare_seeds(pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]], *, seed: int = 0,
                  n_boot: int = 5000) -> PairedComparison:
    """Several seeds, each a ``(base, new)`` pair of outcome maps (same seed = same initial weights and
    task stream). The tasks are those every record holds; each task's difference is averaged over the
    seeds, and that per-task difference is bootstrapped and sign-flipped. McNemar counts every
    discordant (seed, task) pair (so it treats seeds as independent draws of the same questions)."""
    if not pairs:
        raise PairedError("no seed to compare")
    ids = sorted(set.intersection(*(set(b) & set(a) for b, a in pairs)))
    if not ids:
        raise PairedError("the records share no task: evaluate every run on the same split and questions")
    base = np.array([[b[i] for i in ids] for b, _ in pairs], dtype=np.float64)  # (seeds, tasks)
    new = np.array([[a[i] for i in ids] for _, a in pairs], dtype=np.float64)
    per_task = (new - base).mean(axis=0)
    lo, hi = bootstrap_interval(per_task, n_boot=n_boot, seed=seed)
    wins, losses = _discordant(base.ravel().tolist(), new.ravel().tolist())
    return PairedComparison(n=len(ids), base=float(base.mean()), new=float(new.mean()), diff=float(per_task.mean()),
                            ci_low=lo, ci_high=hi, wins=wins, losses=losses,
                            mcnemar_p=mcnemar_exact(wins, losses), permutation_p=sign_flip_test(per_task, seed=seed),
                            per_seed=[float(x) for x in (new - base).mean(axis=1)])


def decide(c: PairedComparison, *, direction: str, test: str, alpha: float, min_effect: float) -> str:
    """The verdict a pre-registration fixes in advance.

    ``reproduced``: the difference points in the predicted ``direction`` (``greater``: new > base,
    ``less``: new < base), is at least ``min_effect`` in size, the chosen test gives ``p < alpha``, and
    every seed points the same way. ``refuted``: the 95% interval excludes an effect of ``min_effect``
    in the predicted direction (the effect, if any, is smaller than claimed, or opposite).
    ``undecided``: anything else."""
    if direction not in ("greater", "less"):
        raise ValueError(f"direction must be 'greater' or 'less', got {direction!r}")
    sign = 1.0 if direction == "greater" else -1.0
    effect = sign * c.diff
    seeds_agree = all(sign * d > 0 for d in c.per_seed)
    if effect >= min_effect and c.p(test) < alpha and seeds_agree:
        return "reproduced"
    bound = c.ci_high if direction == "greater" else -c.ci_low  # the most favourable end of the interval
    if bound < min_effect:
        return "refuted"
    return "undecided"
