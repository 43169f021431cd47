"""Import alfworld / textworld / fast-downward without their side effects.

Three side effects of the stock packages are contained here, once per process:

* ``import alfworld`` creates ``$ALFWORLD_DATA`` (default ``~/.cache/alfworld``): when the user did not
  set it, it is pointed at ``<cache root>/alfworld-data`` first;
* fast-downward's ``pddl2sas`` overwrites ``sys.argv`` on every game load: :func:`preserve_argv`
  restores it around every engine call;
* ``fast_downward.load_lib`` copies its shared library into the system temp folder: the copy goes to
  ``<cache root>/tmp`` instead (a fresh sub-folder per engine, removed right after loading; each engine
  needs its own copy because the library keeps the planning state in globals);
* a loaded copy is never unloaded (unloading crashes the interpreter at exit), and its deleted file keeps
  its 33 MB of disk and memory until the process ends: a process that made engine after engine (a study
  worker running run after run) filled the disk. A closed engine hands its copy back
  (:func:`release_library`) and the next engine takes it instead of loading another, so a process holds
  as many copies as it ever had engines open at once. A copy is handed on only after ``cleanup()``, and
  every game load (``load_sas``) replaces the whole planning state, so what an engine sees does not depend
  on where its copy came from.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

from stratagym.envs.alfworld import paths
from stratagym.errors import ConfigError

__all__ = ["load_engine_modules", "logic_files", "preserve_argv", "release_library", "EngineModules"]

_LOCK = threading.Lock()
_MODULES: "EngineModules | None" = None


class EngineModules:
    """The engine modules, imported once: ``textworld``, ``PddlEnv``, ``fast_downward``, alfworld bits."""

    def __init__(self) -> None:
        self.textworld = importlib.import_module("textworld")
        self.fast_downward = importlib.import_module("fast_downward")
        pddl = importlib.import_module("textworld.envs.pddl.pddl")
        self.PddlEnv = pddl.PddlEnv
        if getattr(pddl, "fast_downward_missing", False):
            raise ConfigError("textworld's PDDL backend needs fast-downward: pip install 'stratagym[alfworld]'")
        self.alfworld = importlib.import_module("alfworld")
        env_mod = importlib.import_module("alfworld.agents.environment.alfred_tw_env")
        self.AlfredDemangler = env_mod.AlfredDemangler
        self.AlfredInfos = env_mod.AlfredInfos
        self.TASK_TYPES = dict(env_mod.TASK_TYPES)
        expert_mod = importlib.import_module("alfworld.agents.expert")
        self.HandCodedTWAgent = expert_mod.HandCodedTWAgent
        self.goal_library = importlib.import_module("alfworld.gen.goal_library")
        self.constants = importlib.import_module("alfworld.gen.constants")
        self.misc = importlib.import_module("alfworld.agents.utils.misc")


class _TempfileShim:
    """Stands in for the ``tempfile`` module inside ``fast_downward.interface`` (see module docstring)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def TemporaryDirectory(self, *args, **kwargs):  # noqa: N802 - mirrors tempfile's name
        os.makedirs(self._directory, exist_ok=True)
        kwargs.setdefault("dir", self._directory)
        return tempfile.TemporaryDirectory(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(tempfile, name)


class _LibraryPool:
    """Stands in for ``fast_downward.load_lib``: a released copy of the library if one is free, else a new one."""

    def __init__(self, load_lib) -> None:
        self._load_lib = load_lib
        self._free: list = []
        self._lock = threading.Lock()
        self.loaded = 0  # copies this process loaded (each is mapped until the process ends)

    def __call__(self):
        with self._lock:
            if self._free:
                return self._free.pop()
            self.loaded += 1
        return self._load_lib()

    def release(self, lib) -> None:
        with self._lock:
            if all(lib is not held for held in self._free):
                self._free.append(lib)


def release_library(lib) -> None:
    """Hand a closed engine's copy of fast-downward (its state already ``cleanup()``-ed) to the next engine."""
    if _MODULES is not None and isinstance(_MODULES.fast_downward.load_lib, _LibraryPool):
        _MODULES.fast_downward.load_lib.release(lib)


@contextlib.contextmanager
def preserve_argv() -> Iterator[None]:
    """Restore ``sys.argv`` after the block (fast-downward's translator overwrites it)."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


def load_engine_modules() -> EngineModules:
    """Import the engine once per process, with the side effects above contained.

    Raises :class:`ConfigError` with the install command when the ``alfworld`` extra is missing.
    """
    global _MODULES
    if _MODULES is not None:
        return _MODULES
    with _LOCK:
        if _MODULES is not None:
            return _MODULES
        if not os.environ.get("ALFWORLD_DATA"):
            os.environ["ALFWORLD_DATA"] = str(paths.default_alfworld_data())
        try:
            with preserve_argv():
                modules = EngineModules()
        except ImportError as exc:
            raise ConfigError(
                f"ALFWorld needs the alfworld and textworld packages ({exc}); install them with "
                "pip install 'stratagym[alfworld]'"
            ) from exc
        interface = importlib.import_module("fast_downward.interface")
        if not isinstance(interface.tempfile, _TempfileShim):
            interface.tempfile = _TempfileShim(str(paths.cache_root() / "tmp"))
        fast_downward = modules.fast_downward
        if not isinstance(fast_downward.load_lib, _LibraryPool):  # textworld calls fast_downward.load_lib()
            fast_downward.load_lib = _LibraryPool(fast_downward.load_lib)
        _MODULES = modules
        return modules


def logic_files() -> tuple[str, str]:
    """The PDDL domain and the grammar (with its ``UNKNOWN GOAL`` placeholder) games are built with.

    The bundled copies (``data/alfworld/alfred.{pddl,twl2}``, from alfworld 0.4.2) keep bundled games
    stable; without them, the installed alfworld package's files are used.
    """
    d = paths.bundled_dir()
    if (d / "alfred.pddl").is_file() and (d / "alfred.twl2").is_file():
        return (d / "alfred.pddl").read_text(), (d / "alfred.twl2").read_text()
    m = load_engine_modules()
    return Path(m.alfworld.ALFRED_PDDL_PATH).read_text(), Path(m.alfworld.ALFRED_TWL2_PATH).read_text()
