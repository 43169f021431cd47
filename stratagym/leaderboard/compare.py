"""Paired comparison of eval records: did a trained checkpoint beat its baseline on the same tasks?

The board ranks records side by side, each with its own interval over tasks. Two records evaluated on the
same tasks are *paired*: a task's difficulty cancels in its difference, so the paired interval is far
tighter than the two intervals read side by side, and it is the figure behind a claim like "RL adds five
points over SFT". With several training runs of the new arm (one record per seed), the interval over tasks
holds those checkpoints fixed; the one about the training procedure has the run as its unit. Both are
reported, as the LLM studies report them (:mod:`stratagym.studies.report`), so that a reader never gets the
first alone (issue 50).

One baseline record may serve every new record (the SFT checkpoint that each RL seed started from,
evaluated once, greedily), or there is one baseline per new record, paired in order (each seed's own
start). Records must be of one ranking (the same env, split and protocol fingerprint, as ``stratagym
leaderboard diff`` checks): comparing, say, an fp32 evaluation with a bf16 one is allowed only when asked
for, and the protocol differences are then printed with the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, TypeVar

from stratagym.errors import UserError
from stratagym.eval.paired import PairedComparison, PairedError, compare, compare_seeds, outcomes_by_task
from stratagym.eval.run_level import format_interval, is_binary, paired_matrices, run_level_reading
from stratagym.leaderboard.protocols import compare_records

__all__ = ["MetricComparison", "CompareError", "pair_baselines", "protocol_differences", "compare_metric",
           "report_lines", "changed_episodes", "change_lines"]


T = TypeVar("T")


class CompareError(UserError, ValueError):
    """The records cannot be paired (nothing in common, different envs, a metric they do not carry)."""


@dataclass(frozen=True)
class MetricComparison:
    """Every new record against its baseline on one metric.

    ``per_record``: one paired comparison per new record (unit: the task). ``pooled``: with two or more new
    records, each task's difference averaged over them, bootstrapped over tasks (:func:`compare_seeds`).
    ``run_level``: with two or more, the seed-level reading (unit: the training run;
    :func:`stratagym.eval.run_level.run_level_reading`). ``binary``: every outcome is 0 or 1 (McNemar's test
    is shown for nothing else)."""

    metric: str
    labels: tuple[str, ...]
    per_record: tuple[PairedComparison, ...]
    pooled: Optional[PairedComparison]
    run_level: Optional[dict[str, Any]]
    binary: bool
    unpaired_tasks: int

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "binary": self.binary, "unpaired_tasks": self.unpaired_tasks,
                "per_record": [dict(label=lab, unit="task", **c.to_dict()) for lab, c in zip(self.labels, self.per_record)],
                "pooled": None if self.pooled is None else dict(unit="task (differences averaged over the records)",
                                                                **self.pooled.to_dict()),
                "run_level": self.run_level}


def pair_baselines(bases: Sequence[T], news: Sequence[T]) -> list[tuple[T, T]]:
    """``(baseline, new)`` pairs: one baseline for every new record, or one each, in order (records, or the
    names they were given by)."""
    if not news:
        raise CompareError("give at least one record to compare with the baseline")
    if len(bases) == 1:
        return [(bases[0], n) for n in news]
    if len(bases) != len(news):
        raise CompareError(f"{len(bases)} baselines for {len(news)} records: give one --base for all of them, or one "
                           "per record in the same order (each seed's own start)")
    return list(zip(bases, news))


def protocol_differences(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], *,
                         across_protocols: bool) -> list[str]:
    """Why the records of each pair would not be ranked together. A different env or split is refused
    outright (their task ids name different tasks); other protocol differences are refused unless
    ``across_protocols``, and then returned to be shown beside the result."""
    found: list[str] = []
    for base, new in pairs:
        reasons = compare_records(base, new)
        hard = [r for r in reasons if r.startswith(("env:", "split:"))]
        if hard:
            raise CompareError(f"{_label(new)} and its baseline {_label(base)} are not evaluations of the same tasks "
                               f"({'; '.join(hard)}): evaluate both on one env and split")
        if reasons and not across_protocols:
            raise CompareError(f"{_label(new)} and its baseline {_label(base)} were evaluated under different protocols "
                               f"({'; '.join(reasons)}); evaluate them alike, or pass --across-protocols to pair them "
                               "anyway with the differences printed")
        found += [line for line in (f"{_label(base)} vs {_label(new)}: {r}" for r in reasons) if line not in found]
    return found


def compare_metric(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], metric: str, *,
                   seed: int = 0) -> MetricComparison:
    """Each new record against its baseline on ``metric``, and over the records when there are several."""
    try:
        maps = [(outcomes_by_task(b, metric), outcomes_by_task(n, metric)) for b, n in pairs]
        per_record = tuple(compare(b, n, seed=seed) for b, n in maps)
        pooled = compare_seeds(maps, seed=seed) if len(maps) > 1 else None
    except PairedError as exc:
        raise CompareError(str(exc)) from None
    base, new = paired_matrices(maps)
    every = set().union(*(set(b) | set(n) for b, n in maps))
    reading = run_level_reading(base, new, seed=seed) if len(maps) > 1 else None
    return MetricComparison(metric=metric, labels=tuple(_label(n) for _, n in pairs), per_record=per_record,
                            pooled=pooled, run_level=reading, binary=is_binary(base, new),
                            unpaired_tasks=len(every) - base.shape[1])


def _label(record: Mapping[str, Any]) -> str:
    agent = record.get("agent") or {}
    return f"{agent.get('label') or agent.get('spec') or '?'} ({str(record.get('record_id', '?'))[:12]})"


def report_lines(result: MetricComparison) -> list[str]:
    """The comparison as plain text lines: per record, pooled, then the seed-level reading."""
    def row(label: str, c: PairedComparison, *, pooled: bool = False) -> str:
        # McNemar pairs one record's 0/1 outcomes; pooled over runs it would count runs as independent draws
        tests = f"sign-flip p {c.permutation_p:.3g}" + (f", McNemar p {c.mcnemar_p:.3g}" if result.binary and not pooled else "")
        counted = "(run, task) pairs" if pooled else "tasks"
        return (f"  {label}: {c.base:.3f} -> {c.new:.3f}, difference {c.diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}] "
                f"over {c.n} tasks; better in {c.wins} {counted}, worse in {c.losses}; {tests}")

    lines = [f"{result.metric}: new - baseline, paired per task (95% bootstrap interval over tasks; unit: the task)"]
    lines += [row(lab, c) for lab, c in zip(result.labels, result.per_record)]
    if result.unpaired_tasks:
        lines.append(f"  {result.unpaired_tasks} task(s) are not in every record and are left out")
    if result.pooled is not None:
        lines.append(row(f"{len(result.per_record)} records, each task's difference averaged", result.pooled, pooled=True)
                     + " (the checkpoints held fixed)")
    r = result.run_level
    if r is not None:
        sd = r["seed_diff"]
        lines.append(f"  over training runs (unit: the run, {r['n_seeds']} runs; Student-t): difference {format_interval(sd)}, "
                     f"per run {', '.join(f'{x:+.3f}' for x in sd['per_seed'])}")
        iqm = "" if result.binary else f"; IQM baseline {format_interval(r['base_iqm'], '.3f')}, new {format_interval(r['new_iqm'], '.3f')}"
        lines.append(f"  stratified bootstrap over runs within tasks (rliable): difference {format_interval(r['diff_mean'])}, "
                     f"P(new > baseline) {format_interval(r['p_improvement'], '.2f')}{iqm}")
    return lines


def changed_episodes(base: Mapping[str, Any], new: Mapping[str, Any], metric: str) -> list[tuple[str, int, float, float]]:
    """The episodes both records played (same task and episode seed) whose ``metric`` differs, in the
    baseline's episode order: ``(task_id, seed, baseline value, new value)``."""
    try:
        b, n = outcomes_by_task(base, metric, by_seed=True), outcomes_by_task(new, metric, by_seed=True)
    except PairedError as exc:
        raise CompareError(str(exc)) from None
    out = []
    for ep in base.get("episodes", []):
        task, seed = str(ep["task_id"]), int(ep.get("seed", 0))
        key = f"{task}#{seed}"
        if key in b and key in n and b[key] != n[key]:
            out.append((task, seed, b[key], n[key]))
    return out


