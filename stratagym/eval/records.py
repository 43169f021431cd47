"""The versioned result record an eval writes and the leaderboard stores.

A record says exactly what was evaluated, so two numbers on the board can be compared (or not):

* ``agent``: the spec as typed (``scripted:oracle``, a checkpoint folder, ``hf:...``, ``openai:...``), its
  kind, a display label, the algorithm that trained it (if known) and a **content hash** (sha256 over the
  checkpoint folder's files, or over the spec for agents without files);
* ``env``: gymnasium id, version (the ``-vN`` suffix), the **data hash** of the tasks evaluated, kwargs;
* ``split``, ``n_tasks``, ``seeds``, ``n_episodes``;
* ``metrics`` (value, n, 95% CI, method), ``distributions``, ``per_seed`` values and ``across_seeds``
  spread; ``episodes``: the per-task outcomes;
* ``config`` (batch size, max steps, ...), ``stratagym_version``, ``created`` (UTC), optional ``training``
  (algorithm, steps, a training curve) from ``stratagym bench``.

``record_id`` is the sha256 of the canonical JSON of everything except ``record_id``, ``created`` and
``transcripts``: the same evaluation submitted twice has the same id, which is how the leaderboard spots
duplicates. ``transcripts`` (optional) names the committed archive of the episodes' turns by content hash
(:mod:`stratagym.eval.transcript_archive`), and ``search_dependence`` (optional, SearchQA) holds the same
agent's scores under retrieval ablations (:mod:`stratagym.eval.search_dependence`); both are attachments,
so back-filling them keeps the id.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from stratagym.atomic import write_json_atomic  # re-exported: records are written with it
from stratagym.errors import UserError
from stratagym.provenance import TRAINING_DATA_FILE

__all__ = [
    "SCHEMA",
    "SUPPORTED_SCHEMAS",
    "LEGACY_SCHEMA",
    "RecordError",
    "record_id",
    "finalize_record",
    "schema_problems",
    "load_record",
    "write_json_atomic",
    "content_hash_path",
    "content_hash_text",
    "env_version",
    "utc_now",
]

#: Records carry their protocol fingerprint (``protocol``) from schema 2 on; schema 1 records (written
#: before fingerprints) are still read, and the leaderboard recomputes what their stored config allows.
SCHEMA = "stratagym.result/2"
LEGACY_SCHEMA = "stratagym.result/1"
SUPPORTED_SCHEMAS = frozenset({SCHEMA, LEGACY_SCHEMA})

_EXCLUDED_FROM_ID = ("record_id", "created", "transcripts", "search_dependence")

#: Required top-level keys and their JSON types.
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema": str,
    "record_id": str,
    "created": str,
    "stratagym_version": str,
    "agent": dict,
    "env": dict,
    "split": str,
    "n_tasks": int,
    "seeds": list,
    "n_episodes": int,
    "metrics": dict,
    "episodes": list,
    "config": dict,
}
_REQUIRED_AGENT = ("spec", "kind", "label", "content_hash")
_REQUIRED_ENV = ("id", "version", "data_hash")
_REQUIRED_METRIC = ("value", "n", "ci_low", "ci_high")


class RecordError(UserError, ValueError):
    """A result record that cannot be read or does not follow the schema."""


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def env_version(env_id: str) -> str:
    """``"v0"`` for ``"stratagym/SearchQA-v0"`` (gymnasium's version suffix), else ``"unversioned"``."""
    m = re.search(r"-(v\d+)$", env_id)
    return m.group(1) if m else "unversioned"


def _canonical(obj: Any) -> bytes:
    # surrogatepass: a record holding a lone surrogate still gets an id (the board then refuses it by schema)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")


def content_hash_text(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_hash_path(path: str | os.PathLike[str]) -> str:
    """sha256 over a file, or over a folder's files (relative path + size + bytes, in sorted order).

    Identifies a checkpoint by what it contains, not by where it lives; hidden files and ``__pycache__``
    are skipped, and so is a top-level ``training_data.json`` (:mod:`stratagym.provenance`: it describes the
    weights' training data without changing them, and records name its own digest).
    """
    root = Path(path)
    h = hashlib.sha256()
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() != TRAINING_DATA_FILE
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts)
    )
    for f in files:
        rel = f.name if f == root else f.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0" + str(f.stat().st_size).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def record_id(record: Mapping[str, Any]) -> str:
    """The content id of a record (sha256 of its canonical JSON minus ``record_id``, ``created`` and the
    attachments ``transcripts`` and ``search_dependence``)."""
    body = {k: v for k, v in record.items() if k not in _EXCLUDED_FROM_ID}
    return hashlib.sha256(_canonical(body)).hexdigest()


