"""Per-step returns of step rows (pure torch): the discounted return of each step and the trajectory total.

The step-level estimators (GiGPO, HGPO), PPO's GAE and the registry's derived batch inputs
(``step_returns``, ``episode_rewards``) all read these, so they sit below every estimator family.
Rows come in any order; ``traj`` and ``step`` say where each belongs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from stratagym.algorithms._segment import as_compute, check_ids, check_rewards, dense_ids

__all__ = ["episode_returns", "step_returns", "traj_order"]


def traj_order(traj: Tensor, step: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """Sort rows by (traj, step).  Returns (order, traj dense ids sorted, position in traj, n_traj)."""
    ti, nt = dense_ids(traj)
    smin, smax = int(step.min()), int(step.max())
    span = smax - smin + 1
    if nt * span < 2**62:  # one sort on a packed (traj, step) key
        order = torch.argsort(ti * span + (step - smin))
    else:
        o1 = torch.argsort(step, stable=True)
        order = o1[torch.argsort(ti[o1], stable=True)]
    ts = ti[order]
    ss = step[order]
    if order.numel() > 1:
        dup = (ts[1:] == ts[:-1]) & (ss[1:] == ss[:-1])
        if bool(dup.any()):
            rows = order[1:][dup][:20].tolist()
            raise ValueError(f"duplicate (traj, step) pairs at rows {rows}")
    cnt = torch.bincount(ts, minlength=nt)
    start = torch.cumsum(cnt, 0) - cnt
    pos = torch.arange(order.numel(), device=order.device) - start[ts]
    return order, ts, pos, nt


def step_returns(rewards: Tensor, traj: Tensor, step: Tensor, *, gamma: float) -> Tensor:
    """Discounted return per step: ``G_t = r_t + gamma * G_{t+1}`` within each trajectory.

    Rows may come in any order; within a trajectory they are ordered by ``step`` (gaps allowed,
    duplicate ``(traj, step)`` pairs raise).  Vectorised: rows are sorted by (traj, step); short
    trajectories (longest <= 64 steps) are padded to a (n_traj, L) matrix multiplied by the
    discount matrix ``U[j, t] = gamma^(j-t)`` (j >= t); otherwise a reverse segmented scan does one
    vectorised update per position, i.e. a loop over the longest trajectory's LENGTH, never over
    rows or trajectories.
    """
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    t = check_ids(traj, "traj", n)
    st = check_ids(step, "step", n)
    if not (0.0 <= float(gamma) <= 1.0) or not math.isfinite(float(gamma)):
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    if n == 0:
        return r.clone()
    x = as_compute(r)
    order, ts, pos, nt = traj_order(t.to(x.device), st.to(x.device))
    xs = x[order]
    gam = float(gamma)
    L = int(pos.max()) + 1
    if L <= 64 and nt * L <= 16 * n + 4096:
        # short trajectories: pad to (n_traj, L) and apply the discount matrix
        # U[j, t] = gamma^(j - t) for j >= t (one matmul, no division by powers of gamma)
        pad = torch.zeros(nt, L, dtype=x.dtype, device=x.device)
        pad[ts, pos] = xs
        ar = torch.arange(L, device=x.device)
        e = (ar.unsqueeze(1) - ar.unsqueeze(0)).to(x.dtype)  # j - t
        U = torch.where(e >= 0, torch.full_like(e, gam) ** e.clamp(min=0), torch.zeros_like(e))
        G = (pad @ U)[ts, pos]
    else:
        # reverse segmented scan: one vectorised update per position (rows at the same position
        # across all trajectories), highest position first
        has_next = torch.zeros(n, dtype=torch.bool, device=x.device)
        has_next[:-1] = ts[1:] == ts[:-1]
        G = xs.clone()
        by_pos = torch.argsort(pos, descending=True, stable=True)
        counts = torch.bincount(pos)
        for rows in torch.split(by_pos, counts.flip(0).tolist()):
            nxt = has_next[rows]
            if bool(nxt.any()):
                rr = rows[nxt]
                G[rr] = xs[rr] + gam * G[rr + 1]
    out = torch.empty_like(G)
    out[order] = G
    return out.to(r.dtype)


def episode_returns(rewards: Tensor, traj: Tensor) -> Tensor:
    """Undiscounted trajectory total broadcast to every step row of the trajectory."""
    r = check_rewards(rewards, "rewards")
    t = check_ids(traj, "traj", r.shape[0])
    x = as_compute(r)
    ti, nt = dense_ids(t.to(x.device))
    tot = torch.zeros(nt, dtype=x.dtype, device=x.device).index_add_(0, ti, x)
    return tot[ti].to(r.dtype)
