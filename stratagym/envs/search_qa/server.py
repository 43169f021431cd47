"""A Search-R1-compatible retrieval server (FastAPI + uvicorn), binding 127.0.0.1 by default.

API (the same as Search-R1's ``retrieval_server.py``, so either side can be swapped):

* ``POST /retrieve`` ``{"queries": [str, ...], "topk": int, "return_scores": bool}`` ->
  ``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}`` (with scores) or
  ``{"result": [[{"id", "contents"}, ...], ...]}`` (without);
* ``GET /health`` -> ``{"status": "ok", "backend": ..., "num_docs": ..., ...}``.

An empty ``queries`` list gets ``{"result": []}``, as from Search-R1's server (its client posts one
whenever no rollout in the batch searched). Malformed requests get a 422 with pydantic's message
(missing ``queries``, a non-string query or one that is not valid Unicode text, query or batch too large,
``topk`` out of range or not a finite integer); the 422 body names the field and the rule but never
echoes the input, which may not be encodable as JSON (``NaN``, ``1e400``, lone surrogates).

Requests arriving together are merged into one
``batch_search`` call by an adaptive micro-batcher (an idle server searches at once; only requests
already waiting merge; one worker thread owns the retriever, so backends need not be thread-safe);
a retriever exception becomes a 503 with the reason, which clients retry elsewhere.
"""

# No `from __future__ import annotations`: FastAPI must see the request model class itself, not a string.
import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Sequence

from stratagym.envs.search_qa.retrievers.base import Hit, Retriever
from stratagym.serving import QueueWorker, SecurityHeaders, safe_validation_error

__all__ = ["create_app", "MicroBatcher", "run_server", "ServerLimits"]


@dataclass(frozen=True)
class ServerLimits:
    """Bounds that keep one client from monopolising the server."""

    max_queries: int = 512       # per request
    max_query_chars: int = 4096  # per query
    max_topk: int = 100
    max_batch: int = 256         # queries merged into one retriever call
    max_wait_ms: float = 0.0     # extra linger for more requests; 0 = adaptive batching only
    inline_max_queries: int = 32  # batches up to this size are searched on the event loop's thread


