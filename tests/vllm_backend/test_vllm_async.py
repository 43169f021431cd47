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
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from tests.vllm_backend.test_vllm_train import REPO, _cmd, _env  # noqa: E402
from tests.vllm_backend.test_vllm_train import _recipe as _train_recipe  # noqa: E402

STEPS = 3


def _recipe(tmp_path: Path, out: Path, rollout: dict) -> Path:
    """test_vllm_train's recipe (the committed SFT model on SearchQA, ``parity_max`` 0.05) for ``STEPS``
    steps without checkpoints, with ``rollout`` on top."""
    path = _train_recipe(tmp_path, out)
    data = yaml.safe_load(path.read_text())
    data["rollout"].update(rollout)
    data["optim"]["lr"] = 1.0e-3  # a large step, so that an engine left on old weights shows in the parity figures
    data["train"].update(total_steps=STEPS, save_every=0)
    path.write_text(yaml.safe_dump(data))
    return path


def _train(recipe: Path) -> list[dict]:
    env = _env()
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(_cmd(recipe), env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
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
