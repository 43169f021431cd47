"""A 2-process run that hangs must not outlive its test: the launcher's timeout stops the workers too."""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from .conftest import accelerate_launch

HANG = """
import os, sys, time
from pathlib import Path
Path(sys.argv[1], f"worker-{os.environ['RANK']}.pid").write_text(str(os.getpid()))
time.sleep(600)
"""


def test_a_hung_launch_times_out_and_leaves_no_worker(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    with pytest.raises(subprocess.TimeoutExpired):
        accelerate_launch([str(script), str(tmp_path)], timeout=25)
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
    assert len(pids) == 2, "both workers should have started within the timeout"
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    for p in alive:  # do not leave them behind even when the assertion fails
        os.kill(p, 9)
    assert not alive, f"workers {alive} outlived the launcher's timeout"
