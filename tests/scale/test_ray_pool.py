"""Env workers as Ray actors on a local cluster (issue 16 item 1).

The contract is :class:`~stratagym.training.rollout.SubprocessPool`'s (tests/trainer/test_rollout.py):
the same trajectories as in-process envs for the same seeds, and a worker killed mid-rollout fails only
the trajectories it hosts. Ray's own behaviour relied on here: an actor runs one caller's calls in
submission order (ray docs, "Actors": "tasks ... from the same submitter are executed in the order
they were submitted"), and a dead actor's pending calls raise ``RayActorError``.
"""

from __future__ import annotations

import os
import signal

import pytest

from stratagym.training.rollout import InProcessPool, RayPool, RolloutCollector, WorkerCrashed
from tests.trainer.conftest import RandomChoicePolicy

ENV = "stratagym/CueCorridor-v0"


def _signature(batch):
    """Everything a trajectory holds that the env decides: observations' hashes, actions, rewards, ends."""
    return [(t.traj, t.group, t.task_id, t.seed, t.failed, t.terminated, t.truncated, t.won, t.env_return,
             [(s.action, s.reward, s.action_valid, s.state_hash, tuple(s.context), s.info.get("task_id"))
              for s in t.steps]) for t in batch.trajectories]


def _collect(pool, g=3, seeds=(11, 22)):
    col = RolloutCollector(ENV, RandomChoicePolicy(0), group_size=g, pool=pool)
    tasks = col.task_ids()[: len(seeds)]
    return col, col.collect(tasks, list(seeds))


def _free_cpus(ray, expect: float = 2.0, polls: int = 100) -> float:
    """The cluster's free CPUs, once they reach ``expect`` (Ray's resource view updates asynchronously
    after an actor dies) or after ``polls`` looks 0.1 s apart, whichever comes first."""
    import time

    free = 0.0
    for _ in range(polls):
        free = ray.available_resources().get("CPU", 0.0)
        if free == expect:
            break
        time.sleep(0.1)
    return free


def test_ray_rollouts_equal_inprocess(ray_cluster):
    """Same policy seed, tasks and env seeds: identical trajectories through 2 Ray actors."""
    _, a = _collect(InProcessPool(ENV))
    pool = RayPool(ENV, num_workers=2)
    try:
        col, b = _collect(pool)
        pids = pool.pids()
        assert len(set(pids)) == 2 and os.getpid() not in pids  # two actor processes hosted the envs
        if os.geteuid() == 0:  # root may raise the actors from Ray's niceness 15 to the driver's
            driver = os.getpriority(os.PRIO_PROCESS, 0)
            assert ray_cluster.get([a.niceness.remote() for a in pool.actors()]) == [driver, driver]
        assert _signature(a) == _signature(b)
        assert not any(t.failed for t in b.trajectories)
        # a second collection on the same (now warm) actors is still identical to in-process
        _, a2 = _collect(InProcessPool(ENV), seeds=(5, 6))
        b2 = RolloutCollector(ENV, RandomChoicePolicy(0), group_size=3, pool=pool).collect(
            col.task_ids()[:2], [5, 6])
        assert _signature(a2) == _signature(b2)
        # an env that raises (a step on a slot never reset) fails that one job; its actor keeps serving
        assert isinstance(pool.reset([(0, 3, {})])[0], tuple)
        bad, good = pool.step([(7, "look"), (0, "look")])
        assert isinstance(bad, WorkerCrashed) and "KeyError" in str(bad)
        assert isinstance(good, tuple) and len(good) == 5
        assert pool.pids() == pids
    finally:
        pool.close()
    # closing the pool kills its actors: the cluster's CPUs are all free again, and the runtime we
    # did not start is left up
    assert ray_cluster.is_initialized()
    assert _free_cpus(ray_cluster) == 2.0


def test_killed_actor_fails_only_its_trajectories(ray_cluster):
    pool = RayPool(ENV, num_workers=2)
    col = RolloutCollector(ENV, RandomChoicePolicy(0), group_size=2, pool=pool)
    tasks = col.task_ids()[:2]
    killed: list[int] = []

    def on_turn(turn: int, live: int) -> None:
        if turn == 1 and not killed:
            pid = pool.pids()[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    try:
        batch = col.collect(tasks, [1, 2], on_turn=on_turn)
        assert killed
        failed = [t.traj for t in batch.trajectories if t.failed]
        # slots 0 and 2 live in actor 0; slots 1 and 3 in actor 1 and must finish normally
        assert set(failed) <= {0, 2}
        for t in batch.trajectories:
            if t.traj in (1, 3):
                assert not t.failed and (t.terminated or t.truncated)
        # every episode of actor 0 still running after turn 1 failed, naming the actor
        running = [t for t in batch.trajectories if t.traj in (0, 2) and (t.failed or len(t.steps) > 1)]
        assert running, "the kill came after actor 0's episodes ended: the test proved nothing"
        for t in running:
            assert t.failed and "ray env actor 0" in (t.error or "")
        assert batch.metrics()["rollout/failed"] == len(failed)
        # the collection goes on: the next rollout recreates the actor and nothing fails
        again = col.collect(tasks, [1, 2])
        assert not any(t.failed for t in again.trajectories)
        assert pool.pids()[0] != killed[0]
    finally:
        col.close()
    assert _free_cpus(ray_cluster) == 2.0


def test_training_goes_on_when_an_actor_dies(ray_cluster, tmp_path):
    """Through the trainer: actor 0 is SIGKILLed during the first step's rollout. That step trains on
    the episodes of actor 1 (its failed ones are left out of the update), and the next step, on a
    recreated actor, has no failure."""
    import functools
    import math

    from stratagym.training.config import RecipeConfig
    from stratagym.training.trainer import Trainer

    cfg = RecipeConfig.from_dict({
        "name": "ray-kill",
        "policy": {"model": "tiny"},
        "env": {"id": ENV},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 4, "workers": "ray", "num_workers": 2},
        "algorithm": {"estimator": "grpo"},
        "train": {"total_steps": 2, "output_dir": str(tmp_path / "run"), "save_every": 0, "progress": False,
                  "tensorboard": False},
    })
    trainer = Trainer(cfg, policy=RandomChoicePolicy(0))
    pool = trainer.collector.pool
    assert isinstance(pool, RayPool)
    killed: list[int] = []

    def on_turn(turn: int, live: int) -> None:
        if turn == 1 and not killed:
            pid = pool.pids()[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    collect = trainer.collector.collect
    trainer.collector.collect = functools.partial(collect, on_turn=on_turn)
    try:
        first = trainer.train_step()
        trainer.collector.collect = collect
        second = trainer.train_step()
    finally:
        trainer.close()
    assert killed
    assert 1 <= first["rollout/failed"] <= 2  # slots 0 and 2 (actor 0) at most
    assert first["train/samples"] > 0 and math.isfinite(first["loss/loss"])
    assert second["rollout/failed"] == 0 and second["rollout/episodes"] == 4
    assert ray_cluster.is_initialized()  # the trainer did not start this runtime, so it left it up
    assert _free_cpus(ray_cluster) == 2.0
