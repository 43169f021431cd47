"""`benchmarks/vllm_backend.py --smoke` runs (its smallest settings; no timing asserted), so `make bench`'s
vLLM figures cannot break unnoticed. The main environment's benchmark smoke test leaves this script out
(it needs vLLM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

REPO = Path(__file__).resolve().parents[2]


def test_vllm_benchmark_smoke():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "vllm_backend.py"), "--smoke"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    assert "| sft (0.64M) | 8 x 8 |" in out
    assert "| GRPO step (sft 0.64M" in out and "| weight sync per step (sft, vllm) |" in out
    assert "| log-prob parity (sft, vllm) | max_abs" in out
