"""The skip allowance can fail a session: a skip with an unlisted reason, one skip too many, or a skipping
vllm test turn the exit status to 1, and the committed allowance file parses (tests/skip_allowance.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.skip_allowance import DEFAULT_FILE, read_allowance

REPO = Path(__file__).resolve().parents[2]

TESTS = '''
import pytest

def test_passes():
    assert True

def test_skips_for_a_good_reason():
    pytest.skip("the subject is absent by design")

def test_skips_for_a_missing_extra():
    pytest.skip("needs somepackage")

@pytest.mark.vllm
def test_vllm_skips():
    pytest.skip("the subject is absent by design")
'''


def _session(tmp_path: Path, allowance: str, *select: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(TESTS)
    (tmp_path / "allowance.txt").write_text(allowance)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    vllm: sample\n")
    env = {**os.environ, "STRATAGYM_SKIP_ALLOWANCE": str(tmp_path / "allowance.txt"), "PYTHONPATH": str(REPO)}
    env.pop("STRATAGYM_ALLOW_SKIPS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.skip_allowance",
                           "test_sample.py", *select], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_an_unlisted_reason_fails_the_session(tmp_path):
    proc = _session(tmp_path, "max_skips: 5\nabsent by design\n", "-m", "not vllm")
    assert proc.returncode == 1, proc.stdout
    assert "skip not in the allowance: test_sample.py::test_skips_for_a_missing_extra: needs somepackage" in proc.stdout
    assert "test_skips_for_a_good_reason" not in proc.stdout.split("skip allowance")[-1]


def test_more_skips_than_allowed_fail_the_session(tmp_path):
    proc = _session(tmp_path, "max_skips: 1\nabsent by design\nsomepackage\n", "-m", "not vllm")
    assert proc.returncode == 1, proc.stdout
    assert "2 tests skipped, the allowance is 1" in proc.stdout


def test_skips_within_the_allowance_pass(tmp_path):
    proc = _session(tmp_path, "max_skips: 2\nabsent by design\nsomepackage\n", "-m", "not vllm")
    assert proc.returncode == 0, proc.stdout
    assert "skip allowance" not in proc.stdout


def test_a_skipping_vllm_test_fails_whatever_the_allowance(tmp_path):
    proc = _session(tmp_path, "max_skips: 5\nabsent by design\n", "-m", "vllm")
    assert proc.returncode == 1, proc.stdout
    assert "a vllm test skipped (the vLLM session allows none): test_sample.py::test_vllm_skips" in proc.stdout


def test_the_committed_allowance_is_small_and_names_reasons():
    max_skips, patterns = read_allowance(DEFAULT_FILE)
    assert 0 <= max_skips <= 5
    assert patterns and all(p.pattern for p in patterns)
    # a missing extra is not allowed: the reasons of the import guards match no pattern
    for reason in ("could not import 'ray': No module named 'ray'", "the C speed-ups are not built",
                   "PostgreSQL server binaries not found", "Java 21 cannot start here"):
        assert not any(p.search(reason) for p in patterns), reason


def test_the_check_is_on_in_this_session(pytestconfig):
    """The plugin is registered through tests/conftest.py (unless STRATAGYM_ALLOW_SKIPS=1 turned it off)."""
    if os.environ.get("STRATAGYM_ALLOW_SKIPS") == "1":
        assert pytestconfig.pluginmanager.get_plugin("stratagym-skip-allowance") is None
    else:
        assert pytestconfig.pluginmanager.get_plugin("stratagym-skip-allowance") is not None
