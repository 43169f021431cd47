"""Where evaluated episodes fail: one label per episode, read from its transcript.

A success rate says how often an agent fails, not how. Long-horizon agents (ALFWorld, WebShop) fail in a
few recurring ways, and the fix differs for each, so the eval's transcripts are sorted into:

=================  ==========================================================================================
``won``            the episode was won
``finished``       it ended on the agent's own terminal action without winning (a wrong purchase, a wrong
                   answer): a decision error
``loop``           it ran to the turn limit repeating at most ``max_distinct`` actions over its last
                   ``window`` turns (walking between two receptacles, re-clicking a button)
``invalid``        it ran to the turn limit and none of its last ``window`` actions was valid (a format
                   or admissibility failure rather than a decision)
``step_limit``     it ran to the turn limit otherwise (searching without converging)
=================  ==========================================================================================

The checks run in that order, so an episode gets the first label that fits. ``window`` defaults to 10 turns
(the loop window used for the SmolLM2 ALFWorld analysis in docs/llm-learning.md); an episode shorter
than ``window`` that hit the limit is a loop when its whole history repeats at most ``max_distinct`` actions.
``stratagym failures RECORD`` prints the table for an eval record, from its progress file's transcripts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["FAILURE_LABELS", "is_loop", "classify_episode", "FailureReport", "failure_report"]

FAILURE_LABELS: tuple[str, ...] = ("won", "finished", "loop", "invalid", "step_limit")


def is_loop(actions: Sequence[str], *, window: int = 10, max_distinct: int = 2) -> bool:
    """Whether the last ``window`` actions (all of them when fewer, at least 3) hold at most ``max_distinct``
    distinct actions (compared after stripping whitespace and case)."""
    tail = [a.strip().lower() for a in actions[-window:]]
    return len(tail) >= min(window, 3) and len(set(tail)) <= max_distinct


def classify_episode(outcome: Mapping[str, Any], transcript: Mapping[str, Any] | None, *, window: int = 10,
                     max_distinct: int = 2) -> str:
    """The label (:data:`FAILURE_LABELS`) of one episode from its record row (``won``, ``truncated``) and its
    transcript (``steps`` with ``action`` and ``action_valid``; without one, only won/finished/step_limit)."""
    if outcome.get("won"):
        return "won"
    if not outcome.get("truncated"):
        return "finished"
    steps = list((transcript or {}).get("steps") or [])
    if steps:
        if is_loop([str(s.get("action", "")) for s in steps], window=window, max_distinct=max_distinct):
            return "loop"
        if not any(s.get("action_valid", True) for s in steps[-window:]):
            return "invalid"
    return "step_limit"


@dataclass
class FailureReport:
    """Counts per label, the episodes without a transcript, and one example (seed, task id) per label."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    without_transcript: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def rows(self) -> list[tuple[str, int, float, str]]:
        """``(label, count, share, example)`` in :data:`FAILURE_LABELS` order, labels that occur only."""
        n = max(self.total, 1)
        out = []
        for label in FAILURE_LABELS:
            if self.counts[label]:
                seed, task = self.examples[label]
                out.append((label, self.counts[label], self.counts[label] / n, f"{task} (seed {seed})"))
        return out


def failure_report(episodes: Sequence[Mapping[str, Any]], transcripts: Mapping[tuple[int, str], Mapping[str, Any]], *,
                   window: int = 10, max_distinct: int = 2) -> FailureReport:
    """Label every episode row of a record (``record["episodes"]``), reading its transcript from
    ``transcripts`` (``(seed, task_id) -> transcript``, :func:`stratagym.eval.transcripts.read_transcripts`)."""
    report = FailureReport()
    for ep in episodes:
        seed, task = ep.get("seed"), str(ep.get("task_id"))
        transcript = transcripts.get((int(seed) if seed is not None else 0, task))
        if transcript is None:
            report.without_transcript += 1
        label = classify_episode(ep, transcript, window=window, max_distinct=max_distinct)
        report.counts[label] += 1
        report.examples.setdefault(label, (seed, task))
    return report
