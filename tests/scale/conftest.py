"""Helpers for the scale tests: a private local Ray cluster per module, a check for leftover Ray
processes, and `accelerate launch` with 2 CPU processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def ray_cluster():
    """A private local Ray instance (2 CPUs, no dashboard), shut down when the module ends.

    ``address="local"`` makes ``ray.init`` start a new instance even where a ``ray start --head``
    cluster (someone else's) or ``RAY_ADDRESS`` exists on this machine, so tests never join one.
    """
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized(), "a Ray runtime leaked into this module from an earlier test"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20,
                 log_to_driver=False)
        try:
            yield ray
        finally:
            ray.shutdown()
    assert not ray_processes(), "Ray's own processes outlived ray.shutdown()"


def ray_processes() -> list[str]:
    """Ray daemons (GCS, raylet) and workers still running under this test process."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(p.cmdline())
        except psutil.Error:  # exited while we looked
            continue
        if "gcs_server" in text or "raylet" in text or "ray::" in text or "default_worker.py" in text:
            out.append(text[:120])
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(args: list[str], num_processes: int = 2, timeout: float = 300,
                      extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``accelerate launch`` with 2 CPU processes on a free rendezvous port, one thread each (``extra_env``
    is added to this process's environment for the launch)."""
    exe = Path(sys.executable).with_name("accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **(extra_env or {})}
    cmd = [str(exe), "launch", "--multi_gpu", "--num_processes", str(num_processes), "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()), *args]
    return run_stopping_workers(cmd, env=env, timeout=timeout)


def run_stopping_workers(cmd: list[str], *, env: dict[str, str], timeout: float, grace: float = 30) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)``, except that a launcher past
    its timeout gets SIGTERM first, and SIGKILL only if it outlives ``grace`` seconds.

    Why: torch elastic (under ``accelerate launch``) starts every worker in a session of its own, so neither
    SIGKILL to the launcher (what ``subprocess.run`` sends) nor to its process group reaches them: a hung
    2-process test used to leave both workers running. On SIGTERM the elastic agent stops its workers
    itself before it exits.
    """
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_one_process(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``python ARGS`` in one plain process, one thread: the single-process side of a comparison."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def _ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stderr[-3000:]


def one_and_two_processes(script: Path, tmp_path: Path) -> tuple[dict, dict]:
    """Run ``script OUT.json`` in one process, then under ``accelerate launch`` in 2; both JSON results."""
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    _ok(run_one_process([str(script), str(one)]))
    _ok(accelerate_launch([str(script), str(two)]))
    return json.loads(one.read_text()), json.loads(two.read_text())


def record_and_replay(script: Path, tmp_path: Path) -> tuple[dict, dict]:
    """``script record DIR`` in 2 processes, then ``script replay DIR`` in one (which updates on the
    recorded global batch); returns ``record.json`` and ``replay.json``."""
    _ok(accelerate_launch([str(script), "record", str(tmp_path)]))
    _ok(run_one_process([str(script), "replay", str(tmp_path)]))
    return json.loads((tmp_path / "record.json").read_text()), json.loads((tmp_path / "replay.json").read_text())
