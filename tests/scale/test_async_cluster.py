"""Async rollouts on a simulated multi-node Ray cluster (issue 33): ``ray.cluster_utils.Cluster`` starts a
head and two worker nodes on this machine (a GCS and a raylet each), and the trainer joins it through
``rollout.ray_address``, as it would join a real cluster started with ``ray start``.

The placement rule is Ray's own: each rollout actor reserves 1 CPU (``num_cpus``), and Ray puts it on a
node with a free one. The head here has no CPU to give (a head that only runs the learner), and each
worker node has one, so the two actors must land one on each worker node and none on the head. Every node
carries a custom resource naming it, so where each actor runs is read back from its node id."""

from __future__ import annotations

import math
import shutil
import tempfile

import pytest

from stratagym.training.config import RecipeConfig
from stratagym.training.trainer import Trainer
from tests.scale.conftest import ray_processes

pytestmark = pytest.mark.slow

LABELS = ("head", "rollout_a", "rollout_b")
STORE = 80 * 2**20  # object store per node: the tiny model's weights are kilobytes


@pytest.fixture
def three_nodes():
    """A head with 0 CPUs and two 1-CPU worker nodes; always shut down, and no Ray process left after.

    ``RAY_TMPDIR`` is a private folder: a ``Cluster`` head writes its address to Ray's
    ``ray_current_cluster`` file and deletes it at shutdown, which in the shared /tmp/ray would redirect
    (then break) a bare ``ray.init()`` of anyone else on this machine."""
    import ray
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized(), "a Ray runtime leaked into this test"
    tmp = tempfile.mkdtemp(prefix="sgray", dir="/tmp")  # short: Ray's socket paths live under it
    cluster = None
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        mp.setenv("RAY_TMPDIR", tmp)
        try:
            cluster = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
                "num_cpus": 0, "resources": {"head": 1}, "include_dashboard": False, "object_store_memory": STORE})
            for label in LABELS[1:]:
                cluster.add_node(num_cpus=1, resources={label: 1}, object_store_memory=STORE)
            cluster.wait_for_nodes()
            yield cluster
        finally:
            if ray.is_initialized():
                ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)
    assert not ray_processes(), "Ray's processes outlived the cluster's shutdown"


def _config(out, address: str) -> RecipeConfig:
    return RecipeConfig.from_dict({
        "name": "async-cluster", "policy": {"model": "tiny", "max_new_tokens": 8, "memory_k": 1},
        "env": {"id": "stratagym/CueCorridor-v0"},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2, "mode": "async", "max_staleness": 1,
                    "async_workers": 2, "ray_address": address},
        "algorithm": {"estimator": "grpo", "invalid_action_penalty": 0.1},
        "loss": {"entropy_coef": 0.01}, "optim": {"lr": 1.0e-2},
        "train": {"total_steps": 3, "output_dir": str(out), "save_every": 0, "progress": False,
                  "tensorboard": False}})


def test_rollout_actors_run_on_the_worker_nodes_of_a_cluster(three_nodes, tmp_path):
    import ray

    trainer = Trainer(_config(tmp_path / "run", three_nodes.address))
    try:
        rows = trainer.train()
        runner = trainer._async
        nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        label = {nid: next(k for k in LABELS if k in n["Resources"]) for nid, n in nodes.items()}
        assert sorted(label.values()) == sorted(LABELS)  # the driver joined the 3-node cluster
        placed = [label[nid] for nid in runner.node_ids()]
        assert sorted(placed) == ["rollout_a", "rollout_b"]  # one actor per worker node, none on the head
        assert len(set(runner.pids())) == 2
    finally:
        trainer.close()
    assert not ray.is_initialized()  # close() disconnected the driver; the cluster is the fixture's to stop
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(r["loss/loss"]) and r["async/lag"] <= 1.0 and r["async/lost_groups"] == 0.0
               for r in rows)
    assert rows[-1]["async/publishes"] >= 2.0  # the weights travelled through the cluster's object store
