"""What the gateway records: every call of every session, with the token ids and log-probs it sampled.

A session is one run of an agent program (named by the ``X-Session-Id`` header or the API key). Each call
appends a :class:`CallRecord`: the prompt as rendered and its token ids, the sampled ids with their
log-probs, the text and the tool calls parsed from it. These are the ids a trainer scores: never the
program's next rendering of the same text (docs/gateway.md).

Each call after a session's first is also checked **append-only**: does its prompt start with the previous
call's prompt ids followed by the previous call's sampled ids? (``first_diff`` says where it does not,
:func:`stratagym.agents.template_audit.first_divergence`.) A run's share of append-only calls is the runtime
form of ``stratagym check-template``. One divergence is not the template's: a reply cut by ``max_tokens``
inside a tool call loses its unfinished block to the parser, so the next prompt cannot hold those ids. A
call whose prompt parts from the sampled ids only inside that dropped tail is marked ``cut_divergence``
(the previous call's ``kept_ids`` says where the tail starts); the trainer's append-only share leaves it out.

With a folder, each session's calls are also appended to ``<folder>/<sha256(session)[:16]>.jsonl`` (the
session's name inside each line), flushed and fsynced before the response goes out, so a killed gateway
loses no answered call. Sessions are independent: each has its own lock-free list, the store one lock.

A session may be given a seed (:meth:`SessionStore.seed_session`; the trainer gives each copy of an agent
program one): its calls then sample with seeds derived from it and the call's number in the session
(:meth:`SessionStore.call_seed`), so a copy draws the same tokens whatever the other copies' requests that
its own share a batch with, and whatever order they arrive in.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from stratagym.agents.template_audit import first_divergence

__all__ = ["CallRecord", "SessionStore", "append_only_counts", "derive_seed", "session_file"]


@dataclass
class CallRecord:
    """One model call of one session (``index`` counts from 0 within the session)."""

    session: str
    index: int
    endpoint: str  # "chat" | "completions"
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    #: None for a session's first call; else whether this prompt extends the previous call's prompt + response
    append_only: bool | None = None
    first_diff: int | None = None
    #: for a reply cut by ``max_tokens`` inside a tool call (the parser drops the unfinished block): how many of
    #: its response ids the parsed reply keeps, up to the end of its last complete call; else None
    kept_ids: int | None = None
    #: this prompt parts from the previous call's ids inside that dropped tail: the cut, not a template, made
    #: it diverge (still ``append_only`` False: the ids do part there)
    cut_divergence: bool = False
    created: float = 0.0
    #: the sampling seed of the call (the request's, or the session's derived one); None: the global stream
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def append_only_counts(calls: Sequence[CallRecord]) -> tuple[int, int, int]:
    """``(checked, append_only, cut)`` over one session's calls: every call after the first is checked, except
    one whose prompt parts from the sampled ids only inside a cut reply's dropped tool call
    (``cut_divergence``, counted as ``cut``): that is the cut's doing, not the template's, and the append-only
    share (``rollout.append_only_min``'s bound) is about the template."""
    checked = sum(c.append_only is not None and not c.cut_divergence for c in calls)
    return checked, sum(c.append_only is True for c in calls), sum(c.cut_divergence for c in calls)


def derive_seed(seed: int, index: int) -> int:
    """A 63-bit seed for item ``index`` of what ``seed`` seeds: call ``index`` of a seeded session, or copy
    ``index`` of a program's task (sha256, so nearby seeds and indices give unrelated streams)."""
    digest = hashlib.sha256(f"stratagym-seed:{int(seed)}:{int(index)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def session_file(folder: Path, session: str) -> Path:
    """The JSONL file of a session's calls (a hash of its name: any header text is a safe file name)."""
    return folder / f"{hashlib.sha256(session.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}.jsonl"


class SessionStore:
    """Every call by session, in memory and, given ``folder``, on disk."""

    def __init__(self, folder: str | os.PathLike[str] | None = None):
        self.folder = Path(folder) if folder is not None else None
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
        self._calls: dict[str, list[CallRecord]] = {}
        self._seeds: dict[str, int] = {}
        self._started: dict[str, int] = {}  # calls a seeded session has started (the next call's number)
        self._lock = threading.Lock()

    def seed_session(self, session: str, seed: int) -> None:
        """Seed ``session``: its calls sample with :func:`derive_seed` (seed, the call's number), counted in
        the order its requests arrive (a program that calls the model from one task at a time, as agent
        loops do, numbers its calls the same way in every run)."""
        with self._lock:
            self._seeds[session] = int(seed)
            self._started[session] = 0

    def call_seed(self, session: str) -> int | None:
        """The seed of the session's next call (and count it), or None for an unseeded session."""
        with self._lock:
            if session not in self._seeds:
                return None
            index = self._started[session]
            self._started[session] = index + 1
            return derive_seed(self._seeds[session], index)

    def add(self, session: str, **fields: Any) -> CallRecord:
        """Append a call to ``session`` (checked against the session's previous call) and persist it."""
        with self._lock:
            calls = self._calls.setdefault(session, [])
            record = CallRecord(session=session, index=len(calls), created=time.time(), **fields)
            if calls:
                prev = calls[-1]
                at = first_divergence(prev.prompt_ids + prev.response_ids, record.prompt_ids)
                record.append_only, record.first_diff = at is None, at
                record.cut_divergence = (at is not None and prev.kept_ids is not None
                                         and at >= len(prev.prompt_ids) + prev.kept_ids)
            calls.append(record)
            if self.folder is not None:
                line = json.dumps(record.to_dict(), ensure_ascii=False) + "\n"
                with open(session_file(self.folder, session), "a", encoding="utf-8") as fh:
                    fh.write(line)
                    fh.flush()
                    os.fsync(fh.fileno())
        return record

    def calls(self, session: str) -> list[CallRecord]:
        with self._lock:
            return list(self._calls.get(session, []))

    def pop(self, session: str) -> list[CallRecord]:
        """Remove a session's calls (and its seed) from memory and return them (its file, if any, stays)."""
        with self._lock:
            self._seeds.pop(session, None)
            self._started.pop(session, None)
            return self._calls.pop(session, [])

    def clear(self) -> None:
        """Forget every session in memory, with the seeds (files stay)."""
        with self._lock:
            self._calls.clear()
            self._seeds.clear()
            self._started.clear()

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._calls)

    def summary(self) -> dict[str, dict[str, int]]:
        """Per session: calls, then :func:`append_only_counts` (calls checked, the append-only ones among them,
        and the divergences a cut reply made, which are not checked)."""
        with self._lock:
            return {s: {"calls": len(c), **dict(zip(("checked", "append_only", "cut"), append_only_counts(c)))}
                    for s, c in self._calls.items()}
