"""ReMax from a recipe (issue 18 item 2): the collector plays one greedy episode per task and its shaped
return becomes ``AdvantageBatch.baseline`` for every row of that task.

ReMax (Li et al. 2023, arXiv 2310.10505, Algorithm 1): ``A = r(sampled) - r(greedy)`` per prompt; verl
``compute_remax_outcome_advantage`` (core_algos.py, verl b178a3c) takes the greedy reward as
``reward_baselines`` and the greedy sample is not trained on. Known answers below are computed by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from stratagym.algorithms.registry import get_estimator
from stratagym.training.config import RecipeConfig
from stratagym.training.rollout import RolloutBatch, RolloutCollector, StepRecord, Trajectory, play
from stratagym.training.rollout import shape_rewards, to_advantage_batch
from stratagym.training.trainer import Trainer

ENV = "stratagym/CueCorridor-v0"


def _step(i: int, reward: float, valid: bool = True) -> StepRecord:
    return StepRecord(step=i, payload=None, action="a", text="a", format_ok=True, num_tokens=1, reward=reward,
                      action_valid=valid, state_hash=0, context=[], search_count=0, info={})


def _traj(k: int, group: int, rewards: list[float], *, valid: bool = True) -> Trajectory:
    return Trajectory(traj=k, group=group, task_id=f"t{group}", seed=0,
                      steps=[_step(i, r, valid) for i, r in enumerate(rewards)])


def test_baseline_rows_by_hand():
    """Task 0: sampled returns 1 and 0; its greedy episode earns 1 with one rejected action, shaped
    1 - 0.1 = 0.9 (the same shaping as the sampled episodes), so A = (1 - 0.9, 0 - 0.9) = (0.1, -0.9).
    Task 1: sampled returns 0.5 and 0.25; its greedy episode failed, so the baseline falls back to the
    group mean 0.375 and A = (0.125, -0.125)."""
    greedy0 = _traj(0, 0, [0.0, 1.0], valid=False)
    greedy0.steps[0].action_valid = True  # one rejected action (the second)
    greedy1 = _traj(1, 1, [])
    greedy1.failed = True
    trajs = [_traj(0, 0, [1.0]), _traj(1, 0, [0.0]), _traj(2, 1, [0.5]), _traj(3, 1, [0.25])]
    for t in trajs:
        t.baseline = greedy0 if t.group == 0 else greedy1
    batch = RolloutBatch(trajs)
    shape_rewards(batch, invalid_action_penalty=0.1)
    rows, _, _ = to_advantage_batch(batch, "trajectory")
    assert torch.allclose(rows.baseline, torch.tensor([0.9, 0.9, 0.375, 0.375]))
    adv = get_estimator("remax")(rows)
    assert torch.allclose(adv, torch.tensor([0.1, -0.9, 0.125, -0.125]), atol=1e-6)


def test_no_baseline_without_greedy_episodes():
    rows, _, _ = to_advantage_batch(RolloutBatch([_traj(0, 0, [1.0])]), "trajectory")
    assert rows.baseline is None
    with pytest.raises(ValueError, match="baseline"):
        get_estimator("remax")(rows)


def test_collector_plays_one_greedy_episode_per_task(choice_policy):
    """The greedy baseline of each task is exactly the episode ``play`` (evaluation's loop, greedy, group
    size 1) gives for the same task and seed, and every trajectory of the task points to it."""
    collector = RolloutCollector(ENV, choice_policy, group_size=3, max_turns=20)
    try:
        tasks = collector.task_ids()[:2]
        batch = collector.collect(tasks, [11, 12], baseline=True)
        assert len(batch.trajectories) == 6
        for t in batch.trajectories:
            g = t.baseline
            assert g is not None and g.task_id == t.task_id and g.seed == t.seed and g.group == t.group
            assert g.baseline is None and g not in batch.trajectories  # not trained on
        assert batch.trajectories[0].baseline is batch.trajectories[2].baseline
        assert batch.trajectories[0].baseline is not batch.trajectories[3].baseline
        ref = play(choice_policy, [(tasks[0], 11), (tasks[1], 12)], env_id=ENV, greedy=True)
        for i, r in enumerate(ref):
            g = batch.trajectories[3 * i].baseline
            assert [s.action for s in g.steps] == [s.action for s in r.steps]
            assert g.env_return == r.env_return
        plain = collector.collect(tasks, [11, 12])
        assert all(t.baseline is None for t in plain.trajectories)
    finally:
        collector.close()


def _config(out: Path, **over) -> RecipeConfig:
    data = {
        "name": "remax",
        "policy": {"class": "stratagym.agents.scorer:ScorerPolicy", "hidden": 16, "memory": 2},
        "env": {"id": ENV},
        "rollout": {"group_size": 4, "tasks_per_step": 3, "max_turns": 40},
        "algorithm": {"estimator": "remax", "invalid_action_penalty": 0.05},
        "optim": {"lr": 0.02, "micro_batch_size": 64},
        "train": {"total_steps": 3, "seed": 2, "output_dir": str(out), "save_every": 0, "progress": False,
                  "tensorboard": False},
    }
    for key, value in over.items():
        sec, name = key.split(".")
        data[sec][name] = value
    return RecipeConfig.from_dict(data)


@pytest.mark.parametrize("filter_groups", [False, True])
def test_remax_trains_end_to_end(tmp_path, filter_groups):
    """A recipe naming ``remax`` trains: the trainer asks the collector for the greedy episodes (the
    estimator's registry ``fields`` include ``baseline``), with and without dynamic sampling."""
    trainer = Trainer(_config(tmp_path / "run", **{"rollout.filter_groups": filter_groups}))
    try:
        assert trainer._play_baseline
        before = [p.detach().clone() for p in trainer.policy.parameters()]
        batch = trainer.rollout()
        assert batch.ok and all(t.baseline is not None for t in batch.ok)
        rows = trainer.train(max_steps=2)
        assert all("adv/baseline_return" in r and torch.isfinite(torch.tensor(r["loss/loss"])) for r in rows)
        assert any(not torch.equal(a, b) for a, b in zip(trainer.policy.parameters(), before))
    finally:
        trainer.close()
    grpo = Trainer(_config(tmp_path / "grpo", **{"algorithm.estimator": "grpo"}))
    try:
        assert not grpo._play_baseline
        assert all(t.baseline is None for t in grpo.rollout().trajectories)
    finally:
        grpo.close()


def test_remax_resume_is_bit_for_bit(tmp_path):
    """The greedy episodes draw no random numbers, so a run stopped after 2 steps and resumed from its
    checkpoint logs the same metrics as an uninterrupted 4-step run."""
    over = {"train.total_steps": 4, "train.save_every": 2}
    ref = Trainer(_config(tmp_path / "ref", **over))
    ref_rows = ref.train()
    ref.close()
    cut = Trainer(_config(tmp_path / "cut", **over))
    first = cut.train(max_steps=2)
    cut.close()
    resumed = Trainer(_config(tmp_path / "cut", **over))
    rest = resumed.train(resume=True)
    resumed.close()

    def clean(rows):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    assert [r["step"] for r in first + rest] == [1, 2, 3, 4]
    assert clean(first + rest) == clean(ref_rows)
