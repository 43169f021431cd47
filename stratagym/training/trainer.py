"""The trainer: group rollouts -> reward shaping -> estimator -> policy loss -> optimizer -> checkpoint.

One loop for every algorithm and every policy that follows :class:`stratagym.agents.policy.Policy`::

    for step in 1..total_steps:
        tasks, seeds  <- the trainer's numpy generator (sharded across accelerate processes)
        batch         <- RolloutCollector.collect(tasks, seeds)      (G envs per task, batched turns)
        shape_rewards(batch)                                          (invalid-action penalty, format reward)
        rows          <- to_advantage_batch(batch, estimator.level)   (trajectory or step rows)
        values        <- critic(samples)  (PPO with a critic only)    V(s_t) per turn, no gradients
        advantages    <- estimator(rows)                              (grpo, stratified+hadw, gigpo, gae, ...)
        for each mini-batch: for each micro-batch:
            logp = policy.sequence_log_probs(payloads)                (with gradients)
            loss = policy_loss(logp, old, adv, mask, ref=reference)   (clip / dual clip / GSPO, KL)
                 + value_loss(critic(samples), GAE returns, values)   (PPO with a critic only)
            accelerator.backward(loss * share of the mini-batch)
          clip, optimizer.step, scheduler.step  (+ the critic's own clip and optimizer step)
        metrics -> JSONL / TensorBoard / W&B;  periodic eval;  atomic checkpoint

This module holds the loop (init, rollout, step, evaluate, save/resume); the update (from "shape
rewards" to the optimizer step) is :class:`~stratagym.training.update.TrainerUpdate`, the Trainer's
base class, and the multi-process rules both use are in :mod:`stratagym.training.distributed`. What a
recipe builds (the policy, the seeds) and its checks against the env are in
:mod:`stratagym.training.recipe`; the metrics log is :mod:`stratagym.training.metrics_log`.

Distributed: ``accelerate launch`` starts one process per GPU; each samples its own shard of tasks,
gradients are averaged by the accelerate-prepared model (DDP/FSDP/DeepSpeed). The reference policy is
a frozen copy of the starting policy (for LoRA the same model with adapters off, or with the loaded
adapter's starting weights as a frozen second adapter). Resuming (``resume=True``) reloads the newest complete
checkpoint -- weights, optimizer, scheduler, RNG states, estimator state (HA-DW anchors), and for PPO
the critic and its optimizer -- and continues bit for bit on CPU: the metrics of a resumed run equal
those of an uninterrupted one.

PPO with a critic (``algorithm.estimator: gae``): an estimator whose registry ``fields`` include
``values`` gets a value model from :func:`stratagym.agents.critic.build_critic` (``critic:`` section of
the recipe), one ``V(s_t)`` per turn. Before the update the critic scores every sample without
gradients (the rollout's values ``V_old``); turn-level GAE gives the advantages (whitened, as verl) and
the value targets ``R = A_raw + V_old``; each micro-batch adds PPO's clipped value loss to the policy
loss (the two models share no parameters, so one backward serves both) and the critic steps its own
AdamW. An estimator whose ``fields`` include ``baseline`` (``remax``) makes the collector play one
extra greedy episode per task, whose shaped return is the baseline of that task's rows.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from stratagym.agents.critic import build_critic
from stratagym.agents.env_fit import POLICY_CONFIG_FILE, check_policy_for_env
from stratagym.agents.policy import policy_hooks, unwrap_model
from stratagym.envs.registry import get_spec
from stratagym.training.allocator import retain_heap, return_freed_memory
from stratagym.training.async_rollout import AsyncRollouts, merge_async_extras
from stratagym.training.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from stratagym.training.config import RecipeConfig
from stratagym.training.distributed import (  # noqa: F401  (estimate_advantages: re-exported)
    end_process_group_at_exit,
    estimate_advantages,
    share_batch_statistics,
)
from stratagym.training.update import TrainerUpdate, UpdateData  # noqa: F401  (UpdateData: re-exported)
from stratagym.training.rollout import (
    RolloutBatch,
    make_pool,
    shape_rewards,
)
from stratagym.training.rollout.dynamic import collect_informative
from stratagym.training.rollout.program import check_append_only, collector_for, is_program
from stratagym.errors import ConfigError
from stratagym.precision import dtype_name
from stratagym.provenance import inherited_stages
from stratagym.training.metrics_log import MetricsLog
from stratagym.training.recipe import (  # noqa: F401  (build_policy, seed_everything: re-exported)
    build_policy,
    check_estimator_metadata,
    refuse_eval_split,
    seed_everything,
    training_set_of,
)

__all__ = ["Trainer", "build_policy", "seed_everything", "check_estimator_metadata"]


def _lr_lambda(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    def fn(i: int) -> float:
        if warmup and i < warmup:
            return (i + 1) / warmup
        if kind == "constant":
            return 1.0
        frac = min(1.0, (i - warmup) / max(1, total - warmup))
        return 1.0 - frac if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))

    return fn


class Trainer(TrainerUpdate):
    """Trains a policy on one env with a group-relative estimator (see the module docstring).

    ``Trainer(config)`` builds the policy from ``config.policy``; pass ``policy=`` to train an existing
    policy object (e.g. a scorer) instead. ``train(resume=True)`` continues from the newest complete
    checkpoint in ``config.train.output_dir``.
    """

    def __init__(self, config: RecipeConfig, policy: Any = None, *, accelerator: Any = None):
        from accelerate import Accelerator

        built = config.validate_and_build()  # the estimator and loss it checked are the ones trained with
        refuse_eval_split(config.env.kwargs)
        self.config = config
        tc = config.train
        seed_everything(tc.seed)
        if tc.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        if tc.retain_heap:
            retain_heap()
        else:  # a long run must not hold ever more freed memory (allocator.py: measured on SmolLM2 RL)
            return_freed_memory()
        self.accelerator = accelerator or Accelerator(
            mixed_precision=tc.mixed_precision, cpu=not torch.cuda.is_available()
        )
        end_process_group_at_exit(self.accelerator)
        self.output_dir = Path(tc.output_dir)
        self._policy_spec = dict(config.policy)
        self.policy = policy if policy is not None else build_policy(self._policy_spec)
        if policy is None:  # an SFT checkpoint must hold its env template's tags (refused with the fix)
            check_policy_for_env(self.policy, config.env.id)
        #: the policy's optional hooks (Policy's no-op defaults for those a policy lacks: policy_hooks)
        self.hooks = policy_hooks(self.policy)
        self.hooks.use_master_weights(tc.mixed_precision)  # fp32 weights for what trains (docs/training.md, Precision)
        self.estimator = built.estimator
        #: the policy loss (:class:`~stratagym.algorithms.registry.PolicyLoss`), validated with the recipe:
        #: each micro-batch calls it, never a name
        self.loss_fn = built.loss_fn
        share_batch_statistics(self.estimator, self.accelerator)
        self.reference = self.policy.frozen_copy() if config.loss.kl_coef > 0 else None
        self.rng = np.random.default_rng(tc.seed)
        self.step = 0
        #: every task drawn for training so far (the checkpoint's provenance, stratagym.provenance): each
        #: process draws the same indexes from ``self.rng`` and plays its slice, so process 0 sees them all
        self._trained_tasks: set[str] = set()
        self._setup_optimizer()
        self.critic: Any = None
        self.critic_optimizer: Optional[torch.optim.Optimizer] = None
        if "values" in self.estimator.fields:
            self._setup_critic()
        self._play_baseline = "baseline" in self.estimator.fields  # ReMax: one greedy episode per task
        self._decorrelate_processes()
        self.collector = self._collector(config.env.kwargs, config.rollout.group_size)
        self._eval_collector: Any = None
        # the rollout source, chosen once: this process's collector, or rollout.mode: async's Ray actors
        # (started by the first rollout), whose figures of the several jobs one filtered step draws merge
        # into one row (a sync draw has none to merge)
        self._async: Optional[AsyncRollouts] = None
        if config.rollout.mode == "async":
            if self.accelerator.num_processes > 1:
                raise ConfigError("rollout.mode: async runs in one learner process; launch without accelerate's "
                                  "multi-process mode, or use rollout.mode: sync")
            self._sample, self._merge_extras = self._sample_async, merge_async_extras
        else:
            self._sample, self._merge_extras = self._sample_sync, _no_extras
        all_ids = self.collector.task_ids()
        self._task_ids = all_ids[config.env.task_slice()]
        if not self._task_ids:
            where = f" in env.tasks {config.env.tasks!r} (the split has {len(all_ids)})" if config.env.tasks else ""
            raise ConfigError(f"env {config.env.id!r} has no tasks{where} with kwargs {config.env.kwargs}")
        observed = None
        if not is_program(config.env.id):  # a program's metadata keys are fixed (env_metadata_keys)
            try:
                get_spec(config.env.id)
            except KeyError:
                (res,) = self.collector.pool.reset([(0, 0, {"task_id": self._task_ids[0]})])
                observed = res[1] if isinstance(res, tuple) else None
        check_estimator_metadata(self.estimator, config.env.id, observed)
        self.log = MetricsLog(self.output_dir, enabled=self.accelerator.is_main_process, tensorboard=tc.tensorboard,
                              wandb=tc.wandb, project=tc.wandb_project, run_name=config.name, config=config.to_dict())
        end_process_group_at_exit(self.accelerator, self)  # built: its DDP wrappers are dropped at exit

    # ---- setup ---------------------------------------------------------------------------------------
    def _collector(self, env_kwargs: dict[str, Any], group_size: int) -> Any:
        """The rollout collector over ``env_kwargs``: env pools as ``rollout.workers`` says, or an agent
        program's gateway (``env.id: program:...``, :mod:`stratagym.training.rollout.program`)."""
        cfg = self.config
        rc = cfg.rollout
        return collector_for(cfg.env.id, env_kwargs, self.policy, group_size=group_size, max_turns=rc.max_turns,
                             batch_invariant=rc.batch_invariant,
                             pool=lambda: make_pool(cfg.env.id, env_kwargs, workers=rc.workers,
                                                    num_workers=rc.num_workers, start_method=rc.start_method,
                                                    ray_address=rc.ray_address))

    def _setup_optimizer(self) -> None:
        oc = self.config.optim
        params = [p for p in self.policy.parameters() if p.requires_grad]
        if not params:
            raise ConfigError("the policy has no trainable parameters")
        self.optimizer = _adamw(params, lr=oc.lr, betas=tuple(oc.betas), eps=oc.eps, weight_decay=oc.weight_decay)
        total_updates = self.config.train.total_steps * oc.mini_batches * oc.ppo_epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _lr_lambda(oc.scheduler, oc.warmup_steps, total_updates))
        self.policy.model, self.optimizer, self.scheduler = self.accelerator.prepare(self.policy.model, self.optimizer, self.scheduler)

    def _setup_critic(self) -> None:
        """PPO's value model and its own AdamW (see :class:`~stratagym.training.config.CriticConfig`)."""
        if self.estimator.level != "step":
            raise ConfigError(f"estimator {self.estimator.name!r} reads critic values but works on trajectory rows; "
                              "critic values are per turn (use the step-level 'gae')")
        cc, oc = self.config.critic, self.config.optim
        self.critic = build_critic(self.policy, cc.options, seed=self.config.train.seed)
        params = [p for p in self.critic.parameters() if p.requires_grad]
        if not params:
            raise ConfigError("the critic has no trainable parameters")
        self.critic_optimizer = _adamw(params, lr=cc.lr if cc.lr is not None else oc.lr, betas=tuple(oc.betas),
                                       eps=oc.eps, weight_decay=cc.weight_decay)
        self.critic.model, self.critic_optimizer = self.accelerator.prepare(self.critic.model, self.critic_optimizer)

    def _decorrelate_processes(self) -> None:
        """Give each process its own sampling stream. Every process seeds alike so that all build the
        same initial weights, and a checkpoint holds process 0's RNG state; sampling from there, every
        process would draw the same random numbers for its own prompts. Single-process runs: no change."""
        if self.accelerator.num_processes > 1:
            seed_everything(self.config.train.seed + 1_000_003 * (self.step + 1) + self.accelerator.process_index)

    def _rollout_metrics(self, batch: RolloutBatch) -> dict[str, float]:
        """``rollout/*`` metrics of the GLOBAL batch: in a multi-process run every process's episodes
        (without their payloads) are gathered, so the log shows what one process rolling out the same
        tasks would, not process 0's shard. Timings and the ``loss/*``, ``adv/*`` metrics stay local."""
        if self.accelerator.num_processes == 1:
            return batch.metrics()
        import dataclasses

        from accelerate.utils import gather_object

        light = [dataclasses.replace(t, steps=[dataclasses.replace(s, payload=None) for s in t.steps])
                 for t in batch.trajectories]
        parts = gather_object([(light, batch.generated_tokens)])
        merged = RolloutBatch([t for part, _ in parts for t in part], generated_tokens=sum(n for _, n in parts),
                              extra=dict(batch.extra))
        return merged.metrics()

    def _resume(self) -> bool:
        ckpt = latest_checkpoint(self.output_dir)
        if ckpt is None:
            return False
        data = load_checkpoint(ckpt)
        self._check_resume_dtype(ckpt, Path(data["policy_dir"]))
        loaded = type(self.policy).from_pretrained(str(data["policy_dir"]))
        # copy the weights into the prepared model in place (the optimizer holds its parameters). A saved
        # policy lacks only frozen weights the run added itself (a LoRA policy's frozen reference adapter);
        # every trainable weight must come back
        module = unwrap_model(self.policy.model)
        result = module.load_state_dict(unwrap_model(loaded.model).state_dict(), strict=False)
        frozen = {name for name, p in module.named_parameters() if not p.requires_grad}
        if result.unexpected_keys or set(result.missing_keys) - frozen:
            raise RuntimeError(f"checkpoint {ckpt} does not match the policy: missing {sorted(set(result.missing_keys) - frozen)[:5]}, "
                               f"unexpected {sorted(result.unexpected_keys)[:5]}")
        if data["optimizer"] is not None:
            self.optimizer.load_state_dict(data["optimizer"])
        if data["scheduler"] is not None:
            self.scheduler.load_state_dict(data["scheduler"])
        if self.critic is not None:
            if data.get("critic_dir") is None:
                raise ConfigError(f"checkpoint {str(ckpt)!r} has no critic, but estimator {self.estimator.name!r} "
                                  "needs one: it was written by a run without a critic; start a new output_dir")
            self.critic.load_pretrained(data["critic_dir"])
            if data.get("critic_optimizer") is not None:
                self.critic_optimizer.load_state_dict(data["critic_optimizer"])
        state = data["state"]
        self.estimator.load_state_dict(state.get("estimator", {}))
        restore_rng_state(data["rng_tensors"], state["rng"], self.rng)
        self.step = int(state["step"])
        # a checkpoint written before runs recorded their tasks: every task of the pool may have been drawn
        self._trained_tasks = set(state["trained_tasks"]) if "trained_tasks" in state else set(self._task_ids)
        self._decorrelate_processes()
        self.hooks.after_optimizer_step()
        self.log.truncate_after(self.step)
        return True

    def _check_resume_dtype(self, ckpt: Path, policy_dir: Path) -> None:
        """Refuse to resume in another compute dtype than the checkpoint's steps ran in.

        Why: ``dtype: auto`` resolves per machine (bf16 where the chip computes it, else fp32), and a run's
        output directory can outlive its machine. A run started in bf16 and resumed on a CPU without bf16
        instructions would go on in fp32 (or the other way round) with nothing said: one run, two numerics,
        and an estimator comparison whose arms differ by the machine they happened to resume on."""
        saved_file = policy_dir / POLICY_CONFIG_FILE
        now = self.hooks.compute_dtype
        if now is None or not saved_file.exists():
            return  # a policy without one compute dtype (scorer), or a checkpoint that does not record it
        saved = json.loads(saved_file.read_text()).get("dtype")
        if saved in (None, "auto"):  # written before the dtype policy: every such checkpoint is float32
            saved = "float32"
        if saved != dtype_name(now):
            raise ConfigError(
                f"checkpoint {str(ckpt)!r} was trained in {saved}, but this run computes in {dtype_name(now)} "
                f"(policy.dtype {self.config.policy.get('dtype', 'float32')!r} here): a resumed run continues in the "
                f"dtype it started in. Resume on a machine that computes {saved} natively (bf16: a CPU with AMX or "
                f"AVX512-BF16, or a GPU), or start a new output_dir from {str(policy_dir)!r} "
                f"(policy.model) to train on in {dtype_name(now)} as a new run.")

    def save(self) -> Optional[Path]:
        """Write a checkpoint for the current step (main process; others wait)."""
        self.accelerator.wait_for_everyone()
        path = None
        if self.accelerator.is_main_process:
            state = {"estimator": self.estimator.state_dict(), "config": self.config.to_dict(),
                     "trained_tasks": sorted(self._trained_tasks)}
            path = save_checkpoint(self.output_dir, self.step, policy=self.policy, optimizer=self.optimizer,
                                   scheduler=self.scheduler, state=state, np_generator=self.rng,
                                   keep_last=self.config.train.keep_last, critic=self.critic,
                                   critic_optimizer=self.critic_optimizer, provenance=self.provenance())
        self.accelerator.wait_for_everyone()
        return path

    def provenance(self) -> list[dict[str, Any]]:
        """The policy's training sets: those of the checkpoint it started from, then the tasks this run drew."""
        env = self.config.env
        return inherited_stages(self.config.policy.get("model")) + [
            training_set_of("rl", env.id, dict(env.kwargs), env.kwargs.get("split"), self._trained_tasks,
                            recipe=self.config.name)]

    # ---- one step ------------------------------------------------------------------------------------------
    def _sample_tasks(self) -> tuple[list[str], list[int]]:
        n_local = self.config.rollout.tasks_per_step
        n = n_local * self.accelerator.num_processes
        ids = self._task_ids
        idx = self.rng.choice(len(ids), size=n, replace=n > len(ids))
        self._trained_tasks.update(ids[i] for i in idx)
        seeds = self.rng.integers(0, 2**31 - 1, size=n)
        r = self.accelerator.process_index
        sl = slice(r * n_local, (r + 1) * n_local)
        return [ids[i] for i in idx[sl]], [int(s) for s in seeds[sl]]

    def _sample_sync(self) -> RolloutBatch:
        """One step's groups from this process's collector (``rollout.mode: sync``)."""
        return self.collector.collect(*self._sample_tasks(), baseline=self._play_baseline)

    def _sample_async(self) -> RolloutBatch:
        """One step's groups from the rollout actors of ``rollout.mode: async``
        (:mod:`stratagym.training.async_rollout`), started on first use; they publish the learner's
        weights of each version once. The policy version is the step count."""
        if self._async is None:
            rc = self.config.rollout
            self._async = AsyncRollouts(
                env_id=self.config.env.id, env_kwargs=self.config.env.kwargs, policy_spec=self._policy_spec,
                group_size=rc.group_size, max_turns=rc.max_turns, num_workers=rc.async_workers,
                max_staleness=rc.max_staleness, seed=self.config.train.seed, address=rc.ray_address,
                state_dict=lambda: unwrap_model(self.policy.model).state_dict())
        return self._async.next_batch(self.step, self._sample_tasks, baseline=self._play_baseline)

    def rollout(self) -> RolloutBatch:
        self.policy.eval()
        rc = self.config.rollout
        if not rc.filter_groups:
            return self._sample()
        alg = self.config.algorithm
        extras: list[dict[str, Any]] = []

        def draw() -> RolloutBatch:  # one group rollout, shaped as update() will shape it
            b = self._sample()
            extras.append(dict(b.extra))
            shape_rewards(b, invalid_action_penalty=alg.invalid_action_penalty, format_reward=alg.format_reward,
                          reward_scale=alg.reward_scale)
            return b

        def gather_counts(local: list[int]) -> list[list[int]]:  # every process's counts, in rank order
            return self._gather_stats(torch.tensor(local, dtype=torch.float64)).long().tolist()

        acc = self.accelerator  # several processes decide rounds and kept groups on the global counts
        batch = collect_informative(draw, rc.tasks_per_step * acc.num_processes, max_rounds=rc.max_filter_rounds,
                                    gather=gather_counts if acc.num_processes > 1 else None, rank=acc.process_index)
        batch.extra.update(self._merge_extras(extras))  # several draws fed this step: one row of their figures
        return batch

    def train_step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        sync0 = self.hooks.weight_sync_seconds  # seconds loading new weights into an engine, or None
        before = self.hooks.prompt_reuse_stats()
        batch = self.rollout()
        check_append_only(batch, self.config.rollout.append_only_min, getattr(self.policy, "tokenizer", None))
        # keys/values kept for the next turn's prompts are of no use once the rollout is over (the update
        # changes the weights): free them before the update's activations need the memory
        self.hooks.release_generation_cache()
        t1 = time.perf_counter()
        metrics = self._rollout_metrics(batch)
        if before is not None:  # this process's share of prompt tokens the generator did not run again
            after = self.hooks.prompt_reuse_stats()
            asked = after[1] - before[1]
            metrics["time/prompt_reuse"] = (after[0] - before[0]) / asked if asked else 0.0
        metrics.update(self.update(batch))
        t2 = time.perf_counter()
        self.step += 1
        metrics.update(batch.timing())
        metrics["time/update"] = t2 - t1
        metrics["time/step"] = t2 - t0
        if sync0 is not None:  # this step's syncs happen in its rollout (the first generation after an update)
            metrics["time/weight_sync"] = float(self.hooks.weight_sync_seconds) - float(sync0)
        metrics["step"] = self.step
        return metrics

    # ---- eval ------------------------------------------------------------------------------------------------
    def evaluate(self, num_tasks: Optional[int] = None) -> dict[str, float]:
        """Greedy (by default) episodes on the first ``num_tasks`` tasks of the eval envs, one per task."""
        cfg = self.config
        if self._eval_collector is None:
            self._eval_collector = self._collector(cfg.env.eval_kwargs if cfg.env.eval_kwargs is not None else cfg.env.kwargs, 1)
        ids = self._eval_collector.task_ids()[: num_tasks or cfg.train.eval_tasks]
        self.policy.eval()
        batch = self._eval_collector.collect(ids, [0] * len(ids), greedy=cfg.train.eval_greedy)
        m = batch.metrics()
        return {k.replace("rollout/", "eval/"): v for k, v in m.items() if k.startswith("rollout/")}

    # ---- the loop ------------------------------------------------------------------------------------------------
    def train(self, *, resume: bool = False, max_steps: Optional[int] = None,
              on_step: Optional[Callable[[dict[str, Any]], None]] = None) -> list[dict[str, Any]]:
        """Run to ``train.total_steps`` (or ``max_steps`` more steps); returns this call's metric rows."""
        tc = self.config.train
        resumed = self._resume() if resume else False
        if not resumed and self.accelerator.is_main_process and (self.output_dir / "metrics.jsonl").exists():
            # a fresh start, or --resume before the first checkpoint: every logged step is redone
            self.log.truncate_after(0)
        end = tc.total_steps if max_steps is None else min(tc.total_steps, self.step + max_steps)
        rows: list[dict[str, Any]] = []
        bar = None
        if tc.progress and self.accelerator.is_main_process:
            from tqdm.auto import tqdm

            bar = tqdm(total=end, initial=self.step, desc=self.config.name, dynamic_ncols=True)
        try:
            while self.step < end:
                row = self.train_step()
                if tc.eval_every and self.step % tc.eval_every == 0:
                    row.update(self.evaluate())
                if self.step % max(tc.log_every, 1) == 0 or self.step == end:
                    self.log.log(row)
                rows.append(row)
                if on_step is not None:
                    on_step(row)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(ret=f"{row.get('rollout/return', 0.0):.3f}", loss=f"{row.get('loss/loss', 0.0):.4f}")
                if tc.save_every and (self.step % tc.save_every == 0 or self.step == tc.total_steps):
                    self.save()
        finally:
            if bar is not None:
                bar.close()
        return rows

    def release_process_group(self) -> None:
        """Drop this trainer's DDP wrappers (policy, critic) and the accelerator's references to them.

        Why: a DDP module holds the process group, so destroying the group at exit (see
        :func:`end_process_group_at_exit`) only ends its worker threads once no DDP module is left. The
        models stay usable, unwrapped, for a single-process pass; another update step is not meant to
        follow. The exit hook calls this on every live multi-process trainer.
        """
        for owner in (self.policy, self.critic):
            if owner is not None and isinstance(getattr(owner, "model", None), torch.nn.Module):
                owner.model = unwrap_model(owner.model)
        self.accelerator.free_memory()

    def close(self) -> None:
        self.hooks.close()  # a vLLM engine's memory and process-wide state
        self.collector.close()
        if self._eval_collector is not None:
            self._eval_collector.close()
        if self._async is not None:  # last: it may shut down the Ray runtime it started
            self._async.close()
            self._async = None
        self.log.close()


def _no_extras(extras: list[dict[str, Any]]) -> dict[str, Any]:
    """A synchronous step's draws carry no figures to merge (their timings are summed by the filter)."""
    return {}


def _adamw(params: list[torch.nn.Parameter], **kwargs: Any) -> torch.optim.AdamW:
    """torch's fused AdamW kernel where the parameters allow it (CPU or CUDA floating point; the same
    update rule, one kernel per parameter instead of a dozen ops; what transformers' ``adamw_torch_fused``
    default, and so TRL, uses), else the multi-tensor one, else the per-parameter loop."""
    if all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.bfloat16, torch.float16) for p in params):
        try:
            return torch.optim.AdamW(params, fused=True, **kwargs)
        except (RuntimeError, ValueError, TypeError):
            pass
    return torch.optim.AdamW(params, **kwargs)


