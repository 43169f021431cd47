"""Stratified GRPO (pure torch): advantages normalised within strata of a task group (e.g. by search count).

Rows of one task group that took different numbers of tool calls face different reward scales; SAN
(stratified advantage normalisation) compares each row only with the rows of its stratum, blended with
the group-normalised advantage.  Registered by its signature (:func:`register_estimator`).
"""

from __future__ import annotations

import math

from torch import Tensor

from stratagym.algorithms._segment import check_ids, grouped_rewards, pair_ids, safe_div, segment_stats
from stratagym.algorithms.registry import register_estimator

__all__ = ["stratified"]


@register_estimator("stratified", requires={"search_count"})
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
    r, x, gi, ng = grouped_rewards(rewards, group)
    s = check_ids(stratum, "stratum", r.shape[0])
    if not math.isfinite(float(alpha)):
        raise ValueError(f"alpha must be finite, got {alpha!r}")
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
