"""The one retrieval interface every backend implements."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["CorpusRetriever", "Hit", "Retriever", "RetrievalError"]


class RetrievalError(RuntimeError):
    """A search could not be served (server down, backend failure). The env shows it as an observation."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: corpus id, ``'"Title"\\ntext'`` contents, backend score (higher is better)."""

    id: str
    contents: str
    score: float

    def to_dict(self, with_score: bool = True) -> dict[str, Any]:
        """The Search-R1 server's JSON shape for one result."""
        doc = {"document": {"id": self.id, "contents": self.contents}}
        if with_score:
            doc["score"] = float(self.score)
        return doc


class Retriever(abc.ABC):
    """Top-k passage search. Backends implement :meth:`batch_search`; everything else derives from it.

    Retrievers are shared: one instance serves every env in a process and every request of a server,
    so implementations must not keep per-query state and should be safe to call from one thread at a
    time (the server serialises calls through its batcher).
    """

    backend: str = "base"

    @abc.abstractmethod
    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """Top-``k`` hits for each query, best first (fewer where the corpus has fewer matches)."""

    def search(self, query: str, k: int = 3) -> list[Hit]:
        return self.batch_search([query], k)[0]

    def __len__(self) -> int:
        """Number of passages searched."""
        return 0

    def describe(self) -> dict[str, Any]:
        """A small JSON-able summary (backend, passages, parameters) for health checks and manifests."""
        return {"backend": self.backend, "num_docs": len(self)}

    def close(self) -> None:
        """Release resources (HTTP clients, JVM handles); the retriever is unusable afterwards."""

    def __enter__(self) -> "Retriever":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class CorpusRetriever(Retriever):
    """A backend that searches a corpus held by this process (``self.corpus``: bm25s, dense): it searches
    ``len(corpus)`` passages, and :meth:`_search` gets a non-empty batch and ``k`` clamped to
    ``[1, len(corpus)]``."""

    corpus: Any

    @abc.abstractmethod
    def _search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` hits for each query; ``queries`` is not empty and ``1 <= k <= len(corpus)``."""

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        if not queries:
            return []
        return self._search(queries, max(1, min(int(k), len(self.corpus))))

    def __len__(self) -> int:
        return len(self.corpus)
