"""Asynchronous rollouts (issue 33) with ``policy.backend: vllm``: each Ray rollout worker holds its own
in-process vLLM engine and reloads the learner's weights into it when a job names a new version.

How the weights reach the engine: the worker loads the published state dict into its HF copy of the
policy and marks the policy dirty (``after_optimizer_step``); the policy syncs the HF weights into the
engine before its next generation, the same path the synchronous vLLM trainer takes after each step.

The checks, from the committed SFT checkpoint through ``stratagym train`` (a subprocess per run):

* ``max_staleness: 0`` is the synchronous vLLM trainer, exactly. On CPU the engine samples from the
  process's torch generator, and at staleness 0 the learner hands the worker its random state and takes
  it back, so the same tokens, rewards, losses and parity figures come out (all but ``time/*`` and the
  ``async/*`` bookkeeping). A worker whose engine kept the old weights would sample from another policy:
  the parity figures (sampler vs trainer log-probs on the same tokens) and the losses would differ.
* ``max_staleness: 1``: the learner trains on jobs one version old while the worker plays the next.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from tests.vllm_backend.test_vllm_generation import ENV_KWARGS, SFT  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STEPS = 3


def _recipe(tmp_path: Path, out: Path, rollout: dict) -> Path:
    data = {
        "name": f"vllm-{out.name}",
        "policy": {"model": str(SFT), "max_new_tokens": 48, "memory_k": 4, "backend": "vllm",
                   "vllm": {"max_model_len": 1024}},
        "env": {"id": "stratagym/SearchQA-v0", "tasks": "1500:", "kwargs": {**ENV_KWARGS, "split": "train"}},
        "rollout": {"group_size": 4, "tasks_per_step": 2, "parity_max": 0.05, **rollout},
        "algorithm": {"estimator": "grpo"},
        "loss": {"clip_low": 0.2, "agg": "token-mean"},
        # a large step, so that an engine left on the old weights would show in the parity figures
        "optim": {"lr": 1.0e-3, "max_grad_norm": 1.0, "micro_batch_size": 32},
        "train": {"total_steps": STEPS, "seed": 0, "output_dir": str(out), "save_every": 0, "eval_every": 0,
                  "progress": False, "tensorboard": False},
    }
    p = tmp_path / f"{out.name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _train(recipe: Path) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", "stratagym.cli", "train", "--config", str(recipe)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = Path(yaml.safe_load(recipe.read_text())["train"]["output_dir"])
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "async/"))} for r in rows]


def test_async_vllm_workers_at_staleness_0_equal_the_synchronous_vllm_trainer(tmp_path):
    sync = _train(_recipe(tmp_path, tmp_path / "sync", {}))
    rows = _train(_recipe(tmp_path, tmp_path / "async0",
                          {"mode": "async", "max_staleness": 0, "async_workers": 1}))
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(r["async/lag"] == 0 for r in rows)
    assert any(r["loss/loss"] != 0 for r in sync)  # it trained, so the weights moved between steps
    assert _comparable(rows) == _comparable(sync)
    assert all(r["parity/max_abs"] < 0.05 for r in rows)


def test_async_vllm_worker_at_staleness_1_trains_on_one_version_old_jobs(tmp_path):
    rows = _train(_recipe(tmp_path, tmp_path / "async1",
                          {"mode": "async", "max_staleness": 1, "async_workers": 1}))
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["async/lag"] for r in rows] == [0] + [1] * (STEPS - 1)  # parity_max holds on step 1 only
    assert all(r["async/dropped_groups"] == 0 and r["rollout/episodes"] == 8 for r in rows)
    assert rows[-1]["async/publishes"] >= 2  # a new version was published and loaded into the engine
