"""Group-relative advantage estimators as pure, vectorised tensor functions.

Rows are flat: one row per trajectory (``grpo``, ``rloo``, ``stratified``) or one row per step
(``step_returns``, ``gigpo``, ``hgpo``).  Id tensors (``group``, ``stratum``, ``traj``, ``anchor``
and the ``context`` hashes) are integer ids of any value; they are densified with
``torch.unique(return_inverse=True)``.  All statistics use scatter/segment reductions
(``bincount``, ``index_add_``, ``scatter_reduce_``): there is no Python loop over rows or groups.
Statistics are computed in float64 and the result is returned in the reward dtype.

Rewards with NaN/inf raise ``ValueError`` naming the offending rows.  A group whose members
all share one value gets an advantage of exactly 0 in every estimator.

See ``docs/algorithms.md`` for the definitions, the paper-vs-code options and the defaults.
"""

from __future__ import annotations

import inspect
import math
from collections import deque
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from .registry import (
    AdvantageBatch,
    EstimatorModifier,
    batch_episode,
    batch_returns,
    register_estimator,
    register_modifier,
)
from ._segment import (
    as_compute,
    check_ids,
    check_rewards,
    dense_ids,
    pair_ids,
    safe_div,
    segment_stats,
)

__all__ = [
    "grpo",
    "rloo",
    "stratified",
    "step_returns",
    "episode_returns",
    "gigpo",
    "hgpo",
    "HADW",
    "HADWEstimator",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "opo",
    "gpg",
    "grpo_passk",
    "whiten",
    "informative_groups",
    "gae",
    "gae_tokens",
]

_MODES = ("mean_norm", "mean_std_norm")


