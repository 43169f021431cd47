"""The package's layers point down (docs/architecture.md), checked by import-linter's contract.

The contract lives in pyproject.toml ([tool.importlinter]). import-linter builds the import graph with
grimp, which sees imports inside functions too, so a lazy upward import cannot hide.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _lint_imports() -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run([exe, "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_no_import_points_up_the_layers():
    res = _lint_imports()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 kept, 0 broken" in res.stdout, res.stdout


def test_the_contract_catches_an_upward_import(tmp_path):
    """The check is not vacuous: an envs module that imports the trainer breaks the contract."""
    probe = REPO / "stratagym" / "envs" / "_layer_probe.py"
    probe.write_text("def f():\n    from stratagym.training import trainer  # noqa: F401\n", encoding="utf-8")
    try:
        res = _lint_imports()
    finally:
        probe.unlink()
    assert res.returncode != 0
    assert "stratagym.envs._layer_probe -> stratagym.training" in res.stdout, res.stdout
