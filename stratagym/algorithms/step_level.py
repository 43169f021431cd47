"""Step-level estimators (pure torch), one row per step: GiGPO and HGPO.

Both give each step credit relative to other steps of its task group that share where they stand:
GiGPO groups steps by the anchor state they were taken in (verl-agent
``compute_gigpo_outcome_advantage``), HGPO by the hashes of their last k+1 observations, at every k
(official ``recipe/hgpo/core_hgpo.py``).  Registered by their signatures (:func:`register_estimator`):
as estimators they read the discounted ``step_returns`` (option ``gamma``) and the trajectory totals
``episode_rewards`` from the batch, derived from ``traj``/``step`` when the batch lacks them; HGPO's
``base_group`` option turns its episode term on.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from stratagym.algorithms._segment import (
    as_compute,
    check_ids,
    check_rewards,
    dense_ids,
    pair_ids,
    safe_div,
    segment_stats,
)
from stratagym.algorithms.registry import register_estimator

__all__ = ["gigpo", "hgpo"]

_MODES = ("mean_norm", "mean_std_norm")


def _check_mode(mode: str) -> None:
    """GiGPO's and HGPO's ``mode``: subtract the mean, or also divide by the std."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")


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


@register_estimator("gigpo", level="step", requires={"state_hash"})
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


@register_estimator("hgpo", level="step", requires={"context_hashes"},
                    switches={"base_group": "episode_rewards"})
def hgpo(
    step_returns: Tensor,
    group: Tensor,
    context: Tensor,
    episode_rewards: Optional[Tensor] = None,
    *,
    alpha: float = 1.0,
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
    weight_offset: float = 1.0,
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
