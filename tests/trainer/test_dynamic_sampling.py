"""Dynamic sampling (DAPO / verl filter_groups): groups whose returns all tie are dropped and more tasks are
drawn until the batch holds the requested number of informative groups, capped in rounds."""

import math

import pytest
import torch

from stratagym.algorithms import get_estimator, list_estimators
from stratagym.training.rollout import RolloutBatch, StepRecord, Trajectory, to_advantage_batch
from stratagym.training.rollout.dynamic import collect_informative


def _traj(group: int, rewards: list[float], j: int = 0) -> Trajectory:
    steps = [StepRecord(step=k, payload=None, action="a", text="a", format_ok=True, num_tokens=3 + k, reward=r,
                        action_valid=True, state_hash=k, context=[k, -1], search_count=k, info={})
             for k, r in enumerate(rewards)]
    return Trajectory(traj=group * 10 + j, group=group, task_id=f"t{group}", seed=0, steps=steps)


def _batch(groups: dict[int, list[list[float]]]) -> RolloutBatch:
    trajs = [_traj(g, rs, j) for g, members in groups.items() for j, rs in enumerate(members)]
    return RolloutBatch(trajs, generate_seconds=1.0, env_seconds=0.5, total_seconds=2.0, generated_tokens=7, turns=2)


def test_keeps_drawing_until_enough_informative_groups():
    """Round 1: group 0 ties (1, 1), group 1 differs (0 vs 1).  Round 2: group 0 ties (0, 0), group 1 differs,
    group 2 is a single trajectory (kept by verl's rule, but the target of 2 is already met).  Dropped: one
    group per round out of 5 drawn -> filtered_frac 0.4."""
    draws = iter([_batch({0: [[1.0], [1.0]], 1: [[0.0], [1.0]]}),
                  _batch({0: [[0.0], [0.0]], 1: [[1.0], [0.0, 0.5]], 2: [[0.5]]})])
    out = collect_informative(lambda: next(draws), 2, max_rounds=4)
    assert [t.group for t in out.trajectories] == [0, 0, 1, 1]
    assert [t.traj for t in out.trajectories] == [0, 1, 2, 3]  # unique across rounds
    assert [t.train_return for t in out.trajectories] == [0.0, 1.0, 1.0, 0.5]
    m = out.metrics()
    assert m["rollout/filter_rounds"] == 2 and m["rollout/informative_groups"] == 2
    assert m["rollout/filtered_frac"] == pytest.approx(2 / 5)
    assert out.generate_seconds == 2.0 and out.generated_tokens == 14 and out.turns == 4


def test_round_cap_and_nothing_informative():
    """After max_rounds the groups found so far are trained on; with none at all, the last draw is returned
    unchanged (its advantages are 0, as without filtering) and the metrics say so."""
    n = {"draws": 0}

    def draw():
        n["draws"] += 1
        return _batch({0: [[1.0], [1.0]], 1: [[0.0], [0.0]]})

    out = collect_informative(draw, 3, max_rounds=3)
    assert n["draws"] == 3 and len(out.trajectories) == 4
    m = out.metrics()
    assert m["rollout/informative_groups"] == 0 and m["rollout/filtered_frac"] == 1.0
    draws = iter([_batch({0: [[1.0], [0.0]]}), _batch({0: [[1.0], [1.0]]})])
    out = collect_informative(lambda: next(draws), 3, max_rounds=2)
    assert len(out.trajectories) == 2 and out.metrics()["rollout/informative_groups"] == 1
    with pytest.raises(ValueError):
        collect_informative(draw, 0, max_rounds=1)


@pytest.mark.parametrize("name", [n for n in list_estimators() if n not in ("remax", "gae")] + ["grpo+hadw", "gigpo+hadw"])
def test_every_estimator_works_on_a_filtered_batch(name):
    """The kept groups are an ordinary batch: trajectory- and step-level estimators run on it, and no kept
    group is constant, so group-relative estimators give some non-zero advantage (stratified works within
    (group, search count) cells, which are single rows here).  (ReMax's greedy baselines and GAE's
    critic values are filled by the trainer: both run with dynamic sampling in test_remax.py and
    test_ppo_critic.py.)"""
    draws = iter([_batch({0: [[1.0, 0.5], [1.0]], 1: [[0.0], [1.0, 1.0]], 2: [[0.5], [0.5]]}),
                  _batch({0: [[0.0], [0.25, 0.0]], 1: [[1.0], [1.0]]})])
    out = collect_informative(lambda: next(draws), 3, max_rounds=3)
    assert out.metrics()["rollout/informative_groups"] == 3
    est = get_estimator(name)
    rows, sample_row, samples = to_advantage_batch(out, est.level)
    adv = est(rows)
    assert adv.shape[0] == len(rows) and bool(torch.isfinite(adv).all())
    assert len(samples) == sample_row.shape[0] == sum(len(t.steps) for t in out.trajectories)
    if not name.startswith("stratified"):  # its cells split groups by search count: here all of one row
        assert bool((adv != 0).any()), name


@pytest.mark.slow
def test_trainer_step_with_dynamic_sampling(tmp_path):
    """A real training step on SearchQA with the tiny model: the filter's metrics are logged and the loss is finite."""
    from tests.trainer.conftest import available
    from tests.trainer.test_trainer_e2e import ENVS, _config
    from stratagym.training.trainer import Trainer

    env = "stratagym/SearchQA-v0"
    if not available(env):
        pytest.skip("SearchQA data not available")
    cfg = _config(env, ENVS[env], str(tmp_path / "run"), **{"rollout.filter_groups": True,
                                                            "rollout.max_filter_rounds": 2})
    trainer = Trainer(cfg)
    try:
        row = trainer.train_step()
    finally:
        close = getattr(trainer, "close", None)
        if close:
            close()
    assert 1 <= row["rollout/filter_rounds"] <= 2
    assert 0.0 <= row["rollout/filtered_frac"] <= 1.0
    assert math.isfinite(row["loss/loss"])
