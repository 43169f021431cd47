"""Where ALFWorld files live: bundled games, the materialised game cache, ALFWorld's own data folder.

Nothing in this family writes outside two places:

* the **cache root** -- ``$STRATAGYM_ALFWORLD_CACHE`` if set, else ``alfworld/`` in the project cache
  (:func:`stratagym.paths.cache_dir`: ``<repo>/build`` in a source checkout, else ``~/.cache/stratagym``). It holds the materialised bundled games
  (``games/``), the default ``ALFWORLD_DATA`` folder that ``import alfworld`` insists on creating
  (``alfworld-data/``), and the scratch copies of fast-downward's shared library (``tmp/``);
* the **real ALFWorld data folder** when the user points ``ALFWORLD_DATA`` at one (read only).

The bundled compact games live in ``data/alfworld`` (``$STRATAGYM_ALFWORLD_DATA`` overrides it).
"""

from __future__ import annotations

import os
from pathlib import Path

from stratagym.paths import cache_dir

__all__ = [
    "REPO_ROOT",
    "bundled_dir",
    "cache_root",
    "user_alfworld_data",
    "REAL_SPLIT_DIRS",
]

REPO_ROOT = Path(__file__).resolve().parents[3]

#: Canonical split name -> folder under ``$ALFWORLD_DATA/json_2.1.1`` (alfworld's base_config.yaml).
REAL_SPLIT_DIRS = {
    "train": "train",
    "in_distribution": "valid_seen",
    "out_of_distribution": "valid_unseen",
}

#: The value of ``ALFWORLD_DATA`` as the user set it, captured before this package sets its own default.
_USER_ALFWORLD_DATA = os.environ.get("ALFWORLD_DATA")


def bundled_dir() -> Path:
    """Folder with the bundled compact games (``<split>.jsonl``) and the ALFWorld logic files."""
    return Path(os.environ.get("STRATAGYM_ALFWORLD_DATA", REPO_ROOT / "data" / "alfworld"))


def cache_root() -> Path:
    """The one folder this family writes to (see the module docstring)."""
    env = os.environ.get("STRATAGYM_ALFWORLD_CACHE")
    if env:
        return Path(env)
    return cache_dir("alfworld")


def user_alfworld_data() -> Path | None:
    """The real ALFWorld data folder the user configured (``ALFWORLD_DATA``), if any.

    Read at call time from the environment unless it is the default this package set itself.
    """
    value = os.environ.get("ALFWORLD_DATA")
    if not value:
        return None
    if _USER_ALFWORLD_DATA is None and Path(value) == default_alfworld_data():
        return None
    return Path(os.path.expandvars(os.path.expanduser(value)))


def default_alfworld_data() -> Path:
    """Where ``ALFWORLD_DATA`` points when the user did not set it (``import alfworld`` creates it)."""
    return cache_root() / "alfworld-data"
