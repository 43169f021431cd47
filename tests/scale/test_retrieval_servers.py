"""Several retrieval servers behind one run (issue 16 item 5), on real loopback sockets.

Server A runs in this process (uvicorn in a thread, as in tests/search_qa/test_server.py); server B is
a separate ``stratagym serve retrieval`` process, so "going down" is a real SIGKILL of a server. Both
serve the bundled corpus with bm25s, so every hit can be checked against the in-process retriever.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from stratagym.agents.policy import Generation  # noqa: E402
from stratagym.envs.search_qa.index import make_retriever  # noqa: E402
from stratagym.envs.search_qa.retrievers.remote import RemoteRetriever  # noqa: E402
from stratagym.envs.search_qa.server import create_app  # noqa: E402
from stratagym.serving import serve_in_thread
from stratagym.training.rollout import InProcessPool, RolloutCollector  # noqa: E402

ENV = "stratagym/SearchQA-v0"
QUERIES = ["Kubae river flows", "capital of the northern province", "who founded the guild", "mountain height"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batches(url: str) -> int:
    """Retriever calls the server has made: one per request when requests come one at a time."""
    return int(httpx.get(url + "/health", timeout=10).json()["batches"])


@pytest.fixture(scope="module")
def local_retriever():
    return make_retriever("bm25s")


@pytest.fixture()
def servers(local_retriever):
    """Server A in a thread, server B a ``stratagym serve retrieval`` subprocess on a free port."""
    a = serve_in_thread(create_app(local_retriever))
    port = _free_port()
    exe = Path(sys.executable).with_name("stratagym")
    proc = subprocess.Popen([str(exe), "serve", "retrieval", "--backend", "bm25s", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    b = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):  # up to ~2 min on a loaded machine; it is ready when /health answers
            if proc.poll() is not None:
                raise RuntimeError(f"retrieval server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                httpx.get(b + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError("retrieval server did not answer /health")
        yield a.url, b, proc
    finally:
        a.stop()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()


def test_round_robin_spreads_requests_evenly(servers, local_retriever):
    """Three clients (three envs of one run) in one process share the cursor: 12 sequential searches
    alternate strictly between the two servers, 6 each, and every answer matches the local index."""
    a, b, _ = servers
    clients = [RemoteRetriever([a, b], retries=1, backoff=0.01, timeout=30) for _ in range(3)]
    before = (_batches(a), _batches(b))
    try:
        for i in range(12):
            q = QUERIES[i % len(QUERIES)]
            hits = clients[i % 3].search(q, 3)
            assert [h.id for h in hits] == [h.id for h in local_retriever.search(q, 3)]
        assert (_batches(a) - before[0], _batches(b) - before[1]) == (6, 6)
        stats = clients[0].server_stats()
        assert [s["sent"] for s in stats] == [6, 6] and [s["failed"] for s in stats] == [0, 0]
    finally:
        for c in clients:
            c.close()


class _Searcher:
    """A policy that searches a fixed query each turn (the query depends on the turn and the task), so
    every turn of every episode hits the retrieval servers."""

    model = None

    def generate(self, requests: Sequence[Any], *, greedy: bool = False) -> list[Generation]:
        out = []
        for r in requests:
            q = QUERIES[(len(r.history) + len(str(r.info.get("task_id", "")))) % len(QUERIES)]
            a = f"<search> {q} </search>"
            out.append(Generation(a, None, a))
        return out

    def eval(self):
        return self


def _rollout(env_kwargs: dict[str, Any], on_turn=None):
    col = RolloutCollector(ENV, _Searcher(), group_size=2, pool=InProcessPool(ENV, env_kwargs))
    tasks = col.task_ids()[:3]
    try:
        return col.collect(tasks, [1, 2, 3], on_turn=on_turn)
    finally:
        col.close()


def test_run_survives_a_server_killed_mid_rollout(servers):
    """6 episodes x 4 search rounds through [A, B]; B is SIGKILLed after the first turn. Every episode
    still ends normally, no observation carries a retrieval error, and each observation equals the run
    with the in-process index. After the kill, requests go to A: B costs one failed request per cooldown
    (10 s by default), not one per round (test_dead_server_is_skipped_for_the_cooldown pins that)."""
    a, b, proc = servers
    kwargs = {"split": "test", "max_turns": 4}
    reference = _rollout(kwargs)
    served_before = _batches(a)
    killed: list[int] = []

    def on_turn(turn: int, live: int) -> None:
        if turn == 1:
            assert _batches(b) > 0  # B took its share of turn 1
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            killed.append(proc.pid)

    remote_kwargs = {**kwargs, "retrieval_urls": [a, b], "retrieval_retries": 2}
    batch = _rollout(remote_kwargs, on_turn=on_turn)
    assert killed
    assert not any(t.failed for t in batch.trajectories)
    for t, ref in zip(batch.trajectories, reference.trajectories):
        assert t.terminated or t.truncated
        assert len(t.steps) == len(ref.steps) == 5
        for s, rs in zip(t.steps, ref.steps):
            assert "retrieval_error" not in s.info
            assert s.state_hash == rs.state_hash and s.reward == rs.reward
    probe = RemoteRetriever([a, b])  # shares this process's counters for the [A, B] list
    stats = probe.server_stats()
    probe.close()
    failed_b = stats[1]["failed"]
    assert failed_b >= 1 and stats[0]["failed"] == 0
    # 6 episodes x 4 search rounds reached a server (the 5th, final turn retrieves nothing, as Search-R1's
    # do_search=False turn): 24 answers, plus the requests that found B dead and went on to A
    assert stats[0]["sent"] + stats[1]["sent"] == 6 * 4 + failed_b
    assert _batches(a) - served_before == stats[0]["sent"]
    assert stats[1]["sent"] - failed_b >= 2  # B answered its share of turn 1 before it was killed


def test_dead_server_is_skipped_for_the_cooldown(servers, local_retriever):
    """With B dead, a client whose cooldown outlasts the test fails on B once, then skips it: 10 searches
    cost 11 requests, not the ~15 of a round robin that keeps knocking on the dead server."""
    a, b, proc = servers
    proc.kill()
    proc.wait(timeout=30)
    client = RemoteRetriever([b, a], retries=1, backoff=0.01, cooldown=3600)
    try:
        for i in range(10):
            q = QUERIES[i % len(QUERIES)]
            assert [h.id for h in client.search(q, 3)] == [h.id for h in local_retriever.search(q, 3)]
        stats = client.server_stats()
        assert [(st["sent"], st["failed"], st["down"]) for st in stats] == [(1, 1, True), (10, 0, False)]
    finally:
        client.close()
