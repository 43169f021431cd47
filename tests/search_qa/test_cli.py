"""`stratagym index build|info` and `stratagym serve retrieval` (the latter as a real subprocess)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from stratagym import cli


@pytest.fixture(scope="module")
def app():
    if "index" not in cli.GROUPS:
        cli._load_plugins()
    return cli.app


def test_index_build_and_info(app, tmp_path, small_corpus_path, capsys):
    out = tmp_path / "idx"
    runner = CliRunner()
    res = runner.invoke(app, ["index", "build", "--corpus", str(small_corpus_path), "--backend", "bm25s", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "built bm25s index" in res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"] == "bm25s" and manifest["corpus"]["path"] == str(small_corpus_path.resolve())
    res = runner.invoke(app, ["index", "info", str(out)])
    assert res.exit_code == 0 and '"backend": "bm25s"' in res.output
    # user errors go through the console script's one error boundary (stratagym.cli.main): exit 2, a message
    code, text = run_main(capsys, "index", "build", "--backend", "elastic", "--out", str(tmp_path / "x"))
    assert code == 2 and "unknown retrieval backend" in text
    code, text = run_main(capsys, "index", "info", str(tmp_path))
    assert code == 2 and "not a stratagym index" in text


def run_main(capsys, *args: str) -> tuple[int, str]:
    """``stratagym ARGS`` through :func:`stratagym.cli.main` in-process: (exit code, stderr + stdout)."""
    with pytest.raises(SystemExit) as info:
        cli.main(list(args))
    out = capsys.readouterr()
    return info.value.code, out.err + out.out


def test_serve_retrieval_subprocess(app, tmp_path, small_corpus_path):
    out = tmp_path / "idx"
    assert CliRunner().invoke(app, ["index", "build", "--corpus", str(small_corpus_path), "--out", str(out)]).exit_code == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-c", "from stratagym.cli import main; main()", "serve", "retrieval", "--index", str(out),
           "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        res = httpx.post(url + "/retrieve", json={"queries": ["Kubae river flows"], "topk": 2, "return_scores": True})
        assert res.status_code == 200 and len(res.json()["result"][0]) == 2
    finally:
        proc.terminate()
        proc.wait(20)
