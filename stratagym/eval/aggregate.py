"""Per-env metrics from per-episode outcomes, each with its sample size, a 95% CI and an across-seed spread.

Input rows are :class:`stratagym.eval.episodes.EpisodeRecord` objects or their ``to_dict()`` form (what the
eval harness stores as per-task outcomes). What is computed:

=========================  =======================================================================
metric                     how
=========================  =======================================================================
``success``                share of episodes won (Wilson); WebShop: share with score == 1
``mean_reward``            mean episode return (bootstrap)
``score``                  mean final task score in [0, 1] (bootstrap)
``webshop_score``          WebShop only: mean reward x 100, the paper's "score" (bootstrap)
``em`` / ``f1`` /          QA: exact match, token F1, substring EM from the env's per-episode ``em``,
``substring_em``           ``f1``, ``substring_em`` info keys (Wilson for 0/1, bootstrap for F1)
``success/<task_type>``    success per task type where episodes carry ``task_type`` (ALFWorld)
``success_in_distribution``  success on in-distribution splits (ALFWorld ``valid_seen``) and
``success_out_of_distribution``  out-of-distribution ones (``valid_unseen``)
``overlap``                share of episodes whose task overlaps the train split (QA: answer, supporting
                           passages or a near-duplicate question; the env's boolean ``overlap`` info key)
``em/overlap``,            the primary metric (``em``, else ``success``) on the overlapping episodes and
``em/no_overlap``          on the others, where episodes carry ``overlap`` (Wilson)
``search_count``           mean search calls per episode (+ its distribution)
``turns``                  mean turns per episode (+ its distribution)
``valid_ratio``            mean share of valid actions per episode
=========================  =======================================================================

Across seeds each metric is recomputed per seed and summarised by :func:`stratagym.eval.stats.across_seeds`
(mean, sample std, min, max).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from stratagym.eval.stats import Estimate, SeedSummary, across_seeds, mean, proportion

__all__ = [
    "Aggregate",
    "aggregate",
    "primary_metric",
    "higher_is_better",
    "IN_DISTRIBUTION_SPLITS",
    "OUT_OF_DISTRIBUTION_SPLITS",
]

#: Split names that count as in-/out-of-distribution (ALFWorld's seen/unseen validation sets).
IN_DISTRIBUTION_SPLITS = frozenset({"valid_seen", "eval_in_distribution", "in_distribution", "id", "seen"})
OUT_OF_DISTRIBUTION_SPLITS = frozenset({"valid_unseen", "eval_out_of_distribution", "out_of_distribution", "ood", "unseen"})

#: Metrics where smaller is better (everything else ranks descending).
LOWER_IS_BETTER = frozenset({"turns"})



@dataclass(frozen=True)
class _MetricRules:
    """What the aggregator needs from an env's spec (defaults for envs registered without one)."""

    primary_metric: str = "success"
    success_from_score: bool = False


def _rules(env_id: str) -> _MetricRules:
    from stratagym.envs.registry import get_spec

    try:
        spec = get_spec(env_id)
    except KeyError:
        return _MetricRules()
    return _MetricRules(spec.primary_metric, spec.success_from_score)


def primary_metric(env_id: str) -> str:
    """The metric a leaderboard ranks ``env_id`` by by default: its ``EnvSpec.primary_metric``."""
    return _rules(env_id).primary_metric


def higher_is_better(metric: str) -> bool:
    return metric not in LOWER_IS_BETTER


@dataclass
class Aggregate:
    """Metrics over a set of episodes: estimates, distributions, per-seed values and across-seed spread."""

    metrics: dict[str, Estimate]
    distributions: dict[str, dict[str, int]]
    per_seed: dict[str, dict[str, float]] = field(default_factory=dict)
    across_seeds: dict[str, SeedSummary] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": {k: v.to_dict() for k, v in sorted(self.metrics.items())},
            "distributions": self.distributions,
            "per_seed": self.per_seed,
            "across_seeds": {k: v.to_dict() for k, v in sorted(self.across_seeds.items())},
        }


def _row(ep: Any) -> dict[str, Any]:
    if isinstance(ep, Mapping):
        row = dict(ep)
    elif hasattr(ep, "to_dict"):
        row = ep.to_dict()
    else:
        raise TypeError(f"expected an EpisodeRecord or a dict, got {type(ep).__name__}")
    if "valid_ratio" not in row:
        turns = int(row.get("turns", 0))
        row["valid_ratio"] = row.get("valid_actions", turns) / turns if turns else 1.0
    row.setdefault("extra", {})
    return row


def _split_of(row: Mapping[str, Any], default: str | None) -> str | None:
    return row["extra"].get("split") or row.get("split") or default


def _won(row: Mapping[str, Any], rules: _MetricRules) -> bool:
    if rules.success_from_score:
        return float(row.get("score", 0.0)) >= 1.0 - 1e-9
    return bool(row.get("won", False))