def _check_mode(mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")


# --------------------------------------------------------------------------- GRPO / RLOO


def grpo(
    rewards: Tensor,
    group: Tensor,
    *,
    scale: str = "group",
    eps: float = 1e-6,
    singleton: str = "zero",
) -> Tensor:
    """GRPO advantage ``(r - mean_g) / (std + eps)``.

    ``scale``: ``"group"`` divides by the group's Bessel std (verl / TRL), ``"batch"`` by the
    Bessel std of all rewards in the batch (TRL ``scale_rewards="batch"``), ``"none"`` does not
    divide (Dr.GRPO).  ``singleton``: ``"zero"`` (default) gives a group of one row advantage 0;
    ``"verl"`` uses verl's convention for such a group (mean 0, std 1, so ``A = r / (1 + eps)``).
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    if singleton not in ("zero", "verl"):
        raise ValueError(f"singleton must be 'zero' or 'verl', got {singleton!r}")
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    out_dtype = r.dtype
    x = as_compute(r)
    gi, ng = dense_ids(g.to(x.device))
    cnt, mean, dev, std = segment_stats(x, gi, ng, ddof=1)
    single = (cnt == 1)[gi]
    if singleton == "verl":
        dev = torch.where(single, x, dev)  # mean 0 for a group of one
    if scale == "group":
        s = torch.where(single, torch.ones_like(x), std[gi])  # std 1 for a group of one
        adv = safe_div(dev, s + eps)
    elif scale == "batch":
        bstd = x.std() if n > 1 else torch.ones((), dtype=x.dtype, device=x.device)
        adv = safe_div(dev, bstd + eps)
    else:
        adv = dev
    return adv.to(out_dtype)


def rloo(rewards: Tensor, group: Tensor) -> Tensor:
    """RLOO: ``r_i - mean_{j != i, j in g} r_j`` = ``n/(n-1) * (r_i - mean_g)``; a group of one gets 0."""
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    x = as_compute(r)
    gi, ng = dense_ids(g.to(x.device))
    cnt, _, dev, _ = segment_stats(x, gi, ng, ddof=0)
    c = cnt[gi].to(x.dtype)
    factor = torch.where(c > 1, c / (c - 1).clamp(min=1), torch.zeros_like(c))
    return (factor * dev).to(r.dtype)


@register_estimator("grpo")
def _grpo_entry(batch: AdvantageBatch, *, scale: str = "group", eps: float = 1e-6,
                singleton: str = "zero") -> Tensor:
    """GRPO (verl ``compute_grpo_outcome_advantage``): see :func:`grpo`."""
    return grpo(batch.rewards, batch.group, scale=scale, eps=eps, singleton=singleton)


@register_estimator("dr_grpo")
def _dr_grpo_entry(batch: AdvantageBatch, *, scale: str = "none", eps: float = 1e-6,
                   singleton: str = "zero") -> Tensor:
    """Dr.GRPO: GRPO without the std division (verl ``norm_adv_by_std_in_grpo=False``)."""
    return grpo(batch.rewards, batch.group, scale=scale, eps=eps, singleton=singleton)


@register_estimator("rloo")
def _rloo_entry(batch: AdvantageBatch) -> Tensor:
    """RLOO (verl ``compute_rloo_outcome_advantage``): see :func:`rloo`."""
    return rloo(batch.rewards, batch.group)


# --------------------------------------------------------------------------- Stratified GRPO


def stratified(
    rewards: Tensor,
    group: Tensor,
    stratum: Tensor,
    *,
    alpha: float = 1.0,
    eps: float = 1e-6,
    normalize: bool = True,
) -> Tensor:
    """Stratified GRPO: ``A = alpha * SAN + (1 - alpha) * GN``.

    SAN (stratified advantage normalisation) works inside each (group, stratum) cell:
    ``(r - mean_k) / (std_k + eps)``; GN inside each group: ``(r - mean_g) / (std_g + eps)``.
    Both use the POPULATION std, so SAN is exactly zero-mean and (for eps=0, non-constant cells)
    unit-variance within each cell.  A cell or group of one row, or one whose rewards are all
    equal, contributes 0.  ``normalize=False`` drops the std division in both terms (the
    un-normalised form ``alpha (r - mean_k) + (1 - alpha)(r - mean_g)`` used for the decomposition
    identity ``r - mean_g = (r - mean_k) + (mean_k - mean_g)``).
    """
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    s = check_ids(stratum, "stratum", n)
    if not math.isfinite(float(alpha)):
        raise ValueError(f"alpha must be finite, got {alpha!r}")
    x = as_compute(r)
    gi, ng = dense_ids(g.to(x.device))
    ci, nc = pair_ids(gi, ng, s.to(x.device))
    _, _, dev_c, std_c = segment_stats(x, ci, nc, ddof=0)
    _, _, dev_g, std_g = segment_stats(x, gi, ng, ddof=0)
    if normalize:
        san = safe_div(dev_c, std_c[ci] + eps)
        gn = safe_div(dev_g, std_g[gi] + eps)
    else:
        san, gn = dev_c, dev_g
    a = float(alpha)
    if a == 1.0:
        out = san
    elif a == 0.0:
        out = gn
    else:
        out = a * san + (1.0 - a) * gn
    return out.to(r.dtype)


@register_estimator("stratified", requires={"search_count"}, fields=("rewards", "group", "stratum"))
def _stratified_entry(batch: AdvantageBatch, *, alpha: float = 1.0, eps: float = 1e-6) -> Tensor:
    """Stratified GRPO: see :func:`stratified`."""
    return stratified(batch.rewards, batch.group, batch.stratum, alpha=alpha, eps=eps)


# --------------------------------------------------------------------------- step returns


def _traj_order(traj: Tensor, step: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
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
    order, ts, pos, nt = _traj_order(t.to(x.device), st.to(x.device))
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


# --------------------------------------------------------------------------- GiGPO


def _episode_term(x: Tensor, gi: Tensor, ng: int, remove_std: bool, eps: float) -> Tensor:
    """verl-agent ``episode_norm_reward`` (compute_mean_std_cross_all_data=True).

    Statistics over all step rows of a group, Bessel std (torch.std); a group of one row uses
    mean 0 and std 1.
    """
    cnt, _, dev, std = segment_stats(x, gi, ng, ddof=1)
    single = (cnt == 1)[gi]
    dev = torch.where(single, x, dev)
    if remove_std:
        return dev
    s = torch.where(single, torch.ones_like(x), std[gi])
    return safe_div(dev, s + eps)


def _step_term(x: Tensor, ci: Tensor, nc: int, remove_std: bool, eps: float) -> Tensor:
    """verl-agent ``step_norm_reward``: Bessel std; a step group of one row gets 0."""
    _, _, dev, std = segment_stats(x, ci, nc, ddof=1)
    if remove_std:
        return dev
    return safe_div(dev, std[ci] + eps)


def gigpo(
    episode_rewards: Tensor,
    step_returns: Tensor,
    group: Tensor,
    anchor: Tensor,
    *,
    omega: float = 1.0,
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO (verl-agent ``compute_gigpo_outcome_advantage``), one row per step.

    ``A = A_episode + omega * A_step``.  ``episode_rewards[i]`` is the return of row i's
    trajectory; ``A_episode`` is normalised over ALL step rows of the task group (as verl-agent,
    ``compute_mean_std_cross_all_data=True``), with mean 0 / std 1 for a group of a single row.
    ``A_step`` normalises ``step_returns`` within each (group, anchor-state) cell; a cell of one
    row gets 0.  Both terms use the Bessel std (verl-agent calls ``torch.std``).  ``mode``:
    ``"mean_std_norm"`` divides by ``std + eps``, ``"mean_norm"`` only subtracts the mean
    (verl-agent's own default is ``"mean_norm"``).
    """
    _check_mode(mode)
    er = check_rewards(episode_rewards, "episode_rewards")
    n = er.shape[0]
    sr = check_rewards(step_returns, "step_returns", n)
    g = check_ids(group, "group", n)
    a = check_ids(anchor, "anchor", n)
    remove_std = mode == "mean_norm"
    xe, xs = as_compute(er), as_compute(sr)
    gi, ng = dense_ids(g.to(xe.device))
    ci, nc = pair_ids(gi, ng, a.to(xe.device))
    ep = _episode_term(xe, gi, ng, remove_std, eps)
    st = _step_term(xs, ci, nc, remove_std, eps)
    return (ep + float(omega) * st).to(er.dtype)


@register_estimator("gigpo", level="step", requires={"state_hash"}, fields=("rewards", "group", "anchor"),
                    derived=("returns", "episode"))
def _gigpo_entry(batch: AdvantageBatch, *, omega: float = 1.0, mode: str = "mean_std_norm",
                 eps: float = 1e-6, gamma: float = 0.95) -> Tensor:
    """GiGPO on step rows: the trajectory total and the discounted step return per row."""
    return gigpo(batch_episode(batch), batch_returns(batch, gamma), batch.group, batch.anchor,
                 omega=omega, mode=mode, eps=eps)


# --------------------------------------------------------------------------- HGPO


def hgpo(
    step_returns: Tensor,
    group: Tensor,
    context: Tensor,
    *,
    alpha: float = 1.0,
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
    weight_offset: float = 1.0,
    episode_rewards: Optional[Tensor] = None,
) -> Tensor:
    """HGPO (Hierarchy-of-Groups Policy Optimization; official ``recipe/hgpo/core_hgpo.py``).

    ``context`` is int64 ``N x (K+1)``: column ``k`` is a hash of the last ``k+1`` observations,
    ``-1`` where the history is too short.  For each level ``k``, rows in the same task group
    with equal ``context[:, k]`` (and ``!= -1``) form a group; groups of one row are skipped; the
    level advantage is ``(r - mean) / (std + eps)`` with the POPULATION std (``mean_norm``:
    ``r - mean``).  Per row, level advantages equal to 0 are dropped, and the rest are averaged
    with weights ``w = (n + weight_offset) ** alpha`` where ``n = k + 1`` is the number of
    observations the level holds: ``sum(w * a) / (sum(w) + eps)`` (the official code's
    normalisation, eps included).  A row with no level left gets 0.

    ``weight_offset=1`` (default) is the official code (``L = k + 1`` with ``k`` its number of
    observations, weight ``L ** alpha``); ``weight_offset=0`` gives the ``n ** alpha`` reading
    of the paper notes.  ``episode_rewards`` (optional) enables the official ``base_group``
    option: the GiGPO episode term (Bessel std, mean 0/std 1 for a group of one row) joins as a
    level holding 0 observations (weight ``weight_offset ** alpha``).
    """
    _check_mode(mode)
    r = check_rewards(step_returns, "step_returns")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    if not isinstance(context, Tensor):
        raise TypeError(f"context must be a torch.Tensor, got {type(context).__name__}")
    if context.dim() != 2 or context.shape[0] != n or context.shape[1] < 1:
        raise ValueError(
            f"context must have shape (N, K+1) with N={n} rows and K+1 >= 1 columns, "
            f"got {tuple(context.shape)}"
        )
    if context.is_floating_point() or context.is_complex():
        raise TypeError(f"context must hold integer hashes, got dtype {context.dtype}")
    x = as_compute(r)
    dev_ = x.device
    ctx = context.to(dev_)
    gi, ng = dense_ids(g.to(dev_))
    remove_std = mode == "mean_norm"
    num = torch.zeros(n, dtype=x.dtype, device=dev_)
    den = torch.zeros(n, dtype=x.dtype, device=dev_)
    a_f = float(alpha)
    if episode_rewards is not None:
        er = as_compute(check_rewards(episode_rewards, "episode_rewards", n))
        base = _episode_term(er, gi, ng, remove_std, eps)
        w0 = float(weight_offset) ** a_f
        keep = base != 0
        num += torch.where(keep, w0 * base, torch.zeros_like(base))
        den += torch.where(keep, torch.full_like(base, w0), torch.zeros_like(base))
    for k in range(ctx.shape[1]):
        col = ctx[:, k]
        valid = col != -1
        rows = torch.nonzero(valid).flatten()
        if rows.numel() < 2:
            continue
        ci, nc = pair_ids(gi[rows], ng, col[rows])
        xv = x[rows]
        cnt, _, dev, std = segment_stats(xv, ci, nc, ddof=0)
        adv = dev if remove_std else safe_div(dev, std[ci] + eps)
        keep = (cnt[ci] > 1) & (adv != 0)
        w = float(k + 1 + weight_offset) ** a_f
        num.index_add_(0, rows, torch.where(keep, w * adv, torch.zeros_like(adv)))
        den.index_add_(0, rows, keep.to(x.dtype) * w)
    out = torch.where(den > 0, num / (den + eps), torch.zeros_like(num))
    return out.to(r.dtype)


@register_estimator("hgpo", level="step", requires={"context_hashes"}, fields=("rewards", "group", "context"),
                    derived=("returns",))
def _hgpo_entry(batch: AdvantageBatch, *, alpha: float = 1.0, mode: str = "mean_std_norm",
                eps: float = 1e-6, gamma: float = 0.95, weight_offset: float = 1.0,
                base_group: bool = False) -> Tensor:
    """HGPO on step rows; ``base_group`` adds the GiGPO episode term (needs trajectory totals)."""
    ep = batch_episode(batch) if base_group else None
    return hgpo(batch_returns(batch, gamma), batch.group, batch.context, alpha=alpha, mode=mode,
                eps=eps, weight_offset=weight_offset, episode_rewards=ep)


# --------------------------------------------------------------------------- critic-free (verl)
#
# verl's other outcome-reward estimators (``verl/trainer/ppo/core_algos.py`` at commit
# b178a3cd56f58b2d502255daba591e92833930a7).  verl computes them on (B, T) token matrices whose
# only non-zero reward is the last response token; here one row is one trajectory with its reward,
# and ``lengths`` (the number of response tokens per row) restores verl's token weighting where it
# matters (the batch whitening of REINFORCE++, OPO's baseline).


def _singleton_check(singleton: str) -> None:
    if singleton not in ("zero", "verl"):
        raise ValueError(f"singleton must be 'zero' or 'verl', got {singleton!r}")


def _weights(lengths: Optional[Tensor], n: int, x: Tensor) -> Tensor:
    if lengths is None:
        return torch.ones_like(x)
    w = as_compute(check_rewards(lengths, "lengths", n)).to(x.device)
    if bool((w < 0).any()):
        raise ValueError("lengths must be >= 0")
    return w


def whiten(x: Tensor, lengths: Optional[Tensor] = None, *, eps: float = 1e-8,
           gather: Optional[Callable[[Tensor], Tensor]] = None) -> Tensor:
    """verl ``masked_whiten`` of a per-row value broadcast over each row's tokens.

    ``(x - mean) / sqrt(var + eps)`` over the whole batch, where each row counts ``lengths[i]``
    times (its tokens; 1 each when ``lengths`` is None) and ``var`` is Bessel-corrected over the
    total count ``W``: ``sum w (x - mean)^2 / (W - 1)``.  verl raises when ``W`` is 0 or 1; here
    the result is then 0 (no spread to measure).  A batch whose rows all share one value gives 0.

    ``gather`` (data-parallel training, see :attr:`AdvantageBatch.gather`): the batch is split over
    processes and ``x`` holds this process's rows; ``gather(t)`` stacks every process's 1-D float64
    ``t`` into a ``(processes, len(t))`` tensor (a collective: every process calls it, one with no
    row too).  Mean, variance and the all-equal test are then the GLOBAL batch's, as in verl, which
    whitens on the driver over the whole batch; each process gets its own rows whitened."""
    r = check_rewards(x, "values")
    n = r.shape[0]
    if gather is not None:
        return _whiten_gathered(r, lengths, eps, gather)
    if n == 0:
        return r.clone()
    v = as_compute(r)
    w = _weights(lengths, n, v)
    tot = w.sum()
    if float(tot) <= 1.0 or float(v.max()) == float(v.min()):
        return torch.zeros_like(v).to(r.dtype)
    mean = (w * v).sum() / tot
    dev = v - mean
    var = (w * dev * dev).sum() / (tot - 1.0)
    return (dev * torch.rsqrt(var + eps)).to(r.dtype)


def _whiten_gathered(r: Tensor, lengths: Optional[Tensor], eps: float,
                     gather: Callable[[Tensor], Tensor]) -> Tensor:
    """:func:`whiten` over the rows of every process: two gathers, (count, sum, max, min) then the
    squared deviations from the global mean; every process takes the same branches (they read the
    same gathered numbers), so all join the same collectives or skip the second alike."""
    n = r.shape[0]
    v = as_compute(r)
    w = _weights(lengths, n, v)
    inf = float("inf")
    local = torch.tensor([float(w.sum()), float((w * v).sum()), float(v.max()) if n else -inf,
                          float(v.min()) if n else inf], dtype=torch.float64)
    every = gather(local).to(torch.float64).reshape(-1, 4)
    tot = float(every[:, 0].sum())
    if tot <= 1.0 or float(every[:, 2].max()) == float(every[:, 3].min()):
        return torch.zeros_like(v).to(r.dtype)
    dev = v - float(every[:, 1].sum()) / tot
    sq = gather(torch.tensor([float((w * dev * dev).sum())], dtype=torch.float64)).to(torch.float64)
    var = float(sq.sum()) / (tot - 1.0)
    return (dev * (var + eps) ** -0.5).to(r.dtype)


def reinforce_pp(rewards: Tensor, *, lengths: Optional[Tensor] = None, eps: float = 1e-8,
                 gather: Optional[Callable[[Tensor], Tensor]] = None) -> Tensor:
    """REINFORCE++ (arXiv 2501.03262; verl
    ``compute_reinforce_plus_plus_outcome_advantage``): the reward whitened over the whole batch,
    with no group baseline.  verl discounts token rewards with ``gamma`` before whitening; with an
    outcome reward and verl's default ``gamma=1`` every token's return is the reward, which is
    this (``lengths`` gives verl's token weighting).  ``gamma < 1`` over tokens is not offered.
    ``gather``: the whitening over every data-parallel process's rows (see :func:`whiten`)."""
    return whiten(rewards, lengths, eps=eps, gather=gather)


def reinforce_pp_baseline(
    rewards: Tensor, group: Tensor, *, lengths: Optional[Tensor] = None, eps: float = 1e-8,
    singleton: str = "zero", gather: Optional[Callable[[Tensor], Tensor]] = None,
) -> Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262; verl
    ``compute_reinforce_plus_plus_baseline_outcome_advantage``): ``r - mean_g``, then whitened over
    the batch (token-weighted by ``lengths``).  ``singleton``: ``"zero"`` gives a group of one
    ``r - r = 0`` before whitening; ``"verl"`` uses verl's group mean 0 for it (``r`` itself)."""
    _singleton_check(singleton)
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    x = as_compute(r)
    gi, ng = dense_ids(g.to(x.device))
    cnt, _, dev, _ = segment_stats(x, gi, ng, ddof=0)
    if singleton == "verl":
        dev = torch.where((cnt == 1)[gi], x, dev)
    return whiten(dev, lengths, eps=eps, gather=gather).to(r.dtype)


