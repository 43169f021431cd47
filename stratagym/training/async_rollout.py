"""Asynchronous rollouts (``rollout.mode: async``): Ray actors generate while the learner trains.

Why: the synchronous trainer collects a batch, then trains on it, so the generator idles while the
learner trains and the other way round. Here each rollout worker is a Ray actor holding its own copy of
the policy (the recipe's backend: ``hf``, or ``vllm`` with the worker's own in-process engine, into which
the policy reloads new weights before its next generation) and its own in-process envs; the learner
keeps the workers busy with *jobs* and trains on whichever job arrives first.

The rules (docs/async.md):

* **A job is one step's groups** (``rollout.tasks_per_step`` tasks x ``group_size`` members), drawn
  from the learner's task generator, sampled by ONE worker with ONE policy version: group-relative
  estimators never see two versions inside a group (nor inside a step's batch).
* **Versions**: the learner's policy version is its step count. A worker loads the weights of the
  version its job names; the learner publishes each version with one ``ray.put`` (the first job that
  needs it), and every worker reads that one object: one put per version, not one per worker.
* **Staleness**: a job sampled at version ``v`` and trained at version ``u`` has lag ``u - v``. A new
  job is dispatched only while the jobs ahead of it (in flight, plus one being trained) are at most
  ``rollout.max_staleness``, so its lag is at most that when jobs arrive in dispatch order; a job that
  arrives later than that (a slow or restarted worker) is dropped and counted (``async/dropped_groups``),
  never trained on.
* ``max_staleness: 0`` is the synchronous trainer, exactly: one job at a time, dispatched with the
  current weights after the previous update, and the learner hands the worker its torch random state
  and takes the worker's back, so the samples, the update and the next draw are the synchronous ones.
  With ``max_staleness > 0`` each worker samples from its own stream (seeded ``train.seed`` + worker).
* **Faults**: a worker that dies (``RayActorError``) loses only its job in flight
  (``async/lost_groups``); it is replaced by a new actor (``async/restarts``), which loads the current
  weights with its next job. A learner that dies loses every job in flight: on resume the workers
  start afresh from the checkpoint's weights, and a group is trained at most once, because a job
  enters the update only when it arrives, and a checkpoint is written only after the update of the
  step that consumed it.

Metrics per step (in the rollout's ``extra``): ``async/lag``, ``async/dropped_groups``,
``async/lost_groups``, ``async/restarts`` (cumulative), ``async/publishes``, ``async/publish_s``
(seconds in ``ray.put`` this step), ``async/wait_s`` (seconds the learner waited for a job), and
``async/groups``: the ``[task_id, seed]`` of each group the step trained on (a list, not a number: the
record that shows which draws an update consumed, so a resumed run can be checked for groups trained
twice or lost in flight).

**Dynamic sampling** (``rollout.filter_groups``, DAPO) works as in the synchronous trainer, with each
round's draw being the next job: the step keeps drawing jobs (each under the staleness rule) until it
holds ``tasks_per_step`` informative groups or ``max_filter_rounds`` jobs were drawn. Groups still never
mix versions; two kept groups may come from jobs of different versions. The step's async figures cover
all its jobs (:func:`merge_async_extras`): ``async/lag`` is the largest lag among them, and
``async/groups`` lists every group drawn, kept or filtered (a filtered group is consumed, never drawn again).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from stratagym.agents.policy import policy_hooks, unwrap_model
from stratagym.errors import ConfigError
from stratagym.training.recipe import build_policy, seed_everything
from stratagym.training.rollout import InProcessPool, RolloutBatch
from stratagym.training.rollout.program import collector_for

__all__ = ["AsyncRollouts", "RolloutWorker", "Job", "merge_async_extras"]


class RolloutWorker:
    """The body of one rollout actor: a policy copy built from the recipe's ``policy`` mapping, and
    in-process envs; :meth:`generate` plays one job's groups with the weights of the job's version."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], policy_spec: dict[str, Any], group_size: int,
                 max_turns: int, seed: int, niceness: Optional[int] = None):
        if niceness is not None:  # Ray starts workers at nice 15; any nice-0 process would starve them
            try:
                os.setpriority(os.PRIO_PROCESS, 0, niceness)
            except OSError:
                pass
        seed_everything(seed)
        self.policy = build_policy(dict(policy_spec))
        self.hooks = policy_hooks(self.policy)  # Policy's no-op defaults for hooks the policy lacks
        # an env's episodes in this actor's process, or an agent program against this actor's own gateway
        self.collector = collector_for(env_id, env_kwargs, self.policy, group_size=group_size, max_turns=max_turns,
                                       pool=lambda: InProcessPool(env_id, env_kwargs))
        self.version: Optional[int] = None

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on (hex id, as in ``ray.nodes()``'s ``NodeID``)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def generate(self, version: int, weights: dict[str, torch.Tensor], tasks: list[str], seeds: list[int],
                 rng_state: Optional[torch.Tensor], baseline: bool) -> tuple[int, RolloutBatch, torch.Tensor, float]:
        """Load ``weights`` (version ``version``) unless already loaded, then play ``tasks`` x G from
        ``seeds``; ``rng_state``: the torch random state to sample from (``max_staleness: 0``), else this
        worker's own stream goes on. Returns (version, batch, torch random state after, load seconds)."""
        t0 = time.perf_counter()
        if version != self.version:
            unwrap_model(self.policy.model).load_state_dict(weights)
            self.hooks.after_optimizer_step()  # caches of the old weights are stale
            self.version = version
        load_s = time.perf_counter() - t0
        if rng_state is not None:
            torch.set_rng_state(rng_state)
        self.policy.eval()
        batch = self.collector.collect(tasks, seeds, baseline=baseline)
        self.hooks.release_generation_cache()
        return version, batch, torch.get_rng_state(), load_s

    def close(self) -> None:
        self.collector.close()


