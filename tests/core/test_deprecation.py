"""Old module paths (issue 49's moves) import for one release: the same module object as the new path,
after a DeprecationWarning that names the new path (stratagym/deprecation.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import stratagym  # noqa: F401  (installs the old-path finder)
from stratagym.deprecation import MOVED


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_path_is_the_new_module_with_a_warning(old, new):
    """The new module itself, or (an old module whose names now live in two places) one holding its names."""
    code = (f"import warnings, importlib; warnings.simplefilter('error', DeprecationWarning)\n"
            f"import stratagym\n"
            f"try:\n    importlib.import_module({old!r})\nexcept DeprecationWarning as w:\n    print('WARNED', w)\n"
            f"warnings.simplefilter('ignore')\n"
            f"o, n = importlib.import_module({old!r}), importlib.import_module({new!r})\n"
            f"print(o is n or all(getattr(o, k) is v for k, v in vars(n).items() if not k.startswith('__')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # a moved submodule's old parent package is imported (and warns) first
    parents = [o for o in MOVED if old == o or old.startswith(o + ".")]
    assert any(f"WARNED {o} moved to {MOVED[o]}; import it from there" in out.stdout for o in parents), out.stdout
    assert out.stdout.strip().endswith("True"), out.stdout


def test_the_old_paths_are_gone_from_the_tree_and_the_new_ones_exist():
    """A moved path is served by the finder only: no file is left at the old place (an old package dir in
    envs/ would be scanned as an env family), and every new path imports."""
    from pathlib import Path

    root = Path(stratagym.__file__).parent
    for old, new in MOVED.items():
        rel = Path(*old.split(".")[1:])
        assert not (root / rel.with_suffix(".py")).exists() and not (root / rel / "__init__.py").exists(), old
        importlib.import_module(new)


def test_a_name_from_an_old_path_still_works():
    with pytest.warns(DeprecationWarning):
        sys.modules.pop("stratagym.envs.tool_calls", None)
        from stratagym.envs.tool_calls import ToolCall, tool_set_for  # noqa: F401
    from stratagym.envs.tools import ToolCall as NewToolCall

    assert ToolCall is NewToolCall
