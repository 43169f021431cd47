"""Episode transcripts: what each turn of an evaluated episode showed, said and got back.

A result record keeps per-episode *outcomes* (reward, success, turns, search count...), not the turns
themselves: records travel to the board's store and into ``leaderboard/records/``, and 500 SearchQA
episodes with their retrieved passages would make each one megabytes. The turns go into the eval's
progress file instead (``<out>.progress.jsonl``, written anyway so a killed eval resumes): each episode
line carries ``steps`` next to the outcome the record keeps. The record's content and id do not change.

A progress file names its eval by the hash of the eval's identity (agent, env, kwargs, split, tasks,
seeds, data). The identity is recomputed here from a record alone (:func:`record_identity_hash`), so a
record is matched with its transcripts wherever the two files ended up (``stratagym bench`` copies
records into the board's folder and leaves progress files in the run folder): :func:`find_transcripts`.

Each step: ``step``, ``observation`` (what the agent saw), ``text`` (the model's response as generated),
``action`` (what was sent to the env), ``reward``, ``action_valid``, ``format_ok``, ``search_count``
(after the step) and ``info`` (the env's info after the step, without the hashes the trainer reads and
the keys already shown); the episode's ``final_observation`` is the env's answer to its last action.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from stratagym.jsonl import read_jsonl

__all__ = ["transcript_of", "eval_identity_hash", "record_identity_hash", "record_task_ids", "read_transcripts", "find_transcripts",
           "same_outcome", "episodes_by_key", "Transcript"]

#: info keys a transcript does not repeat: hashes for the trainer, and values every step shows already.
_SKIP_INFO = frozenset({"state_hash", "context_hashes", "task_id", "step", "action_valid", "search_count",
                        "admissible_actions"})

#: A transcript: ``{"steps": [...], "final_observation": str | None}``.
Transcript = dict[str, Any]


def _plain(value: Any) -> Any:
    """``value`` as plain JSON (what ``json.dumps(default=str)`` would write), so the transcript reads
    back the same as it was written."""
    return json.loads(json.dumps(value, default=str))


def transcript_of(traj: Any) -> Transcript:
    """The transcript of a finished :class:`~stratagym.training.rollout.Trajectory` (see the module
    docstring for its fields)."""
    steps = []
    for s in traj.steps:
        steps.append({
            "step": int(s.step),
            "observation": s.observation,
            "text": s.text,
            "action": s.action,
            "reward": float(s.reward),
            "action_valid": bool(s.action_valid),
            "format_ok": bool(s.format_ok),
            "search_count": int(s.search_count),
            "info": {k: v for k, v in sorted(s.info.items()) if k not in _SKIP_INFO},
        })
    return _plain({"steps": steps, "final_observation": traj.final_observation})


def eval_identity_hash(identity: Mapping[str, Any]) -> str:
    """The hash a progress file's header names its eval by (the harness and :func:`record_identity_hash`
    both use this one function, so the two cannot drift apart)."""
    return hashlib.sha256(json.dumps(dict(identity), sort_keys=True, default=str).encode()).hexdigest()


def record_task_ids(record: Mapping[str, Any]) -> list[str]:
    """The task ids a record evaluated, in order: its episodes of the first seed (the harness writes
    episodes seed by seed, tasks in order within each)."""
    episodes = [e for e in record.get("episodes") or [] if isinstance(e, Mapping)]
    seeds = record.get("seeds") or []
    first = seeds[0] if seeds else None
    ids = [str(e.get("task_id")) for e in episodes if e.get("seed", first) == first]
    return ids or list(dict.fromkeys(str(e.get("task_id")) for e in episodes))


def record_identity_hash(record: Mapping[str, Any], *, legacy: bool = False) -> str | None:
    """The identity hash of the eval that wrote ``record`` (None when the record lacks a field of it).

    The compute dtype is part of the identity when it is not float32 (a bf16 eval and an fp32 eval of one
    checkpoint are two evals). Evals written before that (2026-12-02) hashed no dtype: ``legacy=True``
    gives that older hash, which :func:`find_transcripts` also accepts, checking outcomes."""
    try:
        agent, env = record["agent"], record["env"]
        identity = {
            "agent": agent["spec"],
            "agent_hash": agent["content_hash"],
            "env_id": env["id"],
            "env_kwargs": env.get("kwargs", {}),
            "split": record["split"],
            "tasks": record_task_ids(record),
            "seeds": list(record["seeds"]),
            "data_hash": env["data_hash"],
        }
    except (KeyError, TypeError):
        return None
    dtype = agent.get("dtype")
    if not legacy and dtype not in (None, "float32"):
        identity["dtype"] = dtype
    return eval_identity_hash(identity)


def read_transcripts(path: str | os.PathLike[str], *, outcomes: dict[tuple[int, str], Any] | None = None
                     ) -> tuple[str | None, dict[tuple[int, str], Transcript]]:
    """The identity hash and the transcripts of a progress file: ``(seed, task_id) -> transcript`` for every
    episode line that carries ``steps`` (older files, or evals run without transcripts, have none). Lines
    that are not a progress file's (a torn tail, another file) are passed over: this is a viewer's read.
    ``outcomes``, when given, is filled with each such episode's outcome as the file records it."""
    identity: str | None = None
    out: dict[tuple[int, str], Transcript] = {}
    try:
        lines = list(read_jsonl(path, skip_bad=True))
    except (OSError, EOFError):  # unreadable, or a .gz that is not gzip or is cut short
        return None, {}
    for line in lines:
        row = line.value
        if row.get("type") == "header" and identity is None:
            identity = str(row.get("identity_hash"))
        elif row.get("type") == "episode" and isinstance(row.get("steps"), list):
            key = row.get("key")
            if isinstance(key, list) and len(key) == 2 and isinstance(key[0], int):
                k = (int(key[0]), str(key[1]))
                if k not in out and outcomes is not None:
                    outcomes[k] = row.get("episode")
                out.setdefault(k, {"steps": row["steps"], "final_observation": row.get("final_observation")})
    return identity, out


