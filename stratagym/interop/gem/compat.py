"""What stratagym needs around the ``gem`` package: importing it, and keeping its global randomness private.

* ``import gem`` runs ``logging.basicConfig(level=INFO)`` (gem/__init__.py), which would turn on INFO
  logging for the whole host process; :func:`import_gem` imports it with the root logger's level and
  handlers put back, and turns a missing package into a :class:`ConfigError` naming the extra.
* GEM's envs draw from the process-global ``random`` and ``numpy.random`` generators, and ``reset(seed)``
  reseeds both (gem/utils/seeding.py ``set_seed``; e.g. gem/envs/game_env/guess_the_number.py draws its
  number with ``random.randint``). Two GEM envs stepped in turn would then share one stream, so an
  episode would depend on its batch-mates, and a reset would reseed the trainer's generators.
  :class:`PrivateGlobalRandom` gives each env its own copy of ``random``'s state, swapped in around every
  call into GEM under one process-wide lock, and of ``numpy.random``'s around the calls that reseed it
  (``reset``). Why not numpy's on every call: swapping it in and out costs ~0.25 ms of CPU, ``random``'s
  ~35 us (measured here; a step of GEM's Guess The Number costs ~12 us), and no env in gem-llm 0.1.0
  draws from the global ``numpy.random`` (they use ``random``, or a ``default_rng`` of their own, as
  Sokoban does).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from typing import Any, Iterator

import numpy as np

from stratagym.errors import ConfigError

__all__ = ["import_gem", "PrivateGlobalRandom", "GEM_EXTRA_HINT"]

GEM_EXTRA_HINT = "pip install 'stratagym[gem]' (GEM, package gem-llm==0.1.0)"
_IMPORT_LOCK = threading.Lock()


def import_gem() -> Any:
    """The ``gem`` module, imported without changing the root logger; ConfigError if it is not installed."""
    with _IMPORT_LOCK:
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        try:
            import gem
        except ImportError as exc:
            raise ConfigError(f"GEM is not installed ({exc.name or exc}): {GEM_EXTRA_HINT}") from None
        finally:
            for handler in root.handlers[:]:
                if handler not in handlers:
                    root.removeHandler(handler)
            root.setLevel(level)
    return gem


class PrivateGlobalRandom:
    """One env's own copies of the global ``random`` and ``numpy.random`` states (see the module docstring).

    Inside :meth:`active`, the process-global ``random`` (and, with ``numpy=True``, ``numpy.random``) holds
    this env's state; on leaving, this env's state is saved back and the caller's put back, so code
    outside never sees GEM's draws or reseeds.
    """

    _lock = threading.RLock()  # the global generators are one resource for every thread

    def __init__(self, seed: int = 0):
        self._seed = int(seed)
        self._py = random.Random(self._seed).getstate()
        self._np: Any = None  # made at the first numpy=True call (building a RandomState costs ~0.3 ms)

    @contextlib.contextmanager
    def active(self, *, numpy: bool = False) -> Iterator[None]:
        with self._lock:
            saved_py = random.getstate()
            random.setstate(self._py)
            saved_np = None
            if numpy:
                saved_np = np.random.get_state()
                if self._np is None:
                    self._np = np.random.RandomState(self._seed % 2**32).get_state()
                np.random.set_state(self._np)
            try:
                yield
            finally:
                self._py = random.getstate()
                random.setstate(saved_py)
                if saved_np is not None:
                    self._np = np.random.get_state()
                    np.random.set_state(saved_np)
