"""OpenEnv's side of the boundary: the manifest stratagym ships passes ``openenv validate`` as far as
openenv-core's own ``openenv init`` template does, and stratagym/OpenEnv-v0 plays the env that template
generates (openenv-core's echo env), a server stratagym never saw. Servers started and stopped here."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import httpx
import pytest

import stratagym  # noqa: F401
from stratagym.envs.core import combine_hashes, stable_hash

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_DIR = ROOT / "examples" / "openenv" / "stratagym_env"
OPENENV_CLI = str(Path(sys.executable).with_name("openenv"))
UV_LOCK_ONLY = ["Missing uv.lock - run 'uv lock' to generate it"]


def _validate(path: Path) -> dict:
    out = subprocess.run([OPENENV_CLI, "validate", str(path), "--json"], capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def echo_env_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("openenv")
    subprocess.run([OPENENV_CLI, "init", "echo_env"], cwd=base, capture_output=True, text=True, timeout=120, check=True)
    return base / "echo_env"


def test_the_shipped_manifest_validates_like_openenvs_own_template(echo_env_dir):
    """`openenv validate` checks openenv.yaml, pyproject's server script and openenv-core dependency,
    server/app.py's main() under a __main__ guard, and a uv.lock. No uv here (not on the package index
    this machine uses), so both lack only the lock file."""
    ours, theirs = _validate(MANIFEST_DIR), _validate(echo_env_dir)
    assert ours["criteria"][0]["actual"]["issues"] == UV_LOCK_ONLY
    assert theirs["criteria"][0]["actual"]["issues"] == UV_LOCK_ONLY
    assert ours["environment"] == "stratagym"


def test_the_manifest_app_serves_and_passes_runtime_validation(tmp_path):
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "STRATAGYM_ENV_ID": "stratagym/CueCorridor-v0"}
    proc = subprocess.Popen([sys.executable, "-m", "server.app", "--port", str(port)], cwd=MANIFEST_DIR, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        out = subprocess.run([OPENENV_CLI, "validate", "--url", url], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and json.loads(out.stdout)["passed"], out.stdout[-2000:]
        assert httpx.get(url + "/metadata").json()["name"] == "stratagym/CueCorridor-v0"
    finally:
        _stop(proc)


def test_openenv_v0_plays_openenvs_own_echo_env(echo_env_dir):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=echo_env_dir, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    env = None
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        env = gym.make("stratagym/OpenEnv-v0", base_url=url, tasks=[{}], connect_timeout_s=5, message_timeout_s=10)
        obs, info = env.reset(seed=0)
        assert "ready" in obs and info["step"] == 0 and info["state_hash"] == stable_hash(obs)
        assert "admissible_actions" not in info  # the echo env does not list its actions
        obs2, reward, term, trunc, info2 = env.step("hello <b>world</b>")
        assert obs2 == "hello <b>world</b>"  # the action went into the schema's only string field, `message`
        assert reward == pytest.approx(len(obs2) * 0.1) and not term and info2["action_valid"]
        assert info2["context_hashes"] == [stable_hash(obs2), combine_hashes([stable_hash(obs), stable_hash(obs2)])]
        assert info2["task_id"] == "{}" and info2["search_count"] == 0
    finally:
        if env is not None:
            env.close()
        _stop(proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.communicate()[1][-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not become healthy in {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