def finalize_record(record: dict[str, Any]) -> dict[str, Any]:
    """Stamp ``schema``, ``created`` (if absent) and ``record_id`` on a record built by the harness."""
    record.setdefault("schema", SCHEMA)
    record.setdefault("created", utc_now())
    record["record_id"] = record_id(record)
    return record


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def schema_problems(record: Any) -> list[str]:
    """Everything wrong with ``record``'s structure, as human-readable sentences (empty: it is fine)."""
    if not isinstance(record, Mapping):
        return [f"a result record must be a JSON object, got {type(record).__name__}"]
    problems: list[str] = []
    schema = record.get("schema")
    if schema not in SUPPORTED_SCHEMAS:
        problems.append(f"unsupported schema {schema!r}; this stratagym reads {sorted(SUPPORTED_SCHEMAS)}")
    for key, typ in _REQUIRED.items():
        if key not in record:
            problems.append(f"missing field {key!r}")
        elif not isinstance(record[key], typ) or (typ is int and isinstance(record[key], bool)):
            problems.append(f"field {key!r} must be {getattr(typ, '__name__', typ)}, got {type(record[key]).__name__}")
    if problems:
        return problems
    for key in _REQUIRED_AGENT:
        if not isinstance(record["agent"].get(key), str) or not record["agent"].get(key):
            problems.append(f"agent.{key} must be a non-empty string")
    for key in _REQUIRED_ENV:
        if not isinstance(record["env"].get(key), str) or not record["env"].get(key):
            problems.append(f"env.{key} must be a non-empty string")
    if not record["split"]:
        problems.append("split must be a non-empty string")
    if record["n_tasks"] < 1 or record["n_episodes"] < 1:
        problems.append("n_tasks and n_episodes must be >= 1")
    if not record["seeds"] or not all(isinstance(s, int) and not isinstance(s, bool) for s in record["seeds"]):
        problems.append("seeds must be a non-empty list of integers")
    if not record["metrics"]:
        problems.append("metrics is empty")
    for name, m in record["metrics"].items():
        if not isinstance(m, Mapping) or any(k not in m for k in _REQUIRED_METRIC):
            problems.append(f"metric {name!r} must have {list(_REQUIRED_METRIC)}")
            continue
        bad = [k for k in ("value", "ci_low", "ci_high") if not _finite(m[k])]
        if bad:
            problems.append(f"metric {name!r} is not finite ({', '.join(f'{k}={m[k]!r}' for k in bad)})")
        elif not m["ci_low"] - 1e-9 <= m["value"] <= m["ci_high"] + 1e-9:
            problems.append(f"metric {name!r}: value {m['value']} lies outside its CI [{m['ci_low']}, {m['ci_high']}]")
        if not isinstance(m["n"], int) or isinstance(m["n"], bool) or m["n"] < 1:
            problems.append(f"metric {name!r}: n must be a positive integer")
    if schema == SCHEMA and not isinstance(record.get("protocol"), Mapping):
        problems.append("missing field 'protocol' (the env's protocol fingerprint; schema stratagym.result/2 requires it)")
    if len(record["episodes"]) != record["n_episodes"]:
        problems.append(f"episodes lists {len(record['episodes'])} outcomes but n_episodes is {record['n_episodes']}")
    if isinstance(record.get("record_id"), str) and not problems and record["record_id"] != record_id(record):
        problems.append("record_id does not match the record's content (edited after it was written?)")
    return problems


def load_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record JSON file (no validation beyond being a JSON object); any file that cannot be read
    as one raises :class:`RecordError` saying why (never a traceback for a bad file)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise RecordError(f"no result record at {path}") from None
    except IsADirectoryError:
        raise RecordError(f"{path} is a folder; give the record's .json file") from None
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path} is not UTF-8 text (invalid byte at offset {exc.start}); records are UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise RecordError(f"{path}: JSON nested too deeply to be a result record") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: a result record must be a JSON object")
    return data
