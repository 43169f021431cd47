"""Atomic file writes, the one implementation every layer uses.

A reader (or a process that was killed mid-write and restarted) sees either the old file or the new
one, never a partial one: the data goes to a temporary file in the same folder, is flushed and fsynced,
then ``os.replace`` moves it over the target and the folder entry is fsynced too.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

__all__ = ["atomic_write", "atomic_write_lines", "write_json_atomic", "fsync_dir"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (a rename is durable only once its folder is); a no-op where folders
    cannot be opened (Windows)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_lines(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> Path:
    """Write the byte ``chunks`` to ``path`` atomically (see the module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` atomically."""
    return atomic_write_lines(path, [data.encode("utf-8") if isinstance(data, str) else data])


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 1) -> Path:
    """Write ``obj`` as sorted-key UTF-8 JSON plus a newline to ``path`` atomically."""
    return atomic_write(path, json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False) + "\n")
