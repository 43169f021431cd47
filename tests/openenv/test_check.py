"""``stratagym envs check-openenv URL``: stratagym's contract, fuzz and determinism checks and a soak against
any OpenEnv server (issue 30 item 5). A sound server passes with its resources flat; a server that leaks
an open file per episode is named by what grows. Servers run in their own processes, started and stopped
here on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.openenv.test_third_party import _free_port, _stop, _wait_healthy

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

LEAKY_SERVER = textwrap.dedent('''
    import sys
    import uvicorn
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class TextAction(Action):
        text: str

    class TextObservation(Observation):
        text: str

    OPEN = []

    class LeakyEnv(Environment):
        """Opens a file on every reset and never closes it (the bug the soak exists to find)."""
        SUPPORTS_CONCURRENT_SESSIONS = True

        def reset(self, seed=None, episode_id=None, **kwargs):
            OPEN.append(open(__file__))
            return TextObservation(text=f"episode {seed}", reward=None, done=False)

        def step(self, action, timeout_s=None, **kwargs):
            return TextObservation(text="over", reward=1.0, done=True)

        @property
        def state(self):
            return State()

    app = create_app(LeakyEnv, TextAction, TextObservation, max_concurrent_envs=8)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
''')


def _check(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stratagym.cli", "envs", "check-openenv", url, *args], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=400)


def test_a_stratagym_server_passes_the_checks_and_the_soak():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "stratagym.cli", "serve", "env", "stratagym/CueCorridor-v0", "--port",
                             str(port), "--max-concurrent-envs", "8"], cwd=ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        out = _check(url, "--task", "maze00", "--task", '{"task_id": "maze01"}', "--soak", "300", "--sessions", "4",
                     "--server-pid", str(proc.pid))
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        for name in ("contract", "fuzz", "determinism"):
            assert f"ok   {name}" in out.stdout
        assert "soak: 300 resets" in out.stdout and "0 failed episodes" in out.stdout and "rss_mib" in out.stdout
        assert "LEAK" not in out.stdout
    finally:
        _stop(proc)


def test_a_server_leaking_a_file_per_episode_is_named(tmp_path):
    script = tmp_path / "leaky_server.py"
    script.write_text(LEAKY_SERVER)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(script), str(port)], cwd=tmp_path, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        out = _check(url, "--soak", "400", "--sessions", "2", "--server-pid", str(proc.pid))
        assert out.returncode == 1
        assert "LEAK open_files grew" in out.stdout, out.stdout[-3000:]
        assert "threads grew" not in out.stdout
    finally:
        _stop(proc)


def test_unreachable_server_fails_every_check_with_the_reason():
    out = _check(f"http://127.0.0.1:{_free_port()}", "--message-timeout", "2")
    assert out.returncode == 1 and out.stdout.count("FAIL") == 3 and "unreachable" in out.stdout
