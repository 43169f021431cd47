"""Client for Search-R1-compatible retrieval servers (``POST /retrieve``), ours or Search-R1's own.

Requests go round robin over the given URLs; a failed request (connection error, timeout, 5xx) is
retried on the next URL after an exponential backoff, a bounded number of times, then raises
:class:`RetrievalError` -- which the env turns into an observation, never a crashed rollout.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Sequence

from stratagym.errors import ConfigError
from stratagym.envs.search_qa.retrievers.base import Hit, RetrievalError, Retriever

__all__ = ["RemoteRetriever"]


class _Rejected(RetrievalError):
    """The server answered 4xx: the request itself is wrong, so retrying cannot help."""


class RemoteRetriever(Retriever):
    """Search through one or more retrieval servers.

    ``urls`` are base URLs (``http://127.0.0.1:8000``) or full ``.../retrieve`` endpoints. ``retries``
    extra attempts follow the first, sleeping ``backoff * 2**attempt`` seconds between them.
    """

    backend = "remote"

    def __init__(self, urls: str | Sequence[str], *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.1):
        import httpx

        if isinstance(urls, str):
            urls = [u for u in urls.split(",") if u.strip()]
        if not urls:
            raise ConfigError("RemoteRetriever needs at least one server URL, e.g. http://127.0.0.1:8000")
        self.urls = [self._endpoint(u.strip()) for u in urls]
        self.timeout, self.retries, self.backoff = float(timeout), max(0, int(retries)), float(backoff)
        self._cycle = itertools.cycle(range(len(self.urls)))
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=self.timeout, trust_env=False)

    @staticmethod
    def _endpoint(url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"retrieval server URL {url!r} must start with http:// or https://")
        url = url.rstrip("/")
        return url if url.endswith("/retrieve") else url + "/retrieve"

    def _next_url(self) -> str:
        with self._lock:
            return self.urls[next(self._cycle)]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        if not queries:
            return []
        payload = {"queries": [str(q) for q in queries], "topk": int(k), "return_scores": True}
        errors: list[str] = []
        for attempt in range(self.retries + 1):
            url = self._next_url()
            try:
                resp = self._client.post(url, json=payload)
                if resp.status_code >= 500:
                    raise RetrievalError(f"HTTP {resp.status_code}: {resp.text[:200]}")
                if resp.status_code >= 400:
                    raise _Rejected(f"{url} rejected the request (HTTP {resp.status_code}): {resp.text[:300]}")
                return self._parse(resp.json(), len(queries))
            except _Rejected:
                raise
            except RetrievalError as exc:
                errors.append(f"{url}: {exc}")
            except Exception as exc:  # connection refused, timeout, bad JSON
                errors.append(f"{url}: {type(exc).__name__}: {exc}")
            if attempt < self.retries:
                time.sleep(self.backoff * (2**attempt))
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

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "urls": list(self.urls)}

    def close(self) -> None:
        self._client.close()
