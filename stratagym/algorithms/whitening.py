"""verl's batch whitening (``masked_whiten``) of per-row values, token-weighted, across data-parallel processes.

REINFORCE++ whitens rewards and PPO whitens its GAE advantages with it; OPO reuses the token weights.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from stratagym.algorithms._segment import as_compute, check_rewards

__all__ = ["row_weights", "whiten"]


def row_weights(lengths: Optional[Tensor], n: int, x: Tensor) -> Tensor:
    """Each row's weight in a batch statistic: its token count ``lengths`` (checked >= 0), or 1."""
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
    w = row_weights(lengths, n, v)
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
    w = row_weights(lengths, n, v)
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
