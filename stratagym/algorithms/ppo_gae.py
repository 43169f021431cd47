"""Generalised advantage estimation (pure torch) for PPO with a critic: per turn on step rows, and per
token on (B, T) tensors as verl's ``compute_gae_advantage_return``.

The registry entry ``gae`` (:func:`gae_advantages`) reads the critic's ``values`` from the batch, so a
trainer builds a critic for it.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from stratagym.algorithms._segment import as_compute, check_ids, check_rewards
from stratagym.algorithms.registry import register_estimator
from stratagym.algorithms.returns import step_returns, traj_order
from stratagym.algorithms.whitening import whiten

__all__ = ["gae", "gae_advantages", "gae_tokens"]


def gae(
    rewards: Tensor,
    values: Tensor,
    traj: Tensor,
    step: Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Turn-level GAE (Schulman et al. 2016, arXiv 1506.02438) on step rows; returns ``(advantages, returns)``.

    Within each trajectory, rows ordered by ``step``: ``delta_t = r_t + gamma V_{t+1} - V_t`` (``V`` after
    the last step is 0) and ``A_t = delta_t + gamma lam A_{t+1}``; ``returns = A + V`` are the value
    targets.  This is verl's ``compute_gae_advantage_return`` with one row per turn instead of one
    column per token (see :func:`gae_tokens`).  Vectorised as the discounted sum of the deltas with
    factor ``gamma * lam`` (:func:`step_returns`).  No whitening here: :func:`whiten` it as verl does.
    """
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    v = check_rewards(values, "values", n)
    t = check_ids(traj, "traj", n)
    st = check_ids(step, "step", n)
    for name, x in (("gamma", gamma), ("lam", lam)):
        if not (0.0 <= float(x) <= 1.0):
            raise ValueError(f"{name} must be in [0, 1], got {x!r}")
    if n == 0:
        return r.clone(), r.clone()
    x, vv = as_compute(r), as_compute(v).to(r.device)
    order, ts, _, _ = traj_order(t.to(x.device), st.to(x.device))
    vs = vv[order]
    nxt = torch.zeros_like(vs)
    if n > 1:
        same = ts[1:] == ts[:-1]
        nxt[:-1] = torch.where(same, vs[1:], torch.zeros_like(vs[1:]))
    delta = torch.empty_like(x)
    delta[order] = x[order] + float(gamma) * nxt - vs
    adv = step_returns(delta, t, st, gamma=float(gamma) * float(lam))
    return adv.to(r.dtype), (adv + vv).to(r.dtype)


def gae_tokens(
    token_rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Token-level GAE on ``(B, T)`` tensors, verl's ``compute_gae_advantage_return`` (core_algos.py:214-263,
    without its final whitening): tokens where ``mask`` is 0 (observation tokens between turns, padding)
    carry neither a value nor a TD error: the recursion passes over them, and they get the advantage of
    the next response token.  Returns ``(advantages, returns)`` with ``returns = A + V``.  A loop over
    the T positions, vectorised across rows, as verl."""
    if token_rewards.dim() != 2 or values.shape != token_rewards.shape or mask.shape != token_rewards.shape:
        raise ValueError(f"token_rewards, values and mask must all be (B, T), got {tuple(token_rewards.shape)}, "
                         f"{tuple(values.shape)}, {tuple(mask.shape)}")
    rw, vv = as_compute(token_rewards), as_compute(values)
    m = as_compute(mask)
    B, T = rw.shape
    next_v = torch.zeros(B, dtype=rw.dtype, device=rw.device)
    last = torch.zeros(B, dtype=rw.dtype, device=rw.device)
    adv = torch.zeros_like(rw)
    for t in reversed(range(T)):
        delta = rw[:, t] + gamma * next_v - vv[:, t]
        cand = delta + gamma * lam * last
        next_v = vv[:, t] * m[:, t] + (1 - m[:, t]) * next_v
        last = cand * m[:, t] + (1 - m[:, t]) * last
        adv[:, t] = last
    return adv.to(token_rewards.dtype), (adv + vv).to(token_rewards.dtype)


@register_estimator("gae", level="step")
def gae_advantages(
    rewards: Tensor,
    values: Tensor,
    traj: Tensor,
    step: Tensor,
    gather: Optional[Callable[[Tensor], Tensor]] = None,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten_adv: bool = True,
) -> Tensor:
    """PPO's advantages, the registry entry ``gae``: :func:`gae` on step rows, then (``whiten_adv``)
    :func:`whiten`-ed over the batch as verl does (over every data-parallel process's rows through
    ``gather``).  The critic's targets are :func:`gae`'s returns, without the whitening."""
    adv, _ = gae(rewards, values, traj, step, gamma=gamma, lam=lam)
    return whiten(adv, gather=gather) if whiten_adv else adv
