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
