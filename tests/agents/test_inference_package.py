"""The inference speed machinery lives in stratagym.agents.inference; the policy module loads only the HF
sampling loop, the rest waits until a policy turns it on. The three alias modules that once kept the old
paths (``stratagym.agents.fused_decode`` ...) importable are gone."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = ["fused_decode", "fused_score", "prefix_cache"]


@pytest.mark.parametrize("name", MOVED)
def test_the_modules_live_in_the_inference_package_only(name):
    new = importlib.import_module(f"stratagym.agents.inference.{name}")
    assert new.__name__ == f"stratagym.agents.inference.{name}"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"stratagym.agents.{name}")


def test_the_policy_module_does_not_load_the_speed_machinery():
    """The policy module loads the HF sampling loop (the default backend) and none of the speed machinery."""
    lazy = ("import sys, stratagym.agents.llm, stratagym.agents.backends; "
            "print(sorted(m for m in sys.modules if m.startswith('stratagym.agents.inference.')))")
    out = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, timeout=300)
    # the hf backend's sampling loop (and the cache keyword it needs) comes with the backends; the speed
    # machinery waits until a policy uses it
    assert out.returncode == 0 and out.stdout.strip() == ("['stratagym.agents.inference.hf_generator', "
                                                          "'stratagym.agents.inference.kv_cache']"), \
        out.stdout + out.stderr[-2000:]
