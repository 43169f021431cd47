"""The update half of the trainer: advantages and optimisation on one rollout batch.

:class:`TrainerUpdate` is the base class of :class:`~stratagym.training.trainer.Trainer`; the loop
(init, rollout, step, evaluate, save/resume) lives in ``trainer.py``, and everything between "here is a
rollout batch" and "the optimizer stepped" lives here, so :meth:`TrainerUpdate.update` reads top to
bottom as the algorithm::

    shape rewards -> rows -> (critic: V_old, value targets) -> advantages -> old / reference log-probs
    for each epoch, for each mini-batch:
        for each micro-batch: policy loss (+ value loss) -> backward     (_accumulate_gradients)
        clip, optimizer step, scheduler step (+ the critic's)            (_optimizer_step)

What the micro-batches read is one :class:`UpdateData`; what they report is gathered in an
:class:`UpdateStats`. The few multi-process rules the loop needs (global loss denominators, as many
backward passes on every process, a stand-in sample for a process with none) are one-line methods
here whose bodies live in :mod:`stratagym.training.distributed`; each is a no-op in one process.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from stratagym.agents.policy import pad_right
from stratagym.algorithms.advantages import gae
from stratagym.algorithms.losses import policy_loss, value_loss
from stratagym.algorithms.off_policy import importance_weights
from stratagym.errors import ConfigError
from stratagym.training.diagnostics import advantage_diagnostics
from stratagym.training.parity import ParityError, check_parity, logprob_parity, parity_bounds, write_parity_evidence
from stratagym.training.distributed import (
    bare_model,
    borrow_payload,
    estimate_advantages,
    gather_statistics,
    global_denominators,
    max_over_processes,
)
from stratagym.training.rollout import RolloutBatch, shape_rewards, to_advantage_batch

__all__ = ["TrainerUpdate", "UpdateData", "UpdateStats", "loss_share", "advantage_metrics", "critic_metrics"]


@dataclass
class UpdateData:
    """What the micro-batches of one update read, each list or tensor indexed by sample.

    ``old``: log-probs of the samples before the update (computed when several updates share a batch;
    None: the micro-batch's own detached forward serves); ``ref``: the reference policy's log-probs (KL
    penalty; None without one); ``old_values`` / ``returns``: the critic's ``V_old`` and the GAE value
    targets (PPO with a critic; None otherwise). A process with no sample trains on a stand-in of the
    same shape (:meth:`TrainerUpdate._stand_in`).
    """

    payloads: list[Any]
    advantages: torch.Tensor
    old: Optional[list[torch.Tensor]] = None
    ref: Optional[list[torch.Tensor]] = None
    old_values: Optional[torch.Tensor] = None
    returns: Optional[torch.Tensor] = None


@dataclass
class UpdateStats:
    """What one update's micro-batches and optimizer steps report, reduced into its metrics: the loss
    statistics of every real micro-batch (``loss/*``) and the gradient norms before clipping.

    The logged statistics are the mini-batch's, whatever ``optim.micro_batch_size`` splits it into (a
    metric that moved with the micro-batch size would read as a change of the update, which it is not):

    - the losses (``loss``, ``pg_loss``, ``kl_loss``) add up each micro-batch's loss times its share of
      the mini-batch (:func:`loss_share`), as the gradients do; for ``token-sum`` the mini-batch's loss
      is the plain sum of its micro-batches' sums;
    - ``*_max`` and ``*_min`` keys take the maximum and minimum;
    - the value-loss statistics (``vf_*``, ``vpred_mean``: one value per row) are row-weighted means;
    - every other statistic (token means such as ``clip_frac``, ``approx_kl``, ``kl``, ``entropy``) is
      token-weighted, so token means are exact (row-level fractions among them are weighted by tokens).

    Several mini-batches (and PPO epochs) average their losses; the other statistics pool all micro-batches.
    With several processes, each logs the mini-batch part it trained on."""

    summed: bool = False  # ``token-sum``: a mini-batch's loss is the sum of its micro-batches' losses
    #: per real micro-batch: (its statistics, its mini-batch, loss share, tokens, rows)
    micro: list[tuple[dict[str, float], int, float, float, float]] = field(default_factory=list)
    mini_batch: int = -1
    grad_norms: list[float] = field(default_factory=list)
    critic_norms: list[float] = field(default_factory=list)

    LOSS_KEYS = ("loss", "pg_loss", "kl_loss")

    def start_mini_batch(self) -> None:
        self.mini_batch += 1

    def add_losses(self, stats: dict[str, float], share: float = 1.0, tokens: float = 1.0, rows: float = 1.0) -> None:
        """One real micro-batch's loss statistics, its loss share of the mini-batch, its tokens and rows."""
        self.micro.append((dict(stats), max(self.mini_batch, 0), float(share), float(tokens), float(rows)))

    def _reduce(self, key: str) -> float:
        entries = [(s[key], *w) for s, *w in self.micro if key in s]
        values, mb, share, tokens, rows = (np.array(col, dtype=np.float64) for col in zip(*entries))
        if key.endswith("_max"):
            return float(values.max())
        if key.endswith("_min"):
            return float(values.min())
        if key in self.LOSS_KEYS:
            per_mb = []
            for m in np.unique(mb):
                sel = mb == m
                if self.summed:
                    per_mb.append(values[sel].sum())
                else:
                    per_mb.append(np.average(values[sel], weights=share[sel]) if share[sel].sum() > 0
                                  else values[sel].mean())
            return float(np.mean(per_mb))
        weight = rows if (key.startswith("vf_") or key == "vpred_mean") else tokens
        return float(np.average(values, weights=weight)) if weight.sum() > 0 else float(values.mean())

    def metrics(self) -> dict[str, float]:
        keys = list(dict.fromkeys(k for s, *_ in self.micro for k in s))
        out = {f"loss/{k}": self._reduce(k) for k in keys}
        if self.grad_norms:
            out["optim/grad_norm"] = float(np.mean(self.grad_norms))
        if self.critic_norms:
            out["critic/grad_norm"] = float(np.mean(self.critic_norms))
        return out


def loss_share(loss_fn: Any, agg: str, n_rows: int, n_tokens: float, tokens_mb: float, rows_mb: float,
               num_processes: int) -> float:
    """The share of its mini-batch a micro-batch's loss stands for, so that the micro-batches' gradients
    add up to the mini-batch's: its share of the mini-batch's tokens (``token-mean``), of its sequences
    (sequence means, and a loss that averages per sequence whatever the aggregation, like GMPO), or the
    number of processes (``token-sum``: sums add up, and DDP's gradient mean divides by processes)."""
    if loss_fn.per_sequence:
        return n_rows / max(rows_mb, 1e-12)
    if agg == "token-sum":
        return float(num_processes)
    if agg == "token-mean":
        return n_tokens / float(tokens_mb)
    return n_rows / max(rows_mb, 1e-12)


def advantage_metrics(adv: torch.Tensor) -> dict[str, float]:
    """``adv/mean``, ``adv/std`` and ``adv/nonzero`` (the share of samples that move the policy)."""
    return {
        "adv/mean": float(adv.mean()) if adv.numel() else 0.0,
        "adv/std": float(adv.std()) if adv.numel() > 1 else 0.0,
        "adv/nonzero": float((adv != 0).float().mean()) if adv.numel() else 0.0,
    }


def critic_metrics(values: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
    """The rollout's mean value and target, and the explained variance ``1 - Var(R - V) / Var(R)`` (1: the
    critic predicts the targets; 0: no better than their mean; 0 when the targets do not vary)."""
    if values.numel() == 0:
        return {}
    out = {"critic/values": float(values.mean()), "critic/returns": float(returns.mean())}
    var = float(returns.double().var(unbiased=False))
    out["critic/explained_var"] = 1.0 - float((returns - values).double().var(unbiased=False)) / var if var > 0 else 0.0
    return out


class TrainerUpdate:
    """Advantages and optimisation on one rollout batch; the base class of the ``Trainer``, which sets
    the attributes declared below in its ``__init__``. Each step of the update is a method, so a test or
    a benchmark can wrap one (``_micro_loss``, ``_score_detached``, ...) on a trainer instance."""

    config: Any  # RecipeConfig
    accelerator: Any
    policy: Any
    hooks: Any  # the policy's optional hooks (stratagym.agents.policy.policy_hooks)
    reference: Any  # frozen copy for the KL penalty, or None
    critic: Any  # PPO's value model, or None
    optimizer: torch.optim.Optimizer
    scheduler: Any
    critic_optimizer: Optional[torch.optim.Optimizer]
    estimator: Any
    loss_fn: Any  # the validated PolicyLoss
    step: int
    rng: np.random.Generator
    output_dir: Path  # where a parity stop leaves its evidence

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """Advantages + optimisation on one rollout batch; returns loss/advantage metrics."""
        cfg, oc = self.config, self.config.optim
        alg = cfg.algorithm
        shape_rewards(batch, invalid_action_penalty=alg.invalid_action_penalty, format_reward=alg.format_reward,
                      reward_scale=alg.reward_scale)
        rows, sample_row, samples = to_advantage_batch(batch, self.estimator.level)
        if self.accelerator.num_processes > 1:  # batch-wide statistics (whitening) over every process's rows
            rows.gather = self._gather_stats
        metrics: dict[str, float] = {}
        old_values = returns = None
        if self.critic is not None:  # V_old into rows.values, and the value targets
            old_values, returns = self._critic_targets(rows, samples)
            metrics.update(critic_metrics(old_values, returns))
        if rows.baseline is not None and len(rows):
            metrics["adv/baseline_return"] = float(rows.baseline.float().mean())
        adv_rows = estimate_advantages(self.estimator, rows)
        adv = adv_rows[sample_row] if len(samples) else torch.zeros(0)
        metrics.update(advantage_metrics(adv))
        metrics.update(advantage_diagnostics(rows, adv_rows))  # tied groups, per stratum, group sizes per level
        metrics.update(self.estimator.metrics())  # the estimator's own diagnostics (HA-DW's anchor)
        payloads = [s.payload for s in samples]
        n = len(payloads)
        multi_update = oc.mini_batches * oc.ppo_epochs > 1
        self.policy.train()
        old = self._score_detached(self.policy, payloads) if (multi_update and n) else None
        ref = self._score_detached(self.reference, payloads) if (self.reference is not None and n) else None
        if self.critic is not None:
            self.critic.train()
        data = UpdateData(payloads, adv, old, ref, old_values, returns)
        stats = UpdateStats(summed=self.config.loss.agg == "token-sum" and not self.loss_fn.per_sequence)
        parity_pending = True  # sampler vs trainer log-probs, before the first optimizer step
        for _epoch in range(oc.ppo_epochs):
            order = self._permutation_rng().permutation(n) if multi_update else np.arange(n)
            # as many mini-batches (maybe empty) on every process: each runs collectives
            for mb in np.array_split(order, oc.mini_batches) if (n or self.accelerator.num_processes > 1) else [order]:
                # the pre-update scores are ``old`` when several updates run, else the forwards of this
                # first mini-batch's micro-batches (collected into ``scored``)
                scored: Optional[dict[int, torch.Tensor]] = {} if (parity_pending and old is None) else None
                self._accumulate_gradients(list(mb), data, samples, stats, scores_out=scored)
                if parity_pending:
                    pre_update = old if old is not None else [scored.get(i) for i in range(n)]
                    metrics.update(self._logprob_parity(samples, pre_update,
                                                        lagged=float(batch.extra.get("async/lag", 0.0)) > 0))
                    parity_pending = False
                self._optimizer_step(stats)
        metrics.update(stats.metrics())
        metrics["optim/lr"] = float(self.scheduler.get_last_lr()[0])
        metrics["train/samples"] = float(n)
        return metrics

    # ---- one mini-batch --------------------------------------------------------------------------------
    def _accumulate_gradients(self, mb: list[int], data: UpdateData, samples: list[Any], stats: UpdateStats,
                              scores_out: Optional[dict[int, torch.Tensor]] = None) -> None:
        """Forward, loss and backward of the micro-batches (``optim.micro_batch_size`` samples) of the
        mini-batch ``mb``, each loss weighted by its share of the mini-batch; ``scores_out`` collects the
        real micro-batches' log-probs (sample index -> detached scores) for the parity check.

        DDP padding: every process must run the same number of backward passes, or the gradient
        all-reduce of the last one waits forever. A process with fewer micro-batches than the most loaded
        one repeats its first chunk with the loss multiplied by 0: it joins the all-reduce but adds nothing
        to the gradient; a process with no sample at all trains on a payload borrowed from one that has
        one (:meth:`_stand_in`), also multiplied by 0. Gradients synchronise on the last backward only."""
        tokens_mb, rows_mb = self._global_denominators(sum(max(1, samples[i].num_tokens) for i in mb), len(mb))
        mbs = self.config.optim.micro_batch_size
        chunks = [mb[i : i + mbs] for i in range(0, len(mb), mbs)]
        n_micro = self._n_micro_global(len(chunks))
        stand_in = self._stand_in(data.payloads[chunks[0][0]] if chunks else None, n_micro)
        multi = self.accelerator.num_processes > 1
        stats.start_mini_batch()
        for ci in range(max(n_micro, 1)):
            real = ci < len(chunks) and len(chunks[ci]) > 0
            chunk = chunks[ci] if real else (chunks[0] if chunks and chunks[0] else None)
            src = data
            if chunk is None and stand_in is not None:
                chunk, src = [0], stand_in
            if chunk is None:
                continue  # nothing to train on anywhere
            ctx = contextlib.ExitStack()
            if ci != max(n_micro, 1) - 1 and multi:
                ctx.enter_context(self.accelerator.no_sync(self.policy.model))
                if self.critic is not None:
                    ctx.enter_context(self.accelerator.no_sync(self.critic.model))
            with ctx:
                loss, loss_stats, share, n_tokens = self._micro_loss(chunk, src, tokens_mb, rows_mb,
                                                                     scores_out=scores_out if real else None)
                total = loss * share
                if self.critic is not None:  # no shared parameters: one backward trains both
                    vloss, vstats = self._micro_value_loss(chunk, src)
                    total = total + vloss * (len(chunk) / max(rows_mb, 1e-12))
                    loss_stats.update(vstats)
                if not real:
                    total = total * 0.0
                self.accelerator.backward(total)
            if real:
                stats.add_losses(loss_stats, share=share, tokens=n_tokens, rows=len(chunk))

    def _optimizer_step(self, stats: UpdateStats) -> None:
        """Clip, step and zero the policy's optimizer and scheduler, then the critic's optimizer."""
        oc = self.config.optim
        if oc.max_grad_norm:
            gn = self.accelerator.clip_grad_norm_([p for p in self.policy.parameters()], oc.max_grad_norm)
            stats.grad_norms.append(float(gn))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic is not None:
            if self.config.critic.max_grad_norm:
                cn = self.accelerator.clip_grad_norm_(list(self.critic.parameters()), self.config.critic.max_grad_norm)
                stats.critic_norms.append(float(cn))
            self.critic_optimizer.step()
            self.critic_optimizer.zero_grad(set_to_none=True)
        self.hooks.after_optimizer_step()

    # ---- one micro-batch --------------------------------------------------------------------------------
    def _micro_loss(self, chunk: list[int], data: UpdateData, tokens_mb: float, rows_mb: float,
                    scores_out: Optional[dict[int, torch.Tensor]] = None) -> tuple[torch.Tensor, dict[str, float], float, float]:
        """Loss of the samples ``chunk`` of ``data``, the share of the mini-batch it stands for and its
        number of loss tokens;
        ``scores_out`` (sample index -> its scored log-probs, detached) collects the forward's log-probs
        for the parity check."""
        lc = self.config.loss
        with self.accelerator.autocast():
            res = self.policy.sequence_log_probs([data.payloads[i] for i in chunk], with_entropy=lc.entropy_coef > 0)
        lp = res.logprobs.float()
        mask = res.mask
        if scores_out is not None:
            for k, i in enumerate(chunk):
                scores_out[i] = lp[k][mask[k].bool()].detach().cpu()
        dev = lp.device
        T = lp.shape[1]

        def padded(rows: list[torch.Tensor]) -> torch.Tensor:
            mat = pad_right([rows[i] for i in chunk], 0.0, torch.float32)
            if mat.shape[1] < T:
                mat = torch.nn.functional.pad(mat, (0, T - mat.shape[1]))
            return mat[:, :T].to(dev)

        old_lp = padded(data.old) if data.old is not None else lp.detach()
        ref_lp = padded(data.ref) if data.ref is not None else None
        a = data.advantages[chunk].to(dev)
        weights, is_stats = self._off_policy_weights(old_lp, res.sampling_logprobs, mask)
        loss, stats = policy_loss(
            lp, old_lp, a, mask, loss=self.loss_fn, agg=lc.agg, loss_scale_factor=lc.loss_scale_factor,
            ref_logprob=ref_lp, kl_coef=lc.kl_coef, kl_type=lc.kl_type, kl_is_correction=lc.kl_is_correction,
            entropy=res.entropy.float() if res.entropy is not None else None, entropy_coef=lc.entropy_coef,
            weights=weights,
        )
        stats.update(is_stats)
        n_tokens = float(mask.sum())
        share = loss_share(self.loss_fn, lc.agg, len(chunk), n_tokens, tokens_mb, rows_mb,
                           self.accelerator.num_processes)
        return loss, stats, share, n_tokens

    def _off_policy_weights(self, old_lp: torch.Tensor, sampled: Optional[torch.Tensor],
                            mask: torch.Tensor) -> tuple[Optional[torch.Tensor], dict[str, float]]:
        """``loss.off_policy``'s importance weights of one micro-batch (``pi_old`` over the sampler's
        log-probs, :func:`~stratagym.algorithms.off_policy.importance_weights`) and their statistics,
        logged as ``loss/is_*``, ``loss/tis_*``, ``loss/mis_*``; ``(None, {})`` when the correction is off."""
        correction = self.config.loss.off_policy
        if not correction.enabled:
            return None, {}
        if sampled is None:
            raise ConfigError(f"loss.off_policy needs the sampler's log-probs, but {type(self.policy).__name__} does "
                              "not record them (sequence_log_probs returns no sampling_logprobs); turn it off "
                              "(loss.off_policy.tis / mis: null) or use an LLM policy")
        T = old_lp.shape[1]
        mu = sampled.float().to(old_lp.device)
        if mu.shape[1] < T:
            mu = torch.nn.functional.pad(mu, (0, T - mu.shape[1]))
        return importance_weights(old_lp, mu[:, :T], mask, correction)

    def _micro_value_loss(self, chunk: list[int], data: UpdateData) -> tuple[torch.Tensor, dict[str, float]]:
        """PPO's clipped value loss on one micro-batch (one value per turn: ``(n, 1)`` with a full mask)."""
        with self.accelerator.autocast():
            v = self.critic.values([data.payloads[i] for i in chunk]).float()
        vpred = v[:, None]
        idx = torch.as_tensor(chunk, dtype=torch.long)
        ret = data.returns[idx].to(vpred.device)[:, None]
        old = data.old_values[idx].to(vpred.device)[:, None]
        loss, stats = value_loss(vpred, ret, old, torch.ones_like(vpred, dtype=torch.bool),
                                 cliprange_value=self.config.critic.cliprange_value, agg="token-mean")
        return loss, stats  # logged as loss/vf_loss, loss/vf_clipfrac, loss/vpred_mean

    # ---- before the optimisation --------------------------------------------------------------------
    def _critic_targets(self, rows: Any, samples: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """``V_old(s_t)`` of every sample (the critic before this update, no gradients), put into
        ``rows.values`` for the estimator, and the value targets ``R = A_raw + V_old`` of turn-level GAE
        with the estimator's ``gamma`` and ``lam`` (before the whitening of the advantages). Step rows and
        samples are in the same order (``to_advantage_batch``)."""
        payloads = [s.payload for s in samples]
        mbs = self.config.optim.micro_batch_size
        self.critic.eval()
        parts: list[torch.Tensor] = []
        with torch.no_grad(), self.accelerator.autocast(), bare_model(self.critic):  # see distributed.bare_model
            for i in range(0, len(payloads), mbs):
                parts.append(self.critic.values(payloads[i : i + mbs]).float().cpu())
        values = torch.cat(parts) if parts else torch.zeros(0)
        rows.values = values
        opts = self.estimator.config
        _, returns = gae(rows.rewards, values, rows.traj, rows.step, gamma=float(opts.get("gamma", 1.0)),
                         lam=float(opts.get("lam", 1.0)))
        return values, returns.float()

    def _score_detached(self, policy: Any, payloads: list[Any]) -> list[torch.Tensor]:
        """Per-sample log-probs without gradients (old or reference log-probs), through the bare module
        (see :func:`~stratagym.training.distributed.bare_model`: processes score different numbers of samples, some none)."""
        out: list[torch.Tensor] = []
        mbs = self.config.optim.micro_batch_size
        with torch.no_grad(), self.accelerator.autocast(), bare_model(policy):
            for i in range(0, len(payloads), mbs):
                res = policy.sequence_log_probs(payloads[i : i + mbs])
                for row, m in zip(res.logprobs, res.mask):
                    out.append(row[m.bool()].float().cpu())
        return out

    def _logprob_parity(self, samples: list[Any], scored: list[Optional[torch.Tensor]], *,
                        lagged: bool = False) -> dict[str, float]:
        """``parity/*`` metrics of this step's samples (sampling vs pre-update trainer log-probs); stops
        the run past ``rollout.parity_max`` (:func:`stratagym.training.parity.check_parity`).

        ``lagged``: some of the step's groups were sampled by an older policy version (async mode,
        ``async/lag`` > 0). Their gap to the trainer is the policy lag, which ``loss.off_policy`` corrects,
        not a sampler fault, so the metrics are logged and ``parity_max`` is not applied."""
        sampled: list[Optional[torch.Tensor]] = []
        ids: list[list[int]] = []
        for s in samples:
            pay = s.payload
            has = isinstance(pay, dict) and "sampling_logprobs" in pay and "response_ids" in pay
            sampled.append(pay["sampling_logprobs"] if has else None)
            ids.append(pay["response_ids"].tolist() if has else [])
        rc = self.config.rollout
        report = logprob_parity(sampled, scored, tol=rc.parity_tol, response_ids=ids,
                                tokenizer=self.hooks.tokenizer)

        def describe(i: int) -> str:
            s = samples[i]
            return f"turn {s.step} of task {s.info.get('task_id', '?')!r}"

        # the length check always holds; the bound only where sampler and trainer held the same weights
        dtype = self.hooks.compute_dtype  # None: the policy has no single one; float32's bounds
        bound_max, bound_mean = parity_bounds(rc.parity_max, rc.parity_mean_max,
                                              torch.float32 if dtype is None else dtype)
        if lagged:
            bound_max = bound_mean = None
        try:
            check_parity(report, step=self.step + 1, parity_max=bound_max, parity_mean_max=bound_mean, describe=describe)
        except ParityError as err:  # keep the turns that tripped it: resuming replays this step
            rank = self.accelerator.process_index
            name = f"parity-failure-step-{self.step + 1}" + (f"-rank{rank}" if self.accelerator.num_processes > 1 else "")
            path = write_parity_evidence(self.output_dir / f"{name}.json", err, step=self.step + 1,
                                         payloads=[s.payload for s in samples], scored=scored, describe=describe,
                                         tokenizer=self.hooks.tokenizer, dtype=dtype)
            raise ParityError(f"{err} The worst turns are in {path} (score them again in float32 with "
                              "stratagym.training.parity.rescore_parity_evidence; docs/training.md, "
                              "\"Log-prob parity\"); --resume continues from the last checkpoint.") from None
        return report.metrics() if report is not None else {}

    def _permutation_rng(self) -> np.random.Generator:
        """The generator that shuffles samples into mini-batches. One process: the trainer's RNG (as
        before). Several: a per-process one, because processes hold different sample counts and
        drawing permutations from the shared task RNG would make their task draws diverge."""
        if self.accelerator.num_processes == 1:
            return self.rng
        return np.random.default_rng([self.config.train.seed, self.step, self.accelerator.process_index])

    # ---- multi-process rules (bodies in stratagym.training.distributed; no-ops in one process) -----------
    def _gather_stats(self, t: torch.Tensor) -> torch.Tensor:
        """Every process's 1-D statistics ``t``, stacked ``(processes, len(t))`` (``AdvantageBatch.gather``:
        the whitening of ``gae`` and REINFORCE++ over the global batch). A collective."""
        return gather_statistics(self.accelerator, t)

    def _global_denominators(self, tokens_mb: int, rows_mb: int) -> tuple[float, float]:
        """The mini-batch's token and row counts as the loss normalisers must see them
        (:func:`~stratagym.training.distributed.global_denominators`)."""
        return global_denominators(self.accelerator, tokens_mb, rows_mb)

    def _n_micro_global(self, n_local: int) -> int:
        """The most micro-batches any process has in this mini-batch (each runs as many backward passes)."""
        return max_over_processes(self.accelerator, n_local)

    def _stand_in(self, payload: Any, n_micro: int) -> Optional[UpdateData]:
        """For a process with no sample while others train: one borrowed sample with zero advantage and
        neutral references (:func:`~stratagym.training.distributed.borrow_payload`); ``None`` on every
        other process. A collective when several processes run."""
        borrowed = borrow_payload(self.accelerator, payload, n_micro)
        if borrowed is None:
            return None
        zero = torch.zeros(1)
        return UpdateData([borrowed], zero, None, [zero] if self.reference is not None else None, zero, zero)
