"""Off-policy correction of the policy loss: truncated (TIS) and masked (MIS) importance sampling.

Why: the tokens a batch trains on were sampled by a *behaviour* policy -- the sampler's weights at some
earlier version (asynchronous rollouts, ``rollout.max_staleness``) or another engine with other numerics
(vLLM vs the trainer). The PPO ratio ``pi_theta / pi_old`` only corrects the drift inside one update;
the gap between ``pi_old`` (the trainer's log-probs before the update) and the behaviour policy
``mu`` (the sampling log-probs the backends record) is corrected by an importance weight on each token's
loss, as verl's rollout correction and SkyRL's ``off_policy_correction`` do:

* ``tis="token"``: ``w_t = min(pi_old(y_t) / mu(y_t), cap)`` per token;
* ``tis="sequence"``: ``w = min(prod_t pi_old(y_t) / mu(y_t), cap)``, one weight for every token of a
  sequence (the product as ``exp(sum log ratio)``);
* ``mis="token"``: a token whose ratio leaves ``[low, high]`` gets weight 0 (it is dropped);
* ``mis="sequence"``: a sequence whose product ratio leaves ``[low, high]`` is dropped whole;
* ``mis="geometric"``: the same on the geometric mean ``exp(mean_t log ratio)``.

Log-ratios are clamped to [-20, 20] before ``exp`` (verl's ``SAFETY_BOUND``, SkyRL's ``clip=20``); the
weights carry no gradient (they change the measure, not the objective). TIS and MIS combine: the weight
is ``tis_weight * mis_keep``. Definitions pinned by ``tests/algorithms/test_off_policy.py`` against
verl ``verl/trainer/ppo/rollout_corr_helper.py`` (commit b178a3cd) and SkyRL
``skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py`` (commit a9564572).

One difference, on purpose: verl and SkyRL drop a masked token from the loss mask, so a token-mean's
denominator shrinks; here a masked token is a zero weight and stays in the denominator, because the
trainer fixes its global loss denominators before the forward pass that yields ``pi_old``
(``training/update.py``). With nothing masked the two agree exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

__all__ = ["TIS_LEVELS", "MIS_LEVELS", "SAFETY_BOUND", "OffPolicyCorrection", "importance_weights"]

TIS_LEVELS = ("token", "sequence")
MIS_LEVELS = ("token", "sequence", "geometric")
#: log-ratios are clamped to +-20 before exp (verl rollout_corr_helper.py SAFETY_BOUND; SkyRL clip=20.0)
SAFETY_BOUND = 20.0


@dataclass(frozen=True)
class OffPolicyCorrection:
    """Which correction to apply and its thresholds; all off by default (``enabled`` is False).

    ``tis``: ``None`` | ``token`` | ``sequence``; ``tis_cap``: the truncation (verl's
    ``rollout_is_threshold``, default 2.0; SkyRL's ``token_tis_ratio_clip_high`` /
    ``sequence_tis_ratio_clip_high``). ``mis``: ``None`` | ``token`` | ``sequence`` | ``geometric``;
    ``mis_low`` / ``mis_high``: the kept interval of the ratio (``mis_low`` unset: ``1 / mis_high``, as
    verl's default lower threshold).
    """

    tis: Optional[str] = None
    tis_cap: float = 2.0
    mis: Optional[str] = None
    mis_high: float = 2.0
    mis_low: Optional[float] = None

    def __post_init__(self) -> None:
        if self.tis is not None and self.tis not in TIS_LEVELS:
            raise ValueError(f"tis must be one of {TIS_LEVELS} or null (off), got {self.tis!r}")
        if self.mis is not None and self.mis not in MIS_LEVELS:
            raise ValueError(f"mis must be one of {MIS_LEVELS} or null (off), got {self.mis!r}")
        if not self.tis_cap > 0:
            raise ValueError(f"tis_cap must be > 0, got {self.tis_cap!r}")
        if not self.mis_high > 0:
            raise ValueError(f"mis_high must be > 0, got {self.mis_high!r}")
        if self.mis_low is not None and not 0 <= self.mis_low < self.mis_high:
            raise ValueError(f"mis_low must be in [0, mis_high), got {self.mis_low!r} (mis_high {self.mis_high!r})")

    @property
    def enabled(self) -> bool:
        return self.tis is not None or self.mis is not None

    @property
    def low(self) -> float:
        """The lower bound of MIS's kept interval."""
        return 1.0 / self.mis_high if self.mis_low is None else float(self.mis_low)


def _safe_exp(log_ratio: Tensor) -> Tensor:
    return torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND))


