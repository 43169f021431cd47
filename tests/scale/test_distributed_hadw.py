"""HA-DW's anchor from the global batch across processes (issue 16 item 3).

``_dist_hadw.py`` feeds the same 5 global batches to HA-DW in 1 process and in 2 CPU processes
(gloo), each process holding whole groups (uneven splits, and batches where one process has no row).
With the trainer's ``share_batch_statistics`` hook the 2-process anchors, anchor state and gathered
advantages equal the 1-process ones; without it (each process's own batch, the old behaviour) they do
not -- so the comparison has teeth.

Launcher: ``accelerate launch --multi_gpu --num_processes 2`` (torchrun underneath; ``Accelerator(cpu=True)``
picks gloo). ``accelerate launch --cpu --num_processes 2`` starts ONE process in accelerate 1.x: its
simple launcher only fans out through ``mpirun`` (accelerate/utils/launch.py,
``prepare_simple_launcher_cmd_env``), so the run also asserts it really had 2 processes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.scale.conftest import one_and_two_processes

pytest.importorskip("accelerate")

SCRIPT = Path(__file__).with_name("_dist_hadw.py")
SPECS = ["grpo+hadw", "stratified+hadw/window"]


@pytest.mark.slow
def test_two_processes_move_the_anchor_like_one(tmp_path):
    a, b = one_and_two_processes(SCRIPT, tmp_path)
    assert a["num_processes"] == 1 and b["num_processes"] == 2
    assert b["states_agree"]  # both processes hold the same anchor state after every batch
    for name in SPECS:
        x, y = a[name], b[name]
        assert len(y["anchors"]) == 5
        assert all(math.isclose(p, q, rel_tol=0, abs_tol=1e-12) for p, q in zip(x["anchors"], y["anchors"]))
        for ga, gb in zip(x["advantages"], y["advantages"]):
            assert len(ga) == len(gb)
            assert all(math.isclose(p, q, rel_tol=1e-12, abs_tol=1e-12) for p, q in zip(ga, gb))
        assert x["state"]["history"] == pytest.approx(y["state"]["history"], abs=1e-12)
        # each process alone (no hook) sees only its half: its anchors are not the global ones
        assert any(abs(p - q) > 1e-6 for p, q in zip(x["anchors"], y["alone_anchors"]))
