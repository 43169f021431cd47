"""REINFORCE-style estimators (pure torch) whose baseline is not the plain group mean: REINFORCE++ and
REINFORCE++-baseline (rewards whitened over the whole batch, verl's ``masked_whiten``) and ReMax (the
reward of a greedy rollout of the same task).

verl's versions (``verl/trainer/ppo/core_algos.py`` at commit b178a3cd56f58b2d502255daba591e92833930a7)
run on (B, T) token matrices whose only non-zero reward is the last response token; here one row is one
trajectory, and ``lengths`` (response tokens per row) restores verl's token weighting of the whitening.
Registered by their signatures (:func:`register_estimator`); the two that read ``gather`` whiten over
every data-parallel process's rows.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from stratagym.algorithms._segment import as_compute, check_rewards, check_singleton, grouped_rewards, segment_stats
from stratagym.algorithms.registry import register_estimator
from stratagym.algorithms.whitening import whiten

__all__ = ["reinforce_pp", "reinforce_pp_baseline", "remax"]


@register_estimator("reinforce_plus_plus")
def reinforce_pp(rewards: Tensor, lengths: Optional[Tensor] = None,
                 gather: Optional[Callable[[Tensor], Tensor]] = None, *, eps: float = 1e-8) -> Tensor:
    """REINFORCE++ (arXiv 2501.03262; verl
    ``compute_reinforce_plus_plus_outcome_advantage``): the reward whitened over the whole batch,
    with no group baseline.  verl discounts token rewards with ``gamma`` before whitening; with an
    outcome reward and verl's default ``gamma=1`` every token's return is the reward, which is
    this (``lengths`` gives verl's token weighting).  ``gamma < 1`` over tokens is not offered.
    ``gather``: the whitening over every data-parallel process's rows (see :func:`whiten`)."""
    return whiten(rewards, lengths, eps=eps, gather=gather)


@register_estimator("reinforce_plus_plus_baseline")
def reinforce_pp_baseline(
    rewards: Tensor, group: Tensor, lengths: Optional[Tensor] = None,
    gather: Optional[Callable[[Tensor], Tensor]] = None, *, eps: float = 1e-8, singleton: str = "zero",
) -> Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262; verl
    ``compute_reinforce_plus_plus_baseline_outcome_advantage``): ``r - mean_g``, then whitened over
    the batch (token-weighted by ``lengths``).  ``singleton``: ``"zero"`` gives a group of one
    ``r - r = 0`` before whitening; ``"verl"`` uses verl's group mean 0 for it (``r`` itself)."""
    check_singleton(singleton)
    r, x, gi, ng = grouped_rewards(rewards, group)
    cnt, _, dev, _ = segment_stats(x, gi, ng, ddof=0)
    if singleton == "verl":
        dev = torch.where((cnt == 1)[gi], x, dev)
    return whiten(dev, lengths, eps=eps, gather=gather).to(r.dtype)


@register_estimator("remax")
def remax(rewards: Tensor, baseline: Tensor) -> Tensor:
    """ReMax (arXiv 2310.10505; verl ``compute_remax_outcome_advantage``):
    ``r - b`` where ``b`` is the reward of the GREEDY rollout of the row's task.  The collector must
    play one extra greedy episode per task and put its reward on every row of that task as
    ``AdvantageBatch.baseline``; the greedy episode itself is not trained on (as verl)."""
    r = check_rewards(rewards, "rewards")
    b = check_rewards(baseline, "baseline", r.shape[0])
    return (as_compute(r) - as_compute(b).to(r.device)).to(r.dtype)
