"""Atomic, resumable training checkpoints.

Layout under ``<output_dir>/checkpoints/``::

    step-00000010/
        policy/              policy.save_pretrained(...)   (HF folder, safetensors)
        optimizer.pt         optimizer state_dict          (tensors only: torch.load(weights_only=True))
        critic/              critic.save_pretrained(...)   (PPO with a critic only; safetensors)
        critic_optimizer.pt  the critic's optimizer state  (PPO with a critic only)
        scheduler.pt         LR scheduler state_dict
        rng.pt               torch CPU (+ CUDA) generator states
        trainer_state.json   step, numpy/python RNG states, estimator state (HA-DW anchor history), config
        COMPLETE             written last: a folder without it is never used
    latest                   text file naming the newest complete checkpoint (replaced atomically)

A checkpoint is written into a hidden temporary folder in the same directory and renamed into place
with ``os.replace`` only once every file (and the ``COMPLETE`` marker) is flushed to disk, so a crash
or ``kill -9`` at any moment leaves either the previous checkpoints or the new complete one -- never a
half-written one. Leftover temporary folders (and a replaced step folder renamed aside) are removed at the next save or
resume. The move is :func:`stratagym.atomic.publish_folder`. Nothing is
unpickled: tensors load with ``torch.load(weights_only=True)``, the rest is JSON.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from stratagym.atomic import atomic_write as atomic_write_text  # the name checkpoint callers use
from stratagym.atomic import publish_folder
from stratagym.provenance import write_provenance

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "list_checkpoints", "rng_state",
           "restore_rng_state", "atomic_write_text", "CHECKPOINT_DIR"]

CHECKPOINT_DIR = "checkpoints"
_MARKER = "COMPLETE"


def rng_state(np_generator: Optional[np.random.Generator] = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensor states for rng.pt, JSON-able states) of torch, CUDA, python and numpy generators."""
    tensors: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state_all()
    version, internal, gauss = random.getstate()
    js: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy_global": _np_global_state(),
    }
    if np_generator is not None:
        js["numpy_generator"] = np_generator.bit_generator.state
    return tensors, js


def _np_global_state() -> list[Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def restore_rng_state(tensors: dict[str, Any], js: dict[str, Any], np_generator: Optional[np.random.Generator] = None) -> None:
    torch.set_rng_state(tensors["torch"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["cuda"])
    version, internal, gauss = js["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = js["numpy_global"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if np_generator is not None and "numpy_generator" in js:
        np_generator.bit_generator.state = js["numpy_generator"]


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(output_dir) / CHECKPOINT_DIR
    if not root.exists():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and (p / _MARKER).exists()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(output_dir: str | Path) -> Optional[Path]:
    """The newest complete checkpoint (the ``latest`` pointer if valid, else the highest step)."""
    root = Path(output_dir) / CHECKPOINT_DIR
    pointer = root / "latest"
    if pointer.exists():
        cand = root / pointer.read_text().strip()
        if (cand / _MARKER).exists():
            return cand
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def _clean_tmp(root: Path) -> None:
    if root.exists():
        for p in root.iterdir():
            if p.name.startswith(".tmp-") or (p.name.startswith(".step-") and ".old-" in p.name):
                shutil.rmtree(p, ignore_errors=True)


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    *,
    policy: Any,
    optimizer: Optional[torch.optim.Optimizer],
    scheduler: Any,
    state: dict[str, Any],
    np_generator: Optional[np.random.Generator] = None,
    keep_last: int = 2,
    critic: Any = None,
    critic_optimizer: Optional[torch.optim.Optimizer] = None,
    provenance: Optional[list[dict[str, Any]]] = None,
) -> Path:
    """Write checkpoint ``step`` atomically; returns its folder. ``state`` must be JSON-able.
    ``critic`` / ``critic_optimizer``: PPO's value model and its optimizer, saved beside the policy;
    ``provenance``: the policy's training sets, written into its folder (:mod:`stratagym.provenance`)."""
    root = Path(output_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    _clean_tmp(root)
    final = root / f"step-{step:08d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-step-{step:08d}-", dir=root))
    try:
        policy.save_pretrained(tmp / "policy")
        if provenance is not None:
            write_provenance(tmp / "policy", provenance)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        if scheduler is not None:
            torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        if critic is not None:
            critic.save_pretrained(tmp / "critic")
        if critic_optimizer is not None:
            torch.save(critic_optimizer.state_dict(), tmp / "critic_optimizer.pt")
        tensors, js = rng_state(np_generator)
        torch.save(tensors, tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({**state, "step": step, "rng": js}, indent=1, sort_keys=True))
        (tmp / _MARKER).write_text("ok\n")
        publish_folder(tmp, final)  # fsyncs every file first; a rewritten step replaces the old folder
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(root / "latest", final.name + "\n")
    for old in list_checkpoints(output_dir)[:-keep_last]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a complete checkpoint: ``{"state", "rng_tensors", "optimizer", "scheduler", "policy_dir",
    "critic_dir", "critic_optimizer"}`` (the critic's entries are None without a critic)."""
    path = Path(path)
    if not (path / _MARKER).exists():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {_MARKER} marker)")
    _clean_tmp(path.parent)
    out: dict[str, Any] = {
        "state": json.loads((path / "trainer_state.json").read_text()),
        "rng_tensors": torch.load(path / "rng.pt", weights_only=True),
        "policy_dir": path / "policy",
        "optimizer": None,
        "scheduler": None,
        "critic_dir": path / "critic" if (path / "critic").is_dir() else None,
        "critic_optimizer": None,
    }
    if (path / "critic_optimizer.pt").exists():
        out["critic_optimizer"] = torch.load(path / "critic_optimizer.pt", weights_only=True)
    if (path / "optimizer.pt").exists():
        out["optimizer"] = torch.load(path / "optimizer.pt", weights_only=True)
    if (path / "scheduler.pt").exists():
        out["scheduler"] = torch.load(path / "scheduler.pt", weights_only=True)
    return out
