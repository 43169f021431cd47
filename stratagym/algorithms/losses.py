"""Policy-gradient losses for group-relative RL (pure torch), following verl's and TRL's semantics.

- :func:`token_logprobs` / :func:`entropy_from_logits` live in :mod:`stratagym.ops` (agents use them
  too) and are re-exported here.
- :func:`kl_penalty`: per-token KL estimators k1 / k2 / k3 / abs (verl ``kl`` / ``mse`` /
  ``low_var_kl``), and verl's straight-through variants ``k1+``, ``k3+``, ... (value of the named
  estimator, gradient of k2).
- :func:`agg_loss`: verl's aggregation modes ``token-mean``, ``seq-mean-token-mean``,
  ``seq-mean-token-sum``, ``seq-mean-token-sum-norm``, plus ``token-sum``, with the global
  normalisers verl's trainer passes (``global_batch_size``, ``batch_num_tokens``).
- Policy losses, one decorated definition each (``@register_policy_loss``, see
  :mod:`stratagym.algorithms.registry`): ``vanilla`` (PPO clip, clip-higher, dual clip, TRL's
  two-sided ``delta``), ``gspo``, ``gpg``, ``cispo``, ``sapo``, ``geo_mean`` (GMPO), ``clip_cov``,
  ``kl_cov``, ``dppo_tv``, ``dppo_kl``, ``vespo`` (TRL).
- :func:`policy_loss`: one call for any of them by name, with the options every loss shares
  (aggregation, per-row or per-token weights, the KL term against a reference policy, the entropy
  bonus); returns ``(loss, stats)``.

Shapes: token tensors are ``(B, T)``; ``mask`` is ``(B, T)`` (bool or float, 0 = ignored);
advantages are ``(B,)`` (one per sequence) or ``(B, T)``.  verl source read:
``verl/trainer/ppo/core_algos.py`` at commit b178a3cd56f58b2d502255daba591e92833930a7 (the DPPO
losses, added to verl after that commit, follow its ``compute_policy_loss_dppo_tv/kl``); TRL 1.16.0
``trl/trainer/grpo_trainer.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from stratagym.algorithms.registry import PolicyLoss, get_policy_loss, register_policy_loss
from stratagym.ops import entropy_from_logits, token_logprobs

__all__ = [
    "AGG_MODES",
    "KL_TYPES",
    "PGInputs",
    "agg_loss",
    "entropy_from_logits",
    "kl_penalty",
    "masked_mean",
    "policy_loss",
    "token_logprobs",
    "value_loss",
]

AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum",
             "seq-mean-token-sum-norm")
_KL_BASE = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3", "abs": "abs"}
KL_TYPES = {**_KL_BASE, **{k + "+": v + "+" for k, v in _KL_BASE.items()}}


# --------------------------------------------------------------------------- helpers


def masked_mean(x: Tensor, mask: Tensor, dim: Optional[int] = None) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` is non-zero (mask as weights); 0 where empty."""
    m = mask.to(x.dtype)
    s = (x * m).sum() if dim is None else (x * m).sum(dim)
    c = m.sum() if dim is None else m.sum(dim)
    return torch.where(c > 0, s / torch.where(c > 0, c, torch.ones_like(c)), torch.zeros_like(s))


