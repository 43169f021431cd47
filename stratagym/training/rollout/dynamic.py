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

Several data-parallel processes: every round, every process draws its slice of one global task list,
the processes exchange their informative-group counts and all stop at the same round, keeping the first
``tasks_per_step x processes`` informative groups in (round, process, group) order, as one process
drawing the global list would (:func:`round_quotas`); the metrics are then the global ones.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from stratagym.algorithms.advantages import informative_groups
from stratagym.training.rollout.records import RolloutBatch, Trajectory

__all__ = ["collect_informative", "round_quotas"]


def round_quotas(counts: Sequence[int], kept: int, target: int) -> list[int]:
    """How many of its informative groups each process keeps from one round of a multi-process draw.

    ``counts[r]`` is the number of informative groups process ``r`` drew this round, ``kept`` the
    number kept by all processes in earlier rounds, ``target`` the global number wanted. Processes are
    served in rank order, each keeping its first groups: exactly the groups one process would keep
    from the same global task list (its groups are the processes' slices one after the other), namely
    the first ``target`` informative groups in (round, rank, group) order. With one process this is
    ``[min(counts[0], target - kept)]``, the single-process rule."""
    left = max(int(target) - int(kept), 0)
    out: list[int] = []
    for c in counts:
        take = min(int(c), left)
        out.append(take)
        left -= take
    return out


def collect_informative(
    draw: Callable[[], RolloutBatch],
    target_groups: int,
    *,
    max_rounds: int,
    score: Callable[[Trajectory], float] = lambda t: t.train_return,
    keep_singletons: bool = True,
    gather: Optional[Callable[[list[int]], list[list[int]]]] = None,
    rank: int = 0,
) -> RolloutBatch:
    """Call ``draw()`` (one group rollout, rewards already shaped) until ``target_groups`` informative
    groups are kept or ``max_rounds`` draws were made; returns one batch of the kept groups (the first
    ``target_groups`` found, as verl trims to the train batch size) with the summed timings and the
    filter metrics in ``batch.extra``.  ``score`` is the per-trajectory value compared within a group
    (default: the shaped return the estimators read).

    Several processes (``gather`` given, ``rank`` this process's index): every process calls this in
    step, ``target_groups`` is the GLOBAL target and ``draw()`` returns this process's slice of the
    round's global task list. ``gather([informative, drawn])`` must return every process's pair in
    rank order (a collective, joined every round by every process, also one whose draw held no
    informative group); from the pairs all processes decide alike (:func:`round_quotas`) which groups
    are kept and when to stop, so they draw the same number of rounds (a shared task RNG stays in
    step) and keep what one process drawing the global list would keep. A process may keep fewer
    groups than another, or none (then its batch is empty, with the timings of its draws). The metrics
    are global. Without ``gather``: the single-process behaviour."""
    if target_groups < 1 or max_rounds < 1:
        raise ValueError("target_groups and max_rounds must be >= 1")
    kept: list[Trajectory] = []
    n_local = n_kept = seen = dropped = rounds = 0
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
        ok = batch.ok
        good: set[int] = set()
        if ok:
            mask = informative_groups(torch.tensor([float(score(t)) for t in ok], dtype=torch.float64),
                                      torch.tensor([t.group for t in ok], dtype=torch.long),
                                      keep_singletons=keep_singletons)
            good = {t.group for t, k in zip(ok, mask.tolist()) if k}
        everyone = [[len(good), len(groups)]] if gather is None else gather([len(good), len(groups)])
        quotas = round_quotas([c[0] for c in everyone], n_kept, target_groups)
        seen += sum(c[1] for c in everyone)
        dropped += sum(c[1] - c[0] for c in everyone)
        take = quotas[rank]
        # members first, renumbering after: a kept group's new id may equal a later group's old id
        members = {gid: [t for t in batch.trajectories if t.group == gid] for gid in groups if gid in good}
        for gid in groups:
            if gid not in good or take == 0:
                continue
            for t in members[gid]:
                t.group = n_local
                t.traj = len(kept)
                kept.append(t)
            n_local += 1
            take -= 1
        n_kept += sum(quotas)
    extra = {
        "rollout/filter_rounds": float(rounds),
        "rollout/informative_groups": float(n_kept),
        "rollout/filtered_frac": dropped / max(seen, 1),  # share of drawn groups without signal
    }
    if n_kept == 0 and last is not None:  # nothing informative anywhere: train on the last draw (advantages 0)
        last.extra.update(extra)
        return last
    out = RolloutBatch(kept, generate_seconds=gen_s, env_seconds=env_s, total_seconds=total_s,
                       generated_tokens=tokens, turns=turns)
    out.extra.update(extra)
    return out
