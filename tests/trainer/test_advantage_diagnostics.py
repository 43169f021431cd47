"""The per-step advantage diagnostics (stratagym.training.diagnostics): hand-computed on small batches, and
present in the trainer's metrics rows for the estimators whose studies need them (issue 34)."""

from __future__ import annotations

import pytest
import torch

from stratagym.algorithms.registry import AdvantageBatch
from stratagym.studies.definitions import get_study
from stratagym.studies.runner import recipe_for
from stratagym.training.diagnostics import MAX_STRATUM, advantage_diagnostics
from stratagym.training.trainer import Trainer


def test_trajectory_rows_by_hand():
    rows = AdvantageBatch(rewards=torch.tensor([1.0, 1.0, 0.0, 1.0]), group=torch.tensor([0, 0, 1, 1]),
                          stratum=torch.tensor([1, 2, 1, 12]), traj=torch.tensor([0, 1, 2, 3]))
    out = advantage_diagnostics(rows, torch.tensor([0.5, -0.5, 1.0, -1.0]))
    assert out["adv/tied_groups"] == 0.5  # group 0 (1, 1) ties; group 1 (0, 1) does not
    assert out["adv/stratum/1/mean"] == pytest.approx(0.75) and out["adv/stratum/1/share"] == 0.5
    assert out["adv/stratum/2/mean"] == -0.5 and out[f"adv/stratum/{MAX_STRATUM}/mean"] == -1.0  # 12 pooled
    assert not any(k.startswith("groups/") for k in out)  # no context: no step groups
    assert advantage_diagnostics(AdvantageBatch(rewards=torch.zeros(0), group=torch.zeros(0, dtype=torch.long)),
                                 torch.zeros(0)) == {}


def test_step_rows_by_hand():
    # two episodes of one task, 2 steps each, same return; they meet in state 20 through states 100 / 200
    rows = AdvantageBatch(
        rewards=torch.tensor([0.0, 1.0, 0.0, 1.0]), group=torch.zeros(4, dtype=torch.long),
        stratum=torch.zeros(4, dtype=torch.long), traj=torch.tensor([0, 0, 1, 1]), step=torch.tensor([0, 1, 0, 1]),
        context=torch.tensor([[10, -1], [20, 100], [10, -1], [20, 200]]),
        episode_rewards=torch.ones(4))
    out = advantage_diagnostics(rows, torch.zeros(4))
    assert out["adv/tied_groups"] == 1.0  # both returned 1: counted once per trajectory
    assert out["groups/level0/size"] == 2.0 and out["groups/level0/singleton"] == 0.0
    assert out["groups/level1/size"] == 1.0 and out["groups/level1/singleton"] == 1.0


@pytest.mark.parametrize("name, estimator, kwargs, keys", [
    ("search-strata-bias", "stratified", {"alpha": 0.6}, ["adv/tied_groups", "adv/stratum/1/mean", "adv/stratum/2/share"]),
    ("difficulty-shared", "grpo+hadw", {}, ["adv/tied_groups", "adv/hadw_anchor"]),
    ("context-valued", "hgpo", {"gamma": 0.95}, ["adv/tied_groups", "groups/level0/size", "groups/level2/singleton"]),
])
def test_the_trainer_logs_them(tmp_path, name, estimator, kwargs, keys):
    from stratagym.studies.definitions import Method

    study = get_study(name).with_overrides(iterations=1, tasks_per_iteration=2, group_size=4)
    recipe = recipe_for(study, Method(label=estimator, estimator=estimator, estimator_kwargs=kwargs), 0, str(tmp_path))
    trainer = Trainer(recipe)
    try:
        rows = trainer.train()
    finally:
        trainer.close()
    for k in keys:
        assert k in rows[-1], (k, sorted(rows[-1]))
    assert 0.0 <= rows[-1]["adv/tied_groups"] <= 1.0
