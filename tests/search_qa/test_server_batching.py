"""Adaptive batching in the retrieval server's MicroBatcher: no waiting when idle, merging under load.

Timing-free: a retriever that blocks inside its first call lets the test decide exactly which requests
arrive while a search runs.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from stratagym.envs.search_qa.index import make_retriever
from stratagym.envs.search_qa.retrievers.base import Retriever
from stratagym.envs.search_qa.server import MicroBatcher, ServerLimits


@pytest.fixture(scope="module")
def bm25():
    return make_retriever("bm25s")


class _Gated(Retriever):
    """The real bm25s retriever, but the first call waits for ``release`` after signalling ``entered``."""

    backend = "gated"

    def __init__(self, inner):
        self.inner, self.sizes = inner, []
        self.entered, self.release = threading.Event(), threading.Event()

    def batch_search(self, queries, k=3):
        self.sizes.append(len(queries))
        if len(self.sizes) == 1:
            self.entered.set()
            self.release.wait(30)
        return self.inner.batch_search(queries, k)


def test_default_is_adaptive_without_a_fixed_wait():
    assert ServerLimits().max_wait_ms == 0.0


def test_lone_requests_are_searched_alone(bm25):
    """One client, one query at a time: every request is its own retriever call (nothing to wait for)."""
    gated = _Gated(bm25)
    gated.release.set()

    async def main():
        b = MicroBatcher(gated)
        await b.start()
        out = [await b.submit([q], 3) for q in ("Kubae river flows", "Tritux Madyzound born city", "zzzz")]
        await b.stop()
        return out

    out = asyncio.run(main())
    assert gated.sizes == [1, 1, 1]
    assert [[h.id for h in r[0]] for r in out] == [[h.id for h in hits] for hits in
                                                  bm25.batch_search(["Kubae river flows", "Tritux Madyzound born city", "zzzz"], 3)]


def test_requests_arriving_during_a_search_form_the_next_batch(bm25):
    """A starts a search; B, C, D arrive while it runs; they go together in the next call, each with its k."""
    gated = _Gated(bm25)

    async def main():
        b = MicroBatcher(gated, inline_max_queries=0)  # every call on the worker thread: the test can block it
        await b.start()
        first = asyncio.create_task(b.submit(["Kubae river flows"], 3))
        await asyncio.get_running_loop().run_in_executor(None, gated.entered.wait, 30)
        later = [asyncio.create_task(b.submit(qs, k)) for qs, k in
                 ((["Kubae"], 1), (["Tritux Madyzound born city", "Kubae river"], 2), (["zzzz"], 3))]
        await asyncio.sleep(0.05)  # let them reach the queue; the retriever is still blocked
        gated.release.set()
        res = [await first] + [await t for t in later]
        await b.stop()
        return res

    res = asyncio.run(main())
    assert gated.sizes == [1, 4]
    expected = [bm25.batch_search(["Kubae river flows"], 3), bm25.batch_search(["Kubae"], 1),
                bm25.batch_search(["Tritux Madyzound born city", "Kubae river"], 2), bm25.batch_search(["zzzz"], 3)]
    assert [[[h.id for h in hits] for hits in r] for r in res] == [[[h.id for h in hits] for hits in e] for e in expected]


def test_batches_respect_max_batch(bm25):
    """Waiting requests merge only up to max_batch queries; the rest go in the following call."""
    gated = _Gated(bm25)

    async def main():
        b = MicroBatcher(gated, max_batch=3, inline_max_queries=0)
        await b.start()
        first = asyncio.create_task(b.submit(["a"], 3))
        await asyncio.get_running_loop().run_in_executor(None, gated.entered.wait, 30)
        later = [asyncio.create_task(b.submit([f"Kubae {i}"], 3)) for i in range(5)]
        await asyncio.sleep(0.05)
        gated.release.set()
        await asyncio.gather(first, *later)
        await b.stop()

    asyncio.run(main())
    assert gated.sizes == [1, 3, 2]


class _ThreadRecorder(Retriever):
    backend = "threads"

    def __init__(self, inner):
        self.inner, self.calls = inner, []  # (thread name, batch size)

    def batch_search(self, queries, k=3):
        self.calls.append((threading.current_thread().name, len(queries)))
        return self.inner.batch_search(queries, k)


def test_small_batches_run_on_the_loop_thread_large_ones_on_the_worker(bm25):
    """Small batches skip the thread hand-over; a batch above inline_max_queries goes to the worker."""
    rec = _ThreadRecorder(bm25)

    async def main():
        b = MicroBatcher(rec, inline_max_queries=2)
        await b.start()
        small = await b.submit(["Kubae river flows", "Kubae"], 3)
        large = await b.submit(["Kubae river flows", "Kubae", "zzzz"], 3)
        await b.stop()
        return threading.current_thread().name, small, large

    loop_thread, small, large = asyncio.run(main())
    assert rec.calls == [(loop_thread, 2), ("retriever_0", 3)]
    assert [[h.id for h in hits] for hits in large] == [[h.id for h in hits] for hits in
                                                       bm25.batch_search(["Kubae river flows", "Kubae", "zzzz"], 3)]
    assert [[h.id for h in hits] for hits in small] == [[h.id for h in hits] for hits in large[:2]]
