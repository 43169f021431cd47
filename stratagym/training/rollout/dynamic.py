"""Dynamic sampling (DAPO, arXiv 2503.14476; verl's ``algorithm.filter_groups``).

A group whose trajectories all earn the same return gets advantage 0 from every group-relative
estimator: it costs generation and trains nothing.  :func:`collect_informative` draws group rollouts
round after round, keeps the groups whose returns differ (:func:`~stratagym.algorithms.advantages.
informative_groups`, verl's rule: std > 0, or a group of one) and stops once it holds the requested
number of groups, or after ``max_rounds`` draws.  Groups are renumbered so that ids stay unique across
rounds; every estimator then sees an ordinary batch.

Differences from verl: verl raises once ``max_num_gen_batches`` is reached without enough groups; here
training goes on with the groups found (and, if none was informative, with the last draw as is, whose
advantages are then 0, as without filtering).  The numbers are logged (``rollout/filtered_frac``,
``rollout/filter_rounds``, ``rollout/informative_groups``).
"""

from __future__ import annotations

from typing import Callable

import torch

from stratagym.algorithms.advantages import informative_groups
from stratagym.training.rollout.records import RolloutBatch, Trajectory

__all__ = ["collect_informative"]


def collect_informative(
    draw: Callable[[], RolloutBatch],
    target_groups: int,
    *,
    max_rounds: int,
    score: Callable[[Trajectory], float] = lambda t: t.train_return,
    keep_singletons: bool = True,
) -> RolloutBatch:
    """Call ``draw()`` (one group rollout, rewards already shaped) until ``target_groups`` informative
    groups are kept or ``max_rounds`` draws were made; returns one batch of the kept groups (the first
    ``target_groups`` found, as verl trims to the train batch size) with the summed timings and the
    filter metrics in ``batch.extra``.  ``score`` is the per-trajectory value compared within a group
    (default: the shaped return the estimators read)."""
    if target_groups < 1 or max_rounds < 1:
        raise ValueError("target_groups and max_rounds must be >= 1")
    kept: list[Trajectory] = []
    n_kept = seen = dropped = rounds = 0
    gen_s = env_s = total_s = 0.0
    tokens = turns = 0
    last: RolloutBatch | None = None
    while n_kept < target_groups and rounds < max_rounds:
        batch = draw()
        last = batch
        rounds += 1
        gen_s += batch.generate_seconds
        env_s += batch.env_seconds
        total_s += batch.total_seconds
        tokens += batch.generated_tokens
        turns += batch.turns
        groups = sorted({t.group for t in batch.trajectories})
        seen += len(groups)
        ok = batch.ok
        good: set[int] = set()
        if ok:
            mask = informative_groups(torch.tensor([float(score(t)) for t in ok], dtype=torch.float64),
                                      torch.tensor([t.group for t in ok], dtype=torch.long),
                                      keep_singletons=keep_singletons)
            good = {t.group for t, k in zip(ok, mask.tolist()) if k}
        dropped += len(groups) - len(good)
        for gid in groups:
            if gid not in good or n_kept >= target_groups:
                continue
            for t in batch.trajectories:
                if t.group == gid:
                    t.group = n_kept
                    t.traj = len(kept)
                    kept.append(t)
            n_kept += 1
    extra = {
        "rollout/filter_rounds": float(rounds),
        "rollout/informative_groups": float(n_kept),
        "rollout/filtered_frac": dropped / max(seen, 1),  # share of drawn groups without signal
    }
    if not kept and last is not None:  # nothing informative: train on the last draw (advantages 0)
        last.extra.update(extra)
        return last
    out = RolloutBatch(kept, generate_seconds=gen_s, env_seconds=env_s, total_seconds=total_s,
                       generated_tokens=tokens, turns=turns)
    out.extra.update(extra)
    return out
