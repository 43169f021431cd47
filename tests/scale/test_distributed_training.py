"""The trainer in 2 CPU processes (issue 16 item 2): one step equals one process on the global batch;
the CLI trains, checkpoints once and resumes under ``accelerate launch``.

Launcher: ``accelerate launch --multi_gpu --num_processes 2`` (torchrun; ``Accelerator(cpu=True)`` on a
machine without CUDA picks gloo). ``--cpu --num_processes 2`` would start one process (see
test_distributed_hadw.py), so every run asserts how many processes it really had.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.scale.conftest import accelerate_launch, record_and_replay

pytest.importorskip("accelerate")
SCRIPT = Path(__file__).with_name("_dist_train.py")


def _max_diff(xs, ys) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(xs, ys) if x is not None)


@pytest.mark.slow
def test_two_process_step_equals_one_process_on_the_global_batch(tmp_path):
    """Scorer policy on SearchStrata (episodes of different lengths, so the two processes hold different
    numbers of samples and micro-batches: the DDP padding path), ``grpo+hadw``, token-mean loss.
    The gradient the optimizer applies and the weights after the step equal those of one process
    updating on the concatenated batch, and HA-DW's anchor is the global one. A control step that
    normalises each process by its own counts gives a different gradient. A step where process 1 has
    no sample at all (every episode failed) completes, equal to process 0's episodes alone."""
    rec, rep = record_and_replay(SCRIPT, tmp_path)
    assert rec["world"] == 2 and rep["world"] == 1
    ranks = rec["ranks"]
    assert len({x["digest"] for x in ranks}) == 1  # DDP kept the two processes' weights identical
    assert ranks[0]["samples"] != ranks[1]["samples"], "equal shards: the uneven path was not exercised"
    assert ranks[0]["micro_batches"] == ranks[1]["micro_batches"]  # the shorter shard was padded
    assert ranks[0]["anchor"] == pytest.approx(rep["anchor"], abs=1e-12)
    # whole groups per process: each group's 3 episodes share one (task, seed) and live in one process;
    # process 0 holds the first half of the tasks one process would sample, process 1 the second half
    for x in ranks:
        assert all(len(g) == 3 and len({tuple(e) for e in g}) == 1 for g in x["groups"])
    assert [tuple(g[0]) for x in ranks for g in x["groups"]] == [tuple(t) for t in rep["tasks"]]
    a = torch.load(tmp_path / "record.pt", weights_only=False)
    b = torch.load(tmp_path / "replay.pt", weights_only=False)
    scale = max(float(g.abs().max()) for g in b["grads"] if g is not None)
    assert scale > 0
    assert _max_diff(a["grads"], b["grads"]) <= 1e-5 * scale
    assert max(float((a["weights"][k] - b["weights"][k]).abs().max()) for k in b["weights"]) <= 1e-6
    assert _max_diff(a["control_grads"], b["grads"]) > 1e-3 * scale
    # process 1 with no sample at all: the step completes, and equals process 0's episodes alone
    alone = max(float(g.abs().max()) for g in b["alone_grads"] if g is not None)
    assert alone > 0 and _max_diff(a["starved_grads"], b["alone_grads"]) <= 1e-5 * alone


def _recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "name: dist-cli\n"
        "policy: {model: tiny, max_new_tokens: 6, memory_k: 1}\n"
        "env: {id: stratagym/SearchStrata-v0}\n"
        "rollout: {group_size: 2, tasks_per_step: 1, max_turns: 2}\n"
        "algorithm: {estimator: stratified+hadw}\n"
        "optim: {lr: 1.0e-3, micro_batch_size: 2}\n"
        f"train: {{total_steps: 1, save_every: 1, output_dir: {json.dumps(str(tmp_path / 'run'))}, progress: false, "
        "tensorboard: false}\n"
    )
    return path


