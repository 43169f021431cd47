"""A checkpoint's provenance: the training data it saw, named by content, written beside its weights.

Train/test overlap (``em/overlap``, ``em/no_overlap``) only means something against the data a model really
trained on. Measured against a dataset's bundled train split it can be wrong both ways: a model trained on
13 invented worlds saw none of the bundled train questions, and an SFT run on 800 demonstrations saw 800
questions, not the whole split. So every checkpoint that stratagym trains carries ``training_data.json``:

* one **training set** per stage that showed the model tasks: SFT demonstrations (the tasks the kept
  demonstrations played, and the demonstration file's sha256) and RL (the tasks the trainer drew);
* each set names its env, the data-defining env kwargs (``dataset``, ...), the split, the task ids, and
  sha256 digests of the task id list and of the split's data file where the env has one;
* an RL run or a second SFT stage started from a checkpoint with provenance inherits its stages, so the
  list is the model's whole training history.

``training_data.json`` is left out of a checkpoint's content hash (:func:`stratagym.eval.records.content_hash_path`):
it describes the weights without changing them, so provenance can be added to checkpoints committed before
it existed without moving their records' ``agent.content_hash``. Its own sha256 goes into every eval record
that used it. (Where the base weights came from is another file: ``stratagym_provenance.json``, written by
``stratagym models import``.)
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from stratagym.atomic import atomic_write
from stratagym.errors import ConfigError

__all__ = ["TRAINING_DATA_FILE", "SCHEMA", "TrainingDataMissing", "training_set", "write_provenance", "read_provenance",
           "provenance_digest", "training_sets_for", "inherited_stages", "file_sha256", "split_files",
           "data_digests"]

TRAINING_DATA_FILE = "training_data.json"
SCHEMA = "stratagym.provenance/1"


class TrainingDataMissing(ConfigError):
    """The data a provenance names is not on this machine (e.g. generated worlds not built yet): an eval
    then measures overlap against the env's train split and its record says so."""


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def split_files(value: Any, split: str | None) -> list[Path]:
    """The files a data kwarg's value names for ``split``: the file itself, or a folder's ``{split}.*``
    files (a dataset folder of ``train.jsonl``, ``test.jsonl``...); none for a non-path (``"bundled"``,
    the data versioned with the code)."""
    if not isinstance(value, (str, os.PathLike)):
        return []
    path = Path(value).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir() and split:
        return sorted(p for p in path.glob(f"{split}.*") if p.is_file())
    return []


def data_digests(data_kwargs: Mapping[str, Any], split: str | None) -> dict[str, str]:
    """``kwarg -> sha256`` of the split's data each data kwarg names (see :func:`split_files`)."""
    out = {}
    for key, value in sorted(data_kwargs.items()):
        files = split_files(value, split)
        if len(files) == 1:
            out[key] = file_sha256(files[0])
        elif files:
            out[key] = _sha256_text("".join(f"{f.name}:{file_sha256(f)}\n" for f in files))
    return out


def training_set(*, stage: str, env_id: str, split: str | None, task_ids: Iterable[str],
                 data_kwargs: Mapping[str, Any] | None = None, demos_sha256: str | None = None,
                 note: str | None = None, recipe: str | None = None) -> dict[str, Any]:
    """One stage's training set. ``task_ids`` are the tasks the model was shown (deduplicated and sorted
    here); ``data_kwargs`` the env kwargs that say where the data lives (the spec's ``data_kwargs``:
    ``dataset``, ``corpus``...), kept as given so the set can be loaded again, and hashed
    (:func:`data_digests`) so a changed file is seen; ``demos_sha256`` the SFT demonstration file's digest;
    ``recipe`` the ``name:`` of the recipe that ran the stage (an RL export names its recipe nowhere else)."""
    if stage not in ("sft", "rl"):
        raise ValueError(f"stage must be 'sft' or 'rl', got {stage!r}")
    ids = sorted({str(t) for t in task_ids})
    kwargs = {k: v for k, v in sorted((data_kwargs or {}).items()) if v is not None}
    out: dict[str, Any] = {"stage": stage, "env_id": env_id, "split": split, "data_kwargs": kwargs,
                           "task_ids": ids, "tasks_sha256": _sha256_text("\n".join(ids)),
                           "data_sha256": data_digests(kwargs, split)}
    if demos_sha256:
        out["demos_sha256"] = demos_sha256
    if note:
        out["note"] = note
    if recipe:
        out["recipe"] = recipe
    return out


def inherited_stages(start: str | os.PathLike[str] | None) -> list[dict[str, Any]]:
    """The training sets of the checkpoint a run starts from (empty for a base model without provenance)."""
    if start is None:
        return []
    prov = read_provenance(start)
    return list(prov["training_sets"]) if prov else []


def write_provenance(folder: str | os.PathLike[str], training_sets: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``training_data.json`` into a checkpoint folder (atomically)."""
    # one line per training set: an RL pool can name tens of thousands of task ids
    lines = ",\n".join(json.dumps(dict(s), sort_keys=True, separators=(",", ":")) for s in training_sets)
    text = f'{{"schema": {json.dumps(SCHEMA)}, "training_sets": [\n{lines}\n]}}\n'
    json.loads(text)  # well-formed by construction; checked before it replaces anything
    return atomic_write(Path(folder) / TRAINING_DATA_FILE, text)


def read_provenance(checkpoint: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A checkpoint folder's provenance, or None where it has none. A file that is there but unreadable is
    a :class:`ConfigError` (a result measured against a broken provenance would be wrong silently)."""
    path = Path(checkpoint) / TRAINING_DATA_FILE if Path(checkpoint).is_dir() else Path(checkpoint)
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a readable provenance file ({exc}); restore it from git, or delete it "
                          "to measure overlap against the env's train split") from None
    sets = body.get("training_sets") if isinstance(body, dict) else None
    if body.get("schema") != SCHEMA or not isinstance(sets, list) or not all(
            isinstance(s, dict) and isinstance(s.get("task_ids"), list) and s.get("env_id") for s in sets):
        raise ConfigError(f"{path} is not a {SCHEMA} file (it needs 'schema' and a 'training_sets' list whose "
                          "entries name env_id and task_ids); rewrite it with stratagym.provenance.write_provenance")
    return body


def provenance_digest(provenance: Mapping[str, Any]) -> str:
    """sha256 of a provenance's canonical JSON (what eval records name)."""
    return _sha256_text(json.dumps(provenance, sort_keys=True, separators=(",", ":")))


def training_sets_for(provenance: Mapping[str, Any] | None, env_id: str) -> list[dict[str, Any]]:
    """The training sets of ``env_id`` in a provenance (a model trained on several envs has several)."""
    if not provenance:
        return []
    return [dict(s) for s in provenance["training_sets"] if s.get("env_id") == env_id]