def _estimates(rows: Sequence[Mapping[str, Any]], rules: _MetricRules, split: str | None) -> dict[str, Estimate]:
    m: dict[str, Estimate] = {}
    scores = [float(r.get("score", 0.0)) for r in rows]
    m["success"] = proportion(_won(r, rules) for r in rows)
    if rules.primary_metric == "webshop_score":  # WebShop's headline: mean reward x 100
        m["webshop_score"] = mean(float(r.get("total_reward", 0.0)) for r in rows).scaled(100.0)
    m["mean_reward"] = mean(float(r.get("total_reward", 0.0)) for r in rows)
    m["score"] = mean(scores)

    # QA: the env reports em/f1/substring_em per episode; use them where every episode has them.
    for key, kind in (("em", "p"), ("substring_em", "p"), ("f1", "m")):
        vals = [r["extra"].get(key) for r in rows]
        if vals and all(v is not None for v in vals):
            m[key] = proportion(float(v) >= 0.5 for v in vals) if kind == "p" else mean(float(v) for v in vals)
    # Any other numeric per-episode value an env keeps (its spec's record_info_keys) becomes a metric
    # of its own: a rate for booleans, a bootstrap mean for numbers. A new env gets its columns this way.
    handled = {"em", "substring_em", "f1", "task_type", "split"}
    extra_keys = sorted({k for r in rows for k in r["extra"]} - handled - set(m))
    for key in extra_keys:
        vals = [r["extra"].get(key) for r in rows]
        if all(isinstance(v, bool) for v in vals):
            m[key] = proportion(vals)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
            m[key] = mean(float(v) for v in vals)
    if rules.primary_metric == "em" and "em" not in m:
        m["em"] = proportion(bool(r.get("won", False)) for r in rows)

    # Success per task type (ALFWorld) and per distribution.
    by_type: dict[str, list[bool]] = defaultdict(list)
    by_dist: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        won = _won(r, rules)
        if r["extra"].get("task_type") is not None:
            by_type[str(r["extra"]["task_type"])].append(won)
        sp = _split_of(r, split)
        if sp in IN_DISTRIBUTION_SPLITS:
            by_dist["in_distribution"].append(won)
        elif sp in OUT_OF_DISTRIBUTION_SPLITS:
            by_dist["out_of_distribution"].append(won)
    for t, flags in sorted(by_type.items()):
        m[f"success/{t}"] = proportion(flags)
    # The primary metric on the episodes whose task training could have answered from memory and on the
    # rest, where every episode carries the env's boolean ``overlap`` flag (QA train/test overlap).
    flags_ov = [r["extra"].get("overlap") for r in rows]
    if flags_ov and all(isinstance(v, bool) for v in flags_ov):
        key = "em" if rules.primary_metric == "em" else "success"
        for part, want in (("overlap", True), ("no_overlap", False)):
            sub = [r for r, v in zip(rows, flags_ov) if v is want]
            if sub:
                m[f"{key}/{part}"] = (proportion(float(r["extra"].get("em", r.get("won", False))) >= 0.5 for r in sub)
                                      if key == "em" else proportion(_won(r, rules) for r in sub))
    for d, flags in sorted(by_dist.items()):
        m[f"success_{d}"] = proportion(flags)

    m["search_count"] = mean(float(r.get("search_count", 0)) for r in rows)
    m["turns"] = mean(float(r.get("turns", 0)) for r in rows)
    m["valid_ratio"] = mean(float(r["valid_ratio"]) for r in rows)
    return m


def aggregate(episodes: Iterable[Any], *, env_id: str, split: str | None = None) -> Aggregate:
    """Aggregate per-episode outcomes of ``env_id`` into metrics with CIs, distributions and seed spread.

    ``split`` is the eval's split, used for in/out-of-distribution success when episodes do not carry
    their own ``extra["split"]``.
    """
    rows = [_row(e) for e in episodes]
    if not rows:
        raise ValueError("aggregate needs at least one episode")
    rules = _rules(env_id)
    metrics = _estimates(rows, rules, split)
    distributions = {
        "search_count": _hist(int(r.get("search_count", 0)) for r in rows),
        "turns": _hist(int(r.get("turns", 0)) for r in rows),
    }
    by_seed: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_seed[str(r.get("seed"))].append(r)
    per_seed = {
        seed: {k: est.value for k, est in _estimates(rs, rules, split).items()} for seed, rs in sorted(by_seed.items())
    }
    spread = {k: across_seeds([per_seed[s].get(k, math.nan) for s in per_seed]) for k in metrics}
    return Aggregate(metrics=metrics, distributions=distributions, per_seed=per_seed, across_seeds=spread)


def _hist(values: Iterable[int]) -> dict[str, int]:
    counts = Counter(values)
    return {str(k): counts[k] for k in sorted(counts)}
