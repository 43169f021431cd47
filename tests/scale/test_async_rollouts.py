"""Asynchronous rollouts on a local Ray cluster (issue 33): rollout actors with their own policy copy
generate while the learner trains.

* ``max_staleness: 0`` is the synchronous trainer exactly: same weights and metrics after 2 steps;
* with ``max_staleness: 1`` the next job is generated during the update (lag 1), one ``ray.put`` per
  version;
* a job that arrives more than ``max_staleness`` versions late is dropped and counted, never trained on;
* a worker killed mid-rollout (a real ``ray.kill`` of the actor) loses only its job in flight and is
  replaced; training goes on.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

from stratagym.agents.policy import unwrap_model
from stratagym.training.config import RecipeConfig
from stratagym.training.trainer import Trainer

ENV = "stratagym/CueCorridor-v0"


def _config(out, steps: int = 2, **rollout) -> RecipeConfig:
    return RecipeConfig.from_dict({
        "name": "async", "policy": {"model": "tiny", "max_new_tokens": 8, "memory_k": 1},
        "env": {"id": ENV},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2, **rollout},
        "algorithm": {"estimator": "grpo", "invalid_action_penalty": 0.1},
        "loss": {"entropy_coef": 0.01}, "optim": {"lr": 1.0e-2},
        "train": {"total_steps": steps, "output_dir": str(out), "save_every": 0, "progress": False,
                  "tensorboard": False}})


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in unwrap_model(trainer.policy.model).state_dict().items()}


def _run(cfg: RecipeConfig, **train) -> tuple[list[dict], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The run's metric rows, its weights before and after."""
    trainer = Trainer(cfg)
    try:
        before = _weights(trainer)
        rows = trainer.train(**train)
        return rows, before, _weights(trainer)
    finally:
        trainer.close()


def test_staleness_zero_is_the_synchronous_trainer(ray_cluster, tmp_path):
    sync_rows, start, sync_w = _run(_config(tmp_path / "sync"))
    async_rows, _, async_w = _run(_config(tmp_path / "async", mode="async", max_staleness=0))
    assert any(not torch.equal(start[k], sync_w[k]) for k in start)  # the 2 updates moved the weights
    assert sync_w.keys() == async_w.keys()
    assert all(torch.equal(sync_w[k], async_w[k]) for k in sync_w)
    for s, a in zip(sync_rows, async_rows, strict=True):
        same = {k for k in s if not k.startswith("time/")}
        assert {k: s[k] for k in same} == {k: a[k] for k in same}
        assert a["async/lag"] == 0.0 and a["async/dropped_groups"] == 0.0
    assert [r["async/publishes"] for r in async_rows] == [1.0, 2.0]  # one put per version


def test_parity_max_is_not_applied_to_lagged_groups(ray_cluster, tmp_path):
    """A lagged job's sampling log-probs come from an older policy: their gap to the trainer is the lag
    (what ``loss.off_policy`` corrects), not a broken sampler, so ``rollout.parity_max`` does not stop
    the run there. It still holds on the lag-0 step, and the parity figures are logged on every step."""
    rows, _, _ = _run(_config(tmp_path / "run", steps=3, mode="async", max_staleness=1, parity_max=0.05))
    assert [r["async/lag"] for r in rows] == [0.0, 1.0, 1.0]
    assert rows[0]["parity/max_abs"] < 0.05  # lag 0: the bound held
    assert max(r["parity/max_abs"] for r in rows[1:]) > 0.05  # the bound would have stopped a lagged step
    assert all(r["parity/length_mismatch"] == 0 for r in rows)


def test_stale_jobs_are_dropped_and_a_killed_worker_loses_only_its_job(ray_cluster, tmp_path):
    trainer = Trainer(_config(tmp_path / "run", steps=20, mode="async", max_staleness=1))
    try:
        (first,) = trainer.train(max_steps=1)
        assert first["async/lag"] == 0.0
        runner = trainer._async
        # the next job was dispatched before the update (version 0), so it arrives with lag 1, in bounds
        assert len(runner.in_flight) == 1 and runner.in_flight[0].version == 0
        old_pid = runner.pids()[0]
        # Keep the worker busy after that job (an actor runs its calls one at a time), so that the job
        # step 2's update dispatches is still queued when the worker is killed: lost for certain, on a
        # fast machine too (a tiny job can otherwise finish before the kill).
        runner.workers[0].__ray_call__.remote(lambda worker: time.sleep(120))
        (second,) = trainer.train(max_steps=1)
        assert second["async/lag"] == 1.0 and math.isfinite(second["loss/loss"])
        # kill the worker while its job (dispatched at version 1 during step 2's update) is in flight
        (job,) = runner.in_flight
        ray_cluster.kill(runner.workers[job.worker])
        (third,) = trainer.train(max_steps=1)
        # the job died with its worker: it is lost, the worker replaced
        assert third["async/lost_groups"] == 2.0 and third["async/restarts"] == 1.0
        assert runner.pids()[0] != old_pid
        assert third["async/dropped_groups"] == 0.0 and math.isfinite(third["loss/loss"])
        # a job that falls more than max_staleness versions behind is dropped, not trained on
        (job,) = runner.in_flight
        trainer.step += 5  # the learner moved on 5 versions while the job was generated
        (fourth,) = trainer.train(max_steps=1)
        assert fourth["async/lag"] <= 1.0 and math.isfinite(fourth["loss/loss"])
        assert fourth["async/dropped_groups"] == 2.0
        # versions published, once each: 0 (step 1), 1 (step 2's refill), 2 (the restarted worker's
        # job and the refill), 8 (after the drop)
        assert fourth["async/publishes"] == len({0, 1, 2, 3 + 5})
    finally:
        trainer.close()