class MicroBatcher(QueueWorker):
    """Merges concurrent requests into batched retriever calls, one call at a time.

    Batches adapt to the load (see :meth:`_run`): no request waits for others when the server is idle.
    Calls never overlap, so backends need not be thread-safe. Batches of at most
    ``inline_max_queries`` queries run on the event loop's own thread: handing them to the worker
    thread and back (two thread wake-ups and GIL hand-overs) cost more server CPU per single-query
    request than the search itself (measured on the Lucene backend, benchmarks/retrieval.py), and the
    requests that arrive meanwhile wait in the socket buffers and merge into the next batch. Larger
    batches run on the worker thread, so the server keeps accepting requests during a long search.
    """

    def __init__(self, retriever: Retriever, *, max_batch: int = 256, max_wait_ms: float = 0.0,
                 inline_max_queries: int = 32):
        super().__init__("retriever")
        self.retriever = retriever
        self.max_batch, self.max_wait = int(max_batch), float(max_wait_ms) / 1000.0
        self.inline_max_queries = int(inline_max_queries)
        self.calls = 0  # retriever calls made (for tests and the health endpoint)

    async def submit(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        assert self._queue is not None, "MicroBatcher.start() was not called"
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((list(queries), int(k), fut))
        return await fut

    def _take_waiting(self, batch: list, size: int) -> int:
        """Move requests that are already queued into ``batch`` (up to ``max_batch`` queries), no waiting."""
        assert self._queue is not None
        while size < self.max_batch and not self._queue.empty():
            item = self._queue.get_nowait()
            batch.append(item)
            size += len(item[0])
        return size

    async def _run(self) -> None:
        """Adaptive batching: a request that finds the queue empty is searched at once.

        What merges is only what is already waiting: requests whose handlers ran in the same event-loop
        turn, and those that arrived while the previous search ran (queued by the loop while a large
        batch runs on the worker thread, or waiting in the socket buffers while a small one runs on the
        loop's thread). So one client sending one query at a time never waits for company,
        while many clients form batches as large as the retriever's own pace makes them. ``max_wait_ms``
        > 0 adds the old fixed linger for more requests after that (off by default).
        """
        loop = asyncio.get_running_loop()
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            await asyncio.sleep(0)  # one loop turn: handlers already runnable enqueue their requests
            size = self._take_waiting(batch, len(batch[0][0]))
            if self.max_wait > 0:
                deadline = loop.time() + self.max_wait
                while size < self.max_batch:
                    timeout = deadline - loop.time()
                    if timeout <= 0:
                        break
                    try:
                        item = await asyncio.wait_for(self._queue.get(), timeout)
                    except asyncio.TimeoutError:
                        break
                    batch.append(item)
                    size += len(item[0])
            queries = [q for qs, _, _ in batch for q in qs]
            k = max(k for _, k, _ in batch)
            try:
                if len(queries) <= self.inline_max_queries:
                    results = self.retriever.batch_search(queries, k)
                else:
                    results = await loop.run_in_executor(self._executor, self.retriever.batch_search, queries, k)
                self.calls += 1
                if len(results) != len(queries):
                    raise RuntimeError(f"retriever returned {len(results)} result lists for {len(queries)} queries")
            except Exception as exc:
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            start = 0
            for qs, kk, fut in batch:
                if not fut.done():
                    fut.set_result([hits[:kk] for hits in results[start : start + len(qs)]])
                start += len(qs)


def create_app(retriever: Retriever, limits: ServerLimits = ServerLimits()) -> Any:
    """The FastAPI app serving ``retriever``."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    class RetrieveRequest(BaseModel):
        model_config = ConfigDict(extra="ignore")
        queries: list[str] = Field(..., max_length=limits.max_queries)
        topk: int = Field(3, ge=1, le=limits.max_topk)
        return_scores: bool = False

        @field_validator("queries")
        @classmethod
        def _short_enough(cls, v: list[str]) -> list[str]:
            for i, q in enumerate(v):
                if len(q) > limits.max_query_chars:
                    raise ValueError(f"query {i} has {len(q)} characters; at most {limits.max_query_chars}")
                if not _is_text(q):
                    raise ValueError(f"query {i} is not valid Unicode text (it holds a lone surrogate)")
            return v

    batcher = MicroBatcher(retriever, max_batch=limits.max_batch, max_wait_ms=limits.max_wait_ms,
                           inline_max_queries=limits.inline_max_queries)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="stratagym retrieval server", lifespan=lifespan)
    app.state.batcher = batcher
    app.add_middleware(SecurityHeaders)  # nosniff + a CSP on every response (queries are echoed in errors)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's default handler echoes each error's input; NaN, 1e400 or a lone surrogate there makes
        # the 422 itself fail to encode (a 500). Say where and what, never the value.
        return JSONResponse(status_code=422, content={"detail": [safe_validation_error(e) for e in exc.errors()]})

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest) -> JSONResponse:
        # JSONResponse directly: the body is plain str/float JSON already, and FastAPI's response-model
        # validation + jsonable_encoder of it cost more CPU per single-query request than the search.
        if not req.queries:  # Search-R1's client sends this when no rollout of a batch searched
            return JSONResponse({"result": []})
        try:
            results = await batcher.submit(req.queries, req.topk)
        except Exception as exc:
            raise HTTPException(status_code=503, detail=f"retrieval failed: {type(exc).__name__}: {exc}") from None
        return JSONResponse({"result": [[h.to_dict(True) if req.return_scores else h.to_dict(False)["document"]
                                         for h in hits] for hits in results]})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", **retriever.describe(), "batches": batcher.calls}

    return app


def _is_text(s: str) -> bool:
    """Whether ``s`` is valid Unicode text (encodable as UTF-8: no lone surrogates)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def run_server(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, limits: ServerLimits = ServerLimits()) -> None:
    """Serve in the foreground until interrupted."""
    import uvicorn

    uvicorn.run(create_app(retriever, limits), host=host, port=port, log_level="info", access_log=False)
