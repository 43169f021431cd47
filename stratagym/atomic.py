"""Atomic file writes, the one implementation every layer uses.

A reader (or a process that was killed mid-write and restarted) sees either the old file or the new
one, never a partial one: the data goes to a temporary file in the same folder, is flushed and fsynced,
then ``os.replace`` moves it over the target and the folder entry is fsynced too.
:func:`atomic_write_with` does the same for a library that writes a file by path itself (safetensors'
``save_file``, matplotlib's ``savefig``). :func:`publish_dir` does it for a whole folder (a model
export, a checkpoint, an index): it is built in a temporary folder beside the target and renamed in only
once every file is on disk; :func:`publish_folder` is its second half, for a folder that some other
tool already built beside the target (Anserini's index writer, a checkpoint's staging folder).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = [
    "atomic_write",
    "atomic_write_lines",
    "atomic_write_with",
    "follow_umask",
    "share_weights",
    "umask_mode",
    "write_json_atomic",
    "fsync_dir",
    "fsync_tree",
    "publish_dir",
    "publish_folder",
]


def umask_mode(base: int = 0o666) -> int:
    """``base`` less the process's umask: the mode ``open`` gives a new file (0644 under the usual 022), or with
    ``0o777`` a new folder. Read from ``/proc/self/status`` where Linux offers it, since setting the umask to read
    it back would change it, for a moment, for every thread of the process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return base & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def follow_umask(path: str | os.PathLike[str]) -> None:
    """Give a file that a library wrote the ordinary permissions of the umask: safetensors' ``save_file`` writes
    its files private (0600), which a checkpoint others read, or commit, must not be."""
    os.chmod(path, umask_mode())


def share_weights(folder: str | os.PathLike[str]) -> None:
    """:func:`follow_umask` for every safetensors file under ``folder``: ``save_pretrained`` and safetensors'
    ``save_file`` write them private (0600), and a model folder others read, or commit, must not be."""
    for weights in Path(folder).rglob("*.safetensors"):
        follow_umask(weights)


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


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """Flush every file under ``root`` and every folder entry (``root`` included), so a rename that
    publishes ``root`` never exposes a file whose data is still only in the page cache. Symbolic links
    are not followed."""
    root = Path(root)
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    for d in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
        fsync_dir(d)


def _stem(name: str) -> str:
    """``name`` cut to 200 bytes for a temporary name built from it: with its random part and suffix
    that name stays under the file systems' 255-byte limit however long ``name`` is (a target that fits
    must not fail on its temporary file)."""
    return name.encode("utf-8")[:200].decode("utf-8", errors="ignore")


def _temp_beside(path: Path, suffix: str = "") -> Path:
    """A fresh temporary name in ``path``'s folder (hidden, random, ``.tmp`` + ``suffix``), for a write that is
    renamed over ``path`` once complete."""
    return path.parent / f".{_stem(path.name)}.{uuid.uuid4().hex[:12]}.tmp{suffix}"


def atomic_write_lines(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> Path:
    """Write the byte ``chunks`` to ``path`` atomically (see the module docstring).

    The file gets the ordinary permissions of the umask (0644 under the usual 022), as ``open`` would give
    it: ``mkstemp`` makes its file private (0600), which a record or a transcript archive that others read
    must not be. The temporary file is created exclusively (``O_EXCL``) under a random name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` atomically."""
    return atomic_write_lines(path, [data.encode("utf-8") if isinstance(data, str) else data])


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[Path], Any]) -> Path:
    """Run ``write(tmp)`` for a library that writes a file by path itself, then publish ``tmp`` as
    ``path`` atomically (fsync, ``os.replace``, fsync of the folder). The temporary name sits beside
    ``path`` and ends in the same extension (a writer that picks its format from the name picks the same
    one). The file gets the umask's permissions whatever mode the library gave it (safetensors' ``save_file``
    makes it 0600). Removed if ``write`` raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path, path.suffix[:16])
    try:
        write(tmp)
        follow_umask(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 1) -> Path:
    """Write ``obj`` as sorted-key UTF-8 JSON plus a newline to ``path`` atomically."""
    return atomic_write(path, json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False) + "\n")


def publish_dir(out_dir: str | os.PathLike[str], write: Callable[[Path], Any], *,
                keep_if: Callable[[Path], bool] | None = None) -> Path:
    """Run ``write(tmp_folder)`` and move the folder to ``out_dir`` only once it completed.

    The temporary folder sits beside ``out_dir`` (same file system, so the rename is atomic) and is
    removed if ``write`` raises (or the process is interrupted), so ``out_dir`` never holds a half-written
    folder. The move is :func:`publish_folder` (fsyncs, an older ``out_dir`` replaced only once the new
    one is complete, ``keep_if`` for concurrent builds of the same thing). The folder gets the ordinary
    permissions of the umask, and so do the safetensors files ``write`` leaves in it (:func:`publish_folder`).
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{_stem(out.name)}.tmp-", dir=out.parent))
    try:
        write(tmp)
        publish_folder(tmp, out, keep_if=keep_if)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already unless write or the move failed
    return out


def publish_folder(tmp: str | os.PathLike[str], out: str | os.PathLike[str], *,
                   keep_if: Callable[[Path], bool] | None = None) -> Path:
    """Move the finished folder ``tmp`` to ``out`` (both on one file system: the rename is atomic).

    Every file and folder under ``tmp`` is fsynced before the rename and ``out``'s parent after it. An
    existing ``out`` stays as it was until the new one is complete: it is renamed aside, the new one
    renamed in, and only then is the old one removed. ``keep_if`` is for builds that several processes
    may run at once, each producing the same folder: when it says an existing ``out`` is already a
    complete copy (before the move, or because another process renamed its copy in first), that copy
    stays and ``tmp`` is removed. On any other error ``tmp`` is left to the caller. The folder gets the
    umask's permissions (``mkdtemp`` makes it private), and so do the safetensors files in it.
    """
    tmp, out = Path(tmp), Path(out)
    os.chmod(tmp, umask_mode(0o777))  # a tmp from mkdtemp is private; the published folder is read by others
    share_weights(tmp)
    fsync_tree(tmp)
    if keep_if is not None and out.is_dir() and keep_if(out):
        shutil.rmtree(tmp, ignore_errors=True)
        return out
    old = None
    if out.exists() or out.is_symlink():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        _remove(old)
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except OSError:
        if keep_if is not None and out.is_dir() and keep_if(out):  # another process published first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            if old is not None and not (out.exists() or out.is_symlink()):
                os.replace(old, out)  # put the previous folder back
            raise
    fsync_dir(out.parent)
    if old is not None:
        _remove(old)
    return out


def _remove(path: Path) -> None:
    """Remove a file, link or folder tree at ``path``, if any (best effort for a folder's contents)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
