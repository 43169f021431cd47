"""Atomic file writes, the one implementation every layer uses.

A reader (or a process that was killed mid-write and restarted) sees either the old file or the new
one, never a partial one: the data goes to a temporary file in the same folder, is flushed and fsynced,
then ``os.replace`` moves it over the target and the folder entry is fsynced too. :func:`publish_dir`
does the same for a whole folder (a model export, an imported model): it is built in a temporary folder
beside the target and renamed in only once every file is on disk.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["atomic_write", "atomic_write_lines", "write_json_atomic", "fsync_dir", "publish_dir"]


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


def publish_dir(out_dir: str | os.PathLike[str], write: Callable[[Path], Any]) -> Path:
    """Run ``write(tmp_folder)`` and move the folder to ``out_dir`` only once it completed.

    The temporary folder sits beside ``out_dir`` (same file system, so the rename is atomic) and is
    removed if ``write`` raises (or the process is interrupted), so ``out_dir`` never holds a half-written
    folder. Every file is fsynced before the rename and the parent folder after it. A previous
    ``out_dir`` stays as it was until the new one is complete: it is renamed aside, the new one renamed
    in, and only then is the old one removed. The folder gets the ordinary permissions of the umask
    (``mkdtemp`` makes it private).
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    try:
        write(tmp)
        for p in tmp.rglob("*"):
            if p.is_file() and not p.is_symlink():
                with open(p, "rb") as fh:
                    os.fsync(fh.fileno())
        for d in [tmp, *(p for p in tmp.rglob("*") if p.is_dir() and not p.is_symlink())]:
            fsync_dir(d)
        old = None
        if out.exists() or out.is_symlink():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            if old.exists():
                shutil.rmtree(old)
            os.replace(out, old)
        os.replace(tmp, out)
        fsync_dir(out.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
