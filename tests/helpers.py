"""Shared test helpers: play episodes through the project's one rollout loop and get eval rows; wait for a
training run's checkpoint before killing it; import a script (scripts/, benchmarks/) that is not a package;
copy a committed LoRA adapter onto another base."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType
from pathlib import Path
from typing import Any, Sequence

from stratagym.agents.scripted import ScriptedPolicy
from stratagym.eval.episodes import EpisodeRecord
from stratagym.training.rollout import InProcessPool, play


def play_records(envs: Sequence[Any], agent: Any, episodes: Sequence[tuple[int | str, int | None]], *,
                 greedy: bool = True, info_keys: Sequence[str] = ()) -> list[EpisodeRecord]:
    """Play ``(task, seed)`` episodes (``task`` an id or an index into the env's task list) on ``envs``,
    ``len(envs)`` at a time. ``agent`` is a scripted agent (``act``) or a policy (``generate``)."""
    policy = agent if hasattr(agent, "generate") else ScriptedPolicy(agent)
    tasks = list(envs[0].unwrapped.task_ids())
    wanted = [(tasks[t % len(tasks)] if isinstance(t, int) else t, s) for t, s in episodes]
    spec_id = getattr(getattr(envs[0], "spec", None), "id", None)
    if not info_keys and spec_id:
        from stratagym.envs.registry import get_spec

        try:
            info_keys = get_spec(spec_id).record_info_keys
        except KeyError:
            info_keys = ()
    trajs = play(policy, wanted, env_id=spec_id or "", pool=InProcessPool.from_envs(envs), batch_size=len(envs), greedy=greedy)
    return [EpisodeRecord.from_trajectory(t, info_keys) for t in trajs]


def wait_for_checkpoint(proc: subprocess.Popen, output_dir: Path, step: int, *, timeout: float,
                        log: Path | None = None) -> None:
    """Wait until ``output_dir`` holds a complete checkpoint of step >= ``step`` while ``proc`` (a
    training run) lives; then the caller kills it. Fails if the run ended first (make it longer).

    ``latest_checkpoint`` reads the ``latest`` pointer, written just after a checkpoint folder is
    renamed into place, so a kill between the two resumes from the previous, still complete, step."""
    import time

    from stratagym.training.checkpoint import latest_checkpoint

    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        ckpt = latest_checkpoint(output_dir)
        if ckpt is not None and int(ckpt.name.split("-")[1]) >= step:
            return
        time.sleep(0.02)
    ended = "ended" if proc.poll() is not None else f"wrote no checkpoint of step {step} in {timeout:.0f} s"
    tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
    raise AssertionError(f"training {ended} before it could be killed; make it longer\n{tail}")


def load_script(path: Path, name: str) -> ModuleType:
    """Import the script at ``path`` as module ``name``, registered in ``sys.modules`` first (dataclasses
    look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def adapter_on_base(adapter: Path, base: Path, into: Path) -> Path:
    """A copy of a committed LoRA adapter (``adapter``) under ``into`` whose ``adapter_config.json`` names
    ``base`` as its base model. The committed SmolLM2 adapters name ``build/models/...`` (where
    ``stratagym models import`` writes), which a clean clone lacks; tests use the ``smollm2_model``
    fixture's session copy instead."""
    import json
    import shutil

    copy = into / adapter.name
    shutil.copytree(adapter, copy)
    config_file = copy / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = str(base)
    config_file.write_text(json.dumps(config))
    return copy