def importance_weights(old_logprob: Tensor, rollout_logprob: Tensor, mask: Tensor,
                       correction: OffPolicyCorrection) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights ``(B, T)`` (detached, 0 on padding) correcting the behaviour policy's samples to
    ``pi_old``, and their statistics.

    ``old_logprob``: the trainer's log-probs before the update; ``rollout_logprob``: the sampler's;
    ``mask``: the real tokens. Stats (floats, over real tokens): ``is_ratio_mean`` / ``is_ratio_max`` /
    ``is_ratio_min`` of the raw token ratio; ``is_weight_mean`` / ``is_weight_max`` / ``is_weight_min``
    and ``is_ess`` (``1 / E[(w / E w)^2]``, 1 when every weight is equal) of the applied weights;
    ``tis_clip_frac`` (tokens, or sequences for ``sequence``, whose ratio exceeded the cap);
    ``mis_masked_frac`` (tokens dropped) and ``mis_seq_masked_frac`` (sequences with a dropped token).
    """
    if old_logprob.shape != rollout_logprob.shape or old_logprob.shape != mask.shape:
        raise ValueError(f"old_logprob {tuple(old_logprob.shape)}, rollout_logprob {tuple(rollout_logprob.shape)} "
                         f"and mask {tuple(mask.shape)} must have one shape (B, T)")
    with torch.no_grad():
        m = mask.to(old_logprob.dtype)
        log_ratio = (old_logprob.detach() - rollout_logprob.detach()) * m
        token_ratio = _safe_exp(log_ratio)
        seq_log = log_ratio.sum(dim=-1, keepdim=True)
        n_tok = m.sum(dim=-1, keepdim=True)
        w = torch.ones_like(token_ratio)
        stats: dict[str, float] = {}
        if correction.tis == "token":
            w = torch.clamp(token_ratio, max=correction.tis_cap)
            stats["tis_clip_frac"] = _frac((token_ratio > correction.tis_cap).to(m.dtype) * m, m)
        elif correction.tis == "sequence":
            seq_ratio = _safe_exp(seq_log)
            w = torch.clamp(seq_ratio, max=correction.tis_cap).expand_as(token_ratio)
            real = n_tok.squeeze(-1) > 0
            stats["tis_clip_frac"] = float((seq_ratio.squeeze(-1) > correction.tis_cap)[real].float().mean()) if real.any() else 0.0
        if correction.mis is not None:
            lo, hi = correction.low, correction.mis_high
            if correction.mis == "token":
                keep = (token_ratio >= lo) & (token_ratio <= hi)
            else:
                stat = seq_log if correction.mis == "sequence" else seq_log / n_tok.clamp(min=1.0)
                r = _safe_exp(stat)
                keep = ((r >= lo) & (r <= hi)).expand_as(token_ratio)
            dropped = (~keep).to(m.dtype) * m
            stats["mis_masked_frac"] = _frac(dropped, m)
            real = n_tok.squeeze(-1) > 0
            seq_dropped = dropped.sum(dim=-1) > 0
            stats["mis_seq_masked_frac"] = float(seq_dropped[real].float().mean()) if real.any() else 0.0
            w = w * keep.to(w.dtype)
        w = w * m
        stats.update(_ratio_stats(token_ratio, w, m))
    return w.detach(), stats


def _frac(x: Tensor, m: Tensor) -> float:
    n = float(m.sum())
    return float(x.sum()) / n if n > 0 else 0.0


def _ratio_stats(token_ratio: Tensor, w: Tensor, m: Tensor) -> dict[str, float]:
    """Mean / max / min of the raw token ratios and of the weights over real tokens, and the ESS."""
    real = m.bool()
    if not real.any():
        return {}
    r, ww = token_ratio[real], w[real]
    mean_w = float(ww.mean())
    ess = 1.0 / float(((ww / mean_w) ** 2).mean()) if mean_w > 0 else 0.0
    out = {
        "is_ratio_mean": float(r.mean()), "is_ratio_max": float(r.max()), "is_ratio_min": float(r.min()),
        "is_weight_mean": mean_w, "is_weight_max": float(ww.max()), "is_weight_min": float(ww.min()),
        "is_ess": ess if math.isfinite(ess) else 0.0,
    }
    return out
