"""`stratagym train` with ``policy.backend: vllm`` on CPU: five GRPO steps from the committed SFT checkpoint,
killed with SIGKILL after a checkpoint and resumed, equal to the uninterrupted run.

What may differ and why nothing else does: only ``time/*``. The engine samples from torch's global
generator, which every checkpoint saves and the resume restores, and building the engine (at the first
generation, so at another step in the resumed run) leaves that generator as it found it; the weights the
resumed engine starts from are synced from the checkpoint's safetensors. So the sampled tokens, rewards,
losses and parity figures are the same to the last digit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from stratagym.training.checkpoint import latest_checkpoint  # noqa: E402
from tests.helpers import wait_for_checkpoint  # noqa: E402
from tests.vllm_backend.test_vllm_generation import ENV_KWARGS, SFT  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STEPS = 5


def _recipe(tmp_path: Path, out: Path) -> Path:
    data = {
        "name": "vllm-resume",
        "policy": {"model": str(SFT), "max_new_tokens": 48, "memory_k": 4, "backend": "vllm",
                   "vllm": {"max_model_len": 1024}},
        "env": {"id": "stratagym/SearchQA-v0", "tasks": "1500:", "kwargs": {**ENV_KWARGS, "split": "train"}},
        "rollout": {"group_size": 4, "tasks_per_step": 2, "parity_max": 0.05},
        "algorithm": {"estimator": "grpo"},
        "loss": {"clip_low": 0.2, "agg": "token-mean"},
        "optim": {"lr": 2.0e-4, "max_grad_norm": 1.0, "micro_batch_size": 32},
        "train": {"total_steps": STEPS, "seed": 0, "output_dir": str(out), "save_every": 1, "keep_last": 2,
                  "eval_every": 0, "progress": False, "tensorboard": False},
    }
    p = tmp_path / f"{out.name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _cmd(recipe: Path, resume: bool = False) -> list[str]:
    return [sys.executable, "-m", "stratagym.cli", "train", "--config", str(recipe)] + (["--resume"] if resume else [])


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_vllm_training_killed_and_resumed_equals_uninterrupted(tmp_path):
    ref_out, cut_out = tmp_path / "ref", tmp_path / "cut"
    done = subprocess.run(_cmd(_recipe(tmp_path, ref_out)), env=_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = _metrics(ref_out)
    assert [r["step"] for r in reference] == list(range(1, STEPS + 1))
    rows = [json.loads(line) for line in (ref_out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["time/weight_sync"] > 0 for r in rows)  # every step after the first loads new weights
    assert all(r["parity/max_abs"] < 0.05 and r["parity/length_mismatch"] == 0 for r in rows)
    assert any(r["loss/loss"] != 0 for r in rows)  # it trained

    recipe = _recipe(tmp_path, cut_out)
    proc = subprocess.Popen(_cmd(recipe), env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_checkpoint(proc, cut_out, 2, timeout=600)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = int(latest_checkpoint(cut_out).name.split("-")[1])
    assert 2 <= killed_at < STEPS
    resumed = subprocess.run(_cmd(recipe, resume=True), env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _metrics(cut_out) == reference


def test_two_processes_each_with_an_engine_external_launcher(tmp_path):
    """`distributed: true` under `accelerate launch` (2 CPU processes, gloo): each process builds its own
    in-process engine with vLLM's external_launcher executor, syncs its weights after every step, and the
    engines' log-probs match each process's trainer."""
    from tests.scale.conftest import accelerate_launch

    out = tmp_path / "dist"
    recipe = _recipe(tmp_path, out)
    data = yaml.safe_load(recipe.read_text())
    data["policy"]["vllm"]["distributed"] = True
    data["train"]["total_steps"] = 2
    recipe.write_text(yaml.safe_dump(data))
    # The engines are counted by vLLM's own INFO line, so the level is pinned: importing TRL in this pytest
    # process (any earlier test) sets VLLM_LOGGING_LEVEL=ERROR in os.environ (trl/_compat.py
    # `_patch_vllm_logging`), which the launched processes would inherit.
    done = accelerate_launch(["-m", "stratagym.cli", "train", "--config", str(recipe)], timeout=420,
                             extra_env={"VLLM_LOGGING_LEVEL": "INFO", "VLLM_CONFIGURE_LOGGING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    logs = done.stdout + done.stderr
    assert logs.count("Using external launcher for distributed inference") == 2, logs[-3000:]  # an engine per process
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout/episodes"] == 16 for r in rows)  # 2 processes x 2 tasks x 4 samples, gathered
    assert all(r["time/weight_sync"] > 0 and r["parity/max_abs"] < 0.05 for r in rows)
