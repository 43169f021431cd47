"""An index folder's format marks and its atomic publication, shared by :mod:`.index` (every backend) and
:mod:`.dense_build` (the Search-R1 import), which both write index folders: kept here, below both, so
neither imports the other to write one."""

from __future__ import annotations

import tempfile
from pathlib import Path

from stratagym.atomic import publish_folder
from stratagym.errors import ConfigError

__all__ = ["MANIFEST_NAME", "FORMAT", "VERSION"]

MANIFEST_NAME = "manifest.json"
FORMAT = "stratagym-search-index"
VERSION = 1


def _staging_dir(out: Path) -> Path:
    """A fresh folder beside ``out`` (same file system, so the final rename is atomic)."""
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))


def _replace_dir(staging: Path, out: Path) -> None:
    """Move the finished ``staging`` folder to ``out``, replacing an older index there."""
    if out.exists() and not (out / MANIFEST_NAME).exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists and is not a stratagym index; choose another --out")
    publish_folder(staging, out)
