"""``load_object``: the one way stratagym turns a ``"package.module:attr"`` string into the object.

Why strings: env entry points, scripted agents, tool sets and plug-ins are named lazily so that nothing
heavy is imported until it is used (``stratagym envs list`` never imports ALFWorld). This module sits in
the base layer, so the env contract, the registry, training and the leaderboard share it without
importing one another.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["load_object"]


def load_object(path: str) -> Any:
    """Import ``"package.module:attr"`` (attr may be dotted); a ValueError names the expected form."""
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
