"""PDDL -> SAS translations on disk, so a new process skips the translation of a game met before.

A reset into a game the *process* has never seen is dominated by one translation (~150 ms of ~190 ms,
see :mod:`.speedups`); the in-process LRU cache only helps the process that paid for it. A training run,
each of its subprocess env workers and each Ray worker would otherwise translate every game again.
This module keeps the result of each translation -- the SAS text, the only thing a translation
computes that is not cheap to redo -- in one file per translation, shared by every process of the
machine (as a user's cache is):

* **what is stored**: the SAS text, zlib-compressed (~10x), behind a header holding the full key. The
  other half of ``fast_downward.pddl2sas``'s result, the parsed and normalised PDDL task, is rebuilt on
  a hit by the same two calls the translator starts with (``parse_task`` + ``normalize``, ~7 ms):
  the translation does not change that object afterwards (``tests/alfworld/test_disk_cache.py``
  compares the two pickles), and rebuilding it means nothing but text is ever read back -- no pickle
  loaded from a folder other processes write.
* **key**: sha256 over a format number, the translator's version (:func:`translator_version`: the
  source of fast-downward's translator as installed, of :mod:`.fast_translate` and :mod:`.speedups`,
  the textworld and Python versions), the mode (plain / optimised for the planner), the domain text and
  the problem text. Any code change gives new keys, so a stale result is never served; old entries age
  out by the eviction below.
* **where**: ``$STRATAGYM_ALFWORLD_SAS_CACHE`` when that is set, else ``alfworld-sas`` in the ALFWorld
  cache root (:func:`stratagym.envs.alfworld.paths.cache_root`: ``$STRATAGYM_ALFWORLD_CACHE``, else the
  project cache -- ``$STRATAGYM_CACHE``, ``<repo>/build`` in a source checkout, ``~/.cache/stratagym``
  for an installed package), the one folder this env family writes to.
* **off switch**: ``STRATAGYM_ALFWORLD_DISK_CACHE=0`` (or the env's / engine's ``disk_cache=False``).
* **safe**: a write is :func:`stratagym.atomic.atomic_write` (a temporary file in the same folder,
  fsynced, then ``os.replace``\\ d onto its name), so a reader sees a whole file or none, and
  concurrent writers of one key (same content) just replace each other. A file that is truncated, corrupt, of another key or unreadable is a miss:
  the game is translated again and the file rewritten. A folder that cannot be written (read-only, full
  disk) means no caching, with one warning per process, never an error.
* **bounded**: at most ``$STRATAGYM_ALFWORLD_DISK_CACHE_MAX`` entries (default 2,000, 5-25 KB each once
  compressed: under 50 MB). The folder is scanned on a process's first write and every
  :data:`SCAN_EVERY` writes after, never on a read; above the cap the least recently used entries (a
  hit refreshes a file's mtime) are removed down to 90% of it, and temporary files left by a killed
  writer are removed after an hour.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import threading
import warnings
import zlib
from pathlib import Path
from typing import Any

from stratagym.atomic import atomic_write
from stratagym.envs.alfworld import fast_translate, paths
from stratagym.errors import ConfigError

__all__ = ["cache_dir", "enabled", "max_entries", "translator_version", "key", "load", "store", "evict", "stats",
           "reset_stats", "rebuild_task", "FORMAT", "SCAN_EVERY"]

#: Bumped when the file layout changes (it is part of every key).
FORMAT = 1
_MAGIC = b"stratagym-alfworld-sas"
_SUFFIX = ".sasz"
#: Writes between two scans of the folder for eviction (plus one on each process's first write).
SCAN_EVERY = 64
_DEFAULT_MAX = 2000
_TMP_MAX_AGE_S = 3600.0

_LOCK = threading.Lock()
_version: str | None = None
_writes_since_scan = -1  # -1: this process has not scanned yet
_warned = False
_stats = {"disk_hits": 0, "disk_misses": 0, "disk_writes": 0, "disk_bad_entries": 0, "disk_write_errors": 0,
          "disk_evicted": 0}

_ON = {"1", "true", "yes", "on"}
_OFF = {"0", "false", "no", "off"}


def enabled(override: bool | None = None) -> bool:
    """Whether the disk cache is used: ``override`` if given, else ``$STRATAGYM_ALFWORLD_DISK_CACHE`` (default on)."""
    if override is not None:
        return bool(override)
    value = os.environ.get("STRATAGYM_ALFWORLD_DISK_CACHE", "").strip().lower()
    if not value or value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigError(f"STRATAGYM_ALFWORLD_DISK_CACHE={value!r} is not understood; set it to 0 (off) or 1 (on)")


def max_entries() -> int:
    """The entry cap: ``$STRATAGYM_ALFWORLD_DISK_CACHE_MAX`` (default 2,000)."""
    value = os.environ.get("STRATAGYM_ALFWORLD_DISK_CACHE_MAX", "").strip()
    if not value:
        return _DEFAULT_MAX
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"STRATAGYM_ALFWORLD_DISK_CACHE_MAX={value!r} must be a whole number >= 1 "
                          "(entries kept, default 2000); to switch the cache off set STRATAGYM_ALFWORLD_DISK_CACHE=0")
    return n


def cache_dir() -> Path:
    """The folder of the entries (see the module docstring); not created here."""
    env = os.environ.get("STRATAGYM_ALFWORLD_SAS_CACHE")
    if env:
        return Path(env).expanduser()
    return paths.cache_root() / "alfworld-sas"


def translator_version() -> str:
    """A digest of everything besides its input that a translation's output could depend on (computed once).

    Sources rather than version numbers for the translator itself, so an edited or patched install (or a
    change to this package's faster translator) never reads results of the code it replaced.
    """
    global _version
    if _version is not None:
        return _version
    import importlib.metadata
    import importlib.util

    import fast_downward

    h = hashlib.sha256(f"format {FORMAT}\npython {sys.version_info[0]}.{sys.version_info[1]}\n".encode())
    for dist in ("fast_downward_textworld", "textworld"):
        try:
            h.update(f"{dist} {importlib.metadata.version(dist)}\n".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{dist} ?\n".encode())
    fd_root = Path(fast_downward.__file__).parent
    sources = [fd_root / "__init__.py", *sorted((fd_root / "translate").rglob("*.py")),
               Path(fast_translate.__file__),
               # speedups imports this module: its source is found without importing it (no import cycle)
               Path(importlib.util.find_spec("stratagym.envs.alfworld.speedups").origin)]
    for path in sources:
        with contextlib.suppress(OSError):
            data = path.read_bytes()
            h.update(f"{path.relative_to(path.parents[1])} {len(data)}\n".encode())
            h.update(data)
    _version = h.hexdigest()
    return _version


def key(domain: str, problem: str, optimize: bool) -> str:
    """The entry's name: sha256 of the format, translator version, mode, domain and problem (length-prefixed)."""
    h = hashlib.sha256()
    for part in (translator_version(), "optimize" if optimize else "plain", domain, problem):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _path(k: str) -> Path:
    return cache_dir() / (k + _SUFFIX)


def load(domain: str, problem: str, optimize: bool) -> "tuple[Any, str] | None":
    """``pddl2sas(domain, problem, optimize=optimize)``'s result from disk, or None (absent or unusable)."""
    k = key(domain, problem, optimize)
    path = _path(k)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        _stats["disk_misses"] += 1
        return None
    except OSError:  # unreadable: a miss; the write after the translation will try to replace it
        _stats["disk_misses"] += 1
        _stats["disk_bad_entries"] += 1
        return None
    sas = _decode(blob, k)
    if sas is None:
        _stats["disk_misses"] += 1
        _stats["disk_bad_entries"] += 1
        return None
    try:
        task = rebuild_task(domain, problem)
    except Exception:  # noqa: BLE001 -- the translator would have failed the same way: let it say so
        _stats["disk_misses"] += 1
        return None
    _stats["disk_hits"] += 1
    with contextlib.suppress(OSError):
        os.utime(path)  # the eviction removes the least recently *used* entries
    return task, sas


def _header(k: str) -> bytes:
    """An entry's first line: the magic, the format and the full key (a renamed or swapped file is a miss)."""
    return _MAGIC + b" %d " % FORMAT + k.encode("ascii") + b"\n"


def _decode(blob: bytes, k: str) -> str | None:
    header = _header(k)
    if not blob.startswith(header):
        return None
    try:
        d = zlib.decompressobj()
        data = d.decompress(blob[len(header):])
        if not d.eof or d.unused_data:  # truncated, or something appended
            return None
        return data.decode("utf-8")
    except (zlib.error, UnicodeDecodeError):  # corrupt (zlib checks its adler32)
        return None


def rebuild_task(domain: str, problem: str) -> Any:
    """The parsed, normalised PDDL task ``pddl2sas`` returns beside the SAS text: its own first two steps."""
    saved = list(sys.argv)
    sys.argv = ["translate.py", "domain", "task"]  # fast-downward's options module parses argv on import
    try:
        from fast_downward.translate import normalize
        from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions

        with contextlib.redirect_stdout(io.StringIO()):
            task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                                lisp_parser.parse_nested_list(problem.split("\n")))
            normalize.normalize(task)
    finally:
        sys.argv[:] = saved
    return task


