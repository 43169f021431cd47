"""Building, saving and loading retrieval indexes, each with a manifest that pins what it was built from.

An index directory holds the backend's files plus ``manifest.json``::

    {"format": "stratagym-search-index", "version": 1, "backend": "bm25s" | "pyserini" | "dense",
     "corpus": {"path": ..., "fingerprint": "sha256:...", "num_docs": N},
     "params": {...backend parameters...}, "model": {...encoder, dense only...},
     "build": {...dense only: shards encoded / reused, throughput, merge time...}}

A dense index directory also holds ``faiss.index`` (or, imported from Search-R1, the path of its file in
``params.faiss_file``) and ``corpus_offsets.npy``, the byte offsets that let the corpus be read on demand.

Loading checks the manifest against what the caller asks for (backend, model, corpus file) and fails
with a clear :class:`ConfigError` on any mismatch: an index silently paired with the wrong corpus
returns plausible-looking wrong passages, the worst kind of bug. Directories are built in a staging
folder and renamed into place, so a crash never leaves a half-written index that looks complete.

:func:`make_retriever` is the one entry point the env, the server and the CLI use to turn options into
a :class:`Retriever`; in-process retrievers over the same corpus are built once per process and shared.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from stratagym import paths
from stratagym.atomic import atomic_write
from stratagym.errors import ConfigError
from stratagym.envs.search_qa.data import (
    BUNDLED_CORPUS,
    MappedCorpus,
    file_fingerprint,
    load_corpus,
    save_npy_atomic,
    stamped_fingerprint,
)
from stratagym.envs.search_qa.manifest import FORMAT, MANIFEST_NAME, VERSION, _replace_dir, _staging_dir
from stratagym.envs.search_qa.retrievers.base import Retriever
from stratagym.envs.search_qa.retrievers.bm25 import BM25sRetriever

__all__ = ["BACKENDS", "MANIFEST_NAME", "build_index", "load_index", "read_manifest", "make_retriever", "cache_dir"]

BACKENDS = ("bm25s", "pyserini", "dense")

_SHARED: dict[tuple, Retriever] = {}
_SHARED_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Where indexes built on demand are kept: the project cache (:func:`stratagym.paths.cache_dir`)."""
    return paths.cache_dir()


def _corpus_path(corpus: str | os.PathLike) -> Path:
    return BUNDLED_CORPUS if str(corpus) == "bundled" else Path(corpus).expanduser().resolve()


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown retrieval backend {backend!r}; use one of {BACKENDS}")


# --------------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------------


