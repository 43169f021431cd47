"""Committed transcripts: one compressed, content-addressed archive per result record.

An eval's progress file (:mod:`stratagym.eval.transcripts`) holds every turn, but it lives in ``runs/``,
which git ignores: a board row whose transcripts stay there cannot be read by anyone else. This module
turns a record's transcripts into a file that is committed beside the records and that the record names by
content hash, so a reader of the repository alone can open every turn behind a figure and check that
nobody swapped it.

* **The archive** (``<sha256>.jsonl.gz`` in the transcripts folder, ``leaderboard/transcripts/`` for the
  committed board): gzip of canonical JSON lines. Line 1 is a header (schema, the record's id, how many
  episodes are kept of how many); then one line per kept episode, in the record's episode order:
  ``seed``, ``task_id``, ``episode`` (the outcome exactly as the record holds it), ``steps`` and
  ``final_observation``.
* **The hash** is sha256 over the *uncompressed* lines, so the name does not depend on the zlib that
  compressed them; :func:`read_archive` decompresses, re-hashes and refuses a file whose content does not
  match its name.
* **The reference** is the record's ``transcripts`` field: ``{"schema", "sha256", "episodes", "of"}``.
  The field is left out of ``record_id`` (:mod:`stratagym.eval.records`): attaching transcripts to a
  record, or back-filling them later, does not change which evaluation it is.
* **The size budget.** An archive must fit ``budget_bytes`` compressed (default
  :data:`DEFAULT_BUDGET_BYTES`). A larger one keeps whole episodes in the record's order, the first ones
  of every seed alike, as many as fit; the reference says how many (``episodes`` of ``of``) and the site
  says which episodes have none. The committed board stays under ~50 MB this way (docs/leaderboard.md).
* **Checked against the record.** Every archived episode's outcome must equal the record's episode for the
  same (seed, task id), and the number of steps its turns: a transcript cannot be attached to the wrong
  evaluation (:func:`check_archive`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from stratagym.atomic import atomic_write
from stratagym.errors import UserError
from stratagym.eval.transcripts import Transcript, episodes_by_key, read_transcripts

__all__ = ["ARCHIVE_SCHEMA", "DEFAULT_BUDGET_BYTES", "ArchiveError", "build_archive", "write_archive",
           "read_archive", "check_archive", "archived_transcripts", "archive_name", "record_transcripts"]

ARCHIVE_SCHEMA = "stratagym.transcripts/1"
#: Compressed bytes one record's archive may take (2 MB: 500 SearchQA episodes of an LLM take ~0.1 MB).
DEFAULT_BUDGET_BYTES = 2_000_000


class ArchiveError(UserError, ValueError):
    """A transcript archive that is missing, corrupt, or does not belong to its record."""


def _line(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def archive_name(sha256: str) -> str:
    """The file name of the archive whose uncompressed content hashes to ``sha256``."""
    return f"{sha256}.jsonl.gz"


def _episodes_in_order(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [e for e in record.get("episodes") or [] if isinstance(e, Mapping)]


def build_archive(record: Mapping[str, Any], transcripts: Mapping[tuple[int, str], Transcript], *,
                  budget_bytes: int = DEFAULT_BUDGET_BYTES) -> tuple[bytes, dict[str, Any]]:
    """The uncompressed archive of ``record``'s ``transcripts`` and the reference the record carries.

    Episodes without a transcript are left out; when the compressed archive would exceed
    ``budget_bytes``, the first ``k`` episodes of every seed (record order) are kept, for the largest ``k``
    that fits. Raises :class:`ArchiveError` when not one episode has a transcript."""
    by_seed: dict[Any, list[Mapping[str, Any]]] = {}
    for ep in _episodes_in_order(record):
        if (ep.get("seed"), str(ep.get("task_id"))) in transcripts:
            by_seed.setdefault(ep.get("seed"), []).append(ep)
    total = sum(len(v) for v in by_seed.values())
    if total == 0:
        raise ArchiveError(f"none of record {str(record.get('record_id'))[:12]}'s {len(_episodes_in_order(record))} "
                           "episodes has a transcript in what was given; give the progress file of the eval that "
                           "wrote this record (`stratagym eval --out R.json` keeps it as R.json.progress.jsonl)")

    def lines_for(k: int) -> list[bytes]:
        kept = {id(ep) for eps in by_seed.values() for ep in eps[:k]}
        body = []
        for ep in _episodes_in_order(record):
            if id(ep) not in kept:
                continue
            t = transcripts[(ep.get("seed"), str(ep.get("task_id")))]
            body.append(_line({"seed": ep.get("seed"), "task_id": str(ep.get("task_id")), "episode": ep,
                               "steps": t.get("steps"), "final_observation": t.get("final_observation")}))
        head = _line({"schema": ARCHIVE_SCHEMA, "record_id": record.get("record_id"), "episodes": len(body), "of": total})
        return [head, *body]

    longest = max(len(v) for v in by_seed.values())
    k = longest
    data = b"".join(lines_for(k))
    if len(gzip.compress(data, mtime=0)) > budget_bytes:
        lo, hi = 0, longest  # the largest k that fits: lines_for(lo) fits (or lo == 0), lines_for(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if len(gzip.compress(b"".join(lines_for(mid)), mtime=0)) <= budget_bytes:
                lo = mid
            else:
                hi = mid
        if lo == 0:
            raise ArchiveError(f"one episode per seed already exceeds the budget of {budget_bytes} bytes; "
                               "raise --budget-mb")
        k = lo
        data = b"".join(lines_for(k))
    kept = sum(min(k, len(v)) for v in by_seed.values())
    ref = {"schema": ARCHIVE_SCHEMA, "sha256": hashlib.sha256(data).hexdigest(), "episodes": kept, "of": total}
    return data, ref


def write_archive(record: Mapping[str, Any], transcripts: Mapping[tuple[int, str], Transcript],
                  folder: str | os.PathLike[str], *, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> dict[str, Any]:
    """Write ``record``'s archive into ``folder`` (atomically; an identical one is left as it is) and return
    the reference to store as the record's ``transcripts`` field."""
    data, ref = build_archive(record, transcripts, budget_bytes=budget_bytes)
    path = Path(folder) / archive_name(ref["sha256"])
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, gzip.compress(data, compresslevel=9, mtime=0))
    return ref