def _masked_minmax(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    sel = x[mask.bool()]
    if sel.numel() == 0:
        z = x.new_zeros(())
        return z, z
    return sel.min(), sel.max()


def kl_penalty(logprob: Tensor, ref_logprob: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL(pi || pi_ref) estimators on samples from pi (Schulman's k1/k2/k3).

    ``k1`` = ``logp - logp_ref``; ``k2`` = ``0.5 (logp - logp_ref)^2``;
    ``k3`` = ``exp(logp_ref - logp) - (logp_ref - logp) - 1`` (non-negative, low variance; verl
    ``low_var_kl``, log-ratio clamped to [-20, 20] and the result to [-10, 10] as verl);
    ``abs`` = ``|logp - logp_ref|``.  verl's names (``kl``, ``mse``, ``low_var_kl``) are accepted.

    A trailing ``+`` (``k1+``, ``k3+``, ``low_var_kl+``, ...) is verl's straight-through form
    (``core_algos.py:1841-1864``): the value of the named estimator with the gradient of ``k2``,
    whose expected gradient is the gradient of the true KL (k1's and k3's are not).  ``k2+`` is
    ``k2``.  (At the commit read, verl's ``kl_penalty_forward`` does not strip the ``+`` and raises
    ``NotImplementedError`` for these names; this is the behaviour its docstring describes.)
    """
    if kind not in KL_TYPES:
        raise ValueError(f"unknown KL estimator {kind!r}; choose from {sorted(KL_TYPES)}")
    k = KL_TYPES[kind]
    straight = k.endswith("+")
    k = k.rstrip("+")
    d = logprob - ref_logprob
    if k == "k1":
        value = d
    elif k == "k2":
        return 0.5 * d.square()
    elif k == "abs":
        value = d.abs()
    else:
        kl = torch.clamp(ref_logprob - logprob, -20.0, 20.0)
        value = torch.clamp(torch.exp(kl) - kl - 1.0, -10.0, 10.0)
    if not straight:
        return value
    back = 0.5 * d.square()
    return back - back.detach() + value.detach()


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    loss_scale_factor: Optional[float] = None,
    global_batch_size: Optional[float] = None,
    batch_num_tokens: Optional[float] = None,
) -> Tensor:
    """Aggregate a ``(B, T)`` loss matrix to a scalar (verl ``agg_loss``).

    - ``token-mean``: sum over all unmasked tokens / number of unmasked tokens (DAPO; TRL
      ``bnpo``), or / ``batch_num_tokens`` when given (verl's trainer passes the token count of the
      global mini-batch, so micro-batches add up to the mini-batch's token mean; TRL ``dapo``).
    - ``token-sum``: sum over all unmasked tokens, no normaliser.
    - ``seq-mean-token-mean``: per-sequence token mean, then mean over sequences (original GRPO;
      TRL ``grpo``).
    - ``seq-mean-token-sum``: per-sequence token sum, then mean over sequences (TRL ``luspo``).
    - ``seq-mean-token-sum-norm``: per-sequence token sum / ``loss_scale_factor`` (default the
      padded length T, Dr.GRPO's constant; TRL ``dr_grpo`` with ``max_completion_length``), then
      mean over sequences.

    The sequence modes divide the sum of sequence losses by ``global_batch_size`` when given (verl's
    trainer passes the global mini-batch's sequence count, so rows masked out entirely count as verl
    counts them); otherwise by B, the number of rows here (a fully-masked row counts as a 0).
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose from {AGG_MODES}")
    if loss_mat.shape != mask.shape or loss_mat.dim() != 2:
        raise ValueError(f"loss_mat and mask must both be (B, T), got {tuple(loss_mat.shape)} "
                         f"and {tuple(mask.shape)}")
    for name, v in (("global_batch_size", global_batch_size), ("batch_num_tokens", batch_num_tokens)):
        if v is not None and float(v) < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        if batch_num_tokens is None:
            return masked_mean(loss_mat, m)
        total = (loss_mat * m).sum()
        return total / float(batch_num_tokens) if float(batch_num_tokens) > 0 else total * 0.0
    if mode == "token-sum":
        return (loss_mat * m).sum()
    seq_sum = (loss_mat * m).sum(-1)
    if mode == "seq-mean-token-sum":
        seq = seq_sum
    elif mode == "seq-mean-token-sum-norm":
        scale = float(loss_mat.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        seq = seq_sum / scale
    else:
        seq = masked_mean(loss_mat, m, dim=-1)
    if global_batch_size is not None:
        return seq.sum() / float(global_batch_size) if float(global_batch_size) > 0 else seq.sum() * 0.0
    return seq.mean() if seq.numel() else seq.sum()


def _expand(x: Tensor, shape: torch.Size, name: str) -> Tensor:
    if x.shape == shape:
        return x
    if x.dim() == 1 and x.shape[0] == shape[0]:
        return x.unsqueeze(-1).expand(shape)
    raise ValueError(f"{name} must be (B,) or (B, T) = {tuple(shape)}, got {tuple(x.shape)}")


@dataclass
class PGInputs:
    """What every registered policy loss receives: ``(B, T)`` tensors and the aggregation to use.

    ``advantages`` and ``weights`` are already broadcast to ``(B, T)``; ``mask`` is float.  A loss
    builds its per-token loss matrix and calls :meth:`aggregate`, which applies the weights and the
    configured aggregation, so weights, ``agg`` and the global normalisers mean the same in every
    loss.
    """

    logprob: Tensor
    old_logprob: Tensor
    advantages: Tensor
    mask: Tensor
    agg: str = "token-mean"
    weights: Optional[Tensor] = None
    loss_scale_factor: Optional[float] = None
    global_batch_size: Optional[float] = None
    batch_num_tokens: Optional[float] = None

    def aggregate(self, loss_mat: Tensor) -> Tensor:
        if self.weights is not None:
            loss_mat = loss_mat * self.weights
        return agg_loss(loss_mat, self.mask, self.agg, loss_scale_factor=self.loss_scale_factor,
                        global_batch_size=self.global_batch_size, batch_num_tokens=self.batch_num_tokens)

    def mean(self, x: Tensor) -> float:
        """Masked token mean of a detached tensor, for stats."""
        return float(masked_mean(x.detach(), self.mask))


def _stats(x: PGInputs, pg: Tensor, ratio: Tensor, neg_kl: Tensor, clip_active: Optional[Tensor] = None,
           lower_active: Optional[Tensor] = None, **extra: float) -> dict[str, float]:
    """The stats every loss reports (0 where a loss has no such notion), plus its own extras."""
    with torch.no_grad():
        r = ratio.detach()
        rmin, rmax = _masked_minmax(r, x.mask)
        out = {
            "pg_loss": float(pg.detach()),
            "clip_frac": 0.0 if clip_active is None else x.mean(clip_active.to(x.mask.dtype)),
            "clip_frac_lower": 0.0 if lower_active is None else x.mean(lower_active.to(x.mask.dtype)),
            "approx_kl": x.mean(-neg_kl),
            "ratio_mean": x.mean(r),
            "ratio_min": float(rmin),
            "ratio_max": float(rmax),
        }
    out.update(extra)
    return out


def _clip_bounds(clip_low: float, clip_high: Optional[float]) -> tuple[float, float]:
    if clip_low < 0 or (clip_high is not None and clip_high < 0):
        raise ValueError("clip_low / clip_high must be >= 0")
    return float(clip_low), float(clip_low if clip_high is None else clip_high)


def _clipped_surrogate(x: PGInputs, ratio: Tensor, lo: float, hi: float, clip_c: Optional[float],
                       delta: Optional[float] = None) -> tuple[Tensor, Tensor, Tensor]:
    """PPO's per-token ``max(-A r, -A clip(r, 1-lo, 1+hi))`` with dual clip; (loss, clipped, lower)."""
    adv = x.advantages
    r1 = ratio if delta is None else torch.clamp(ratio, max=float(delta))
    l1 = -adv * r1
    l2 = -adv * torch.clamp(ratio, 1.0 - lo, 1.0 + hi)
    clipped = torch.maximum(l1, l2)
    clip_active = l2 > l1
    if clip_c is None:
        return clipped, clip_active, torch.zeros_like(clip_active)
    l3 = -adv * clip_c
    lower_active = (clipped > l3) & (adv < 0)
    return torch.where(adv < 0, torch.minimum(l3, clipped), clipped), clip_active, lower_active


# --------------------------------------------------------------------------- registered losses


@register_policy_loss("vanilla", aliases=("ppo",))
def vanilla_loss(x: PGInputs, *, clip_low: float = 0.2, clip_high: Optional[float] = None,
                 clip_c: Optional[float] = None, delta: Optional[float] = None):
    """PPO clip (verl ``compute_policy_loss_vanilla``, core_algos.py:1159; TRL ``grpo``/``bnpo``/...).

    Per token ``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))`` with ``r = exp(logp - old)``
    (log-ratio clamped to [-20, 20] as verl); ``clip_high = clip_low`` unless given (DAPO
    clip-higher sets e.g. 0.28).  Dual clip (``clip_c``, e.g. 3.0; must be > 1; verl always applies
    it with 3.0, here it is off unless given): for ``A < 0`` the loss is capped at ``-A * clip_c``.
    ``delta`` is TRL's two-sided clipping: the unclipped branch's ratio is capped at ``delta``.
    """
    lo, hi = _clip_bounds(clip_low, clip_high)
    if clip_c is not None and clip_c <= 1.0:
        raise ValueError(f"clip_c (dual clip) must be > 1, got {clip_c}")
    neg_kl = torch.clamp(x.logprob - x.old_logprob, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    mat, clip_active, lower = _clipped_surrogate(x, ratio, lo, hi, clip_c, delta)
    pg = x.aggregate(mat)
    return pg, _stats(x, pg, ratio, neg_kl, clip_active, lower)


@register_policy_loss("gspo", ratio="sequence")
def gspo_loss(x: PGInputs, *, clip_low: float = 0.2, clip_high: Optional[float] = None,
              clip_c: Optional[float] = None):
    """GSPO (arXiv 2507.18071; verl ``compute_policy_loss_gspo``,
    core_algos.py:1253).

    Sequence ratio ``s_i = exp(mean_t (logp - old))`` over the mask (the geometric mean of the token
    ratios), applied per token as ``sg[s_i] * pi / sg[pi]`` so the value is ``s_i`` and the gradient
    flows per token.  As verl (core_algos.py:1286-1298, 1320), only that sequence log-ratio is clamped, at
    10 (the token log-ratios are not clamped), and ``approx_kl`` uses the unclamped values.  GSPO's
    paper uses clip ranges around 3e-4 / 4e-4 and ``agg="seq-mean-token-mean"``, which verl forces;
    here ``agg`` applies as given.  ``clip_c`` (dual clip) is a stratagym extension, off by default.
    """
    lo, hi = _clip_bounds(clip_low, clip_high)
    if clip_c is not None and clip_c <= 1.0:
        raise ValueError(f"clip_c (dual clip) must be > 1, got {clip_c}")
    neg_kl = x.logprob - x.old_logprob
    seq_log = masked_mean(neg_kl, x.mask, dim=-1)
    log_ratio = torch.clamp(x.logprob - x.logprob.detach() + seq_log.detach().unsqueeze(-1), max=10.0)
    ratio = torch.exp(log_ratio)
    mat, clip_active, lower = _clipped_surrogate(x, ratio, lo, hi, clip_c)
    pg = x.aggregate(mat)
    return pg, _stats(x, pg, ratio, neg_kl, clip_active, lower)


@register_policy_loss("gpg")
def gpg_loss(x: PGInputs):
    """GPG (arXiv 2504.02546; verl ``compute_policy_loss_gpg``,
    core_algos.py:1414): plain policy gradient ``-logp * A``, no ratio and no clipping."""
    neg_kl = x.logprob - x.old_logprob
    pg = x.aggregate(-x.logprob * x.advantages)
    return pg, _stats(x, pg, torch.exp(neg_kl), neg_kl)


@register_policy_loss("cispo")
def cispo_loss(x: PGInputs, *, clip_low: float = 0.2, clip_high: Optional[float] = None,
               cap: Optional[float] = None):
    """CISPO (MiniMax-M1, arXiv 2506.13585; verl ``compute_policy_loss_cispo``,
    core_algos.py:1721): ``-sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * logp``: the ratio is
    clipped and detached, so every token keeps a gradient through ``logp``.  ``cap`` switches to
    TRL's form (``loss_type="cispo"``): ``sg(min(r, cap))`` with ``cap`` = TRL's ``epsilon_high``,
    no lower bound and no [-20, 20] clamp of the log-ratio."""
    lo, hi = _clip_bounds(clip_low, clip_high)
    if cap is None:
        neg_kl = torch.clamp(x.logprob - x.old_logprob, -20.0, 20.0)
        ratio = torch.exp(neg_kl)
        clipped = torch.clamp(ratio, 1.0 - lo, 1.0 + hi)
    else:
        neg_kl = x.logprob - x.old_logprob
        ratio = torch.exp(neg_kl)
        clipped = torch.clamp(ratio, max=float(cap))
    pg = x.aggregate(-clipped.detach() * x.advantages * x.logprob)
    return pg, _stats(x, pg, ratio, neg_kl, ratio != clipped)


@register_policy_loss("sapo")
def sapo_loss(x: PGInputs, *, tau_pos: float = 1.0, tau_neg: float = 1.05):
    """SAPO (arXiv 2511.20347; verl ``compute_policy_loss_sapo``,
    core_algos.py:1329; TRL ``sapo``): a smooth gate instead of a hard clip, per token
    ``-A * sigmoid(tau (r - 1)) * 4 / tau`` with ``tau = tau_pos`` where ``A > 0`` and ``tau_neg``
    elsewhere (verl's defaults 1.0 / 1.05).  verl forces ``seq-mean-token-mean``; here ``agg``
    applies as given."""
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError("tau_pos and tau_neg must be > 0")
    neg_kl = torch.clamp(x.logprob - x.old_logprob, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    tau = torch.where(x.advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    pg = x.aggregate(-gate * x.advantages)
    return pg, _stats(x, pg, ratio, neg_kl)


@register_policy_loss("geo_mean", aliases=("gmpo",), per_sequence=True)
def geo_mean_loss(x: PGInputs, *, clip_low: float = 0.2, clip_high: Optional[float] = None):
    """GMPO (arXiv 2507.20673; verl ``compute_policy_loss_geo_mean``,
    core_algos.py:1635): the geometric mean of the token ratios, each token's log-ratio clipped to
    ``[-clip_low, clip_high]`` on the side that limits the update (by the sign of A), times the
    sequence's mean advantage; the loss is the plain mean over the B sequences (verl ignores the
    aggregation mode here, and so does this).  Weights apply per sequence as the geometric mean of
    the row's token weights, ``exp(mean_t log(w + 1e-10))`` (verl, core_algos.py:1697-1705): the
    sequence's ratio is a geometric mean of token ratios, so per-token importance weights combine the
    same way.  Per-row weights ``(B,)`` are unchanged by it (up to the 1e-10); weights must be >= 0.
    """
    lo, hi = _clip_bounds(clip_low, clip_high)
    m = x.mask
    neg_kl = x.logprob - x.old_logprob
    sgn = torch.sign(x.advantages)
    clamped = torch.clamp(neg_kl, -lo, hi)
    nk_min = sgn * torch.minimum(sgn * neg_kl, sgn * clamped)
    count = m.sum(-1)
    ratio = torch.exp((nk_min * m).sum(-1) / (count + 1e-8))
    adv = (x.advantages * m).sum(-1) / (count + 1e-8)
    seq_loss = -adv * ratio
    if x.weights is not None:
        if bool(((x.weights < 0) & (m > 0)).any()):
            raise ValueError("geo_mean takes the geometric mean of each row's weights: they must be >= 0")
        seq_loss = seq_loss * torch.exp((torch.log(x.weights + 1e-10) * m).sum(-1) / (count + 1e-8))
    pg = seq_loss.mean() if seq_loss.numel() else seq_loss.sum()
    clipped = neg_kl != clamped
    return pg, _stats(x, pg, torch.exp(neg_kl), neg_kl, clipped & (x.advantages > 0),
                      clipped & (x.advantages < 0))


def _generator(seed: Optional[int]) -> Optional[torch.Generator]:
    return None if seed is None else torch.Generator().manual_seed(int(seed))


def _cov_surrogate(x: PGInputs, ratio_name: str, cov_ratio: float) -> tuple[Tensor, Tensor, Tensor]:
    """What Clip-Cov and KL-Cov start from: their token share ``cov_ratio`` checked (> 0), then the
    log-ratio (no [-20, 20] clamp, as verl), the ratio and the unclipped surrogate ``-A r`` per token."""
    if cov_ratio <= 0:
        raise ValueError(f"{ratio_name} must be > 0, got {cov_ratio}")
    neg_kl = x.logprob - x.old_logprob
    ratio = torch.exp(neg_kl)
    return neg_kl, ratio, -x.advantages * ratio


@register_policy_loss("clip_cov")
def clip_cov_loss(x: PGInputs, *, clip_low: float = 0.2, clip_high: Optional[float] = None,
                  clip_cov_ratio: float = 0.0002, clip_cov_lb: float = 1.0, clip_cov_ub: float = 5.0,
                  seed: Optional[int] = None):
    """Clip-Cov (arXiv 2505.22617; verl ``compute_policy_loss_clip_cov``,
    core_algos.py:1450): PPO clip, plus the gradient cut on a few tokens whose centred
    ``A * logp`` covariance lies in ``(clip_cov_lb, clip_cov_ub)`` (those driving entropy collapse).
    ``max(int(clip_cov_ratio * #tokens), 1)`` of the candidates (tokens not already clipped) are
    drawn at random, as verl; ``seed`` makes the draw reproducible (``None``: the global RNG).  No
    [-20, 20] clamp of the log-ratio, as verl."""
    lo, hi = _clip_bounds(clip_low, clip_high)
    neg_kl, ratio, l1 = _cov_surrogate(x, "clip_cov_ratio", clip_cov_ratio)
    m, adv = x.mask, x.advantages
    l2 = -adv * torch.clamp(ratio, 1.0 - lo, 1.0 + hi)
    with torch.no_grad():
        valid = m > 0
        lp = x.logprob.detach()
        cov = (adv - masked_mean(adv, m)) * (lp - masked_mean(lp, m))
        cand = (cov < clip_cov_ub) & (cov > clip_cov_lb) & valid & ~(l2 > l1)
        idx = torch.nonzero(cand)
        clip_num = max(int(clip_cov_ratio * float(m.sum())), 1)
        if len(idx) > 0:
            perm = torch.randperm(len(idx), generator=_generator(seed)).to(idx.device)
            idx = idx[perm[: min(clip_num, len(idx))]]
        corr = torch.ones_like(l1)
        corr[idx[:, 0], idx[:, 1]] = 0.0
    pg = x.aggregate(torch.maximum(l1, l2) * corr)
    return pg, _stats(x, pg, ratio, neg_kl, corr == 0)


@register_policy_loss("kl_cov")
def kl_cov_loss(x: PGInputs, *, kl_cov_ratio: float = 0.0002, ppo_kl_coef: float = 0.1):
    """KL-Cov (arXiv 2505.22617; verl ``compute_policy_loss_kl_cov``,
    core_algos.py:1555): the unclipped surrogate ``-A r``, and on the top ``max(int(kl_cov_ratio *
    #tokens), 1)`` tokens by centred ``A * logp`` covariance a penalty ``ppo_kl_coef * |logp - old|``
    added (verl's config default 0.1).  Ties in the covariance go to the earlier token (a stable
    sort; verl's ``topk`` leaves their order unspecified).  Stats add ``kl_abs``, verl's ``ppo_kl``."""
    neg_kl, ratio, l1 = _cov_surrogate(x, "kl_cov_ratio", kl_cov_ratio)
    m, adv = x.mask, x.advantages
    l_kl = l1 + ppo_kl_coef * neg_kl.abs()
    with torch.no_grad():
        valid = m > 0
        flat = torch.nonzero(valid.reshape(-1)).flatten()
        pick = torch.zeros_like(valid)
        if flat.numel() > 0:
            a = adv[valid].detach()
            lp = x.logprob[valid].detach()
            cov = (a - a.mean()) * (lp - lp.mean())
            k = max(1, int(flat.numel() * kl_cov_ratio))
            top = torch.sort(cov, descending=True, stable=True).indices[:k]
            pick.view(-1)[flat[top]] = True
    pg = x.aggregate(torch.where(pick, l_kl, l1))
    return pg, _stats(x, pg, ratio, neg_kl, pick, kl_abs=x.mean(neg_kl.abs()))


def _dppo(x: PGInputs, valid: Tensor, ratio: Tensor, neg_kl: Tensor, clip_c: float):
    truncated = torch.clamp(ratio, max=float(clip_c)).detach()
    keep = valid.detach().to(x.logprob.dtype)
    pg = x.aggregate(-x.advantages * truncated * x.logprob * keep)
    return pg, _stats(x, pg, ratio, neg_kl, ~valid, (ratio > clip_c) & valid)


@register_policy_loss("dppo_tv")
def dppo_tv_loss(x: PGInputs, *, clip_low: float = 0.2, clip_high: Optional[float] = None,
                 clip_c: float = 3.0):
    """DPPO-Binary-TV (arXiv 2602.04879; verl ``compute_policy_loss_dppo_tv``): the
    trust region is on the probability change, not the ratio.  Per token
    ``-A * sg(min(r, clip_c)) * logp``, kept only where ``p - p_old <= clip_high`` (``A > 0``) or
    ``p - p_old >= -clip_low`` (``A <= 0``); ``clip_low``/``clip_high`` are TV thresholds and
    ``clip_c`` the truncated-importance-sampling cap.  Its default is verl's effective one, 3.0: verl
    reads ``config.get("clip_ratio_c", 20.0)``, but its ``ActorConfig`` always carries
    ``clip_ratio_c = 3.0`` (verl/workers/config/actor.py:143), so 20 is only the fallback of a config
    without the key.  The DPPO paper (Section 5.4) recommends a large cap; pass ``clip_c=20`` for it."""
    lo, hi = _clip_bounds(clip_low, clip_high)
    neg_kl = torch.clamp(x.logprob - x.old_logprob, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    diff = torch.exp(x.logprob) - torch.exp(x.old_logprob)
    valid = torch.where(x.advantages > 0, diff <= hi, diff >= -lo)
    return _dppo(x, valid, ratio, neg_kl, clip_c)


@register_policy_loss("dppo_kl")
def dppo_kl_loss(x: PGInputs, *, clip_low: float = 0.2, clip_high: Optional[float] = None,
                 clip_c: float = 3.0):
    """DPPO-Binary-KL (arXiv 2602.04879; verl ``compute_policy_loss_dppo_kl``): as ``dppo_tv`` with
    the binary KL ``p_old log(p_old/p) + (1-p_old) log((1-p_old+1e-8)/(1-p+1e-8))`` bounded by
    ``clip_high`` (``A > 0``, only where ``p > p_old``) or ``clip_low`` (``A <= 0``, where ``p < p_old``)."""
    lo, hi = _clip_bounds(clip_low, clip_high)
    neg_kl = torch.clamp(x.logprob - x.old_logprob, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    p, p_old = torch.exp(x.logprob), torch.exp(x.old_logprob)
    bkl = p_old * (x.old_logprob - x.logprob) + (1 - p_old) * torch.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
    valid = torch.where(x.advantages > 0, (bkl <= hi) | (p <= p_old), (bkl <= lo) | (p >= p_old))
    return _dppo(x, valid, ratio, neg_kl, clip_c)


@register_policy_loss("vespo")
def vespo_loss(x: PGInputs, *, k_pos: float = 2.0, lambda_pos: float = 3.0, k_neg: float = 3.0,
               lambda_neg: float = 2.0):
    """VESPO (TRL ``loss_type="vespo"``, ``GRPOTrainer.get_gamma_weights``; paper arXiv 2602.10693):
    ``-phi(w) * A * logp`` with ``w`` the SEQUENCE importance ratio ``exp(sum_t log r)`` (token
    log-ratios clamped to [-20, 20], the sum to [ln 1e-8, 20], as TRL) and the detached Gamma weight
    ``phi(w) = exp(lam + k ln w - lam w)`` (``phi(1) = 1``), ``k, lam`` = ``k_pos, lambda_pos`` where
    ``A >= 0`` and ``k_neg, lambda_neg`` elsewhere (TRL's defaults 2, 3, 3, 2).  TRL's extra vLLM
    importance-sampling factor inside ``w`` is not offered.  TRL normalises by the token count
    (``agg="token-mean"``)."""
    m = x.mask
    neg_kl = x.logprob - x.old_logprob
    with torch.no_grad():
        d = torch.clamp(neg_kl.detach(), -20.0, 20.0)
        log_w = torch.clamp((d * m).sum(-1, keepdim=True), math.log(1e-8), 20.0)
        w = torch.exp(log_w)
        nonneg = x.advantages >= 0
        k = torch.where(nonneg, torch.full_like(x.advantages, k_pos), torch.full_like(x.advantages, k_neg))
        lam = torch.where(nonneg, torch.full_like(x.advantages, lambda_pos),
                          torch.full_like(x.advantages, lambda_neg)).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * w).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    pg = x.aggregate(-phi * x.advantages * x.logprob)
    return pg, _stats(x, pg, torch.exp(neg_kl), neg_kl, phi_mean=x.mean(phi))


# --------------------------------------------------------------------------- critic


def value_loss(
    vpreds: Tensor,
    returns: Tensor,
    old_values: Tensor,
    mask: Tensor,
    *,
    cliprange_value: Optional[float] = 0.5,
    agg: str = "token-mean",
    **norms: Any,
) -> tuple[Tensor, dict[str, float]]:
    """PPO's clipped value loss (verl ``compute_value_loss``, core_algos.py:1799-1838, from TRL's PPO):
    ``0.5 * agg(max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2))``; ``cliprange_value=None``
    drops the clipped branch.  Works on ``(B, T)`` token values or ``(N, 1)`` turn values alike.
    Stats: ``vf_loss``, ``vf_clipfrac`` (the clipped branch is the larger), ``vpred_mean``."""
    for name, t in (("returns", returns), ("old_values", old_values), ("mask", mask)):
        if t.shape != vpreds.shape:
            raise ValueError(f"{name} must have shape {tuple(vpreds.shape)}, got {tuple(t.shape)}")
    m = mask.to(vpreds.dtype)
    l1 = (vpreds - returns) ** 2
    if cliprange_value is None:
        mat, clipped = l1, torch.zeros_like(l1, dtype=torch.bool)
    else:
        c = float(cliprange_value)
        vclip = torch.clamp(vpreds, old_values - c, old_values + c)
        l2 = (vclip - returns) ** 2
        mat, clipped = torch.maximum(l1, l2), l2 > l1
    loss = 0.5 * agg_loss(mat, m, agg, **norms)
    return loss, {"vf_loss": float(loss.detach()), "vf_clipfrac": float(masked_mean(clipped.to(m.dtype), m)),
                  "vpred_mean": float(masked_mean(vpreds.detach(), m))}


# --------------------------------------------------------------------------- the one call


def policy_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss: "str | PolicyLoss" = "vanilla",
    ratio_level: Optional[str] = None,
    agg: str = "token-mean",
    loss_scale_factor: Optional[float] = None,
    global_batch_size: Optional[float] = None,
    batch_num_tokens: Optional[float] = None,
    weights: Optional[Tensor] = None,
    ref_logprob: Optional[Tensor] = None,
    kl_coef: float = 0.0,
    kl_type: str = "k3",
    kl_is_correction: bool = False,
    logits: Optional[Tensor] = None,
    entropy: Optional[Tensor] = None,
    entropy_coef: float = 0.0,
    **options: Any,
) -> tuple[Tensor, dict[str, float]]:
    """A registered policy loss by name, with the terms every loss shares; returns ``(loss, stats)``.

    ``loss``: a name from :func:`~stratagym.algorithms.registry.list_policy_losses` (``vanilla``,
    ``gspo``, ``gpg``, ``cispo``, ``sapo``, ``geo_mean``, ``clip_cov``, ``kl_cov``, ``dppo_tv``,
    ``dppo_kl``, ``vespo``); ``**options`` are that loss's own options (e.g. ``clip_low``, ``clip_high``,
    ``clip_c`` for ``vanilla``), checked against its definition: an unknown one raises
    :class:`~stratagym.algorithms.registry.UnknownOptionError` naming the valid ones.
    ``ratio_level="sequence"`` is the older spelling of ``loss="gspo"``.

    Shared terms: ``agg`` and the normalisers as :func:`agg_loss`; ``weights`` (``(B,)`` or
    ``(B, T)``) multiply the per-token policy loss (e.g. HA-DW weights);
    ``kl_coef * agg(kl_penalty(logp, ref_logp, kl_type))`` is added when ``ref_logprob`` is given
    and ``kl_coef != 0`` (``kl_is_correction``: TRL's ``use_bias_correction_kl``, the per-token KL
    multiplied by the importance ratio ``exp(logp - old)``, or GSPO's sequence ratio, with its
    gradient, from DeepSeek-V3.2); ``entropy`` (or ``logits``, from which it is computed) is
    reported and ``entropy_coef * agg(entropy)`` subtracted.

    Stats (floats): ``pg_loss``, ``clip_frac`` (tokens where the loss's clip or mask is active),
    ``clip_frac_lower`` (dual clip or truncation active), ``approx_kl`` (masked mean of
    ``old_logp - logp``), ``ratio_mean`` / ``ratio_min`` / ``ratio_max``, the loss's own extras, and
    ``kl`` / ``kl_loss`` / ``entropy`` when computed, and ``loss``.
    """
    if logprob.dim() != 2:
        raise ValueError(f"logprob must be (B, T), got {tuple(logprob.shape)}")
    shape = logprob.shape
    for name, t in (("old_logprob", old_logprob), ("mask", mask)):
        if t.shape != shape:
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if ratio_level not in (None, "token", "sequence"):
        raise ValueError(f"ratio_level must be 'token' or 'sequence', got {ratio_level!r}")
    if ratio_level == "sequence":
        if (loss.name if isinstance(loss, PolicyLoss) else str(loss)).lower() not in ("vanilla", "ppo", "gspo"):
            raise ValueError(f"ratio_level='sequence' is GSPO; it does not combine with loss={loss!r}")
        loss = "gspo"
    if isinstance(loss, PolicyLoss):  # a loss already looked up and validated (the trainer holds one)
        fn = loss if not options else get_policy_loss(loss.name, **{**loss.options, **options})
    else:
        fn = get_policy_loss(loss, **options)
    if agg not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {agg!r}; choose from {AGG_MODES}")
    m = mask.to(logprob.dtype)
    adv = _expand(advantages.to(logprob.dtype), shape, "advantages")
    if not bool(torch.isfinite(adv).all()):
        raise ValueError("advantages contain NaN/inf")
    w = None if weights is None else _expand(weights.to(logprob.dtype), shape, "weights")
    norms = dict(loss_scale_factor=loss_scale_factor, global_batch_size=global_batch_size,
                 batch_num_tokens=batch_num_tokens)
    x = PGInputs(logprob, old_logprob, adv, m, agg, w, **norms)
    pg, stats = fn(x)
    total = pg

    if ref_logprob is not None:
        if ref_logprob.shape != shape:
            raise ValueError(f"ref_logprob must have shape {tuple(shape)}, got {tuple(ref_logprob.shape)}")
        kl_mat = kl_penalty(logprob, ref_logprob, kl_type)
        if kl_is_correction:
            d = logprob - old_logprob
            if fn.ratio == "sequence":  # the loss's importance ratio is per sequence (GSPO)
                d = masked_mean(d, m, dim=-1).unsqueeze(-1).expand(shape)
            kl_mat = kl_mat * torch.exp(d)
        kl_loss = agg_loss(kl_mat, m, agg, **norms)
        stats["kl"] = float(masked_mean(kl_mat.detach(), m))
        stats["kl_loss"] = float(kl_loss.detach())
        if kl_coef:
            total = total + kl_coef * kl_loss
    if entropy is None and logits is not None:
        entropy = entropy_from_logits(logits)
    if entropy is not None:
        if entropy.shape != shape:
            raise ValueError(f"entropy must have shape {tuple(shape)}, got {tuple(entropy.shape)}")
        ent = agg_loss(entropy, m, agg, **norms)
        stats["entropy"] = float(masked_mean(entropy.detach(), m))
        if entropy_coef:
            total = total - entropy_coef * ent
    stats["loss"] = float(total.detach())
    return total, stats
