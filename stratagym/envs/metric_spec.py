"""How an env declares a metric it produces: :class:`MetricSpec`, named in its ``EnvSpec(metrics=...)``.

An env reports per-episode numbers in its final ``info`` (QA's ``em``, ``f1``...) or is scored by a field
of the episode record (WebShop's score is its return x 100). The spec that says where such a number lives
and how to summarise it sits with the env that produces it, so the eval's aggregator and the board's
columns read it from there: a new metric needs no edit to ``eval/aggregate.py`` or the board's renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

__all__ = ["MetricSpec", "METRIC_KINDS"]

#: ``rate``: the share of episodes whose value is true (or at least 0.5), with a Wilson interval;
#: ``mean``: the mean value, with a bootstrap interval.
METRIC_KINDS = ("rate", "mean")


@dataclass(frozen=True)
class MetricSpec:
    """One metric an env produces and how the eval aggregates it.

    * ``name``: the metric's name in records and on the board;
    * ``kind``: ``rate`` or ``mean`` (:data:`METRIC_KINDS`);
    * ``key``: the ``info`` key it reads (kept in the record's ``extra``, so the env's spec must also list it
      in ``record_info_keys``); default: ``name``. The metric is computed only where every episode has it;
    * ``field``: instead of ``key``, a field of the episode record (``total_reward``, ``score``, ``turns``...;
      a missing field counts as 0);
    * ``scale``: a factor applied to the value and its interval (WebShop's score: 100);
    * ``higher_is_better``: the board's ranking direction when the metric ranks a board;
    * ``parts``: for a boolean key, two names ``(when_true, when_false)``: the env's primary metric is
      also reported on the episodes where the flag is true and where it is false, as
      ``<primary>/<when_true>`` and ``<primary>/<when_false>`` (QA's ``em/overlap``, ``em/no_overlap``);
    * ``column``: whether the board places the column in declaration order (``False``: it sorts by name
      after the placed ones).
    """

    name: str
    kind: Literal["rate", "mean"]
    key: str | None = None
    field: str | None = None
    scale: float = 1.0
    higher_is_better: bool = True
    parts: tuple[str, str] | None = None
    column: bool = True

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a MetricSpec needs a non-empty name, got {self.name!r}")
        if self.kind not in METRIC_KINDS:
            raise ValueError(f"metric {self.name!r}: kind must be one of {', '.join(METRIC_KINDS)}, got {self.kind!r}")
        if self.key is not None and self.field is not None:
            raise ValueError(f"metric {self.name!r} reads either an info key (key=) or a record field (field=), not both")
        if self.parts is not None:
            if self.field is not None or len(self.parts) != 2 or not all(isinstance(p, str) and p for p in self.parts):
                raise ValueError(f"metric {self.name!r}: parts names the two halves of a boolean info key, "
                                 f"e.g. parts=('overlap', 'no_overlap'); got {self.parts!r}")
            object.__setattr__(self, "parts", tuple(self.parts))

    @property
    def info_key(self) -> str | None:
        """The ``info`` key this metric reads (``None`` when it reads a record field)."""
        return None if self.field is not None else (self.key or self.name)

    def value(self, row: Mapping[str, Any]) -> Any:
        """This metric's raw value in one episode row (``EpisodeRecord.to_dict()`` form), ``None`` where the
        episode does not carry its info key."""
        if self.field is not None:
            return row.get(self.field, 0)
        return row.get("extra", {}).get(self.info_key)

    def part_names(self, primary: str) -> tuple[str, ...]:
        """The names of the primary metric on this flag's two halves (none when ``parts`` is unset)."""
        return tuple(f"{primary}/{p}" for p in self.parts) if self.parts else ()
