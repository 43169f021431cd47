"""Dynamic sampling across processes (issue 16): 2 CPU processes keep what one process keeps.

``_dist_filter.py`` runs the real Trainer's ``rollout()`` with ``rollout.filter_groups`` on four scripted
scenarios (which group of each round's global task list carries signal is fixed by a table), once in
one process drawing the global list (twice the tasks per step) and once under ``accelerate launch
--multi_gpu --num_processes 2`` (gloo). Every process must draw as many rounds as the one process, keep
the shared task RNG in step, report the global filter metrics, and the processes together must keep
exactly the groups the one process keeps: the first 4 informative groups in (round, rank, group) order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scale._dist_filter import TABLES
from tests.scale.conftest import one_and_two_processes

pytest.importorskip("accelerate")
SCRIPT = Path(__file__).with_name("_dist_filter.py")


def _expected(table: list[list[int]], target: int = 4) -> list[tuple[int, int]]:
    """The known answer: (round, global index) of the first ``target`` informative groups in (round, index)
    order, drawing until they are found or the table (the round cap) ends; with none at all, the last
    round's groups (trained on as drawn)."""
    found: list[tuple[int, int]] = []
    for k, flags in enumerate(table):
        found += [(k, i) for i, f in enumerate(flags) if f][: target - len(found)]
        if len(found) == target:
            return found
    return found or [(len(table) - 1, i) for i in range(len(table[-1]))]


@pytest.mark.slow
def test_two_processes_filter_groups_like_one(tmp_path):
    a, b = one_and_two_processes(SCRIPT, tmp_path)
    assert a["world"] == 1 and b["world"] == 2
    for name, (table, _) in TABLES.items():
        (single,), (p0, p1) = a["scenarios"][name], b["scenarios"][name]
        want = [list(x) for x in _expected(table)]
        assert single["kept"] == want, name
        # the same number of draws on both processes, as one process; the shared task RNG in step
        assert p0["rounds"] == p1["rounds"] == single["rounds"], name
        assert p0["next_draw"] == p1["next_draw"] == single["next_draw"], name
        assert p0["metrics"] == p1["metrics"] == single["metrics"], name
        # each process keeps groups of its own slice; together, the one process's selection
        assert all(i < 2 for _, i in p0["kept"]) and all(i >= 2 for _, i in p1["kept"]), name
        assert sorted(p0["kept"] + p1["kept"]) == single["kept"], name
    # uneven shares, a process with none, and a cut inside one process's round were all exercised
    assert b["scenarios"]["process0_keeps_nothing"][0]["kept"] == []
    assert len(b["scenarios"]["cut_after_process0"][0]["kept"]) == 2
    # process 0 kept nothing in the first scenario; the update step still ran in step on both processes
    (before0, after0), (before1, after1) = b["digests"]
    assert before0 == before1 and after0 == after1 and after0 != before0
