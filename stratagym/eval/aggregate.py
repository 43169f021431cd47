"""Per-env metrics from per-episode outcomes, each with its sample size, a 95% CI and an across-seed spread.

Input rows are :class:`stratagym.eval.episodes.EpisodeRecord` objects or their ``to_dict()`` form (what the
eval harness stores as per-task outcomes). The metrics of every env are computed here:

=================================  ===============================================================
metric                             how
=================================  ===============================================================
``success``                        share of episodes won (Wilson); ``success_from_score`` envs
                                   (WebShop): share with score == 1
``mean_reward``                    mean episode return (bootstrap)
``score``                          mean final task score in [0, 1] (bootstrap)
``success/<task_type>``            success per task type where episodes carry ``task_type`` (ALFWorld)
``success_in_distribution``,       success on in-distribution splits (ALFWorld ``valid_seen``) and
``success_out_of_distribution``    out-of-distribution ones (``valid_unseen``)
``search_count``                   mean search calls per episode (+ its distribution)
``turns``                          mean turns per episode (+ its distribution; lower is better)
``valid_ratio``                    mean share of valid actions per episode
``prompt_cuts``                    mean turns per episode whose prompt the policy cut to fit its
                                   model (only where some prompt was cut: a sign the memory or the
                                   pages outgrow the context)
=================================  ===============================================================

An env's own metrics are declared in its spec (``EnvSpec.metrics``, :class:`~stratagym.envs.metric_spec.MetricSpec`)
and computed as declared, each where every episode has its value: SearchQA's ``em``, ``f1``,
``substring_em``, ``overlap`` with ``em/overlap`` / ``em/no_overlap`` (EM on the questions that overlap the
train split and on the rest), WebShop's ``webshop_score`` (mean reward x 100). A declared rate that is the
env's primary metric counts an episode without its value by ``won``. Any other numeric value an env keeps
(``record_info_keys``) becomes a metric too: a Wilson rate for booleans, a bootstrap mean for numbers.

Across seeds each metric is recomputed per seed and summarised by :func:`stratagym.eval.stats.across_seeds`
(mean, sample std, min, max).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from stratagym.envs.metric_spec import MetricSpec
from stratagym.envs.registry import get_spec
from stratagym.eval.stats import Estimate, SeedSummary, across_seeds, mean, proportion

__all__ = [
    "Aggregate",
    "aggregate",
    "primary_metric",
    "higher_is_better",
    "metric_order",
    "IN_DISTRIBUTION_SPLITS",
    "OUT_OF_DISTRIBUTION_SPLITS",
]

#: Split names that count as in-/out-of-distribution (ALFWorld's seen/unseen validation sets).
IN_DISTRIBUTION_SPLITS = frozenset({"valid_seen", "eval_in_distribution", "in_distribution", "id", "seen"})
OUT_OF_DISTRIBUTION_SPLITS = frozenset({"valid_unseen", "eval_out_of_distribution", "out_of_distribution", "ood", "unseen"})

#: The metrics of every env read off the episode record (success, its parts by task type and by
#: distribution are computed from the win rule and the split). An env's own metrics are declared in its
#: spec (``EnvSpec.metrics``), never here.
_COMMON_FIRST = (MetricSpec("mean_reward", "mean", field="total_reward", column=False),
                 MetricSpec("score", "mean", field="score"))
_COMMON_LAST = (MetricSpec("search_count", "mean", field="search_count"),
                MetricSpec("turns", "mean", field="turns", higher_is_better=False),
                MetricSpec("valid_ratio", "mean", field="valid_ratio"))
#: Shown only where some episode's prompt was cut, so records of policies that never cut keep their metrics.
_PROMPT_CUTS = MetricSpec("prompt_cuts", "mean", field="prompt_cuts", higher_is_better=False, column=False)
#: Keys of ``extra`` that describe an episode rather than measure it.
_DESCRIPTIVE_KEYS = frozenset({"task_type", "split"})


@dataclass(frozen=True)
class _MetricRules:
    """What the aggregator needs from an env's spec (defaults for envs registered without one)."""

    primary_metric: str = "success"
    success_from_score: bool = False
    declared: tuple[MetricSpec, ...] = ()