@dataclass
class Job:
    """One dispatched job: its worker, version, groups (tasks and seeds) and Ray result."""

    worker: int
    version: int
    tasks: list[str]
    seeds: list[int]
    ref: Any


class AsyncRollouts:
    """The learner's side: ``num_workers`` :class:`RolloutWorker` actors, jobs in flight, one published
    weights object per version, and the staleness rule (see the module docstring).

    ``state_dict()`` returns the learner's current weights (published lazily, once per version);
    ``address`` is ``ray.init``'s when no Ray runtime is up (a runtime this object starts, it shuts down
    at :meth:`close`). Each actor reserves ``num_cpus`` CPUs of the cluster."""

    def __init__(self, *, env_id: str, env_kwargs: dict[str, Any], policy_spec: dict[str, Any], group_size: int,
                 max_turns: int, num_workers: int, max_staleness: int, seed: int,
                 state_dict: Callable[[], dict[str, torch.Tensor]], address: Optional[str] = None,
                 num_cpus: float = 1.0):
        if not policy_spec:
            raise ConfigError("rollout.mode: async builds each worker's policy from the recipe's policy mapping; "
                              "a Trainer given a policy object has none (pass the policy in the recipe)")
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("rollout.mode: async needs Ray: pip install 'stratagym[dist]'") from exc
        self.ray = ray
        self._started = False
        niceness = os.getpriority(os.PRIO_PROCESS, 0)
        if not ray.is_initialized():
            try:
                ray.init(address=address, include_dashboard=False)
            except ConnectionError as exc:
                raise ConfigError(f"rollout.ray_address {address!r}: no Ray cluster to connect to ({exc}); "
                                  "start one with `ray start --head`, or leave ray_address unset") from None
            self._started = True
        self._actor_cls = ray.remote(num_cpus=num_cpus, max_restarts=0)(RolloutWorker)
        self._args = (env_id, dict(env_kwargs), dict(policy_spec), int(group_size), int(max_turns))
        self._seed, self._niceness = int(seed), niceness
        self.max_staleness = int(max_staleness)
        self._state_dict = state_dict
        self.workers: list[Any] = [self._new_actor(w) for w in range(int(num_workers))]
        self.in_flight: list[Job] = []
        self._published: Optional[tuple[int, Any]] = None
        self.publishes = 0
        self.dropped_groups = 0
        self.lost_groups = 0
        self.restarts = 0

    def _new_actor(self, w: int) -> Any:
        # a distinct, reproducible stream per worker and incarnation (restarts get a new one)
        return self._actor_cls.remote(*self._args, self._seed + 7919 * (w + 1) + 104729 * getattr(self, "restarts", 0),
                                      self._niceness)

    def _weights(self, version: int) -> tuple[Any, float]:
        """The Ray object of ``version``'s weights, put on first use (one put per version)."""
        if self._published is not None and self._published[0] == version:
            return self._published[1], 0.0
        t0 = time.perf_counter()
        ref = self.ray.put({k: v.detach().cpu() for k, v in self._state_dict().items()})
        self._published = (version, ref)
        self.publishes += 1
        return ref, time.perf_counter() - t0

    def _free_workers(self) -> list[int]:
        busy = {j.worker for j in self.in_flight}
        return [w for w in range(len(self.workers)) if w not in busy]

    def _fill(self, version: int, draw: Callable[[], tuple[list[str], list[int]]], baseline: bool,
              ahead: int) -> float:
        """Dispatch jobs to free workers while at most ``max_staleness`` jobs are ahead of the new one
        (``ahead``: jobs about to be trained besides those in flight); returns seconds spent publishing."""
        spent = 0.0
        for w in self._free_workers():
            if len(self.in_flight) + ahead > self.max_staleness:
                break
            ref, s = self._weights(version)
            spent += s
            tasks, seeds = draw()
            rng = torch.get_rng_state() if self.max_staleness == 0 else None
            job_ref = self.workers[w].generate.remote(version, ref, tasks, seeds, rng, baseline)
            self.in_flight.append(Job(w, version, tasks, seeds, job_ref))
        return spent

    def _restart(self, w: int) -> None:
        try:
            self.ray.kill(self.workers[w])
        except Exception:
            pass
        self.restarts += 1
        self.workers[w] = self._new_actor(w)

    def next_batch(self, version: int, draw: Callable[[], tuple[list[str], list[int]]], *,
                   baseline: bool = False) -> RolloutBatch:
        """The next job whose lag at ``version`` is within ``max_staleness``, as a rollout batch; new jobs
        are dispatched before it returns, so the workers generate while the learner trains on it."""
        publish_s = self._fill(version, draw, baseline, ahead=0)
        t0 = time.perf_counter()
        while True:
            if not self.in_flight:  # every worker died or was dropped: dispatch again
                publish_s += self._fill(version, draw, baseline, ahead=0)
            ready, _ = self.ray.wait([j.ref for j in self.in_flight], num_returns=1)
            job = next(j for j in self.in_flight if j.ref == ready[0])
            self.in_flight.remove(job)
            try:
                job_version, batch, rng_after, _load_s = self.ray.get(job.ref)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.WorkerCrashedError):
                self.lost_groups += len(job.tasks)
                self._restart(job.worker)
                publish_s += self._fill(version, draw, baseline, ahead=0)
                continue
            lag = version - job_version
            if lag > self.max_staleness:
                self.dropped_groups += len(job.tasks)
                publish_s += self._fill(version, draw, baseline, ahead=0)
                continue
            break
        wait_s = time.perf_counter() - t0
        if self.max_staleness == 0:
            torch.set_rng_state(rng_after)  # the learner's stream goes on where the sampling left it
        publish_s += self._fill(version, draw, baseline, ahead=1)  # generate while the learner trains
        batch.extra.update({
            "async/lag": float(lag), "async/dropped_groups": float(self.dropped_groups),
            "async/lost_groups": float(self.lost_groups), "async/restarts": float(self.restarts),
            "async/publishes": float(self.publishes), "async/publish_s": publish_s, "async/wait_s": wait_s,
            "async/groups": [[t, s] for t, s in zip(job.tasks, job.seeds)],
        })
        return batch

    def pids(self) -> list[int]:
        """The worker actors' process ids (tests kill one)."""
        return self.ray.get([w.pid.remote() for w in self.workers])

    def node_ids(self) -> list[str]:
        """The Ray node of each worker actor, in worker order: where Ray placed them on a cluster (an
        actor needs ``num_cpus`` free CPUs on its node; Ray picks among the nodes that have them)."""
        return self.ray.get([w.node_id.remote() for w in self.workers])

    def close(self) -> None:
        """Kill the workers (jobs in flight are lost) and shut down a Ray runtime this object started."""
        for w in self.workers:
            try:
                self.ray.kill(w)
            except Exception:
                pass
        self.workers, self.in_flight = [], []
        if self._started and self.ray.is_initialized():
            self.ray.shutdown()


def merge_async_extras(extras: list[dict[str, Any]]) -> dict[str, Any]:
    """One step's ``async/*`` figures from the extras of the several jobs it consumed (dynamic sampling):
    the cumulative counters as the last job left them, the largest lag, the seconds summed, and every
    job's groups in arrival order."""
    if not extras:
        return {}
    out = {k: v for k, v in extras[-1].items() if k.startswith("async/")}
    out["async/lag"] = max(float(e["async/lag"]) for e in extras)
    for k in ("async/publish_s", "async/wait_s"):
        out[k] = sum(float(e[k]) for e in extras)
    out["async/groups"] = [g for e in extras for g in e["async/groups"]]
    return out
