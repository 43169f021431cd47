"""``stratagym serve env``: a stratagym env as an OpenEnv server built by openenv-core's own ``create_app``,
talked to with openenv-core's own ``GenericEnvClient`` (issue 30 item 1). Every server is started and
stopped by its test, on 127.0.0.1, and every wait is bounded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient

import stratagym
from stratagym.interop.openenv.server import create_server_app
from stratagym.serving import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "stratagym/SearchStrata-v0"
BAD_TEXT = ["", "x" * 100_000, "\x00\x01\x1b[31m\x7f", "\ud83d broken \udc00", "<script>alert('x')</script><b>&amp;",
            "click[" * 50, '{"text": 1}', "\u202e\u200b"]


@pytest.fixture(scope="module")
def server():
    srv = serve_in_thread(create_server_app(ENV_ID, max_concurrent_envs=4, idle_timeout_s=None))
    yield srv
    srv.stop()


def _client(url: str, timeout: float = 20.0):
    client = GenericEnvClient(base_url=url, connect_timeout_s=timeout, message_timeout_s=timeout).sync()
    client.connect()
    return client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_cli(port: int, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "stratagym.cli", "serve", "env", ENV_ID, "--port", str(port), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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


def test_sessions_in_two_server_processes_reset_to_byte_identical_observations():
    """G = 4 sessions, two in each of two `stratagym serve env` processes, reset with one (task_id, seed)."""
    ports = [_free_port(), _free_port()]
    procs = [_start_cli(p, "--max-concurrent-envs", "2") for p in ports]
    clients = []
    try:
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        for url, proc in zip(urls, procs):
            _wait_healthy(url, proc)
        clients = [_client(url) for url in urls for _ in range(2)]
        task_id = stratagym.get_spec(ENV_ID) and "q007"
        firsts = [c.reset(task_id=task_id, seed=11) for c in clients]
        blobs = {json.dumps(r.observation, sort_keys=True, ensure_ascii=False).encode() for r in firsts}
        assert len(blobs) == 1, "every member of the group must start from the same bytes"
        obs = firsts[0].observation
        assert obs["info"]["task_id"] == task_id and obs["info"]["step"] == 0 and "q007" in obs["text"]
        assert obs["admissible_actions"] and obs["info"]["state_hash"] == obs["info"]["context_hashes"][0]
        # and it is what the env gives in-process
        import gymnasium as gym

        env = gym.make(ENV_ID)
        text, info = env.reset(seed=11, options={"task_id": task_id})
        env.close()
        assert obs["text"] == text and obs["admissible_actions"] == info.pop("admissible_actions") and obs["info"] == info
        # a different seed in one session does not disturb the others; the next step is the same everywhere
        steps = {json.dumps(c.step({"text": obs["admissible_actions"][0]}).observation, sort_keys=True) for c in clients}
        assert len(steps) == 1
    finally:
        for c in clients:
            c.close()
        for p in procs:
            _stop(p)


def test_observation_carries_text_info_and_admissible_actions_and_the_reward(server):
    c = _client(server.url)
    try:
        r = c.reset(task_id="q003", seed=0)
        assert set(r.observation) >= {"text", "info", "admissible_actions", "truncated"}
        assert set(stratagym.envs.core.INFO_KEYS) <= set(r.observation["info"])
        while not r.done:
            answer = next(a for a in r.observation["admissible_actions"] if a.startswith("answer["))
            r = c.step({"text": answer})
        assert r.done and r.reward in (0.0, 1.0) and r.observation["info"]["score"] == r.reward
    finally:
        c.close()


def test_hostile_text_gives_a_valid_observation_and_the_session_lives_on(server):
    c = _client(server.url)
    try:
        c.reset(task_id="q001", seed=0)
        for text in BAD_TEXT:
            r = c.step({"text": text})
            assert isinstance(r.observation["text"], str) and r.observation["info"]["action_valid"] is False
            if r.done:
                c.reset(task_id="q001", seed=0)
        assert c.reset(task_id="q001", seed=0).observation["info"]["step"] == 0
        with pytest.raises(RuntimeError, match="unknown task_id"):  # openenv-core's client raises the server's error
            c.reset(task_id="<b>nope</b>", seed=0)
        assert c.reset(seed=1).observation["info"]["step"] == 0  # the session survived the bad reset
    finally:
        c.close()


def test_http_bad_input_is_4xx_never_500_and_every_response_is_nosniff(server):
    responses = [
        httpx.post(server.url + "/reset", json={"task_id": "<script>x</script>", "seed": 0}),
        httpx.post(server.url + "/reset", json={"seed": -1}),
        httpx.post(server.url + "/reset", json={"task_index": 10**9}),
        httpx.post(server.url + "/step", json={"action": {"text": "<script>alert(1)</script>"}}),  # no session over HTTP
        httpx.post(server.url + "/step", json={"action": {"txet": "x"}}),
        httpx.post(server.url + "/step", content=b"{not json", headers={"content-type": "application/json"}),
    ]
    for r in responses:
        assert 400 <= r.status_code < 500, (r.request.content, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json")
    assert responses[3].status_code == 409 and "WebSocket" in responses[3].json()["detail"]
    ok = [httpx.post(server.url + "/reset", json={"task_id": "q002", "seed": 0}), httpx.get(server.url + "/health"),
          httpx.get(server.url + "/schema"), httpx.get(server.url + "/metadata"), httpx.get(server.url + "/docs")]
    assert all(r.status_code == 200 for r in ok)
    for r in responses + ok + [httpx.get(server.url + "/nothing-here")]:
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert ok[-1].headers["content-type"].startswith("text/html") and "object-src 'none'" in ok[-1].headers["content-security-policy"]
    assert ok[3].json()["name"] == ENV_ID


def test_sessions_are_bounded_and_idle_ones_are_reclaimed():
    srv = serve_in_thread(create_server_app(ENV_ID, max_concurrent_envs=2, idle_timeout_s=1.0))
    clients = []
    try:
        clients = [_client(srv.url), _client(srv.url)]
        for c in clients:
            c.reset(seed=0)  # sessions open and then left idle, never closed
        from websockets.sync.client import connect

        with connect(srv.url.replace("http://", "ws://") + "/ws", open_timeout=5) as ws:  # a third session
            refusal = json.loads(ws.recv(timeout=5))
        assert refusal["type"] == "error" and refusal["data"]["code"] == "CAPACITY_REACHED"
        assert refusal["data"]["max_sessions"] == 2
        deadline = time.monotonic() + 20  # openenv-core's reaper checks every max(timeout / 4, 5) s
        while True:
            probe = _client(srv.url, timeout=5)
            try:
                assert probe.reset(seed=0).observation["info"]["step"] == 0
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
            finally:
                probe.close()
    finally:
        for c in clients:
            c.close()
        srv.stop()


def test_openenv_validate_passes_against_the_running_server(server):
    openenv_cli = Path(sys.executable).with_name("openenv")
    out = subprocess.run([str(openenv_cli), "validate", "--url", server.url], capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["passed"], out.stdout[-3000:]
    assert {c["id"] for c in report["criteria"]} >= {"health_endpoint", "schema_endpoint", "metadata_endpoint"}


@pytest.mark.parametrize("args, fragment", [
    (["stratagym/NoSuch-v0"], "NoSuch"),
    ([ENV_ID, "-E", "novalue"], "key=value"),
    ([ENV_ID, "-E", "max_stepz=3"], "max_stepz"),
    ([ENV_ID, "--max-concurrent-envs", "0"], "max-concurrent-envs"),
    ([ENV_ID, "--idle-timeout", "-5"], "idle-timeout"),
])
def test_cli_user_errors_exit_2_with_the_fix_and_no_traceback(args, fragment):
    out = subprocess.run([sys.executable, "-m", "stratagym.cli", "serve", "env", *args, "--port", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 2, out.stderr[-2000:]
    assert fragment in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("field", ["task_id", "task_index", "episode_id", "seed", "nonsense"])
def test_hostile_reset_arguments_over_http_are_4xx_or_an_observation(server, field):
    values = BAD_TEXT + [None, 1e308, -1, 2**70, True, [1], {"a": 1}, "\ud800"]
    for value in values:
        body = json.dumps({field: value}).encode()  # json.dumps escapes lone surrogates; the server must cope
        r = httpx.post(server.url + "/reset", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 200 or 400 <= r.status_code < 500, (field, value, r.status_code, r.text[:300])
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["content-type"].startswith("application/json")
        if r.status_code == 200:
            assert r.json()["observation"]["info"]["step"] == 0
