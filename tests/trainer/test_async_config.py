"""``rollout.mode`` / ``max_staleness`` / ``async_workers`` are validated at load time with the fix named."""

from __future__ import annotations

import pytest

from stratagym.errors import ConfigError
from stratagym.training.config import RecipeConfig


def _data(**rollout) -> dict:
    return {"name": "a", "policy": {"model": "tiny"}, "env": {"id": "stratagym/CueCorridor-v0"},
            "rollout": rollout, "train": {"output_dir": "runs/never-written"}}


@pytest.mark.parametrize("rollout, match", [
    ({"mode": "overlap"}, "rollout.mode must be sync or async"),
    ({"mode": "async", "max_staleness": -1}, "max_staleness must be >= 0"),
    ({"max_staleness": 2}, "set rollout.mode: async"),
    ({"mode": "async", "async_workers": 0}, "rollout.async_workers must be >= 1"),
    ({"mode": "async", "max_staleness": "1"}, "expected an integer"),
])
def test_bad_async_settings_are_config_errors(rollout, match):
    with pytest.raises(ConfigError, match=match):
        RecipeConfig.from_dict(_data(**rollout))


def test_async_settings_load():
    cfg = RecipeConfig.from_dict(_data(mode="async", max_staleness=2, async_workers=2))
    assert (cfg.rollout.mode, cfg.rollout.max_staleness, cfg.rollout.async_workers) == ("async", 2, 2)