def read_archive(folder: str | os.PathLike[str], ref: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and episode lines of the archive ``ref`` names, after checking its content hash."""
    sha = str(ref.get("sha256", "")) if isinstance(ref, Mapping) else ""
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise ArchiveError(f"the record's transcripts reference has no valid sha256 ({sha[:70]!r})")
    path = Path(folder) / archive_name(sha)
    try:
        data = gzip.decompress(path.read_bytes())
    except FileNotFoundError:
        raise ArchiveError(f"transcript archive {path} is missing; restore it from git or re-attach the "
                           "transcripts (`stratagym leaderboard attach`)") from None
    except (OSError, EOFError) as exc:
        raise ArchiveError(f"transcript archive {path} is not gzip data ({exc}); restore it from git") from None
    if hashlib.sha256(data).hexdigest() != sha:
        raise ArchiveError(f"transcript archive {path} does not hash to its name (edited after it was written?); "
                           "restore it from git")
    rows = [json.loads(line) for line in data.splitlines() if line.strip()]
    if not rows or rows[0].get("schema") != ARCHIVE_SCHEMA:
        raise ArchiveError(f"{path} is not a {ARCHIVE_SCHEMA} archive")
    return rows[0], rows[1:]


def check_archive(record: Mapping[str, Any], folder: str | os.PathLike[str]) -> dict[tuple[int, str], Transcript]:
    """The transcripts of ``record``'s archive, after checking that they belong to it: the header names the
    record, the counts match the reference, and every episode's outcome equals the record's and has as
    many steps as it took turns. Raises :class:`ArchiveError` on any mismatch."""
    ref = record.get("transcripts")
    rid = str(record.get("record_id"))
    if not isinstance(ref, Mapping):
        raise ArchiveError(f"record {rid[:12]} has no transcripts reference")
    header, rows = read_archive(folder, ref)
    if header.get("record_id") != rid:
        raise ArchiveError(f"archive {str(ref.get('sha256'))[:12]} belongs to record {str(header.get('record_id'))[:12]}, "
                           f"not {rid[:12]}")
    if (header.get("episodes"), header.get("of")) != (ref.get("episodes"), ref.get("of")) or len(rows) != ref.get("episodes"):
        raise ArchiveError(f"archive {str(ref.get('sha256'))[:12]}: episode counts differ from the record's reference")
    mine = episodes_by_key(record)
    out: dict[tuple[int, str], Transcript] = {}
    for row in rows:
        key = (row.get("seed"), str(row.get("task_id")))
        if mine.get(key) != row.get("episode"):
            raise ArchiveError(f"archive {str(ref.get('sha256'))[:12]}: episode {key} differs from record {rid[:12]}'s")
        steps = row.get("steps")
        turns = row["episode"].get("turns")
        if not isinstance(steps, list) or (isinstance(turns, int) and len(steps) != turns):
            raise ArchiveError(f"archive {str(ref.get('sha256'))[:12]}: episode {key} has "
                               f"{len(steps) if isinstance(steps, list) else 'no'} steps for {turns} turns")
        out[key] = {"steps": steps, "final_observation": row.get("final_observation")}
    return out


def archived_transcripts(records: Iterable[Mapping[str, Any]],
                         folder: str | os.PathLike[str]) -> dict[str, dict[tuple[int, str], Transcript]]:
    """``record_id -> {(seed, task_id): transcript}`` for every record that references an archive in
    ``folder``, each checked by :func:`check_archive` (a bad archive raises: a site never shows a transcript
    that does not belong to its row)."""
    return {str(r["record_id"]): check_archive(r, folder) for r in records if isinstance(r.get("transcripts"), Mapping)}


def record_transcripts(record: Mapping[str, Any], progress: str | os.PathLike[str] | None,
                       archives: str | os.PathLike[str]) -> tuple[dict[tuple[int, str], Transcript], Path | None]:
    """An eval record's transcripts and the file they came from: its progress file where that file is there
    (the eval's own, beside a fresh record), else the committed archive the record names in ``archives``
    (checked by :func:`check_archive`: a board record on a clone). A record with neither has none ({})."""
    if progress is not None and Path(progress).is_file():
        return read_transcripts(progress)[1], Path(progress)
    if isinstance(record.get("transcripts"), Mapping):
        return check_archive(record, archives), Path(archives) / archive_name(str(record["transcripts"].get("sha256")))
    return {}, None if progress is None else Path(progress)
