"""Small vectorised helpers shared by the advantage estimators (pure torch).

Everything here works on flat 1-D tensors with a dense segment index (0..n-1, from
``torch.unique(..., return_inverse=True)``) and uses scatter/segment reductions only;
there is no Python loop over rows or segments.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = [
    "check_rewards",
    "check_ids",
    "dense_ids",
    "pair_ids",
    "segment_stats",
    "safe_div",
    "check_singleton",
    "grouped_rewards",
]

_MAX_LISTED = 20


def _fmt_rows(rows: Tensor) -> str:
    rows = rows.tolist()
    shown = ", ".join(str(r) for r in rows[:_MAX_LISTED])
    more = f", ... ({len(rows)} rows in all)" if len(rows) > _MAX_LISTED else ""
    return f"[{shown}{more}]"


def check_rewards(x: Tensor, name: str, n: Optional[int] = None) -> Tensor:
    """Validate a 1-D reward-like tensor and return it as floating point.

    Raises ``TypeError`` for non-tensors, ``ValueError`` for a wrong shape/length and for
    NaN/inf entries (naming the offending row indices).
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one value per row), got shape {tuple(x.shape)}")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name} has {x.shape[0]} rows, expected {n}")
    if x.dtype == torch.bool or not (x.is_floating_point()):
        x = x.to(torch.get_default_dtype())
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()
        raise ValueError(f"{name} contains NaN/inf at rows {_fmt_rows(rows)}")
    return x


def check_ids(x: Tensor, name: str, n: int) -> Tensor:
    """Validate a 1-D integer id tensor of length ``n``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of integer ids, got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one id per row), got shape {tuple(x.shape)}")
    if x.shape[0] != n:
        raise ValueError(f"{name} has {x.shape[0]} rows, expected {n} (one per reward row)")
    if x.is_floating_point() or x.is_complex():
        raise TypeError(f"{name} must hold integer ids, got dtype {x.dtype}")
    return x


def dense_ids(x: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary integer ids to 0..k-1 (sorted order); returns (inverse, k)."""
    if x.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=x.device), 0
    uniq, inv = torch.unique(x, return_inverse=True)
    return inv, int(uniq.shape[0])


def pair_ids(a: Tensor, na: int, b: Tensor) -> tuple[Tensor, int]:
    """Dense id of the pair (a, b) where ``a`` is already dense in 0..na-1 and ``b`` is any int id."""
    b_inv, nb = dense_ids(b)
    return dense_ids(a * max(nb, 1) + b_inv)


def segment_stats(
    x: Tensor, idx: Tensor, n: int, *, ddof: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-segment count, mean, deviation and std (two-pass, numerically stable).

    Returns ``(count, mean, dev, std)`` where ``count``, ``mean`` and ``std`` are per segment
    (length ``n``) and ``dev = x - mean[idx]`` is per row.  ``ddof`` = 0 gives the population std,
    1 the Bessel-corrected one; segments with ``count <= ddof`` get std 0.

    A segment whose members are all equal gets ``dev`` exactly 0 (no rounding residue from
    the mean), so "zero advantage" tests downstream are exact.
    """
    cnt = torch.bincount(idx, minlength=n)
    cntf = cnt.to(x.dtype)
    s = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, idx, x)
    mean = s / cntf.clamp(min=1)
    dev = x - mean[idx]
    hi = torch.full((n,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce_(
        0, idx, x, reduce="amax"
    )
    lo = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device).scatter_reduce_(
        0, idx, x, reduce="amin"
    )
    const = (hi == lo)[idx]
    dev = torch.where(const, torch.zeros_like(dev), dev)
    ss = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, idx, dev * dev)
    denom = (cntf - ddof).clamp(min=1)
    var = torch.where(cnt > ddof, ss / denom, torch.zeros_like(ss))
    return cnt, mean, dev, var.sqrt()


def safe_div(num: Tensor, den: Tensor | float) -> Tensor:
    """``num / den`` with 0 wherever ``num == 0`` (so ``eps=0`` on a constant group gives 0, not NaN)."""
    q = num / den
    return torch.where(num == 0, torch.zeros_like(q), q)


def as_compute(x: Tensor) -> Tensor:
    """Compute in float64 (cheap at these sizes, keeps identities tight)."""
    return x.to(torch.float64)


def check_singleton(singleton: str) -> None:
    """The ``singleton`` option of the estimators that offer verl's convention for a group of one row."""
    if singleton not in ("zero", "verl"):
        raise ValueError(f"singleton must be 'zero' or 'verl', got {singleton!r}")


def grouped_rewards(rewards: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """How every group-relative estimator starts: ``rewards`` checked (:func:`check_rewards`), ``group``
    checked against them (:func:`check_ids`), the rewards in compute precision and each row's group.

    Returns ``(r, x, gi, ng)``: ``r`` the checked rewards (its dtype is the estimator's output dtype),
    ``x = as_compute(r)``, ``gi`` each row's dense group index (on ``x``'s device), ``ng`` the number of
    groups.
    """
    r = check_rewards(rewards, "rewards")
    g = check_ids(group, "group", r.shape[0])
    x = as_compute(r)
    gi, ng = dense_ids(g.to(x.device))
    return r, x, gi, ng
