"""The trainer applies ``loss.off_policy`` (TIS / MIS) with the sampler's log-probs as the behaviour
policy, logs the weights' statistics, and refuses bad options at load time."""

from __future__ import annotations

import math

import pytest

from stratagym.errors import ConfigError
from stratagym.training.config import RecipeConfig
from stratagym.training.trainer import Trainer


def _data(out: str, off_policy: dict) -> dict:
    return {
        "name": "tis",
        "policy": {"model": "tiny", "max_new_tokens": 8, "memory_k": 1},
        "env": {"id": "stratagym/CueCorridor-v0"},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2},
        "algorithm": {"estimator": "grpo"},
        "loss": {"off_policy": off_policy},
        "optim": {"lr": 1.0e-3},
        "train": {"total_steps": 1, "output_dir": out, "save_every": 0, "progress": False, "tensorboard": False},
    }


def test_tis_and_mis_run_in_the_trainer_and_log_their_statistics(tmp_path):
    cfg = RecipeConfig.from_dict(_data(str(tmp_path / "run"), {"tis": "token", "tis_cap": 2.0, "mis": "sequence",
                                                                 "mis_high": 100.0}))
    trainer = Trainer(cfg)
    try:
        (row,) = trainer.train()
    finally:
        trainer.close()
    for key in ("loss/is_ratio_mean", "loss/is_weight_mean", "loss/is_ess", "loss/tis_clip_frac", "loss/mis_masked_frac"):
        assert key in row and math.isfinite(row[key]), key
    # on-policy (the sampler is the trainer's own model): ratios are 1 up to the sampler/trainer parity
    assert abs(row["loss/is_ratio_mean"] - 1.0) < 0.05
    assert row["loss/mis_masked_frac"] == 0.0


@pytest.mark.parametrize("bad, match", [({"tis": "seq"}, "loss.off_policy: tis must be one of"),
                                        ({"mis": "token", "mis_high": -1.0}, "mis_high must be > 0"),
                                        ({"tis_ratio": 2}, "unknown key")])
def test_bad_off_policy_options_are_config_errors(tmp_path, bad, match):
    with pytest.raises(ConfigError, match=match):
        RecipeConfig.from_dict(_data(str(tmp_path / "run"), bad))
