"""The one JSON-lines reader: every ``.jsonl`` file the project reads goes through :func:`read_jsonl`.

A JSONL file is one JSON object per line. Two kinds are read:

* **input** (a dataset, demonstrations, bundled games): a bad line is the user's to fix, so it raises
  the caller's error class (a :class:`~stratagym.errors.ConfigError` by default, which the CLI prints and
  exits 2 on) naming the file and the line: not UTF-8, not valid JSON (with the column, and a hint when
  the last line has no newline: a truncated file), or not an object;
* **logs this project appends to** (``metrics.jsonl``): a process killed mid-write leaves a torn last
  row, which belongs to a step that is redone, so ``skip_bad=True`` passes over bad lines instead.

Blank lines are skipped in both. A file whose name ends in ``.gz`` is read through gzip (committed,
compressed progress files and transcripts). (A resumable evaluation's progress file has its own reader,
``stratagym.eval.harness``: it needs the byte length of the intact prefix, to cut a torn tail off.)
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from stratagym.errors import ConfigError

__all__ = ["JSONLine", "read_jsonl"]


class JSONLine(NamedTuple):
    """One object of a JSONL file: its 1-based line ``number``, the parsed ``value`` and the line's
    ``text`` as read (without the newline), for a caller that rewrites lines unchanged."""

    number: int
    value: dict[str, Any]
    text: str


def read_jsonl(path: str | os.PathLike[str], *, error: type[Exception] = ConfigError,
               skip_bad: bool = False) -> Iterator[JSONLine]:
    """Yield every object of the JSONL file ``path`` (see the module docstring), read line by line so
    that a large file is never held whole. A bad line raises ``error`` with a message naming the file and
    the line; with ``skip_bad`` it is passed over. A missing file is ``FileNotFoundError``: whether that
    is an error is the caller's to say."""
    path = Path(path)
    with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if skip_bad:
                    continue
                raise error(f"{path} is not UTF-8 text (line {number}: {exc.reason} at byte {exc.start}); "
                            "re-save it as UTF-8 (e.g. iconv -t UTF-8)") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                if skip_bad:
                    continue
                hint = " (the file looks truncated)" if not line.endswith("\n") else ""
                column = min(exc.pos, len(line.rstrip("\r\n"))) + 1  # 1-based, within the line's text
                raise error(f"{path}: line {number} is not valid JSON: {exc.msg} at column {column}{hint}; "
                            "expected one JSON object per line") from None
            if not isinstance(value, dict):
                if skip_bad:
                    continue
                raise error(f"{path}: line {number}: expected a JSON object, got {type(value).__name__}")
            yield JSONLine(number, value, line.rstrip("\r\n"))
