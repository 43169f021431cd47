"""The Trainer's two malloc policies (stratagym/training/allocator.py), applied once per process, no-ops
returning False where the C library is not glibc: by default freed big blocks go back to the OS (the mmap
threshold pinned); ``train.retain_heap`` keeps freed memory in the heap (no re-faulted pages per step)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
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
    monkeypatch.setattr(allocator, "_returning", None)


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
    monkeypatch.setattr(trainer_mod, "retain_heap", lambda: calls.append("retain") or True)  # the names the trainer calls
    monkeypatch.setattr(trainer_mod, "return_freed_memory", lambda: calls.append("return") or True)

    def config(**train) -> RecipeConfig:
        return RecipeConfig.from_dict({
            "name": "heap", "policy": {"model": "tiny", "max_new_tokens": 4},
            "env": {"id": "stratagym/CueCorridor-v0"}, "rollout": {"group_size": 2, "tasks_per_step": 1},
            "train": {"total_steps": 1, "output_dir": str(tmp_path), "save_every": 0, "progress": False,
                      "tensorboard": False, **train},
        })

    assert config().train.retain_heap is False  # opt-in: it changes malloc for the whole host process
    trainer_mod.Trainer(config()).close()
    assert calls == ["return"]
    trainer_mod.Trainer(config(retain_heap=True)).close()
    assert calls == ["return", "retain"]


# ---- the default policy: freed big blocks go back to the OS ----------------------------------------------------

#: A training step's allocation pattern in a fresh interpreter (the threshold is process-wide): one big block
#: freed (glibc then raises its dynamic threshold past that size), big blocks each followed by a smaller
#: long-lived one, then the big ones freed. Prints whether the policy applied and the MB still resident.
PATTERN = r"""
import ctypes, json, sys
from stratagym.training.allocator import return_freed_memory
pinned = return_freed_memory() if sys.argv[1] == "pin" else False
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

BIG = 4 << 20
p = libc.malloc(BIG); libc.memset(p, 1, BIG); libc.free(p)
before = rss_mb()
big, small = [], []
for _ in range(100):
    b = libc.malloc(BIG); libc.memset(b, 1, BIG); big.append(b)
    small.append(libc.malloc(64 << 10))  # 64 KiB: bigger than the free fragments imports leave, so it lands after b
for b in big:
    libc.free(b)
print(json.dumps({"pinned": pinned, "held_mb": rss_mb() - before}))
"""


def _held(mode: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"} | env
    out = subprocess.run([sys.executable, "-c", PATTERN, mode], capture_output=True, text=True, env=environ, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not (sys.platform.startswith("linux") and _is_glibc()), reason="glibc only")
def test_returning_gives_freed_big_blocks_back_which_glibc_keeps_by_default():
    default = _held("default")
    returned = _held("pin")
    assert default["held_mb"] > 300  # 400 MB freed, nearly all of it still resident (measured: 400)
    assert returned["pinned"] is True and returned["held_mb"] < 20  # measured: 0.4


@pytest.mark.skipif(not (sys.platform.startswith("linux") and _is_glibc()), reason="glibc only")
def test_returning_leaves_a_users_own_threshold_alone():
    got = _held("pin", MALLOC_MMAP_THRESHOLD_="33554432")
    assert got["pinned"] is False and got["held_mb"] > 300  # their 32 MiB threshold keeps 4 MiB blocks in the heap


def test_returning_keeps_a_retained_heap_and_is_a_no_op_without_glibc(fresh, monkeypatch):
    monkeypatch.setattr(allocator, "_applied", True)  # retain_heap ran first in this process
    assert allocator.return_freed_memory() is False
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setattr(allocator, "_returning", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert allocator.return_freed_memory() is False
