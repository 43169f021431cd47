"""A multi-process run ends cleanly right after its last collective (the CI flake of stop 25).

Found with a core dump of a rank that aborted after its work was done: a gloo worker thread released
the last reference to an ``all_gather``'s Python-owned output tensors while the main thread was
finalizing the interpreter; taking the GIL then ended the thread through a ``noexcept`` destructor
(SIGABRT, "terminate called without an active exception"). ``_dist_exit.py`` provokes that race on
purpose: without stratagym's exit hook 8 of 8 launches aborted on this machine (torch 2.13), with it
none did. The Trainer and ``share_batch_statistics`` register the hook.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from stratagym.training import trainer as trainer_module
from tests.scale.conftest import accelerate_launch

pytest.importorskip("accelerate")
SCRIPT = Path(__file__).with_name("_dist_exit.py")


@pytest.mark.slow
def test_two_processes_exit_cleanly_after_a_collective():
    for _ in range(3):  # the race hit every launch without the hook; three clean exits in a row
        r = accelerate_launch([str(SCRIPT), "hook"], timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        assert sorted(line for line in r.stdout.splitlines() if line.startswith("done")) == ["done 0", "done 1"]


def test_exit_hook_is_registered_only_for_several_processes(monkeypatch):
    registered = []
    monkeypatch.setattr(trainer_module, "_END_AT_EXIT", False)
    monkeypatch.setattr(trainer_module.atexit, "register", registered.append)
    trainer_module.end_process_group_at_exit(SimpleNamespace(num_processes=1))
    assert registered == []
    trainer_module.end_process_group_at_exit(SimpleNamespace(num_processes=2))
    trainer_module.end_process_group_at_exit(SimpleNamespace(num_processes=2))
    assert registered == [trainer_module._end_process_group]  # once per process
