"""The inference speed machinery lives in stratagym.agents.inference; the old module paths still import and
are the very same modules (so a patched attribute is seen through either name)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = ["fused_decode", "fused_score", "prefix_cache"]


@pytest.mark.parametrize("name", MOVED)
def test_old_paths_are_the_moved_modules(name):
    new = importlib.import_module(f"stratagym.agents.inference.{name}")
    old = importlib.import_module(f"stratagym.agents.{name}")
    assert old is new and new.__name__ == f"stratagym.agents.inference.{name}"


def test_old_from_imports_work_in_a_fresh_process_and_the_policy_module_does_not_load_them():
    """The policy module loads the HF sampling loop (the default backend) and none of the speed machinery."""
    code = ("import sys; from stratagym.agents.fused_decode import FusedDecoder; "
            "from stratagym.agents.prefix_cache import PrefixCache; "
            "from stratagym.agents.fused_score import FusedScorer; "
            "import stratagym.agents.inference.fused_score as s; assert FusedScorer is s.FusedScorer; "
            "assert PrefixCache.__module__ == 'stratagym.agents.inference.prefix_cache'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    lazy = ("import sys, stratagym.agents.llm, stratagym.agents.backends; "
            "print(sorted(m for m in sys.modules if m.startswith('stratagym.agents.inference.')))")
    out = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, timeout=300)
    # the hf backend's sampling loop (and the cache keyword it needs) comes with the backends; the speed
    # machinery waits until a policy uses it
    assert out.returncode == 0 and out.stdout.strip() == ("['stratagym.agents.inference.hf_generator', "
                                                          "'stratagym.agents.inference.kv_cache']"), \
        out.stdout + out.stderr[-2000:]