@pytest.mark.slow
def test_cli_train_checkpoint_and_resume_in_two_processes(tmp_path):
    """``accelerate launch ... -m stratagym.cli train --config`` with the tiny LM: one step, one complete
    checkpoint (written by process 0 only: no leftover temporary folder, one metrics row per step), then
    ``--resume`` to step 2 in 2 processes continues from it."""
    recipe = _recipe(tmp_path)
    run = tmp_path / "run"
    r = accelerate_launch(["-m", "stratagym.cli", "train", "--config", str(recipe)])
    assert r.returncode == 0, r.stderr[-3000:]
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-00000001"]
    assert (ckpts / "latest").read_text().strip() == "step-00000001"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1]
    # rollout metrics are the global batch's: 2 processes x 1 task x 2 episodes
    assert rows[0]["rollout/episodes"] == 4
    state = json.loads((ckpts / "step-00000001" / "trainer_state.json").read_text())
    assert state["step"] == 1 and state["estimator"]["hadw"]["steps"] == 1
    r = accelerate_launch(["-m", "stratagym.cli", "train", "--config", str(recipe), "--resume",
                           "--set", "train.total_steps=2"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-00000001", "step-00000002"]
    assert (ckpts / "latest").read_text().strip() == "step-00000002"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    state = json.loads((ckpts / "step-00000002" / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["estimator"]["hadw"]["steps"] == 2


CRITIC = Path(__file__).with_name("_dist_critic.py")


@pytest.mark.slow
def test_two_process_ppo_critic_step_equals_one_process(tmp_path):
    """PPO with a critic (``gae``, the scorer's critic) on SearchStrata, uneven shards: after one step of
    2 processes, the critic's gradient, weights and values on the global batch, and the policy's gradient,
    equal those of one process updating on the concatenated batch. GAE's advantages are whitened over the
    batch: a control step whitening each process over its own rows gives another policy gradient."""
    rec, rep = record_and_replay(CRITIC, tmp_path)
    assert rec["world"] == 2 and rep["world"] == 1
    ranks = rec["ranks"]
    assert ranks[0]["samples"] != ranks[1]["samples"], "equal shards: the uneven path was not exercised"
    assert len({x["policy"] for x in ranks}) == 1 and len({x["critic"] for x in ranks}) == 1
    a = torch.load(tmp_path / "record.pt", weights_only=False)
    b = torch.load(tmp_path / "replay.pt", weights_only=False)
    cscale = max(float(g.abs().max()) for g in b["critic_grads"] if g is not None)
    assert cscale > 0 and _max_diff(a["critic_grads"], b["critic_grads"]) <= 1e-5 * cscale
    assert max(float((a["critic"][k] - b["critic"][k]).abs().max()) for k in b["critic"]) <= 1e-6
    moved = float((b["values_after"] - b["values_before"]).abs().max())
    assert moved > 1e-2 and float((a["values_after"] - b["values_after"]).abs().max()) <= 1e-5 * moved
    scale = max(float(g.abs().max()) for g in b["grads"] if g is not None)
    assert scale > 0 and _max_diff(a["grads"], b["grads"]) <= 1e-5 * scale
    assert max(float((a["weights"][k] - b["weights"][k]).abs().max()) for k in b["weights"]) <= 1e-6
    assert _max_diff(a["control_grads"], b["grads"]) > 1e-3 * scale


@pytest.mark.slow
def test_two_process_ppo_step_with_an_llm_critic_and_a_process_without_samples(tmp_path):
    """The tiny LLM policy and its LLMCritic (transformer bodies: buffers, which a DDP forward broadcasts),
    two mini-batches (old log-probs scored before the update), process 1 with no sample at all: the
    no-grad scoring passes run on the bare modules, so the step completes (it hung when they went
    through DDP) and both processes hold the same updated critic."""
    r = accelerate_launch([str(CRITIC), "llm", str(tmp_path)], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads((tmp_path / "llm.json").read_text())
    assert out["world"] == 2
    (b0, a0, n0), (b1, a1, n1) = out["ranks"]
    assert n0 > 0 and n1 == 0
    assert b0 == b1 and a0 == a1 and a0 != b0
