"""A multi-process run ends cleanly right after its last collective (the CI flake of stops 24-25).

Found with a core dump of a rank that aborted after its work was done: a gloo worker thread released
the last reference to an ``all_gather``'s Python-owned output tensors while the main thread was
finalizing the interpreter; taking the GIL then ended the thread through a ``noexcept`` destructor
(SIGABRT, "terminate called without an active exception"). stratagym's exit hook
(``end_process_group_at_exit``, registered by the Trainer) drops live trainers' DDP wrappers and
destroys the process group before finalization, which joins gloo's threads. ``_dist_exit.py`` checks
that no gloo thread is left when the hook has run, deterministically, and exits right after a large
collective, which provoked the abort in 8 of 8 launches without any hook (``raw``); with a destroy but
no release of the Trainer's DDP wrapper, its gloo threads survived the hook.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from stratagym.training import distributed
from tests.scale.conftest import accelerate_launch

pytest.importorskip("accelerate")
SCRIPT = Path(__file__).with_name("_dist_exit.py")


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["raw", "trainer"])
def test_two_processes_end_gloo_before_the_interpreter_finalizes(setup):
    for _ in range(2):
        r = accelerate_launch([str(SCRIPT), setup], timeout=180)
        assert r.returncode == 0, r.stderr[-3000:]
        lines = r.stdout.splitlines()
        assert sorted(line for line in lines if line.startswith("done")) == ["done 0", "done 1"]
        assert [line for line in lines if line.startswith("gloo threads")] == ["gloo threads after the hook: 0"] * 2


def test_exit_hook_is_registered_once_and_only_for_several_processes(monkeypatch):
    registered = []
    monkeypatch.setattr(distributed, "_END_AT_EXIT", False)
    monkeypatch.setattr(distributed, "_DISTRIBUTED_TRAINERS", distributed.weakref.WeakSet())
    monkeypatch.setattr(distributed.atexit, "register", registered.append)
    one, several = SimpleNamespace(num_processes=1), SimpleNamespace(num_processes=2)

    class Owner:  # weak-referenceable stand-in for a Trainer
        pass

    alone, shard = Owner(), Owner()
    distributed.end_process_group_at_exit(one, alone)
    assert registered == [] and list(distributed._DISTRIBUTED_TRAINERS) == []
    distributed.end_process_group_at_exit(several, shard)
    distributed.end_process_group_at_exit(several)
    assert registered == [distributed._end_process_group]  # once per process
    assert list(distributed._DISTRIBUTED_TRAINERS) == [shard]
    del shard
    assert list(distributed._DISTRIBUTED_TRAINERS) == []  # the registry does not keep trainers alive
