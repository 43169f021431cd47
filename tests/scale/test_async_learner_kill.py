"""`stratagym train` in async mode (issue 33), its learner process killed with SIGKILL after a checkpoint,
then resumed with ``--resume``: what docs/async.md ("Faults") promises.

The run has one rollout worker and ``max_staleness: 1``, so the learner's task draws are consumed strictly
in order: step k trains draw k, and while step k updates, draw k + 1 is already in flight with the actor.
A checkpoint at step k therefore holds the learner's generator *after* draw k + 1. Killed there, the job of
draw k + 1 dies with its actor and is never trained; the resumed run (a new actor, loading the
checkpoint's weights as version k) trains draws k + 2, k + 3, ... So the groups each step consumed
(``async/groups``: ``[task_id, seed]`` per group) must be draws 1..k, then k + 2..N + 1: nothing trained
twice, the lost job's groups never trained, nothing drawn again.

Ray's processes are counted by session: the learner is started in a session of its own, and Ray's
daemons (GCS, raylet) and workers stay in it, so "nothing left" is checked on the whole session, not just
on the learner's children (which are re-parented once it dies)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from stratagym.training.checkpoint import latest_checkpoint
from tests.helpers import wait_for_checkpoint
from stratagym.training.config import RecipeConfig
from stratagym.training.trainer import Trainer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STEPS = 12  # ~0.2 s a step once the actor is up: seconds of margin to kill after checkpoint 2


def _recipe(out: Path) -> dict:
    return {
        "name": "async-kill", "policy": {"model": "tiny", "max_new_tokens": 8, "memory_k": 1},
        "env": {"id": "stratagym/CueCorridor-v0"},
        # ray_address local: a new Ray instance of the learner's own, never a `ray start` cluster on this machine
        "rollout": {"group_size": 2, "tasks_per_step": 2, "max_turns": 2, "mode": "async", "max_staleness": 1,
                    "async_workers": 1, "ray_address": "local"},
        "algorithm": {"estimator": "grpo", "invalid_action_penalty": 0.1},
        "loss": {"entropy_coef": 0.01}, "optim": {"lr": 1.0e-2},
        "train": {"total_steps": STEPS, "seed": 3, "output_dir": str(out), "save_every": 1, "keep_last": 2,
                  "progress": False, "tensorboard": False},
    }


def _start(recipe: Path, log: Path, resume: bool = False) -> subprocess.Popen:
    """The learner in a new session (so its pid is the session id of every Ray process it starts)."""
    cmd = [sys.executable, "-m", "stratagym.cli", "train", "--config", str(recipe)] + (["--resume"] if resume else [])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("RAY_ADDRESS", None)
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _session(sid: int) -> dict[int, str]:
    """Live (not zombie) processes of session ``sid``: pid -> command line."""
    import psutil

    out = {}
    for pid in psutil.pids():
        try:
            if os.getsid(pid) != sid:
                continue
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out[pid] = " ".join(p.cmdline())[:120]
        except (OSError, psutil.Error):  # exited while we looked
            continue
    return out


def _gone(sid: int, timeout: float = 60) -> dict[int, str]:
    """Wait until session ``sid`` has no live process (Ray's workers exit once their raylet is gone);
    what is still there after ``timeout`` is killed, by pid, and returned."""
    deadline = time.time() + timeout
    while (left := _session(sid)) and time.time() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _draws(data: dict, out: Path, n: int) -> list[list[list]]:
    """The learner's first ``n`` task draws (its generator, seeded by ``train.seed``), as ``async/groups``."""
    cfg = RecipeConfig.from_dict({**data, "train": {**data["train"], "output_dir": str(out)}})
    trainer = Trainer(cfg)  # async mode starts no Ray before its first rollout; this one never rolls out
    try:
        return [[[t, s] for t, s in zip(*trainer._sample_tasks())] for _ in range(n)]
    finally:
        trainer.close()


def test_learner_killed_with_sigkill_resumes_and_trains_no_group_twice(tmp_path):
    out = tmp_path / "run"
    data = _recipe(out)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(data))

    proc = _start(recipe, tmp_path / "first.log")
    ray_seen: dict[int, str] = {}
    try:
        wait_for_checkpoint(proc, out, 2, timeout=300, log=tmp_path / "first.log")
        ray_seen = _session(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)  # the learner and every Ray daemon in its process group
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        left = _gone(proc.pid)
    assert any("raylet" in c for c in ray_seen.values()), ray_seen  # the check below is not vacuous
    assert any(c.startswith("ray::RolloutWorker") for c in ray_seen.values()), ray_seen
    assert not left, f"Ray processes outlived the killed learner: {left}"

    killed_at = int(latest_checkpoint(out).name.split("-")[1])
    assert 2 <= killed_at < STEPS
    before = [r for r in _rows(out) if r["step"] <= killed_at]
    assert [r["step"] for r in before] == list(range(1, killed_at + 1))

    again = _start(recipe, tmp_path / "resume.log", resume=True)
    try:
        rc = again.wait(timeout=300)
    finally:
        if again.poll() is None:
            os.killpg(again.pid, signal.SIGKILL)
            again.wait(timeout=30)
        left = _gone(again.pid)
    assert rc == 0, (tmp_path / "resume.log").read_text()[-3000:]
    assert not left, f"Ray processes outlived the resumed learner: {left}"

    rows = _rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # each step once: no gap, no duplicate
    assert rows[:killed_at] == before  # the steps before the checkpoint are the killed run's, untouched
    resumed = rows[killed_at:]
    # the resumed run starts after the checkpoint's step, with a new actor: one publish (the checkpoint's
    # weights, version killed_at), lag 0; then the next job is dispatched during each update (lag 1)
    assert resumed[0]["async/publishes"] == 1.0 and resumed[0]["async/lag"] == 0.0
    assert [r["async/lag"] for r in resumed[1:]] == [1.0] * (len(resumed) - 1)
    assert [r["async/publishes"] for r in rows] == [*range(1, killed_at + 1), *range(1, STEPS - killed_at + 1)]
    assert all(r["async/dropped_groups"] == 0.0 and r["async/lost_groups"] == 0.0 for r in rows)

    draws = _draws(data, tmp_path / "draws", STEPS + 1)
    consumed = [r["async/groups"] for r in rows]
    assert consumed == draws[:killed_at] + draws[killed_at + 1:]  # draw killed_at + 1 was in flight: lost
    pairs = [tuple(g) for step in consumed for g in step]
    assert len(set(pairs)) == len(pairs) == STEPS * 2  # no group trained twice
    assert not {tuple(g) for g in draws[killed_at]} & set(pairs)  # the lost job's groups are never trained
