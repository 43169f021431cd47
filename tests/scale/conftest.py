"""Fixtures for the scale tests: one private local Ray cluster per module that asks for it."""

from __future__ import annotations

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
