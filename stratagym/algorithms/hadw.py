"""HA-DW (pure torch): History-Aware Adaptive Difficulty Weighting, arXiv 2601.08521, as a modifier
that reweights any estimator's advantages (``"<estimator>+hadw"``).

:class:`HADW` is the stateful weighting (the difficulty anchor that follows the batches);
:class:`HADWEstimator` registers it as the ``+hadw`` modifier, with its options read from
``HADW.__init__``.
"""

from __future__ import annotations

import inspect
import math
from collections import deque
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from stratagym.algorithms._segment import as_compute, check_ids, check_rewards, dense_ids, segment_stats
from stratagym.algorithms.registry import (
    AdvantageBatch,
    Estimator,
    EstimatorModifier,
    batch_episode,
    register_modifier,
)

__all__ = ["HADW", "HADWEstimator"]


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
    needs = ("group",)  # the group mean reward p_hat

    def __init__(self, inner: Estimator, **options: Any) -> None:
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
