"""The FastAPI retrieval server on real loopback sockets (uvicorn), and the HTTP client."""

from __future__ import annotations

import threading

import httpx
import pytest

from stratagym.envs.search_qa.env import SearchQAEnv
from stratagym.envs.search_qa.index import make_retriever
from stratagym.envs.search_qa.retrievers.base import RetrievalError, Retriever
from stratagym.envs.search_qa.retrievers.remote import RemoteRetriever
from stratagym.envs.search_qa.server import ServerLimits, create_app
from stratagym.serving import serve_in_thread


@pytest.fixture(scope="module")
def retriever():
    return make_retriever("bm25s")


@pytest.fixture(scope="module")
def server(retriever):
    srv = serve_in_thread(create_app(retriever, ServerLimits(max_queries=64, max_query_chars=1000, max_topk=20)))
    yield srv
    srv.stop()


def test_health_and_search_r1_response_shape(server, retriever):
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok" and h["backend"] == "bm25s" and h["num_docs"] == len(retriever)
    assert server.url.startswith("http://127.0.0.1:")
    body = {"queries": ["Kubae river flows", "Tritux Madyzound born city"], "topk": 3, "return_scores": True}
    res = httpx.post(server.url + "/retrieve", json=body).json()["result"]
    direct = retriever.batch_search(body["queries"], 3)
    assert [[d["document"]["id"] for d in row] for row in res] == [[h.id for h in row] for row in direct]
    assert res[0][0]["document"]["contents"] == direct[0][0].contents
    assert res[0][0]["score"] == pytest.approx(direct[0][0].score)
    res = httpx.post(server.url + "/retrieve", json={**body, "return_scores": False}).json()["result"]
    assert set(res[0][0]) == {"id", "contents"}  # Search-R1: bare documents without scores


@pytest.mark.parametrize("body, fragment", [
    ({}, "queries"),
    ({"queries": "Kubae"}, "list"),
    ({"queries": [1, 2]}, "string"),
    ({"queries": ["a"], "topk": 0}, "greater than or equal to 1"),
    ({"queries": ["a"], "topk": 21}, "less than or equal to 20"),
    ({"queries": ["a"] * 65}, "at most 64"),
    ({"queries": ["x" * 1001]}, "at most 1000"),
])
def test_malformed_requests_get_4xx_with_a_message(server, body, fragment):
    r = httpx.post(server.url + "/retrieve", json=body)
    assert r.status_code == 422
    assert fragment in r.text


def test_non_json_body_is_rejected(server):
    r = httpx.post(server.url + "/retrieve", content=b"{not json", headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500


def test_32_concurrent_clients(server, retriever, test_questions):
    queries = [q for ex in test_questions[:64] for q in ex.oracle_queries]
    expected = {q: [h.id for h in hits] for q, hits in zip(queries, retriever.batch_search(queries, 3))}
    errors: list[str] = []
    done = []

    def client(i: int) -> None:
        with httpx.Client(timeout=30) as c:
            for j in range(8):
                qs = [queries[(i * 8 + j + t) % len(queries)] for t in range(1 + (i + j) % 3)]
                try:
                    r = c.post(server.url + "/retrieve", json={"queries": qs, "topk": 3, "return_scores": True})
                    r.raise_for_status()
                    got = [[d["document"]["id"] for d in row] for row in r.json()["result"]]
                    if got != [expected[q] for q in qs]:
                        errors.append(f"wrong result for {qs}")
                except Exception as exc:  # collected, asserted below
                    errors.append(repr(exc))
        done.append(i)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(done) == 32
    assert httpx.get(server.url + "/health").json()["batches"] > 0


def test_remote_retriever_round_robin_skips_a_dead_server(server, retriever):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    r = RemoteRetriever([dead, server.url], retries=2, backoff=0.01, timeout=5)
    for _ in range(4):  # every other call starts at the dead URL and must fail over
        hits = r.search("Kubae river flows", 3)
        assert [h.id for h in hits] == [h.id for h in retriever.search("Kubae river flows", 3)]
    r.close()


def test_env_through_the_server_matches_in_process(server):
    remote = SearchQAEnv(split="test", retrieval_urls=[server.url])
    local = SearchQAEnv(split="test")
    for env in (remote, local):
        env.reset(options={"task_index": 3})
    a = remote.step("<search> Kubae river flows </search>")
    b = local.step("<search> Kubae river flows </search>")
    assert a[0] == b[0] and a[4]["state_hash"] == b[4]["state_hash"]
    remote.close()


class _Flaky(Retriever):
    backend = "flaky"

    def batch_search(self, queries, k=3):
        raise RuntimeError("disk on fire")


def test_retriever_exception_is_503_then_an_env_observation():
    srv = serve_in_thread(create_app(_Flaky()))
    try:
        r = httpx.post(srv.url + "/retrieve", json={"queries": ["a"]})
        assert r.status_code == 503 and "disk on fire" in r.json()["detail"]
        client = RemoteRetriever(srv.url, retries=1, backoff=0.01)
        with pytest.raises(RetrievalError, match="disk on fire"):
            client.search("a")
        env = SearchQAEnv(split="test", retrieval_urls=srv.url, retrieval_retries=0)
        env.reset(seed=0)
        obs, *_, info = env.step("<search> a </search>")
        assert "Retrieval failed" in obs and "503" in obs and info["action_valid"]
    finally:
        srv.stop()


class _Counting(Retriever):
    """Wraps the real bm25s retriever and records the batch sizes it is called with."""

    backend = "counting"

    def __init__(self, inner):
        self.inner, self.sizes = inner, []

    def batch_search(self, queries, k=3):
        self.sizes.append(len(queries))
        return self.inner.batch_search(queries, k)


def test_micro_batcher_merges_concurrent_requests(retriever):
    import asyncio

    from stratagym.envs.search_qa.server import MicroBatcher

    counting = _Counting(retriever)

    async def main():
        b = MicroBatcher(counting, max_batch=256, max_wait_ms=200)
        await b.start()
        reqs = [(["Kubae river flows", "Kubae"], 3), (["Tritux Madyzound born city"], 1), (["zzzz"], 2)] * 4
        out = await asyncio.gather(*(b.submit(q, k) for q, k in reqs))
        await b.stop()
        return reqs, out

    reqs, out = asyncio.run(main())
    assert counting.sizes == [16]  # 12 requests, 16 queries, one retriever call
    for (qs, k), res in zip(reqs, out):
        assert [[h.id for h in hits] for hits in res] == [[h.id for h in hits] for hits in retriever.batch_search(qs, k)]
