"""What a rollout records: one :class:`StepRecord` per turn, one :class:`Trajectory` per episode, one
:class:`RolloutBatch` per collection (with timing and token counts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["StepRecord", "Trajectory", "RolloutBatch", "DROP_INFO"]

#: info keys not copied into step records (large and re-derivable).
DROP_INFO = ("admissible_actions",)


@dataclass
class StepRecord:
    """One turn of one episode."""

    step: int
    payload: Any
    action: str
    text: str
    format_ok: bool
    num_tokens: int
    reward: float
    action_valid: bool
    state_hash: int  # of the observation the action was taken in (GiGPO anchor)
    context: list[int]  # context hashes of that observation (HGPO)
    search_count: int  # after the step
    info: dict[str, Any]  # info after the step (without admissible_actions)
    shaped_reward: Optional[float] = None  # reward after the trainer's shaping
    observation: Optional[str] = None  # the observation the action was taken in (transcripts; shared, not copied)
    prompt_cut: bool = False  # the policy cut this turn's prompt to fit its model (LLMPolicy.fit_prompt)

    @property
    def train_reward(self) -> float:
        return self.reward if self.shaped_reward is None else self.shaped_reward


@dataclass
class Trajectory:
    """One episode of a group rollout."""

    traj: int
    group: int
    task_id: str
    seed: Optional[int]
    steps: list[StepRecord] = field(default_factory=list)
    failed: bool = False
    error: Optional[str] = None
    terminated: bool = False
    truncated: bool = False
    won: bool = False
    score: float = 0.0
    baseline: Optional["Trajectory"] = None  # ReMax: the task's greedy episode (collect(baseline=True))
    final_observation: Optional[str] = None  # what the env answered the last action with (transcripts)

    @property
    def env_return(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def train_return(self) -> float:
        return float(sum(s.train_reward for s in self.steps))

    @property
    def search_count(self) -> int:
        return self.steps[-1].search_count if self.steps else 0

    @property
    def valid_ratio(self) -> float:
        return sum(s.action_valid for s in self.steps) / len(self.steps) if self.steps else 1.0

    @property
    def prompt_cuts(self) -> int:
        """Turns whose prompt the policy cut to fit its model."""
        return sum(s.prompt_cut for s in self.steps)


@dataclass
class RolloutBatch:
    """The trajectories of one collection, with timing and token counts."""

    trajectories: list[Trajectory]
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    total_seconds: float = 0.0
    generated_tokens: int = 0
    turns: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # more metrics (dynamic sampling's; async mode's, one a list)

    @property
    def ok(self) -> list[Trajectory]:
        return [t for t in self.trajectories if not t.failed and t.steps]

    def metrics(self) -> dict[str, float]:
        ok = self.ok
        n = max(len(ok), 1)
        return {
            "rollout/episodes": float(len(self.trajectories)),
            "rollout/failed": float(len(self.trajectories) - len(ok)),
            "rollout/return": sum(t.env_return for t in ok) / n,
            "rollout/shaped_return": sum(t.train_return for t in ok) / n,
            "rollout/success": sum(t.won for t in ok) / n,
            "rollout/score": sum(t.score for t in ok) / n,
            "rollout/turns": sum(len(t.steps) for t in ok) / n,
            "rollout/search_count": sum(t.search_count for t in ok) / n,
            "rollout/valid_ratio": sum(t.valid_ratio for t in ok) / n,
            "rollout/format_ok": sum(s.format_ok for t in ok for s in t.steps) / max(sum(len(t.steps) for t in ok), 1),
            "rollout/prompt_cut": sum(t.prompt_cuts for t in ok) / max(sum(len(t.steps) for t in ok), 1),
            "rollout/tokens": float(self.generated_tokens),
            **self.extra,
        }

    def timing(self) -> dict[str, float]:
        total = max(self.total_seconds, 1e-9)
        return {
            "time/rollout": self.total_seconds,
            "time/generate": self.generate_seconds,
            "time/env": self.env_seconds,
            "time/env_share": self.env_seconds / total,
            "time/tokens_per_s": self.generated_tokens / max(self.generate_seconds, 1e-9),
        }
