"""Client for Search-R1-compatible retrieval servers (``POST /retrieve``), ours or Search-R1's own.

Several servers share the load round robin. The cursor is shared by every client of the same server
list in a process (a rollout's envs each hold a client; with one cursor per client they would all
start at the first server and move in lockstep), and starts at an offset taken from the process id,
so env worker processes do not all begin on the same server either.

A server that fails (connection error, timeout, 5xx) is marked down for ``cooldown`` seconds: requests
skip it while another server is up, so a dead server costs one failed request per cooldown, not one
per round. After the cooldown a live request probes it again. A failed request is retried at once on
the next server; only when every server has failed within the same call does the client sleep (an
exponential backoff) before trying again. After ``retries`` extra attempts it raises
:class:`RetrievalError`, which the env turns into an observation, never a crashed rollout.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Sequence

from stratagym.errors import ConfigError
from stratagym.envs.search_qa.retrievers.base import Hit, RetrievalError, Retriever

__all__ = ["RemoteRetriever"]


class _Rejected(RetrievalError):
    """The server answered 4xx: the request itself is wrong, so retrying cannot help."""


class _ServerPool:
    """Round-robin cursor and down-marks for one list of server URLs, shared within a process."""

    def __init__(self, urls: tuple[str, ...]):
        self.urls = urls
        self.lock = threading.Lock()
        self.cursor = os.getpid() % len(urls)
        self.down_until = [0.0] * len(urls)
        self.sent = [0] * len(urls)      # requests sent to each server (for describe() and the tests)
        self.failed = [0] * len(urls)    # of which failed

    def pick(self, avoid: set[int]) -> int:
        """The next server in round-robin order, skipping those marked down and those in ``avoid``
        (already failed in this call) while any other is left; if none is left, the next in order."""
        with self.lock:
            n, now = len(self.urls), time.monotonic()
            order = [(self.cursor + i) % n for i in range(n)]
            choice = next((i for i in order if i not in avoid and self.down_until[i] <= now), None)
            if choice is None:
                choice = next((i for i in order if i not in avoid), order[0])
            self.cursor = (choice + 1) % n
            self.sent[choice] += 1
            return choice

    def mark(self, i: int, ok: bool, cooldown: float) -> None:
        with self.lock:
            if ok:
                self.down_until[i] = 0.0
            else:
                self.failed[i] += 1
                self.down_until[i] = time.monotonic() + cooldown


_POOLS: dict[tuple[str, ...], _ServerPool] = {}
_POOLS_LOCK = threading.Lock()


def _shared_pool(urls: tuple[str, ...]) -> _ServerPool:
    with _POOLS_LOCK:
        pool = _POOLS.get(urls)
        if pool is None:
            pool = _POOLS[urls] = _ServerPool(urls)
        return pool


class RemoteRetriever(Retriever):
    """Search through one or more retrieval servers.

    ``urls`` are base URLs (``http://127.0.0.1:8000``) or full ``.../retrieve`` endpoints. ``retries``
    extra attempts follow the first; a server that fails is skipped for ``cooldown`` seconds; after
    every server has failed within one call the client sleeps ``backoff * 2**k`` (k = 0, 1, ...).
    """

    backend = "remote"

    def __init__(self, urls: str | Sequence[str], *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.1,
                 cooldown: float = 10.0):
        import httpx

        if isinstance(urls, str):
            urls = [u for u in urls.split(",") if u.strip()]
        if not urls:
            raise ConfigError("RemoteRetriever needs at least one server URL, e.g. http://127.0.0.1:8000")
        self.urls = [self._endpoint(u.strip()) for u in urls]
        self.timeout, self.retries, self.backoff = float(timeout), max(0, int(retries)), float(backoff)
        self.cooldown = max(0.0, float(cooldown))
        self._servers = _shared_pool(tuple(self.urls))
        self._client = httpx.Client(timeout=self.timeout, trust_env=False)

    @staticmethod
    def _endpoint(url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"retrieval server URL {url!r} must start with http:// or https://")
        url = url.rstrip("/")
        return url if url.endswith("/retrieve") else url + "/retrieve"

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        if not queries:
            return []
        payload = {"queries": [str(q) for q in queries], "topk": int(k), "return_scores": True}
        errors: list[str] = []
        tried: set[int] = set()
        rounds = 0
        for attempt in range(self.retries + 1):
            if len(tried) == len(self.urls):  # every server failed in this call: back off, then go round again
                time.sleep(self.backoff * (2**rounds))
                rounds += 1
                tried.clear()
            i = self._servers.pick(tried)
            url = self.urls[i]
            try:
                resp = self._client.post(url, json=payload)
                if resp.status_code >= 500:
                    raise RetrievalError(f"HTTP {resp.status_code}: {resp.text[:200]}")
                if resp.status_code >= 400:
                    self._servers.mark(i, True, self.cooldown)  # the server is up; the request is wrong
                    raise _Rejected(f"{url} rejected the request (HTTP {resp.status_code}): {resp.text[:300]}")
                hits = self._parse(resp.json(), len(queries))
                self._servers.mark(i, True, self.cooldown)
                return hits
            except _Rejected:
                raise
            except RetrievalError as exc:
                errors.append(f"{url}: {exc}")
            except Exception as exc:  # connection refused, timeout, bad JSON
                errors.append(f"{url}: {type(exc).__name__}: {exc}")
            self._servers.mark(i, False, self.cooldown)
            tried.add(i)
        raise RetrievalError(f"all {self.retries + 1} attempts failed; last: {errors[-1]}")

    @staticmethod
    def _parse(body: Any, n: int) -> list[list[Hit]]:
        try:
            result = body["result"]
            if len(result) != n:
                raise ValueError(f"{len(result)} result lists for {n} queries")
            out = []
            for row in result:
                hits = []
                for item in row:
                    doc = item.get("document", item) if isinstance(item, dict) else {}
                    hits.append(Hit(str(doc.get("id", "")), str(doc.get("contents", "")), float(item.get("score", 0.0))))
                out.append(hits)
            return out
        except Exception as exc:
            raise RetrievalError(f"malformed server response: {exc}") from None

    def server_stats(self) -> list[dict[str, Any]]:
        """Per server, in this process (shared by every client of the same list): requests sent, failed,
        and whether it is marked down now."""
        s, now = self._servers, time.monotonic()
        with s.lock:
            return [{"url": u, "sent": s.sent[i], "failed": s.failed[i], "down": s.down_until[i] > now}
                    for i, u in enumerate(s.urls)]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "urls": list(self.urls)}

    def close(self) -> None:
        self._client.close()