def _rules(env_id: str | None, spec: Any = None) -> _MetricRules:
    """The rules of ``env_id``'s spec; ``spec``: that ``EnvSpec`` when the caller holds it (no lookup)."""
    if spec is None:
        if env_id is None:
            return _MetricRules()
        try:
            spec = get_spec(env_id)
        except KeyError:
            return _MetricRules()
    return _MetricRules(spec.primary_metric, spec.success_from_score, tuple(spec.metrics))


def primary_metric(env_id: str) -> str:
    """The metric a leaderboard ranks ``env_id`` by by default: its ``EnvSpec.primary_metric``."""
    return _rules(env_id).primary_metric


def higher_is_better(metric: str, env_id: str | None = None) -> bool:
    """The ranking direction of ``metric``: from its declaration (the common metrics here, ``env_id``'s
    ``EnvSpec.metrics``); undeclared metrics rank higher-first."""
    for spec in _COMMON_FIRST + _COMMON_LAST + (_PROMPT_CUTS,) + _rules(env_id).declared:
        if spec.name == metric:
            return spec.higher_is_better
    return True


def metric_order(env_id: str) -> list[str]:
    """The metrics the board places, in order: success and score, then ``env_id``'s declared metrics (each
    followed by its parts by a flag), then success in/out of distribution, search count, turns and valid
    ratio. Any other metric of a record follows these, sorted by name (the board does that)."""
    rules = _rules(env_id)
    order = ["success"] + [m.name for m in _COMMON_FIRST if m.column]
    for m in rules.declared:
        if m.column:
            order.append(m.name)
        order += m.part_names(rules.primary_metric)
    order += ["success_in_distribution", "success_out_of_distribution"] + [m.name for m in _COMMON_LAST if m.column]
    return order


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


def _mean(values: Iterable[Any], n_boot: int) -> Estimate:
    """A bootstrap mean, or with ``n_boot=0`` the mean alone (NaN bounds: nobody reads them)."""
    if n_boot:
        return mean(float(v) for v in values)
    arr = np.asarray([float(v) for v in values], dtype=np.float64)
    return Estimate(float(arr.mean()) if arr.size else float("nan"), int(arr.size), float("nan"), float("nan"), "bootstrap")


def _summarise(spec: MetricSpec, values: Sequence[Any], n_boot: int = 2000) -> Estimate:
    """A rate (share of values true or >= 0.5, Wilson) or a mean (bootstrap), scaled as declared."""
    est = proportion(float(v) >= 0.5 for v in values) if spec.kind == "rate" else _mean(values, n_boot)
    return est if spec.scale == 1.0 else est.scaled(spec.scale)


def _declared(spec: MetricSpec, rows: Sequence[Mapping[str, Any]], n_boot: int = 2000) -> Estimate | None:
    """``spec`` over ``rows``, or ``None`` where an episode lacks its value."""
    values = [spec.value(r) for r in rows]
    if not values or any(v is None for v in values):
        return None
    return _summarise(spec, values, n_boot)


def _primary_on(rows: Sequence[Mapping[str, Any]], rules: _MetricRules, n_boot: int = 2000) -> Estimate:
    """The primary metric on a part of the episodes; an episode without the primary's value counts by its
    ``won`` flag (a declared rate), success where the primary is not a declared metric."""
    spec = next((m for m in rules.declared if m.name == rules.primary_metric), None)
    if spec is None:
        return proportion(_won(r, rules) for r in rows)
    values = [spec.value(r) for r in rows]
    return _summarise(spec, [bool(r.get("won", False)) if v is None else v for r, v in zip(rows, values)], n_boot)


