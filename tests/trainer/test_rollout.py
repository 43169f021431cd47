"""Group rollouts: shared task/seed per group, per-step records, flat tensors, worker crashes."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from stratagym.training.rollout import (
    InProcessPool,
    RolloutCollector,
    SubprocessPool,
    shape_rewards,
    to_advantage_batch,
)


ENV = "stratagym/CueCorridor-v0"


def _collect(policy, pool=None, tasks=None, g=3):
    col = RolloutCollector(ENV, policy, group_size=g, pool=pool or InProcessPool(ENV))
    ids = col.task_ids()
    tasks = tasks or ids[:2]
    return col, col.collect(tasks, [11, 22][: len(tasks)])


def test_group_rollout_records(choice_policy):
    col, batch = _collect(choice_policy)
    assert len(batch.trajectories) == 6
    for t in batch.trajectories:
        assert not t.failed and t.steps
        assert t.group == t.traj // 3
        assert t.seed == [11, 22][t.group]
        assert [s.step for s in t.steps] == list(range(len(t.steps)))
        assert all(s.info["task_id"] == t.task_id for s in t.steps)
        # history handed to the policy grows by one turn per step
        assert [s.payload["n_hist"] for s in t.steps] == list(range(len(t.steps)))
        assert t.steps[0].context and t.steps[0].state_hash == t.steps[0].context[0]
        assert t.terminated or t.truncated
    # same task + same seed => identical first observation state in a group
    for g in (0, 1):
        first = {t.steps[0].state_hash for t in batch.trajectories if t.group == g}
        assert len(first) == 1
    m = batch.metrics()
    assert m["rollout/episodes"] == 6 and m["rollout/failed"] == 0
    assert 0 <= batch.timing()["time/env_share"] <= 1
    col.close()


def test_flat_tensors_trajectory_and_step(choice_policy):
    _, batch = _collect(choice_policy)
    shape_rewards(batch, invalid_action_penalty=0.5, format_reward=1.0)
    ok = batch.ok
    rows, sample_row, samples = to_advantage_batch(batch, "trajectory")
    assert len(rows) == len(ok) and len(samples) == sum(len(t.steps) for t in ok)
    assert torch.allclose(rows.rewards, torch.tensor([t.train_return for t in ok]))
    # env return + shaping: every response format_ok (scripted) => +1 at the end
    assert torch.allclose(rows.rewards, torch.tensor([t.env_return - 0.5 * sum(not s.action_valid for s in t.steps) + 1.0 for t in ok]))
    assert sample_row.tolist() == [i for i, t in enumerate(ok) for _ in t.steps]
    srows, srow_map, ssamples = to_advantage_batch(batch, "step")
    assert len(srows) == len(ssamples) and srow_map.tolist() == list(range(len(ssamples)))
    assert srows.context.shape[0] == len(ssamples)
    assert (srows.context[:, 0] == srows.anchor).all()
    # context columns beyond a step's history are -1
    for i, s in enumerate(ssamples):
        assert (srows.context[i, len(s.context):] == -1).all()
    assert torch.allclose(srows.episode_rewards, torch.tensor([t.train_return for t in ok for _ in t.steps]))


@pytest.mark.slow
def test_subprocess_pool_matches_inprocess(choice_policy):
    from tests.trainer.conftest import RandomChoicePolicy

    _, a = _collect(RandomChoicePolicy(0))
    pool = SubprocessPool(ENV, num_workers=2)
    try:
        _, b = _collect(RandomChoicePolicy(0), pool=pool)
    finally:
        pool.close()
    assert [[s.action for s in t.steps] for t in a.trajectories] == [[s.action for s in t.steps] for t in b.trajectories]
    assert [t.env_return for t in a.trajectories] == [t.env_return for t in b.trajectories]


@pytest.mark.slow
def test_killed_worker_fails_only_its_trajectories(choice_policy):
    pool = SubprocessPool(ENV, num_workers=2)
    col = RolloutCollector(ENV, choice_policy, group_size=2, pool=pool)
    tasks = col.task_ids()[:2]
    killed = []

    def on_turn(turn, live):
        if turn == 1 and not killed:
            pid = pool.pids()[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    try:
        batch = col.collect(tasks, [1, 2], on_turn=on_turn)
        failed = [t.traj for t in batch.trajectories if t.failed]
        live_after_turn1 = [t.traj for t in batch.trajectories if len(t.steps) > 1 or (t.failed)]
        # slots 0 and 2 live in worker 0: only they may fail; the rest finish normally
        assert set(failed) <= {0, 2}
        for t in batch.trajectories:
            if t.traj not in failed:
                assert t.terminated or t.truncated
        if any(t.traj in (0, 2) for t in batch.trajectories if t.traj in live_after_turn1):
            assert failed and all("worker" in (batch.trajectories[i].error or "") for i in failed)
        assert batch.metrics()["rollout/failed"] == len(failed)
        # the pool recovers: the next rollout restarts the worker
        again = col.collect(tasks, [1, 2])
        assert not any(t.failed for t in again.trajectories)
    finally:
        col.close()
