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


def _lint_with_probe(tmp_path: Path, probe: Path, import_line: str, layer: str, layer_with_probe: str) -> subprocess.CompletedProcess:
    """import-linter on a copy of the config whose ``layer`` line also names ``probe``, a module that makes
    one lazy import (``import_line``), for this run only."""
    probe.write_text(f"def f():\n    {import_line}  # noqa: F401\n", encoding="utf-8")
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert layer in text
    try:
        cfg = tmp_path / "pyproject.toml"
        cfg.write_text(text.replace(layer, layer_with_probe, 1), encoding="utf-8")
        exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
        return subprocess.run([exe, "--config", str(cfg)], cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        probe.unlink()


def test_no_import_points_up_the_layers():
    res = _lint_imports()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 kept, 0 broken" in res.stdout, res.stdout


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


def test_the_contract_catches_an_import_circle_in_algorithms(tmp_path):
    """The registry imports no estimator family (they register with it): a lazy import of one from a
    registry-level module, the way the old circle was held, breaks the algorithms contract."""
    res = _lint_with_probe(tmp_path, REPO / "stratagym" / "algorithms" / "registry_probe.py",
                           "from stratagym.algorithms import step_level", '"registry",', '"registry | registry_probe",')
    assert res.returncode != 0
    assert "stratagym.algorithms.registry_probe -> stratagym.algorithms.step_level" in res.stdout, res.stdout


def test_every_algorithms_module_is_in_the_algorithms_contract():
    """A module the layers do not name is not checked: each one in algorithms/ has its layer (the
    per-sample references, which import only torch, and the package itself excepted)."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c.get("containers") == ["stratagym.algorithms"])
    named = {m.strip() for layer in contract["layers"] for m in layer.split("|")}
    modules = {p.stem for p in (REPO / "stratagym" / "algorithms").glob("*.py")} - {"__init__", "reference"}
    assert modules - named == set(), f"add these to the algorithms contract in pyproject.toml: {sorted(modules - named)}"
    assert named <= modules, sorted(named - modules)


def test_every_envs_module_is_in_the_envs_contract():
    """Every module and package in envs/ has its layer: the contract's root (core and what it stands on),
    the tools protocol, the registry and the families (issue 49: the root holds the contract alone)."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c.get("containers") == ["stratagym.envs"])
    named = {m.strip() for layer in contract["layers"] for part in layer.split("|") for m in part.split(":")}
    root = REPO / "stratagym" / "envs"
    modules = {p.stem for p in root.glob("*.py")} - {"__init__"}
    modules |= {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert modules - named == set(), f"add these to the envs contract in pyproject.toml: {sorted(modules - named)}"
    assert named <= modules, sorted(named - modules)


def test_the_env_contract_does_not_import_the_tools_protocol_or_the_registry(tmp_path):
    """core.py names neither (the tools protocol registers with it), and the envs contract catches a
    module in core's layer that imports the tools: a probe placed there for one run breaks it."""
    import ast

    tree = ast.parse((REPO / "stratagym" / "envs" / "core.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m.startswith(("stratagym.envs.tools", "stratagym.envs.registry")) for m in imported), imported
    res = _lint_with_probe(tmp_path, REPO / "stratagym" / "envs" / "core_probe.py",
                           "from stratagym.envs.tools import parsing", '"core | random_agent | metric_spec",',
                           '"core | random_agent | metric_spec | core_probe",')
    assert res.returncode != 0
    assert "stratagym.envs.core_probe -> stratagym.envs.tools" in res.stdout, res.stdout
