"""RL tasks drawn from an evaluation split are refused, as demonstrations from one are (issue 28): a policy
trained on test or test_unseen tasks would be measured on what it trained on."""

from __future__ import annotations

import pytest

from stratagym.errors import ConfigError
from stratagym.training.trainer import Trainer
from tests.trainer.test_parity import _config


@pytest.mark.parametrize("split", ["test", "test_unseen", "valid", "in_distribution", "TEST"])
def test_rl_on_an_evaluation_split_is_refused(tmp_path, split):
    cfg = _config(tmp_path)
    cfg.env.kwargs = {"split": split, "max_turns": 1}
    with pytest.raises(ConfigError, match=f"env.kwargs.split is '{split}', an evaluation split.*env.kwargs.split: train"):
        Trainer(cfg)
