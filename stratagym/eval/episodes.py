"""One row of an eval: the outcome of one episode, read off a rollout :class:`Trajectory`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from stratagym.training.rollout import Trajectory

__all__ = ["EpisodeRecord", "DEFAULT_RECORD_INFO_KEYS"]

#: info keys copied into ``EpisodeRecord.extra`` when an env's spec names none of its own.
DEFAULT_RECORD_INFO_KEYS: tuple[str, ...] = ()


@dataclass
class EpisodeRecord:
    """The outcome of one episode (one row of an eval's per-task results)."""

    task_id: str
    seed: int | None
    total_reward: float
    won: bool
    score: float
    turns: int
    search_count: int
    valid_actions: int
    truncated: bool
    extra: dict[str, Any] = field(default_factory=dict)
    prompt_cuts: int = 0  # turns whose prompt the policy cut to fit its model (LLMPolicy.fit_prompt)

    @property
    def valid_ratio(self) -> float:
        return self.valid_actions / self.turns if self.turns else 1.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["valid_ratio"] = self.valid_ratio
        return d

    @classmethod
    def from_trajectory(cls, traj: Trajectory, info_keys: Sequence[str] = DEFAULT_RECORD_INFO_KEYS) -> "EpisodeRecord":
        """The record of a finished trajectory; ``info_keys`` (the env spec's ``record_info_keys``) are
        copied from the last step's ``info`` into ``extra`` where present."""
        if traj.failed:
            raise RuntimeError(f"episode {traj.task_id!r} (seed {traj.seed}) failed: {traj.error}")
        last = traj.steps[-1].info if traj.steps else {}
        return cls(
            task_id=traj.task_id,
            seed=traj.seed,
            total_reward=traj.env_return,
            won=bool(traj.won),
            score=float(traj.score),
            turns=len(traj.steps),
            search_count=traj.search_count,
            valid_actions=sum(bool(s.action_valid) for s in traj.steps),
            truncated=bool(traj.truncated and not traj.terminated),
            extra={k: last[k] for k in info_keys if k in last},
            prompt_cuts=traj.prompt_cuts,
        )
