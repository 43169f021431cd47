"""Submission checks: a record reaches the board only if it fits the store's schema
(:mod:`stratagym.leaderboard.schema`: types, column sizes, valid text, finite numbers), passes the
record's own consistency checks (supported schema version, values inside their CIs, ``record_id`` equal
to the content hash), its protocol fingerprint is complete, of a known env version and agrees with the
record's own config (:func:`stratagym.leaderboard.protocols.protocol_problems`; schema 2), its env is a
registered stratagym env and its split is one that env knows.

Known splits: an env class may declare them as a ``splits`` class attribute (a tuple of names); for envs
that do not, the standard vocabulary :data:`STANDARD_SPLITS` applies. Duplicates are checked by the store
itself (a unique ``record_id``), which also holds under concurrent submitters.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

from stratagym.envs.registry import get_spec, list_envs
from stratagym.errors import UserError
from stratagym.eval.records import SCHEMA, schema_problems as record_problems
from stratagym.leaderboard.protocols import protocol_problems
from stratagym.leaderboard.schema import schema_problems
from stratagym.objects import load_object

__all__ = ["SubmissionError", "STANDARD_SPLITS", "known_splits", "validate_record"]

#: Split names accepted for envs that do not declare their own (``default``: the env's default split).
STANDARD_SPLITS = frozenset(
    {
        "default", "train", "dev", "validation", "valid", "test", "test_unseen",
        "valid_seen", "valid_unseen", "valid_train", "in_distribution", "out_of_distribution",
        "eval_in_distribution", "eval_out_of_distribution",
    }
)


class SubmissionError(UserError, ValueError):
    """A record the leaderboard refuses; ``problems`` lists every reason (the message joins them)."""

    def __init__(self, problems: list[str] | str, *, record_id: str | None = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.record_id = record_id
        rid = f" {record_id[:12]}" if record_id else ""
        super().__init__(f"submission{rid} rejected: " + "; ".join(self.problems))


def known_splits(env_id: str) -> frozenset[str]:
    """The splits ``env_id`` declares (class attribute ``splits``) plus ``default``; else the standard set."""
    spec = get_spec(env_id)
    try:
        cls = load_object(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    except Exception:  # an env whose extra is missing still has a board
        cls = None
    declared = getattr(cls, "splits", None)
    if isinstance(declared, (tuple, list, frozenset, set)) and declared and all(isinstance(s, str) for s in declared):
        return frozenset(declared) | {"default"}
    return STANDARD_SPLITS


def validate_record(
    record: Any,
    *,
    known_envs: Collection[str] | None = None,
    extra_splits: Mapping[str, Collection[str]] | None = None,
) -> None:
    """Raise :class:`SubmissionError` listing every problem with ``record``; return None if it is fine.

    ``known_envs`` overrides the registry (tests, boards of third-party envs); ``extra_splits`` adds
    accepted splits per env id.
    """
    rid = record.get("record_id") if isinstance(record, Mapping) else None
    rid = rid if isinstance(rid, str) and rid.isascii() and rid.isalnum() else None  # shown in the message
    problems = schema_problems(record) or record_problems(record)
    if not problems and record.get("schema") == SCHEMA:
        problems = protocol_problems(record)
    if problems:
        raise SubmissionError(problems, record_id=rid)
    env_id = record["env"]["id"]
    if known_envs is not None:
        env_ok = env_id in known_envs
        splits: Collection[str] = STANDARD_SPLITS
    else:
        env_ok = env_id in {s.id for s in list_envs()}
        splits = known_splits(env_id) if env_ok else STANDARD_SPLITS
    if not env_ok:
        known = sorted(known_envs) if known_envs is not None else "see `stratagym envs list`"
        problems.append(f"unknown env {env_id!r} (not registered with stratagym; known: {known})")
    else:
        allowed = set(splits) | set((extra_splits or {}).get(env_id, ()))
        if record["split"] not in allowed:
            problems.append(f"unknown split {record['split']!r} for {env_id}; known splits: {sorted(allowed)}")
    if problems:
        raise SubmissionError(problems, record_id=rid)
