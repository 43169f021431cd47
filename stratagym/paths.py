"""Where stratagym keeps what it builds (indexes, tiny models, materialised games): one rule for all.

``cache_dir()`` is ``$STRATAGYM_CACHE`` when set, else ``<repo>/build`` in a writable source checkout
(so a developer's caches stay inside the project and ``git clean`` removes them), else
``~/.cache/stratagym`` for installed packages.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["REPO_ROOT", "cache_dir", "slug"]

#: The source checkout's root when stratagym runs from one (``<root>/stratagym/paths.py``).
REPO_ROOT = Path(__file__).resolve().parents[1]


def cache_dir(*parts: str) -> Path:
    """The cache folder (see the module docstring), joined with ``parts``; not created here."""
    env = os.environ.get("STRATAGYM_CACHE")
    if env:
        root = Path(env).expanduser()
    elif (REPO_ROOT / "pyproject.toml").is_file() and os.access(REPO_ROOT, os.W_OK):
        root = REPO_ROOT / "build"
    else:
        root = Path.home() / ".cache" / "stratagym"
    return root.joinpath(*parts)


def slug(text: str) -> str:
    """A file-name-safe form of a label or id, the one rule for every path stratagym derives from user
    text: lower case, each run of characters other than ``a-z0-9`` becomes ``-`` (so ``/``, ``..`` and
    spaces cannot escape or split a folder), trimmed; ``x`` if nothing is left."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"
