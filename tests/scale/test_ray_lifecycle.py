"""Who starts Ray shuts it down (issue 16 item 1): a trainer with ``rollout.workers: ray`` and no Ray
runtime up starts one, shares it between its train and eval pools, and leaves none behind on close.

This module must not use the module-scoped ``ray_cluster`` fixture: it checks the path where the
pool itself calls ``ray.init`` (``address: local``, so it never joins someone else's ``ray start``).
"""

from __future__ import annotations

import pytest

from stratagym.training.config import RecipeConfig
from stratagym.training.trainer import Trainer
from tests.scale.conftest import ray_processes as _ray_processes
from tests.trainer.conftest import RandomChoicePolicy

ENV = "stratagym/CueCorridor-v0"


def test_trainer_starts_and_stops_its_own_ray(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized(), "a Ray runtime leaked into this module from an earlier test"
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = RecipeConfig.from_dict({
        "name": "ray-lifecycle",
        "policy": {"model": "tiny"},
        "env": {"id": ENV},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 4, "workers": "ray", "num_workers": 1,
                    "ray_address": "local"},
        "algorithm": {"estimator": "grpo"},
        "train": {"total_steps": 1, "output_dir": str(tmp_path / "run"), "save_every": 0, "progress": False,
                  "tensorboard": False, "eval_tasks": 2},
    })
    trainer = Trainer(cfg, policy=RandomChoicePolicy(0))
    try:
        assert ray.is_initialized()
        assert _ray_processes()  # the check below can see Ray's processes
        (row,) = trainer.train()
        # the runtime the pool started runs its env actors at the driver's niceness, not Ray's 15
        import os

        actors = [a for a in trainer.collector.pool.actors() if a is not None]
        assert actors and ray.get([a.niceness.remote() for a in actors]) == [os.getpriority(os.PRIO_PROCESS, 0)] * len(actors)
        assert "RAY_worker_niceness" not in os.environ  # the pool's setting did not leak into ours
        assert row["rollout/episodes"] == 4 and row["rollout/failed"] == 0
        ev = trainer.evaluate()  # a second pool on the same runtime
        assert ev["eval/episodes"] == 2 and ev["eval/failed"] == 0
        trainer.collector.close()  # the train pool closes first: the eval pool still needs Ray
        assert ray.is_initialized()
    finally:
        trainer.close()
    assert not ray.is_initialized()
    assert not _ray_processes(), "Ray's own processes outlived ray.shutdown()"