def test_learner_resume_starts_new_workers_and_trains_no_group_twice(ray_cluster, tmp_path):
    """The learner stops with a job in flight (its actors go with it, as after kill -9); resuming from
    the step-2 checkpoint starts new actors on the checkpoint's weights, and the log holds each step once."""
    import json

    cfg = _config(tmp_path / "run", steps=3, mode="async", max_staleness=1)
    cfg.train.save_every = 1
    first = Trainer(cfg)
    try:
        first.train(max_steps=2)
        assert len(first._async.in_flight) == 1  # the job of step 3, dispatched during step 2's update
    finally:
        first.close()  # the job in flight is lost with the actors
    again = Trainer(cfg)
    try:
        (row,) = again.train(resume=True)
        # a fresh actor, the checkpoint's weights published once as version 2, no stale job left
        assert row["step"] == 3 and row["async/lag"] == 0.0 and row["async/publishes"] == 1.0
        assert row["async/dropped_groups"] == 0.0 and row["async/lost_groups"] == 0.0
    finally:
        again.close()
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_dynamic_sampling_at_staleness_zero_is_the_synchronous_dapo(ray_cluster, tmp_path):
    """DAPO's filter across jobs: at ``max_staleness: 0`` each round's draw is the next job, sampled with
    the learner's random state, so the kept groups, the update and the metrics are the synchronous
    trainer's with ``filter_groups``; ``async/groups`` lists every group drawn, filtered ones too."""
    dapo = {"filter_groups": True, "max_filter_rounds": 3}
    sync_rows, start, sync_w = _run(_config(tmp_path / "sync", steps=3, **dapo))
    async_rows, _, async_w = _run(_config(tmp_path / "async", steps=3, mode="async", max_staleness=0, **dapo))
    assert any(r["rollout/filter_rounds"] > 1 for r in sync_rows)  # some step drew more than one job
    assert any(not torch.equal(start[k], sync_w[k]) for k in start)
    assert all(torch.equal(sync_w[k], async_w[k]) for k in sync_w)
    for s, a in zip(sync_rows, async_rows, strict=True):
        same = {k for k in s if not k.startswith("time/")}
        assert {k: s[k] for k in same} == {k: a[k] for k in same}
        assert a["async/lag"] == 0.0
        assert len(a["async/groups"]) == 2 * a["rollout/filter_rounds"]  # 2 tasks a job, every job's groups
    drawn = [tuple(g) for r in async_rows for g in r["async/groups"]]
    assert len(drawn) == len(set(drawn))  # no group drawn twice


def test_dynamic_sampling_with_stale_jobs_keeps_lags_in_bounds(ray_cluster, tmp_path):
    rows, _, _ = _run(_config(tmp_path / "run", steps=3, mode="async", max_staleness=1, filter_groups=True,
                              max_filter_rounds=3))
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["async/lag"] <= 1.0 and r["async/dropped_groups"] == 0.0 for r in rows)
    assert all(math.isfinite(r["loss/loss"]) for r in rows)
    assert sum(len(r["async/groups"]) for r in rows) == 2 * sum(r["rollout/filter_rounds"] for r in rows)


def test_merge_async_extras_by_hand():
    from stratagym.training.async_rollout import merge_async_extras

    first = {"async/lag": 1.0, "async/dropped_groups": 0.0, "async/lost_groups": 0.0, "async/restarts": 0.0,
             "async/publishes": 3.0, "async/publish_s": 0.25, "async/wait_s": 1.0, "async/groups": [["a", 0]],
             "rollout/other": 5.0}
    second = {**first, "async/lag": 0.0, "async/publishes": 4.0, "async/publish_s": 0.5, "async/wait_s": 2.0,
              "async/groups": [["b", 1], ["c", 2]]}
    assert merge_async_extras([first, second]) == {
        "async/lag": 1.0, "async/dropped_groups": 0.0, "async/lost_groups": 0.0, "async/restarts": 0.0,
        "async/publishes": 4.0, "async/publish_s": 0.75, "async/wait_s": 3.0,
        "async/groups": [["a", 0], ["b", 1], ["c", 2]]}
    assert merge_async_extras([]) == {}


def test_an_agent_program_rolls_out_in_the_actors(ray_cluster, tmp_path):
    """``env.id: program:...`` under ``rollout.mode: async``: each actor serves its own policy copy through its
    own gateway and plays the program there; the learner trains on the ids those gateways recorded."""
    cfg = RecipeConfig.from_dict({
        "name": "async-program", "policy": {"model": "tiny", "max_new_tokens": 6},
        "env": {"id": "program:tests.training.program_fixtures:make_program", "kwargs": {"timeout_s": 60}},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 4, "mode": "async", "max_staleness": 1},
        "algorithm": {"estimator": "gigpo"}, "optim": {"lr": 1.0e-2},
        "train": {"total_steps": 2, "output_dir": str(tmp_path), "save_every": 0, "progress": False,
                  "tensorboard": False}})
    rows, before, after = _run(cfg)
    assert len(rows) == 2 and all(r["rollout/episodes"] == 4 and r["rollout/failed"] == 0 for r in rows)
    assert all(math.isfinite(r["loss/loss"]) and r["rollout/turns"] == 2 for r in rows)
    assert any(not torch.equal(before[k], after[k]) for k in before)