def episodes_by_key(record: Mapping[str, Any]) -> dict[tuple[Any, str], Mapping[str, Any]]:
    """A record's episode outcomes keyed as transcripts are: ``(seed, task_id)``."""
    return {(e.get("seed"), str(e.get("task_id"))): e for e in record.get("episodes") or [] if isinstance(e, Mapping)}


def same_outcome(recorded: Mapping[str, Any], other: Any) -> bool:
    """Whether ``other`` (an episode outcome from a progress file or a rerun) agrees with ``recorded`` on
    every field ``recorded`` holds: a rerun on newer code may add fields (``prompt_cuts``), never change one.
    ``extra.overlap`` is left out: it says how the task relates to a training set (the env's train split,
    or the checkpoint's own training data where it has provenance), not what happened in the episode."""
    def without_overlap(value: Any) -> Any:
        return {a: b for a, b in value.items() if a != "overlap"} if isinstance(value, Mapping) else value

    return isinstance(other, Mapping) and all(
        k in other and (without_overlap(other[k]) == without_overlap(v) if k == "extra" else other[k] == v)
        for k, v in recorded.items())


def find_transcripts(folders: Iterable[str | os.PathLike[str]],
                     records: Iterable[Mapping[str, Any]]) -> dict[str, dict[tuple[int, str], Transcript]]:
    """``record_id -> {(seed, task_id): transcript}`` for every record whose eval left a progress file with
    transcripts among ``folders`` (a progress file itself, or a folder searched recursively for ``*.progress.jsonl``), matched by the
    eval's identity, not by file name. Where several files name one eval (a rerun), the first in path
    order that holds an episode wins for that episode.

    A file is used for a record only if every episode the two share has the same outcome in both: a file
    of the same identity but another run (a legacy bf16 and fp32 eval of one checkpoint hashed alike:
    :func:`record_identity_hash`) is passed over, never mixed in."""
    wanted: dict[str, list[Mapping[str, Any]]] = {}
    for rec in records:
        for h in {record_identity_hash(rec), record_identity_hash(rec, legacy=True)} - {None}:
            wanted.setdefault(str(h), []).append(rec)
    found: dict[str, dict[tuple[int, str], Transcript]] = {}
    files = sorted({p for folder in map(Path, folders) for pattern in ("*.progress.jsonl", "*.progress.jsonl.gz")
                    for p in ([folder] if folder.is_file() else folder.rglob(pattern)) if p.is_file()})
    for path in files:
        outcomes: dict[tuple[int, str], Any] = {}
        identity, episodes = read_transcripts(path, outcomes=outcomes)
        for rec in wanted.get(identity or "", []):
            mine = episodes_by_key(rec)
            if any(key in mine and not same_outcome(mine[key], outcome) for key, outcome in outcomes.items()):
                continue  # another run under the same identity
            bucket = found.setdefault(str(rec["record_id"]), {})
            for key, transcript in episodes.items():
                bucket.setdefault(key, transcript)
    return {rid: eps for rid, eps in found.items() if eps}