def change_lines(base: Mapping[str, Any], new: Mapping[str, Any], metric: str,
                 base_transcripts: Mapping[tuple[int, str], Any], new_transcripts: Mapping[tuple[int, str], Any], *,
                 max_actions: int = 20) -> list[str]:
    """What changed, episode by episode: each episode whose ``metric`` moved, with the actions the baseline
    and the new record took (from their transcripts; at most ``max_actions`` each). The evidence behind a
    paired difference, readable without the runs."""
    def actions(transcripts: Mapping[tuple[int, str], Any], seed: int, task: str) -> str:
        t = transcripts.get((seed, task))
        if not t:
            return "(no transcript)"
        acts = [str(s.get("action")) for s in t.get("steps", [])]
        more = f" ... (+{len(acts) - max_actions} more)" if len(acts) > max_actions else ""
        return " | ".join(acts[:max_actions]) + more

    moved = changed_episodes(base, new, metric)
    lines = [f"{metric}: the {len(moved)} episode(s) of {_label(new)} whose outcome differs from {_label(base)}'s"]
    for task, seed, b, n in moved:
        lines += [f"  {task} (seed {seed}): {b:.3f} -> {n:.3f}",
                  f"    baseline: {actions(base_transcripts, seed, task)}",
                  f"    new:      {actions(new_transcripts, seed, task)}"]
    return lines