def remax(rewards: Tensor, baseline: Tensor) -> Tensor:
    """ReMax (arXiv 2310.10505; verl ``compute_remax_outcome_advantage``):
    ``r - b`` where ``b`` is the reward of the GREEDY rollout of the row's task.  The collector must
    play one extra greedy episode per task and put its reward on every row of that task as
    ``AdvantageBatch.baseline``; the greedy episode itself is not trained on (as verl)."""
    r = check_rewards(rewards, "rewards")
    b = check_rewards(baseline, "baseline", r.shape[0])
    return (as_compute(r) - as_compute(b).to(r.device)).to(r.dtype)


def opo(rewards: Tensor, group: Tensor, lengths: Tensor, *, singleton: str = "zero") -> Tensor:
    """OPO (arXiv 2505.23585; verl ``compute_opo_outcome_advantage``):
    ``r - b_g`` with the length-weighted group baseline ``b_g = sum_j l_j r_j / sum_j l_j`` (the
    optimal baseline for on-policy updates under a token-sum loss).  ``singleton``: ``"zero"``
    gives a group of one 0; ``"verl"`` uses verl's baseline 0 (``r``).  A group whose lengths sum
    to 0 uses the plain mean (verl would divide by zero); a constant group gets exactly 0."""
    _singleton_check(singleton)
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    x = as_compute(r)
    w = _weights(lengths, n, x)
    gi, ng = dense_ids(g.to(x.device))
    cnt, mean, _, _ = segment_stats(x, gi, ng, ddof=0)
    wsum = torch.zeros(ng, dtype=x.dtype, device=x.device).index_add_(0, gi, w)
    wx = torch.zeros(ng, dtype=x.dtype, device=x.device).index_add_(0, gi, w * x)
    base = torch.where(wsum > 0, wx / torch.where(wsum > 0, wsum, torch.ones_like(wsum)), mean)
    hi = torch.full((ng,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce_(0, gi, x, reduce="amax")
    lo = torch.full((ng,), float("inf"), dtype=x.dtype, device=x.device).scatter_reduce_(0, gi, x, reduce="amin")
    adv = torch.where((hi == lo)[gi], torch.zeros_like(x), x - base[gi])  # a constant group gets exactly 0
    single = (cnt == 1)[gi]
    adv = torch.where(single, x if singleton == "verl" else torch.zeros_like(x), adv)
    return adv.to(r.dtype)


def gpg(rewards: Tensor, group: Tensor, *, f_norm: float = 1.0, singleton: str = "zero") -> Tensor:
    """GPG (arXiv 2504.02546; verl ``compute_gpg_outcome_advantage``):
    ``alpha * (r - mean_g) / f_norm`` with ``alpha = B / max(#{i: r_i != 0}, 1)`` over the whole
    batch (the paper's correction for groups without signal), and no std division.  ``singleton``:
    ``"zero"`` gives a group of one 0; ``"verl"`` uses verl's group mean 0 (``alpha * r / f_norm``)."""
    _singleton_check(singleton)
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    if not float(f_norm) or not math.isfinite(float(f_norm)):
        raise ValueError(f"f_norm must be finite and non-zero, got {f_norm!r}")
    x = as_compute(r)
    gi, ng = dense_ids(g.to(x.device))
    cnt, _, dev, _ = segment_stats(x, gi, ng, ddof=0)
    if singleton == "verl":
        dev = torch.where((cnt == 1)[gi], x, dev)
    alpha = n / max(int(torch.count_nonzero(x)), 1)
    return (alpha * dev / float(f_norm)).to(r.dtype)


def grpo_passk(rewards: Tensor, group: Tensor, *, norm: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO for pass@k (arXiv 2503.19595; verl
    ``compute_grpo_passk_outcome_advantage``): in each group only the best row gets a non-zero
    advantage, ``r_max - r_second`` (divided by the group's Bessel std + eps when ``norm``); all
    other rows get 0.  Among rows tied at the maximum the first gets it (then ``r_max = r_second``
    and the value is 0 anyway).  A group of one row gets 0, where verl raises."""
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    x = as_compute(r)
    if n == 0:
        return r.clone()
    gi, ng = dense_ids(g.to(x.device))
    cnt, _, _, std = segment_stats(x, gi, ng, ddof=1)
    gmax = torch.full((ng,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce_(
        0, gi, x, reduce="amax")
    rows = torch.arange(n, device=x.device)
    at_max = x == gmax[gi]
    first = torch.full((ng,), n, dtype=torch.long, device=x.device).scatter_reduce_(
        0, gi, torch.where(at_max, rows, torch.full_like(rows, n)), reduce="amin")
    is_best = rows == first[gi]
    second = torch.full((ng,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce_(
        0, gi, torch.where(is_best, torch.full_like(x, float("-inf")), x), reduce="amax")
    gap = gmax - second
    gap = torch.where(cnt >= 2, gap, torch.zeros_like(gap))
    if norm:
        gap = safe_div(gap, std + eps)
    adv = torch.where(is_best, gap[gi], torch.zeros_like(x))
    return adv.to(r.dtype)


@register_estimator("reinforce_plus_plus", batch_wide=True)
def _reinforce_pp_entry(batch: AdvantageBatch, *, eps: float = 1e-8) -> Tensor:
    """REINFORCE++: batch-whitened reward (token-weighted when the batch carries ``lengths``)."""
    return reinforce_pp(batch.rewards, lengths=batch.lengths, eps=eps, gather=batch.gather)


@register_estimator("reinforce_plus_plus_baseline", batch_wide=True)
def _reinforce_pp_baseline_entry(batch: AdvantageBatch, *, eps: float = 1e-8,
                                 singleton: str = "zero") -> Tensor:
    """REINFORCE++-baseline: group mean removed, then batch-whitened."""
    return reinforce_pp_baseline(batch.rewards, batch.group, lengths=batch.lengths, eps=eps,
                                 singleton=singleton, gather=batch.gather)


@register_estimator("remax", fields=("rewards", "baseline"))
def _remax_entry(batch: AdvantageBatch) -> Tensor:
    """ReMax: reward minus the greedy rollout's reward (``batch.baseline``, from the collector)."""
    return remax(batch.rewards, batch.baseline)


@register_estimator("opo", fields=("rewards", "group", "lengths"))
def _opo_entry(batch: AdvantageBatch, *, singleton: str = "zero") -> Tensor:
    """OPO: reward minus the length-weighted group mean."""
    return opo(batch.rewards, batch.group, batch.lengths, singleton=singleton)


@register_estimator("gpg")
def _gpg_entry(batch: AdvantageBatch, *, f_norm: float = 1.0, singleton: str = "zero") -> Tensor:
    """GPG: ``alpha (r - mean_g) / f_norm``."""
    return gpg(batch.rewards, batch.group, f_norm=f_norm, singleton=singleton)


@register_estimator("grpo_passk")
def _grpo_passk_entry(batch: AdvantageBatch, *, norm: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO pass@k: only each group's best row, ``(r_max - r_second) / (std + eps)``."""
    return grpo_passk(batch.rewards, batch.group, norm=norm, eps=eps)


# --------------------------------------------------------------------------- GAE (PPO with a critic)


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
    order, ts, _, _ = _traj_order(t.to(x.device), st.to(x.device))
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


@register_estimator("gae", level="step", fields=("rewards", "group", "values", "traj", "step"),
                    batch_wide=True)
def _gae_entry(batch: AdvantageBatch, *, gamma: float = 1.0, lam: float = 1.0, whiten_adv: bool = True) -> Tensor:
    """PPO's GAE on step rows, whitened over the batch as verl (the critic's targets: :func:`gae`'s returns)."""
    adv, _ = gae(batch.rewards, batch.values, batch.traj, batch.step, gamma=gamma, lam=lam)
    return whiten(adv, gather=batch.gather) if whiten_adv else adv


# --------------------------------------------------------------------------- dynamic sampling (DAPO)


def informative_groups(rewards: Tensor, group: Tensor, *, keep_singletons: bool = True) -> Tensor:
    """Per row: does its group carry a learning signal?  (DAPO dynamic sampling, arXiv 2503.14476;
    verl ``filter_groups`` in ``recipe/dapo/dapo_ray_trainer.py``.)

    A group whose rewards all tie gets advantage 0 from every group-relative estimator, so DAPO drops
    it and samples more tasks.  verl keeps a group when the std of its metric is > 0 **or** it has a
    single member (``keep_singletons=True``, the default); ``keep_singletons=False`` drops groups of
    one too (under stratagym's ``singleton="zero"`` they also get advantage 0).  Returns a bool
    tensor, one entry per row.
    """
    r = check_rewards(rewards, "rewards")
    n = r.shape[0]
    g = check_ids(group, "group", n)
    if n == 0:
        return torch.zeros(0, dtype=torch.bool, device=r.device)
    x = as_compute(r)
    gi, ng = dense_ids(g.to(x.device))
    cnt = torch.bincount(gi, minlength=ng)
    hi = torch.full((ng,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce_(0, gi, x, reduce="amax")
    lo = torch.full((ng,), float("inf"), dtype=x.dtype, device=x.device).scatter_reduce_(0, gi, x, reduce="amin")
    keep = hi > lo
    if keep_singletons:
        keep = keep | (cnt == 1)
    return keep[gi]


# --------------------------------------------------------------------------- HA-DW


class HADW:
    """History-Aware Adaptive Difficulty Weighting (arXiv 2601.08521).

    ``__call__(advantages, rewards, group)`` returns ``advantages * Phi`` with
    ``Phi = lam * exp(D * M)``, ``D = -sgn(A) * sgn(p_hat - C)``, ``M = |p_hat - C|``, ``p_hat``
    the group mean reward and ``C`` the difficulty anchor; then it updates the anchor from the
    batch (``update=False`` leaves the state alone).

    ``anchor="kalman"`` (the paper): ``y_t`` = batch accuracy (mean reward over the rows);
    the batch is weighted with the PRIOR anchor ``C-``; then ``C+ = (1 - eta_t) C- + eta_t y_t``
    with ``eta_t = eta * sigma_t``.  ``sigma_source`` picks what ``sigma_t`` is the population
    std of: ``"anchors"`` (the paper's wording: the last ``m`` anchors ``C-`` including the
    current prior) or ``"observations"`` (the last ``m`` batch accuracies including ``y_t``).
    With ``"anchors"`` a constant start keeps ``sigma_t = 0`` and the anchor never moves unless
    ``init_anchor`` differs from the first posterior, so the default is ``"observations"``.
    First batch with no ``init_anchor``: ``C- = y_1`` (the anchor starts at the first batch's
    accuracy, so the first batch is weighted by ``lam * exp(D |p_hat - y_1|)``).
    Defaults: ``lam = 1.3`` (paper's best), ``eta = 0.1``, ``m = 10`` (the paper gives no eta/m).

    ``anchor="window"`` (official code): ``C`` = mean of a deque of the last ``window`` (10)
    batch-mean rewards with the current batch appended BEFORE use; ``lam = 1.5``.

    ``reduce_mean`` (a hook for data-parallel trainers; ``None`` = this batch is the whole batch): given
    this process's rewards, return the mean reward over the GLOBAL batch, or ``None`` when no process
    has a row. Each process then moves its anchor identically, as one process would on the global
    batch. It is a collective: every process calls it once per batch, also a process with no rows.
    Group means ``p_hat`` stay local, which is exact when whole groups live on one process.
    """

    def __init__(
        self,
        lam: Optional[float] = None,
        anchor: str = "kalman",
        eta: float = 0.1,
        m: int = 10,
        window: int = 10,
        *,
        sigma_source: str = "observations",
        init_anchor: Optional[float] = None,
    ) -> None:
        if anchor not in ("kalman", "window"):
            raise ValueError(f"anchor must be 'kalman' or 'window', got {anchor!r}")
        if sigma_source not in ("observations", "anchors"):
            raise ValueError(f"sigma_source must be 'observations' or 'anchors', got {sigma_source!r}")
        if int(m) < 1 or int(window) < 1:
            raise ValueError("m and window must be >= 1")
        self.anchor_mode = anchor
        self.lam = float(lam) if lam is not None else (1.3 if anchor == "kalman" else 1.5)
        self.eta = float(eta)
        self.m = int(m)
        self.window = int(window)
        self.sigma_source = sigma_source
        self.init_anchor = None if init_anchor is None else float(init_anchor)
        self.reduce_mean: Optional[Callable[[Tensor], Optional[float]]] = None
        self.reset()

    # -- state
    def reset(self) -> None:
        self.anchor: Optional[float] = self.init_anchor  # prior anchor for the next batch (kalman)
        self._hist: deque = deque(maxlen=self.m if self.anchor_mode == "kalman" else self.window)
        self.steps = 0
        self.last_anchor: Optional[float] = None  # anchor used for the latest batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "anchor_mode": self.anchor_mode,
            "lam": self.lam,
            "eta": self.eta,
            "m": self.m,
            "window": self.window,
            "sigma_source": self.sigma_source,
            "init_anchor": self.init_anchor,
            "anchor": self.anchor,
            "history": list(self._hist),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.anchor_mode = state["anchor_mode"]
        self.lam = float(state["lam"])
        self.eta = float(state["eta"])
        self.m = int(state["m"])
        self.window = int(state["window"])
        self.sigma_source = state.get("sigma_source", "observations")
        self.init_anchor = state.get("init_anchor")
        self.anchor = None if state["anchor"] is None else float(state["anchor"])
        maxlen = self.m if self.anchor_mode == "kalman" else self.window
        self._hist = deque((float(v) for v in state["history"]), maxlen=maxlen)
        self.steps = int(state["steps"])

    @property
    def history(self) -> list[float]:
        return list(self._hist)

    # -- anchor for the current batch, and the state after it
    def _anchor_and_next(self, y: float) -> tuple[float, dict[str, Any]]:
        if self.anchor_mode == "window":
            hist = deque(self._hist, maxlen=self.window)
            hist.append(y)
            c = sum(hist) / len(hist)
            return c, {"history": hist, "anchor": c}
        prior = y if self.anchor is None else self.anchor
        hist = deque(self._hist, maxlen=self.m)
        hist.append(prior if self.sigma_source == "anchors" else y)
        mu = sum(hist) / len(hist)
        sigma = math.sqrt(sum((v - mu) ** 2 for v in hist) / len(hist))
        eta_t = self.eta * sigma
        post = (1.0 - eta_t) * prior + eta_t * y
        return prior, {"history": hist, "anchor": post}

    def weights(self, advantages: Tensor, rewards: Tensor, group: Tensor, anchor: float) -> Tensor:
        """``Phi`` per row for a given anchor value (no state change)."""
        adv = check_rewards(advantages, "advantages")
        n = adv.shape[0]
        r = as_compute(check_rewards(rewards, "rewards", n))
        g = check_ids(group, "group", n)
        gi, ng = dense_ids(g.to(r.device))
        _, mean, _, _ = segment_stats(r, gi, ng, ddof=0)
        diff = mean[gi] - float(anchor)
        d = -torch.sign(as_compute(adv)) * torch.sign(diff)
        return self.lam * torch.exp(d * diff.abs())

    def __call__(
        self, advantages: Tensor, rewards: Tensor, group: Tensor, *, update: bool = True
    ) -> Tensor:
        adv = check_rewards(advantages, "advantages")
        n = adv.shape[0]
        r = check_rewards(rewards, "rewards", n)
        check_ids(group, "group", n)
        if self.reduce_mean is not None:
            y_global = self.reduce_mean(as_compute(r))  # before any early return: it is a collective
            if y_global is None:
                return adv.clone()
            y = float(y_global)
        elif n == 0:
            return adv.clone()
        else:
            y = float(as_compute(r).mean())
        c, nxt = self._anchor_and_next(y)
        phi = self.weights(adv, r, group, c) if n else torch.ones(0, dtype=torch.float64)
        if update:
            self._hist = nxt["history"]
            self.anchor = nxt["anchor"]
            self.steps += 1
        self.last_anchor = c
        return (as_compute(adv) * phi).to(adv.dtype)


@register_modifier("hadw")
class HADWEstimator(EstimatorModifier):
    """``"<estimator>+hadw"``: the inner advantages reweighted by :class:`HADW` (stateful: the
    difficulty anchor, saved in checkpoints through ``state_dict``).

    The group mean reward ``p_hat`` uses ``batch.rewards`` for trajectory-level estimators and
    the per-row trajectory return (``episode_rewards``) for step-level ones.  Options: those of
    :class:`HADW` (``lam``, ``anchor``, ``eta``, ``m``, ``window``, ``sigma_source``, ``init_anchor``).
    """

    defaults = {k: p.default for k, p in list(inspect.signature(HADW.__init__).parameters.items())[1:]}

    def __init__(self, inner, **options: Any) -> None:
        super().__init__(inner, **options)
        self.hadw = HADW(**self.options)

    def modify(self, batch: AdvantageBatch, advantages: Tensor) -> Tensor:
        r = batch_episode(batch) if self.level == "step" else batch.rewards
        return self.hadw(advantages, r, batch.group)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "hadw": self.hadw.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.hadw.load_state_dict(state["hadw"])

    def share_statistics(self, reduce_mean: Callable[[Tensor], Optional[float]]) -> None:
        """The anchor moves with the GLOBAL batch's mean reward (:attr:`HADW.reduce_mean`)."""
        super().share_statistics(reduce_mean)
        self.hadw.reduce_mean = reduce_mean

    def join_empty(self) -> None:
        """No rows here: still join the mean-reward collective and move the anchor with the others."""
        super().join_empty()
        if self.hadw.reduce_mean is not None:
            self.hadw(torch.zeros(0), torch.zeros(0), torch.zeros(0, dtype=torch.long))

    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        if self.hadw.last_anchor is not None:
            out["adv/hadw_anchor"] = float(self.hadw.last_anchor)
        return out
