"""``train.retain_heap``: glibc keeps freed memory in the heap (no re-faulted pages per step), applied once
per process by the Trainer, a no-op returning False where the C library is not glibc."""

from __future__ import annotations

import ctypes
import sys

import pytest
import torch

from stratagym.training import allocator
from stratagym.training.config import RecipeConfig


def _is_glibc() -> bool:
    try:
        ctypes.CDLL("libc.so.6").gnu_get_libc_version
        return True
    except (OSError, AttributeError):
        return False


@pytest.fixture
def fresh(monkeypatch):
    """Forget whether this process applied the setting (it is applied once per process)."""
    monkeypatch.setattr(allocator, "_applied", None)


@pytest.mark.skipif(not (sys.platform.startswith("linux") and _is_glibc()), reason="glibc only")
def test_applies_on_glibc_and_stops_page_faults_of_reused_blocks(fresh):
    import resource

    assert allocator.retain_heap() is True
    assert allocator.retain_heap() is True  # idempotent

    def churn() -> None:  # a step's blocks, freed and allocated again; by default glibc trims these
        for _ in range(20):
            blocks = [torch.empty(6 << 20) for _ in range(3)]  # 3 x 24 MiB live at once
            for b in blocks:
                b.fill_(1.0)
            del blocks

    churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    churn()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 500, faults  # glibc's defaults: ~12000 faults (measured), the pages of a trimmed block


def test_no_op_without_glibc(fresh, monkeypatch):
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert allocator.retain_heap() is False


def test_config_key_defaults_on_and_the_trainer_applies_it(tmp_path, monkeypatch):
    from stratagym.training import trainer as trainer_mod

    calls = []
    monkeypatch.setattr(trainer_mod, "retain_heap", lambda: calls.append(1) or True)  # the name the trainer calls

    def config(**train) -> RecipeConfig:
        return RecipeConfig.from_dict({
            "name": "heap", "policy": {"model": "tiny", "max_new_tokens": 4},
            "env": {"id": "stratagym/CueCorridor-v0"}, "rollout": {"group_size": 2, "tasks_per_step": 1},
            "train": {"total_steps": 1, "output_dir": str(tmp_path), "save_every": 0, "progress": False,
                      "tensorboard": False, **train},
        })

    assert config().train.retain_heap is False  # opt-in: it changes malloc for the whole host process
    trainer_mod.Trainer(config()).close()
    assert calls == []
    trainer_mod.Trainer(config(retain_heap=True)).close()
    assert calls == [1]