def _estimates(rows: Sequence[Mapping[str, Any]], rules: _MetricRules, split: str | None, n_boot: int = 2000) -> dict[str, Estimate]:
    """Every metric over ``rows``; ``n_boot=0`` skips the bootstrap intervals of means (NaN bounds) where
    only values are read (per-seed values, the committed-records check)."""
    m: dict[str, Estimate] = {}
    m["success"] = proportion(_won(r, rules) for r in rows)
    for spec in _COMMON_FIRST:
        m[spec.name] = _declared(spec, rows, n_boot)  # type: ignore[assignment]  (record fields are never missing)
    # The env's own metrics, as its spec declares them; each only where every episode has its value.
    for spec in rules.declared:
        est = _declared(spec, rows, n_boot)
        if est is not None:
            m[spec.name] = est
    # Any other numeric per-episode value an env keeps (its spec's record_info_keys) becomes a metric
    # of its own: a rate for booleans, a bootstrap mean for numbers. A new env gets its columns this way.
    handled = _DESCRIPTIVE_KEYS | {s.info_key for s in rules.declared}
    extra_keys = sorted({k for r in rows for k in r["extra"]} - handled - set(m))
    for key in extra_keys:
        vals = [r["extra"].get(key) for r in rows]
        if all(isinstance(v, bool) for v in vals):
            m[key] = proportion(vals)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
            m[key] = _mean(vals, n_boot)
    primary = next((s for s in rules.declared if s.name == rules.primary_metric), None)
    if primary is not None and primary.kind == "rate" and primary.name not in m:
        m[primary.name] = proportion(bool(r.get("won", False)) for r in rows)  # episodes without the value

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
    # The primary metric on the two halves of a declared flag (QA: the episodes whose task overlaps the
    # train split, which training could answer from memory, and the rest), where every episode has it.
    for spec in rules.declared:
        if spec.parts is None:
            continue
        flags = [spec.value(r) for r in rows]
        if not flags or not all(isinstance(v, bool) for v in flags):
            continue
        for name, want in zip(spec.part_names(rules.primary_metric), (True, False)):
            sub = [r for r, v in zip(rows, flags) if v is want]
            if sub:
                m[name] = _primary_on(sub, rules, n_boot)
    for d, flags in sorted(by_dist.items()):
        m[f"success_{d}"] = proportion(flags)

    for spec in _COMMON_LAST:
        m[spec.name] = _declared(spec, rows, n_boot)  # type: ignore[assignment]
    if any(r.get("prompt_cuts") for r in rows):
        m["prompt_cuts"] = _summarise(_PROMPT_CUTS, [int(r.get("prompt_cuts") or 0) for r in rows], n_boot)
    return m


def aggregate(episodes: Iterable[Any], *, env_id: str, split: str | None = None, spec: Any = None,
              intervals: bool = True) -> Aggregate:
    """Aggregate per-episode outcomes of ``env_id`` into metrics with CIs, distributions and seed spread.

    ``split`` is the eval's split, used for in/out-of-distribution success when episodes do not carry
    their own ``extra["split"]``. ``spec``: ``env_id``'s ``EnvSpec`` when the caller already resolved it
    (the eval harness does, once per eval); else it is looked up. ``intervals=False`` skips the bootstrap
    intervals of means (NaN bounds; Wilson intervals of rates are kept: they cost nothing).
    """
    rows = [_row(e) for e in episodes]
    if not rows:
        raise ValueError("aggregate needs at least one episode")
    rules = _rules(env_id, spec)
    metrics = _estimates(rows, rules, split, 2000 if intervals else 0)
    distributions = {
        "search_count": _hist(int(r.get("search_count", 0)) for r in rows),
        "turns": _hist(int(r.get("turns", 0)) for r in rows),
    }
    by_seed: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_seed[str(r.get("seed"))].append(r)
    per_seed = {
        # values only: a per-seed bootstrap would be computed and thrown away (half an eval's aggregation time)
        seed: {k: est.value for k, est in _estimates(rs, rules, split, 0).items()} for seed, rs in sorted(by_seed.items())
    }
    spread = {k: across_seeds([per_seed[s].get(k, math.nan) for s in per_seed]) for k in metrics}
    return Aggregate(metrics=metrics, distributions=distributions, per_seed=per_seed, across_seeds=spread)


def _hist(values: Iterable[int]) -> dict[str, int]:
    counts = Counter(values)
    return {str(k): counts[k] for k in sorted(counts)}
