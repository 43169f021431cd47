"""A real ``vllm serve`` on loopback, evaluated through ``stratagym eval openai:<model>@<url>``: greedy, the
same episodes and metrics as the in-process ``vllm`` backend on the same weights, for SearchQA (tag
protocol, stop strings, Search-R1's growing assistant turn continued through the chat API) and WebShop
(think/action) on a synthetic corridor. The test starts each server itself and always stops it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from tests.vllm_backend.test_vllm_generation import ENV_KWARGS, SFT  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                VLLM_CPU_KVCACHE_SPACE="1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """vLLM's OpenAI-compatible server (``vllm serve``) for MODEL on 127.0.0.1 (float32, eager), stopped on
    exit whatever happens."""

    def __init__(self, model: Path, name: str, log: Path, *extra: str, env: dict[str, str] | None = None,
                 start_timeout: float = 300):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        # `vllm serve MODEL` is this server; vllm-cpu 0.32's `vllm` console script cannot start (it looks up
        # its own version under the distribution name "vllm", and the package is "vllm-cpu"), so the test
        # starts the same server through its module entry point
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--host", "127.0.0.1", "--port", str(self.port),
               "--served-model-name", name, "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
               "--seed", "0", *extra]
        self.start_timeout = start_timeout
        self.proc = subprocess.Popen(cmd, env={**_env(), **(env or {})}, cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def __enter__(self) -> "Server":
        import httpx

        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"vllm serve exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.__exit__()
        raise AssertionError(f"vllm serve did not come up in {self.start_timeout:.0f} s:\n{self.log.read_text()[-3000:]}")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def _eval(agent: str, env_id: str, out: Path, *args: str) -> dict:
    cmd = [str(BIN / "stratagym"), "eval", agent, "--env", env_id, "--out", str(out), "-q", *args]
    done = subprocess.run(cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def _same_play(a: dict, b: dict) -> None:
    assert a["episodes"] == b["episodes"]
    assert a["metrics"] == b["metrics"]


def _env_args(kwargs: dict) -> list[str]:
    return [x for k, v in kwargs.items() for x in ("-E", f"{k}={json.dumps(v)}")]


def test_served_sft_model_plays_searchqa_like_the_in_process_engine(tmp_path):
    common = ["--split", "test", "-n", "8", *_env_args({k: v for k, v in ENV_KWARGS.items() if k != "split"})]
    with Server(SFT, "sft", tmp_path / "serve.log") as server:
        served = _eval(f"openai:sft@{server.url}", "stratagym/SearchQA-v0", tmp_path / "served.json", *common,
                       "-P", "memory_k=4", "-P", "max_new_tokens=48")
    local = _eval(str(SFT), "stratagym/SearchQA-v0", tmp_path / "local.json", *common,
                  "-P", "backend=vllm", "-P", "vllm={max_model_len: 1024}")
    _same_play(served, local)
    assert served["metrics"]["valid_ratio"]["value"] > 0.9  # the SFT model plays well-formed turns: a real comparison
    assert any(e["search_count"] > 0 for e in served["episodes"])


def test_served_model_plays_think_action_like_the_in_process_engine(tmp_path):
    """A random Qwen2 (head_dim 32, vLLM's CPU attention needs >= 32) with the tiny test model's ChatML
    tokenizer: its actions are mostly invalid, but the same ones on both sides, turn after turn."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from stratagym.agents.tiny_lm import tiny_lm_path

    tok = AutoTokenizer.from_pretrained(tiny_lm_path())
    torch.manual_seed(5)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))
    folder = tmp_path / "qwen2-random"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    common = ["-n", "4", "--max-steps", "4", "-P", "max_new_tokens=24", "-P", "memory_k=2", "-P", "template=think_action"]
    with Server(folder, "qwen2", tmp_path / "serve.log") as server:
        served = _eval(f"openai:qwen2@{server.url}", "stratagym/CueCorridor-v0", tmp_path / "served.json", *common,
                       "-P", f"model={folder}")
    local = _eval(str(folder), "stratagym/CueCorridor-v0", tmp_path / "local.json", *common,
                  "-P", "backend=vllm", "-P", "vllm={max_model_len: 1024}")
    _same_play(served, local)
    assert sum(e["turns"] for e in served["episodes"]) >= 4
