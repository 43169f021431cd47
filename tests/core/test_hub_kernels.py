"""Models load without Hub kernels unless the user opts in (stratagym/hub_kernels.py), through the Python
API as well as the ``stratagym`` command (tests/core/test_cli_environment.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stratagym.hub_kernels import hub_kernels_requested, load_kwargs

PACKAGE = Path(__file__).resolve().parents[2] / "stratagym"


@pytest.mark.parametrize("value, requested", [(None, False), ("0", False), ("NO", False), ("", False),
                                              ("1", True), ("YES", True), ("true", True), ("on", True)])
def test_only_a_true_setting_requests_hub_kernels(monkeypatch, value, requested):
    if value is None:
        monkeypatch.delenv("USE_HUB_KERNELS", raising=False)
    else:
        monkeypatch.setenv("USE_HUB_KERNELS", value)
    assert hub_kernels_requested() is requested
    assert load_kwargs() == ({} if requested else {"use_kernels": False})


def test_a_policy_loaded_from_python_is_not_kernelized(monkeypatch):
    # transformers' own default kernelizes (measured: use_kernels True on this tiny model); ours does not
    from transformers import AutoModelForCausalLM

    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path

    monkeypatch.delenv("USE_HUB_KERNELS", raising=False)
    path = tiny_lm_path()
    assert AutoModelForCausalLM.from_pretrained(path).use_kernels  # the default this module exists for
    assert not LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path))).model.use_kernels


def _model_loads(tree: ast.AST):
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained"
                and isinstance(node.func.value, ast.Name) and node.func.value.id.startswith("AutoModel")):
            yield node


def test_every_model_load_in_the_package_passes_load_kwargs():
    loads, missing = 0, []
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in _model_loads(ast.parse(path.read_text(), filename=str(path))):
            loads += 1
            spread = [k.value for k in call.keywords if k.arg is None]
            if not any(isinstance(v, ast.Call) and getattr(v.func, "id", None) == "load_kwargs" for v in spread):
                missing.append(f"{path.relative_to(PACKAGE.parent)}:{call.lineno}")
    assert loads >= 9 and not missing, missing
