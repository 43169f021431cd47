"""Which implementation of the step hot path's pure functions runs: the C twins or the Python ones.

``stratagym.envs._speedups`` (``stratagym/envs/_speedups.c``, built by ``pip install -e .`` when a C
compiler is there) holds exact twins of a few pure functions that every env step runs: BLAKE2b
(``hashing._digest``) and the context tracker's level update, ``sanitize_action`` for plain strings, the
``info`` dict, the Search-R1 turn parser, and a search's ``<information>`` block and its hash. Why: a SearchQA step runs right after a retrieval that
evicts the env's Python code from the CPU caches, and these few hundred instructions of C cost a
fraction of the interpreted code (``benchmarks/searchqa_env.py`` measures both).

The Python functions stay the reference: tests check every twin against them on arbitrary inputs,
and they are what runs when the extension is not built or ``STRATAGYM_NO_SPEEDUPS=1`` (any value but
empty or ``0``) is set when stratagym is imported. :func:`use` switches in a running process (for A/B
benchmarks and tests); each module that has twins registers a binder with :func:`bind`.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Callable

from stratagym.errors import ConfigError

__all__ = ["API", "SPEEDUPS", "ENABLED", "DISABLED_BY_ENV", "available", "bind", "use"]

#: Set when the environment asked for the pure-Python path (read once, at import).
DISABLED_BY_ENV: bool = os.environ.get("STRATAGYM_NO_SPEEDUPS", "") not in ("", "0")


#: The C module's interface version this code calls (``SPEEDUPS_API`` in _speedups.c).
API = 2


def _import() -> ModuleType | None:
    try:
        # by name: the C extension is no Python source, so import-linter would read a static import of it
        # as an import of its package, stratagym.envs (which imports everything in it)
        _speedups = importlib.import_module("stratagym.envs._speedups")
    except ImportError:  # not built (no compiler at install time): the pure-Python fallback
        return None
    if getattr(_speedups, "API", None) != API:  # built from older sources (a pull without a reinstall)
        warnings.warn(f"stratagym.envs._speedups was built from other sources (API {getattr(_speedups, 'API', None)}, "
                      f"this code needs {API}); running the pure-Python path. Rebuild it: make setup, or "
                      "pip install -e .", RuntimeWarning, stacklevel=2)
        return None
    return _speedups


#: The C module in use, or None when the Python references run.
SPEEDUPS: ModuleType | None = None if DISABLED_BY_ENV else _import()
ENABLED: bool = SPEEDUPS is not None

_BINDERS: list[Callable[[ModuleType | None], None]] = []


def available() -> bool:
    """Whether the C extension is built and importable (whatever is in use now)."""
    return _import() is not None


def bind(binder: Callable[[ModuleType | None], None]) -> None:
    """Register a module's binder and call it now: it points the module's hot-path names at the C
    module's twins, or at its own Python references when given None."""
    _BINDERS.append(binder)
    binder(SPEEDUPS)


def use(enabled: bool) -> None:
    """Switch every registered module to the C twins (``True``) or the Python references (``False``)
    in this process; the results are the same either way, only the speed differs."""
    global SPEEDUPS, ENABLED
    module = _import() if enabled else None
    if enabled and module is None:
        raise ConfigError("the C speed-ups (stratagym.envs._speedups) are not built; reinstall with a C compiler "
                          "present: pip install -e .")
    SPEEDUPS, ENABLED = module, module is not None
    for binder in _BINDERS:
        binder(module)
