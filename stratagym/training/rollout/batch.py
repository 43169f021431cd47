"""From a :class:`RolloutBatch` to what the estimators read: reward shaping and flat tensors."""

from __future__ import annotations

from typing import Any, Optional

import torch

from stratagym.algorithms.registry import AdvantageBatch
from stratagym.envs.registry import get_spec
from stratagym.training.rollout.records import RolloutBatch, StepRecord

__all__ = ["shape_rewards", "to_advantage_batch", "env_metadata_keys"]


def shape_rewards(batch: RolloutBatch, *, invalid_action_penalty: float = 0.0, format_reward: float = 0.0,
                  reward_scale: float = 1.0) -> None:
    """Set each step's ``shaped_reward``: ``reward_scale * r`` minus ``invalid_action_penalty`` on steps
    whose action the env rejected (verl-agent's penalty, on that step only), plus ``format_reward`` on
    the last step of a trajectory whose every response was well-formed. A trajectory's greedy
    ``baseline`` episode (ReMax) is shaped the same way, so baseline and rewards are comparable."""
    greedy = {id(t.baseline): t.baseline for t in batch.trajectories if t.baseline is not None}
    for traj in [*batch.trajectories, *greedy.values()]:
        for s in traj.steps:
            s.shaped_reward = reward_scale * s.reward - (invalid_action_penalty if not s.action_valid else 0.0)
        if traj.steps and format_reward and all(s.format_ok for s in traj.steps):
            traj.steps[-1].shaped_reward = float(traj.steps[-1].shaped_reward or 0.0) + format_reward


def to_advantage_batch(batch: RolloutBatch, level: str) -> tuple[Any, torch.Tensor, list[StepRecord]]:
    """Flatten the successful trajectories for an estimator of ``level``.

    Returns ``(advantage_batch, sample_row, samples)``: ``samples`` are the training samples (every step
    of every successful trajectory, in order) and ``sample_row[i]`` is the advantage row of sample i.
    """
    if level not in ("trajectory", "step"):
        raise ValueError(f"level must be 'trajectory' or 'step', got {level!r}")
    ok = batch.ok
    samples = [s for t in ok for s in t.steps]
    if level == "trajectory":
        rewards = torch.tensor([t.train_return for t in ok], dtype=torch.float32)
        group = torch.tensor([t.group for t in ok], dtype=torch.long)
        traj = torch.tensor([t.traj for t in ok], dtype=torch.long)
        stratum = torch.tensor([t.search_count for t in ok], dtype=torch.long)
        sample_row = torch.tensor([i for i, t in enumerate(ok) for _ in t.steps], dtype=torch.long)
        lengths = torch.tensor([sum(s.num_tokens for s in t.steps) for t in ok], dtype=torch.long)  # OPO, REINFORCE++
        return (AdvantageBatch(rewards=rewards, group=group, stratum=stratum, traj=traj, lengths=lengths,
                               baseline=_baselines(ok, rewards)),
                sample_row, samples)
    rows = [(t, s) for t in ok for s in t.steps]
    width = max((len(s.context) for _, s in rows), default=1) or 1
    context = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, (_, s) in enumerate(rows):
        if s.context:
            context[i, : len(s.context)] = torch.tensor(s.context, dtype=torch.long)
    ab = AdvantageBatch(
        rewards=torch.tensor([s.train_reward for _, s in rows], dtype=torch.float32),
        group=torch.tensor([t.group for t, _ in rows], dtype=torch.long),
        stratum=torch.tensor([s.search_count for _, s in rows], dtype=torch.long),
        traj=torch.tensor([t.traj for t, _ in rows], dtype=torch.long),
        step=torch.tensor([s.step for _, s in rows], dtype=torch.long),
        anchor=torch.tensor([s.state_hash for _, s in rows], dtype=torch.long),
        context=context,
        episode_rewards=torch.tensor([t.train_return for t, _ in rows], dtype=torch.float32),
    )
    return ab, torch.arange(len(rows), dtype=torch.long), samples


def _baselines(ok: list[Any], rewards: torch.Tensor) -> Optional[torch.Tensor]:
    """ReMax's per-row baseline: the shaped return of the row's greedy episode (``Trajectory.baseline``),
    or None when the collector played none. A task whose greedy episode failed (env error, no step) uses
    its group's mean return instead, so its rows get Dr.GRPO's ``r - mean`` rather than no baseline."""
    if not ok or all(t.baseline is None for t in ok):
        return None
    out = rewards.clone()
    for g in {t.group for t in ok}:
        members = [i for i, t in enumerate(ok) if t.group == g]
        ref = ok[members[0]].baseline
        value = (ref.train_return if ref is not None and not ref.failed and ref.steps
                 else float(rewards[members].double().mean()))
        out[members] = value
    return out


def env_metadata_keys(env_id: str, observed_info: Optional[dict[str, Any]] = None) -> set[str]:
    """The metadata keys ``env_id`` provides: its stratagym ``EnvSpec.metadata_keys``, else the keys
    seen in an ``info`` dict (for envs registered with gymnasium directly); an agent program's are fixed."""
    from stratagym.training.rollout.program import PROGRAM_METADATA_KEYS, is_program

    if is_program(env_id):
        return set(PROGRAM_METADATA_KEYS)
    try:
        return set(get_spec(env_id).metadata_keys)
    except KeyError:
        return set(observed_info or {})