def store(domain: str, problem: str, optimize: bool, sas: str) -> bool:
    """Write one translation's SAS text (atomically); False when the folder cannot be written (warned once)."""
    global _writes_since_scan
    k = key(domain, problem, optimize)
    folder = cache_dir()
    try:
        atomic_write(folder / (k + _SUFFIX), _header(k) + zlib.compress(sas.encode("utf-8"), 1))
    except OSError as exc:
        _stats["disk_write_errors"] += 1
        _warn_once(f"ALFWorld's translation cache cannot write to {folder} ({exc}); games are translated "
                   "in every new process. Point STRATAGYM_ALFWORLD_SAS_CACHE at a writable folder, or set "
                   "STRATAGYM_ALFWORLD_DISK_CACHE=0 to switch the cache off.")
        return False
    _stats["disk_writes"] += 1
    with _LOCK:
        _writes_since_scan += 1
        scan = _writes_since_scan == 0 or _writes_since_scan >= SCAN_EVERY
        if scan:
            _writes_since_scan = 0
    if scan:
        evict()
    return True


def evict(limit: int | None = None) -> int:
    """Remove the least recently used entries above ``limit`` (default :func:`max_entries`) and stale temp files.

    Removes down to 90% of the limit, so the next scans find nothing to do for a while. Returns how many
    entries were removed; errors (a file another process removed first, a read-only folder) are ignored.
    """
    import time

    limit = max_entries() if limit is None else int(limit)
    entries: list[tuple[float, str]] = []
    now = time.time()
    try:
        with os.scandir(cache_dir()) as it:
            for e in it:
                try:
                    if e.name.endswith(_SUFFIX):
                        entries.append((e.stat().st_mtime, e.path))
                    elif e.name.endswith(".tmp") and now - e.stat().st_mtime > _TMP_MAX_AGE_S:
                        os.unlink(e.path)
                except OSError:
                    continue
    except OSError:
        return 0
    if len(entries) <= limit:
        return 0
    entries.sort()
    removed = 0
    for _, path in entries[: len(entries) - max(1, int(limit * 0.9))]:
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed += 1
    _stats["disk_evicted"] += removed
    return removed


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def stats() -> dict[str, int]:
    """Counters since the last :func:`reset_stats` (this process)."""
    return dict(_stats)


def reset_stats() -> None:
    for k in _stats:
        _stats[k] = 0
