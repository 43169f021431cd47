"""Group-relative estimators (pure torch): each row's advantage is its reward against its task group's.

GRPO (and Dr.GRPO, its variant without the std division), RLOO, and verl's group-baseline estimators
OPO, GPG and GRPO pass@k (``verl/trainer/ppo/core_algos.py`` at commit
b178a3cd56f58b2d502255daba591e92833930a7, where they run on (B, T) token matrices whose only non-zero
reward is the last response token; here one row is one trajectory with its reward, and ``lengths``
restores verl's token weighting where it matters).  Also DAPO's test for which groups carry a signal.
Each estimator is one function, registered by its signature (:func:`register_estimator`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from stratagym.algorithms._segment import check_singleton, grouped_rewards, safe_div, segment_stats
from stratagym.algorithms.registry import register_estimator
from stratagym.algorithms.whitening import row_weights

__all__ = ["gpg", "grpo", "grpo_passk", "informative_groups", "opo", "rloo"]


# Dr.GRPO is GRPO without the std division (verl norm_adv_by_std_in_grpo=False): a variant, same definition
@register_estimator("dr_grpo", defaults={"scale": "none"})
@register_estimator("grpo")
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
    r, x, gi, ng = grouped_rewards(rewards, group)
    n = r.shape[0]
    out_dtype = r.dtype
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


@register_estimator("rloo")
def rloo(rewards: Tensor, group: Tensor) -> Tensor:
    """RLOO: ``r_i - mean_{j != i, j in g} r_j`` = ``n/(n-1) * (r_i - mean_g)``; a group of one gets 0."""
    r, x, gi, ng = grouped_rewards(rewards, group)
    cnt, _, dev, _ = segment_stats(x, gi, ng, ddof=0)
    c = cnt[gi].to(x.dtype)
    factor = torch.where(c > 1, c / (c - 1).clamp(min=1), torch.zeros_like(c))
    return (factor * dev).to(r.dtype)


@register_estimator("opo")
def opo(rewards: Tensor, group: Tensor, lengths: Tensor, *, singleton: str = "zero") -> Tensor:
    """OPO (arXiv 2505.23585; verl ``compute_opo_outcome_advantage``):
    ``r - b_g`` with the length-weighted group baseline ``b_g = sum_j l_j r_j / sum_j l_j`` (the
    optimal baseline for on-policy updates under a token-sum loss).  ``singleton``: ``"zero"``
    gives a group of one 0; ``"verl"`` uses verl's baseline 0 (``r``).  A group whose lengths sum
    to 0 uses the plain mean (verl would divide by zero); a constant group gets exactly 0."""
    check_singleton(singleton)
    r, x, gi, ng = grouped_rewards(rewards, group)
    w = row_weights(lengths, r.shape[0], x)
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


@register_estimator("gpg")
def gpg(rewards: Tensor, group: Tensor, *, f_norm: float = 1.0, singleton: str = "zero") -> Tensor:
    """GPG (arXiv 2504.02546; verl ``compute_gpg_outcome_advantage``):
    ``alpha * (r - mean_g) / f_norm`` with ``alpha = B / max(#{i: r_i != 0}, 1)`` over the whole
    batch (the paper's correction for groups without signal), and no std division.  ``singleton``:
    ``"zero"`` gives a group of one 0; ``"verl"`` uses verl's group mean 0 (``alpha * r / f_norm``)."""
    check_singleton(singleton)
    r, x, gi, ng = grouped_rewards(rewards, group)
    n = r.shape[0]
    if not float(f_norm) or not math.isfinite(float(f_norm)):
        raise ValueError(f"f_norm must be finite and non-zero, got {f_norm!r}")
    cnt, _, dev, _ = segment_stats(x, gi, ng, ddof=0)
    if singleton == "verl":
        dev = torch.where((cnt == 1)[gi], x, dev)
    alpha = n / max(int(torch.count_nonzero(x)), 1)
    return (alpha * dev / float(f_norm)).to(r.dtype)


@register_estimator("grpo_passk")
def grpo_passk(rewards: Tensor, group: Tensor, *, norm: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO for pass@k (arXiv 2503.19595; verl
    ``compute_grpo_passk_outcome_advantage``): in each group only the best row gets a non-zero
    advantage, ``r_max - r_second`` (divided by the group's Bessel std + eps when ``norm``); all
    other rows get 0.  Among rows tied at the maximum the first gets it (then ``r_max = r_second``
    and the value is 0 anyway).  A group of one row gets 0, where verl raises."""
    r, x, gi, ng = grouped_rewards(rewards, group)
    n = r.shape[0]
    if n == 0:
        return r.clone()
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


def informative_groups(rewards: Tensor, group: Tensor, *, keep_singletons: bool = True) -> Tensor:
    """Per row: does its group carry a learning signal?  (DAPO dynamic sampling, arXiv 2503.14476;
    verl ``filter_groups`` in ``recipe/dapo/dapo_ray_trainer.py``.)

    A group whose rewards all tie gets advantage 0 from every group-relative estimator, so DAPO drops
    it and samples more tasks.  verl keeps a group when the std of its metric is > 0 **or** it has a
    single member (``keep_singletons=True``, the default); ``keep_singletons=False`` drops groups of
    one too (under stratagym's ``singleton="zero"`` they also get advantage 0).  Returns a bool
    tensor, one entry per row.
    """
    r, x, gi, ng = grouped_rewards(rewards, group)
    if r.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool, device=r.device)
    cnt = torch.bincount(gi, minlength=ng)
    hi = torch.full((ng,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce_(0, gi, x, reduce="amax")
    lo = torch.full((ng,), float("inf"), dtype=x.dtype, device=x.device).scatter_reduce_(0, gi, x, reduce="amin")
    keep = hi > lo
    if keep_singletons:
        keep = keep | (cnt == 1)
    return keep[gi]
