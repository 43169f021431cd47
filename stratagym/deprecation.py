"""Old import paths kept for one release after a move, each with a DeprecationWarning naming the new one.

Issue 49 moved the tools protocol into :mod:`stratagym.envs.tools`, the interop adapters into
:mod:`stratagym.interop` and the HTTP helpers into :mod:`stratagym.serving`. :data:`MOVED` maps every old
module path to its new one, and :func:`install` (called by ``import stratagym``) puts a finder on
``sys.meta_path`` that answers an import of an old path with the new module itself, after a
DeprecationWarning. Why a finder and not a file per old path: an old package directory left in
``stratagym/envs/`` would be scanned as an env family at every ``import stratagym``; a table also lists, in
one place, what the next release deletes (docs/architecture.md, "Moved modules").
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Sequence

__all__ = ["MOVED", "MOVED_NAMES", "install"]

#: Old module path -> new module path (the same module object is served under both names).
MOVED: dict[str, str] = {
    "stratagym.envs.tool_calls": "stratagym.envs.tools",
    "stratagym.envs.tool_parsers": "stratagym.envs.tools.parsers",
    "stratagym.envs.tool_parsers_families": "stratagym.envs.tools.parser_families",
    "stratagym.envs.tool_schema": "stratagym.envs.tools.schema",
    "stratagym.envs.security": "stratagym.serving",
    "stratagym.envs.openenv": "stratagym.interop.openenv",
    "stratagym.envs.openenv.server": "stratagym.interop.openenv.server",
    "stratagym.envs.openenv.client_env": "stratagym.interop.openenv.client_env",
    "stratagym.envs.openenv.check": "stratagym.interop.openenv.check",
    "stratagym.envs.openenv.cli": "stratagym.interop.openenv.cli",
    "stratagym.envs.gem": "stratagym.interop.gem",
    "stratagym.envs.gem.gem_env": "stratagym.interop.gem.gem_env",
    "stratagym.envs.gem.export": "stratagym.interop.gem.export",
    "stratagym.envs.gem.compat": "stratagym.interop.gem.compat",
    "stratagym.envs.gem.cli": "stratagym.interop.gem.cli",
    "stratagym.envs.mcp_server": "stratagym.interop.mcp.server",
    "stratagym.envs.mcp_cli": "stratagym.interop.mcp.cli",
    "stratagym.envs.trl_tools": "stratagym.interop.trl.tools",
    "stratagym.envs.search_qa.trl": "stratagym.interop.trl.search_qa",
    "stratagym.envs.webshop.trl": "stratagym.interop.trl.webshop",
    "stratagym.envs.alfworld.trl": "stratagym.interop.trl.alfworld",
}


#: Names an old module had that live elsewhere now: old path -> {name: module that holds it}. Such an old path
#: is served as a module of its own holding the new module's names plus these (not the new module itself).
MOVED_NAMES: dict[str, dict[str, str]] = {
    "stratagym.envs.tool_calls": {"tool_set_for": "stratagym.envs.registry"},
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (imported, if need be, under the new name)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; import it from there (the old path goes in the next "
                      "release)", DeprecationWarning, stacklevel=2)
        new = importlib.import_module(self.new)
        extra = MOVED_NAMES.get(spec.name)
        if not extra:
            return new
        old = ModuleType(spec.name, new.__doc__)
        old.__dict__.update({k: v for k, v in vars(new).items() if not k.startswith("__")})
        for name, home in extra.items():
            setattr(old, name, getattr(importlib.import_module(home), name))
        return old

    def exec_module(self, module: ModuleType) -> None:  # the new module ran when it was imported
        pass


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the old-path finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