def build_index(corpus: str | os.PathLike, out_dir: str | os.PathLike, backend: str = "bm25s", *,
                model: str | None = None, faiss_kind: str = "flat", k1: float = 0.9, b: float = 0.4,
                threads: int = 1, batch_size: int = 64, query_prefix: str = "query: ",
                passage_prefix: str = "passage: ", max_length: int = 256, faiss_params: dict[str, Any] | None = None,
                device: str | None = None, shard_size: int | None = None, work_dir: str | os.PathLike | None = None,
                restart: bool = False, keep_shards: bool = False, train_size: int | None = None,
                progress: bool = False, on_shard: Callable[[int, Path], None] | None = None) -> Path:
    """Index the corpus jsonl at ``corpus`` with ``backend`` into ``out_dir`` (replaced atomically).

    ``dense`` encodes in resumable shards of ``shard_size`` passages under ``work_dir`` (default
    ``<out_dir>.shards``): a build that dies is rerun with the same arguments and encodes only the
    shards it had not finished; the shards are deleted once the index is in place (unless
    ``keep_shards``). See :mod:`stratagym.envs.search_qa.dense_build`.
    """
    _check_backend(backend)
    cpath = _corpus_path(corpus)
    out = Path(out_dir).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not (out / MANIFEST_NAME).exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists and is not a stratagym index; choose another --out")
    if backend == "dense":
        return _build_dense(cpath, out, model=model, faiss_kind=faiss_kind, batch_size=batch_size,
                            query_prefix=query_prefix, passage_prefix=passage_prefix, max_length=max_length,
                            faiss_params=faiss_params, device=device, shard_size=shard_size, work_dir=work_dir,
                            restart=restart, keep_shards=keep_shards, train_size=train_size, progress=progress,
                            on_shard=on_shard)
    docs = load_corpus(cpath)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "backend": backend,
        "corpus": {"path": str(cpath), "fingerprint": docs.fingerprint, "num_docs": len(docs)},
        "params": {},
    }
    staging = _staging_dir(out)
    try:
        if backend == "bm25s":
            r = BM25sRetriever(docs, k1=k1, b=b)
            r.save(staging / "bm25s")
            manifest["params"] = {"k1": r.k1, "b": r.b, "stemmer": r.stemmer_name}
        else:
            from stratagym.envs.search_qa.retrievers.lucene import build_lucene_index  # lazy: pyserini only (Java helpers, ~4 ms)

            build_lucene_index(cpath, staging / "lucene", threads=threads)
            manifest["params"] = {"k1": k1, "b": b}
        _write_json(staging / MANIFEST_NAME, manifest)
        _replace_dir(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _build_dense(cpath: Path, out: Path, *, model: str | None, faiss_kind: str, batch_size: int, query_prefix: str,
                 passage_prefix: str, max_length: int, faiss_params: dict[str, Any] | None, device: str | None,
                 shard_size: int | None, work_dir: str | os.PathLike | None, restart: bool, keep_shards: bool,
                 train_size: int | None, progress: bool, on_shard: Callable[[int, Path], None] | None) -> Path:
    import faiss

    # lazy: the dense backend only (~6 ms; `gym.make` of the default bm25s env stays fast)
    from stratagym.envs.search_qa.dense_build import DEFAULT_SHARD_SIZE, OFFSETS_NAME, encode_shards, merge_shards
    from stratagym.envs.search_qa.retrievers.dense import DEFAULT_DENSE_MODEL, FAISS_KINDS, E5Encoder

    if faiss_kind not in FAISS_KINDS:
        raise ConfigError(f"unknown faiss index kind {faiss_kind!r}; use one of {FAISS_KINDS}")
    docs = MappedCorpus.open(cpath)  # offsets only: the passages are read shard by shard
    encoder = E5Encoder(model or DEFAULT_DENSE_MODEL, query_prefix=query_prefix, passage_prefix=passage_prefix,
                        max_length=max_length, batch_size=batch_size, device=device)
    work = Path(work_dir).expanduser() if work_dir is not None else out.with_name(out.name + ".shards")
    shard_size = int(shard_size or DEFAULT_SHARD_SIZE)
    shards, stats = encode_shards(docs, encoder, work, shard_size=shard_size, restart=restart, progress=progress,
                                  on_shard=on_shard)
    t0 = time.perf_counter()
    index = merge_shards(shards, faiss_kind, params=faiss_params, train_size=train_size, progress=progress)
    staging = _staging_dir(out)
    try:
        faiss.write_index(index, str(staging / "faiss.index"))
        del index
        save_npy_atomic(staging / OFFSETS_NAME, np.asarray(docs.offsets))
        manifest = {
            "format": FORMAT, "version": VERSION, "backend": "dense",
            "corpus": {"path": str(cpath), "fingerprint": docs.fingerprint, "num_docs": len(docs)},
            "params": {"faiss": faiss_kind, **(faiss_params or {}), "shard_size": shard_size},
            "model": encoder.describe(),
            "build": {**stats, "merge_s": round(time.perf_counter() - t0, 3)},
        }
        _write_json(staging / MANIFEST_NAME, manifest)
        _replace_dir(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    if not keep_shards:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------------------
# Load
# --------------------------------------------------------------------------------------------------


def read_manifest(index_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(index_dir).expanduser() / MANIFEST_NAME
    if not path.exists():
        raise ConfigError(f"{path.parent} is not a stratagym index (no {MANIFEST_NAME}); "
                          "build one with `stratagym index build --corpus ... --backend ... --out ...`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is corrupt ({exc}); rebuild the index") from None
    if manifest.get("format") != FORMAT or manifest.get("backend") not in BACKENDS:
        raise ConfigError(f"{path} is not a stratagym search index manifest; rebuild the index")
    if int(manifest.get("version", 0)) > VERSION:
        raise ConfigError(f"{path} was written by a newer stratagym (version {manifest['version']}); upgrade stratagym")
    return manifest


def load_index(index_dir: str | os.PathLike, *, corpus: str | os.PathLike | None = None, backend: str | None = None,
               model: str | None = None, device: str | None = None, batch_size: int = 64,
               verify_corpus: str = "stat") -> Retriever:
    """Load a saved index; every argument given must agree with its manifest.

    ``corpus`` defaults to the file the manifest names; whichever file is used must have the
    fingerprint the index was built from. ``model`` (dense only) defaults to the manifest's.
    ``verify_corpus``: ``"stat"`` (default) hashes the corpus once per machine and trusts the hash while
    the file's size, modification time and inode are unchanged (:func:`~stratagym.envs.search_qa.data.
    stamped_fingerprint`); ``"full"`` reads the whole file on every load.
    """
    index_dir = Path(index_dir).expanduser()
    m = read_manifest(index_dir)
    built = m["backend"]
    if backend is not None and backend != built:
        raise ConfigError(f"index {index_dir} was built with backend {built!r}, not {backend!r}; "
                          f"pass retriever={built!r} or build a {backend} index")
    cpath = _corpus_path(corpus) if corpus is not None else Path(m["corpus"]["path"])
    if not cpath.exists():
        raise ConfigError(f"index {index_dir} needs its corpus {cpath}, which does not exist; pass corpus=PATH to the moved file")
    fp = stamped_fingerprint(cpath, verify=verify_corpus)
    if fp != m["corpus"]["fingerprint"]:
        raise ConfigError(f"corpus mismatch: index {index_dir} was built from a corpus with fingerprint "
                          f"{m['corpus']['fingerprint'][:19]}... ({m['corpus']['num_docs']} passages, {m['corpus']['path']}), "
                          f"but {cpath} has {fp[:19]}...; rebuild the index for this corpus or pass the right corpus")
    params = m.get("params", {})
    if built == "pyserini":
        from stratagym.envs.search_qa.retrievers.lucene import PyseriniRetriever  # lazy: pyserini only (~4 ms)

        return PyseriniRetriever(index_dir / "lucene", k1=params.get("k1", 0.9), b=params.get("b", 0.4))
    if built == "bm25s":
        return BM25sRetriever.load(index_dir / "bm25s", load_corpus(cpath), k1=params["k1"], b=params["b"],
                                   stemmer=params.get("stemmer"))
    # lazy: the dense backend only (~6 ms; `gym.make` of the default bm25s env stays fast)
    from stratagym.envs.search_qa.dense_build import OFFSETS_NAME
    from stratagym.envs.search_qa.retrievers.dense import DenseRetriever, E5Encoder

    offsets = index_dir / OFFSETS_NAME  # absent in indexes built before the offsets: computed in memory
    docs = MappedCorpus.open(cpath, offsets if offsets.exists() else None, fingerprint=fp)
    index_file = Path(params["faiss_file"]) if "faiss_file" in params else index_dir / "faiss.index"
    if "faiss_file_size" in params and index_file.is_file() and index_file.stat().st_size != params["faiss_file_size"]:
        raise ConfigError(f"{index_file} changed since it was imported into {index_dir} ({index_file.stat().st_size} bytes, "
                          f"was {params['faiss_file_size']}); run `stratagym index import-search-r1` again")

    mm = m.get("model", {})
    if model is not None and str(model) != mm.get("model"):
        raise ConfigError(f"index {index_dir} was built with encoder {mm.get('model')!r}, not {str(model)!r}; "
                          "query it with the same model or rebuild the index")
    encoder = E5Encoder(mm["model"], query_prefix=mm.get("query_prefix", "query: "),
                        passage_prefix=mm.get("passage_prefix", "passage: "), max_length=mm.get("max_length", 256),
                        batch_size=batch_size, device=device)
    return DenseRetriever.load(index_dir, docs, encoder, kind=params.get("faiss", "flat"), index_file=index_file)


# --------------------------------------------------------------------------------------------------
# One entry point for env, server and CLI
# --------------------------------------------------------------------------------------------------


def make_retriever(retriever: str | Retriever | None = None, *, corpus: str | os.PathLike | None = None,
                   index: str | os.PathLike | None = None, urls: str | Sequence[str] | None = None,
                   dense_model: str | None = None, faiss_kind: str = "flat", shared: bool = True,
                   **kwargs: Any) -> Retriever:
    """Turn env/server options into a retriever.

    * a :class:`Retriever` instance is used as is;
    * ``urls`` (or ``retriever="remote"``) -> :class:`RemoteRetriever` over those servers;
    * ``index`` -> :func:`load_index`; ``retriever`` and ``corpus``, when given, must match its manifest
      (``corpus`` defaults to the file the manifest names);
    * otherwise an index over ``corpus`` (default: the bundled one) is built on the fly with
      ``retriever`` (default ``bm25s``): ``bm25s`` and ``dense`` in memory, ``pyserini`` under
      :func:`cache_dir` keyed by the corpus fingerprint. With ``shared`` (default) each distinct
      configuration is built once per process and reused by every env.
    """
    if isinstance(retriever, Retriever):
        return retriever
    if urls or retriever == "remote":
        if not urls:
            raise ConfigError("retriever='remote' needs retrieval_urls=['http://127.0.0.1:8000', ...]")
        from stratagym.envs.search_qa.retrievers.remote import RemoteRetriever  # lazy: remote only (~2 ms)

        return RemoteRetriever(urls, **{k: v for k, v in kwargs.items() if k in ("timeout", "retries", "backoff")})
    if retriever is not None and not isinstance(retriever, str):
        raise ConfigError(f"retriever must be a backend name {BACKENDS} or a Retriever, got {type(retriever).__name__}")
    if retriever is not None:
        _check_backend(retriever)
    if index is not None:
        ipath = Path(index).expanduser().resolve()
        key: tuple = ("index", str(ipath), retriever, str(corpus), dense_model)
        factory = lambda: load_index(ipath, corpus=corpus, backend=retriever, model=dense_model)  # noqa: E731
    else:
        backend = retriever or "bm25s"
        cpath = _corpus_path(corpus if corpus is not None else "bundled")
        if not cpath.exists():
            raise ConfigError(f"corpus {cpath} does not exist; pass corpus=PATH to a jsonl of {{'id', 'contents'}} rows")
        fp = file_fingerprint(cpath)
        key = ("built", backend, fp, dense_model, faiss_kind)
        factory = lambda: _build_in_process(backend, cpath, fp, dense_model, faiss_kind)  # noqa: E731
    if not shared:
        return factory()
    with _SHARED_LOCK:
        r = _SHARED.get(key)
        if r is None:
            r = _SHARED[key] = factory()
        return r


def _build_in_process(backend: str, cpath: Path, fingerprint: str, dense_model: str | None, faiss_kind: str) -> Retriever:
    if backend == "bm25s":
        return BM25sRetriever(load_corpus(cpath))
    if backend == "dense":
        # lazy: the dense backend only (~3 ms; `gym.make` of the default bm25s env stays fast)
        from stratagym.envs.search_qa.retrievers.dense import DEFAULT_DENSE_MODEL, DenseRetriever, E5Encoder

        return DenseRetriever(load_corpus(cpath), E5Encoder(dense_model or DEFAULT_DENSE_MODEL), kind=faiss_kind)
    out = cache_dir() / "indexes" / f"{fingerprint.split(':')[-1][:16]}-pyserini"
    if not (out / MANIFEST_NAME).exists():
        build_index(cpath, out, "pyserini")
    return load_index(out, corpus=cpath, backend="pyserini")
