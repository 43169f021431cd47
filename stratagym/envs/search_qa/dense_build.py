"""Wiki-scale dense indexes: sharded, resumable encoding, a streaming merge into faiss, Search-R1 import.

Encoding a 21M-passage corpus with e5-base takes hours on a GPU; a crash must not cost them again.
:func:`encode_shards` encodes the corpus in shards of ``shard_size`` passages; each shard is a float32
``.npy`` written atomically (temp file + ``os.replace``), so a shard file that exists with the expected
shape is complete, and a restart (after ``kill -9``, OOM, a pre-empted node) encodes only the shards
that are missing. ``build.json`` in the work folder pins what the shards were encoded from (corpus
fingerprint, encoder, shard size): shards of another build are refused, never silently mixed.

:func:`merge_shards` reads the shards memory-mapped and adds them to a faiss index in chunks; IVF kinds
train on a random sample. Passages are read through :class:`MappedCorpus` (byte offsets into the
jsonl), so neither the build nor a search holds the corpus as Python strings.

:func:`import_search_r1` wraps an index written by Search-R1's ``search_r1/search/index_builder.py``
(``e5_Flat.index`` over ``wiki-18.jsonl``: row ``i`` of the index is line ``i`` of the corpus) in a
stratagym manifest without re-encoding anything.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from stratagym.atomic import write_json_atomic
from stratagym.errors import ConfigError
from stratagym.envs.search_qa.data import MappedCorpus, save_npy_atomic
from stratagym.envs.search_qa.manifest import FORMAT, MANIFEST_NAME, VERSION, _replace_dir, _staging_dir
from stratagym.envs.search_qa.retrievers.dense import E5Encoder, faiss_gpu_available, new_faiss_index, read_faiss_index

__all__ = ["encode_shards", "merge_shards", "shard_plan", "import_search_r1", "OFFSETS_NAME", "BUILD_NAME",
           "DEFAULT_SHARD_SIZE"]

OFFSETS_NAME = "corpus_offsets.npy"
BUILD_NAME = "build.json"
PROGRESS_NAME = "progress.json"
DEFAULT_SHARD_SIZE = 100_000
#: Passages handed to the encoder at once inside a shard: bounds the texts held in memory and paces the
#: progress bar (the encoder batches these further by ``batch_size``, sorted by length).
ENCODE_CHUNK = 4096


def shard_plan(n: int, shard_size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` passage ranges of the shards of an ``n``-passage corpus."""
    if shard_size < 1:
        raise ConfigError(f"shard_size must be >= 1, got {shard_size}")
    return [(a, min(a + shard_size, n)) for a in range(0, n, shard_size)]


def _shard_path(work_dir: Path, k: int) -> Path:
    return work_dir / f"emb-{k:05d}.npy"


def _shard_complete(path: Path, rows: int, dim: int) -> bool:
    """A shard counts when its file reads back as a float32 ``(rows, dim)`` array (files are written
    atomically, so anything else is a foreign or damaged file, re-encoded)."""
    if not path.exists():
        return False
    try:
        arr = np.load(str(path), mmap_mode="r")
    except (ValueError, OSError):
        return False
    return arr.dtype == np.float32 and arr.shape == (rows, dim)


def _progress_bar(total: int, initial: int, enabled: bool, desc: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="passage", unit_scale=True, desc=desc, disable=not enabled,
                file=sys.stderr, mininterval=1.0, smoothing=0.05)


def encode_shards(corpus: MappedCorpus, encoder: Any, work_dir: str | os.PathLike, *,
                  shard_size: int = DEFAULT_SHARD_SIZE, restart: bool = False, progress: bool = True,
                  on_shard: Callable[[int, Path], None] | None = None) -> tuple[list[Path], dict[str, Any]]:
    """Encode every passage of ``corpus`` into shards under ``work_dir``, skipping complete shards.

    Returns the shard paths in corpus order and stats (``shards``, ``shards_encoded`` this call,
    ``passages_encoded``, ``encode_s``, ``passages_per_s``). ``on_shard(k, path)`` runs after each
    newly written shard (tests interrupt a build by raising from it). ``restart`` deletes shards
    left by a build with other settings instead of refusing them.
    """
    work = Path(work_dir).expanduser()
    n, dim = len(corpus), int(encoder.dim)
    plan = shard_plan(n, int(shard_size))
    spec = {"corpus_fingerprint": corpus.fingerprint, "num_docs": n, "shard_size": int(shard_size),
            "encoder": encoder.describe()}
    build_file = work / BUILD_NAME
    if build_file.exists():
        try:
            old = json.loads(build_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            old = None
        if old != spec:
            if not restart:
                diff = sorted(k for k in spec if old is None or old.get(k) != spec[k])
                raise ConfigError(f"{work} holds encoding shards of another build (different {', '.join(diff) or 'build.json'}); "
                                  "pass --restart (restart=True) to delete them, or choose another --work-dir")
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    if not build_file.exists():
        write_json_atomic(build_file, spec)
    paths = [_shard_path(work, k) for k in range(len(plan))]
    todo = [k for k, (a, b) in enumerate(plan) if not _shard_complete(paths[k], b - a, dim)]
    done_rows = n - sum(plan[k][1] - plan[k][0] for k in todo)
    stats: dict[str, Any] = {"shards": len(plan), "shards_encoded": 0, "shards_reused": len(plan) - len(todo),
                             "passages_encoded": 0, "encode_s": 0.0, "passages_per_s": 0.0}
    if progress:
        print(f"{len(plan) - len(todo)}/{len(plan)} shards already encoded in {work}" if len(todo) < len(plan)
              else f"encoding {len(plan)} shards of {shard_size} passages into {work} (rerun to resume)", file=sys.stderr)
    bar = _progress_bar(n, done_rows, progress, "encode")
    t0 = time.perf_counter()
    try:
        for k in todo:
            a, b = plan[k]
            out = np.empty((b - a, dim), dtype=np.float32)
            for s in range(a, b, ENCODE_CHUNK):
                e = min(s + ENCODE_CHUNK, b)
                out[s - a:e - a] = encoder.encode(corpus.texts(s, e), is_query=False)
                bar.update(e - s)
            save_npy_atomic(paths[k], out)
            del out
            stats["shards_encoded"] += 1
            stats["passages_encoded"] += b - a
            elapsed = time.perf_counter() - t0
            stats["encode_s"] = round(elapsed, 3)
            stats["passages_per_s"] = round(stats["passages_encoded"] / max(elapsed, 1e-9), 1)
            write_json_atomic(work / PROGRESS_NAME, {"shards_total": len(plan), "last_shard": k, **stats,
                                                     "shards_complete": len(plan) - len(todo) + stats["shards_encoded"]})
            if on_shard is not None:
                on_shard(k, paths[k])
    finally:
        bar.close()
    return paths, stats


def _train_sample(shards: Sequence[np.ndarray], n: int, size: int, seed: int) -> np.ndarray:
    """``size`` rows drawn without replacement across the memory-mapped shards (sorted reads)."""
    if size >= n:
        return np.concatenate([np.asarray(s) for s in shards]).astype(np.float32, copy=False)
    rows = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    out = np.empty((size, shards[0].shape[1]), dtype=np.float32)
    base, filled = 0, 0
    for s in shards:
        local = rows[(rows >= base) & (rows < base + len(s))] - base
        out[filled:filled + len(local)] = s[local]
        filled += len(local)
        base += len(s)
    return out


def merge_shards(shard_paths: Sequence[str | os.PathLike], kind: str = "flat", *, params: dict[str, Any] | None = None,
                 train_size: int | None = None, seed: int = 0, chunk_rows: int = 1 << 16, progress: bool = False,
                 gpu: bool | None = None) -> Any:
    """A faiss index of ``kind`` over the shards, in order (row ``i`` = passage ``i``).

    Shards are memory-mapped and added ``chunk_rows`` at a time, so beyond the index itself only one
    chunk is in memory. IVF kinds train on ``train_size`` random rows (default ``64 * nlist``, and
    ``40 * 2**nbits`` for IVF-PQ, at most all), on the GPU when faiss-gpu sees one (``gpu=None``: when available).
    """
    import faiss

    mms = [np.load(str(p), mmap_mode="r") for p in shard_paths]
    if not mms:
        raise ConfigError("no shards to merge (empty corpus?)")
    n, d = sum(len(m) for m in mms), int(mms[0].shape[1])
    params = dict(params or {})
    index = new_faiss_index(kind, d, n, seed=seed, **params)
    use_gpu = kind in ("ivf", "ivfpq") and (gpu or (gpu is None and faiss_gpu_available()))
    target = index
    if use_gpu:  # pragma: no cover - needs faiss-gpu
        res = faiss.StandardGpuResources()
        target = faiss.index_cpu_to_gpu(res, 0, index)
    if not index.is_trained:
        # k-means wants >= 39 points per centroid: 64 per IVF cell, and 40 per PQ code for IVF-PQ
        ksub = 1 << int(index.pq.nbits) if isinstance(index, faiss.IndexIVFPQ) else 0
        size = int(train_size or min(n, max(64 * index.nlist, 40 * ksub)))
        target.train(_train_sample(mms, n, max(size, index.nlist), seed))
    bar = _progress_bar(n, 0, progress, f"add ({kind})")
    try:
        for m in mms:
            for s in range(0, len(m), chunk_rows):
                x = np.ascontiguousarray(m[s:s + chunk_rows], dtype=np.float32)
                target.add(x)
                bar.update(len(x))
    finally:
        bar.close()
    if use_gpu:  # pragma: no cover - needs faiss-gpu
        index = faiss.index_gpu_to_cpu(target)
    return index


def faiss_kind_of(index: Any) -> str:
    """stratagym's name for a faiss index's kind (``flat``, ``ivf``, ``ivfpq``, ``hnsw``), or ``faiss:<Class>``."""
    import faiss

    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(index, faiss.IndexIVFPQ):
        return "ivfpq"
    if isinstance(index, faiss.IndexIVF):
        return "ivf"
    if isinstance(index, faiss.IndexFlat):
        return "flat"
    return f"faiss:{type(index).__name__}"


def import_search_r1(index_file: str | os.PathLike, corpus: str | os.PathLike, model: str | os.PathLike,
                     out_dir: str | os.PathLike, *, query_prefix: str = "query: ", passage_prefix: str = "passage: ",
                     max_length: int = 256, device: str | None = None) -> Path:
    """Wrap a Search-R1 faiss index (``e5_Flat.index``) and its corpus (``wiki-18.jsonl``) as a stratagym
    dense index in ``out_dir``: a manifest pinning the corpus fingerprint, the encoder and the index file
    (referenced by path, not copied: it is tens of GB), plus the corpus byte offsets. Nothing is encoded.

    Checked, each failure a :class:`ConfigError` naming the fix: both files exist; the index has one
    vector per corpus line; its dimension is the encoder's.
    """
    ipath = Path(index_file).expanduser().resolve()
    cpath = Path(corpus).expanduser().resolve()
    if not ipath.is_file():
        raise ConfigError(f"Search-R1 index {ipath} does not exist; pass --index PATH/e5_Flat.index "
                          "(huggingface-cli download PeterJinGo/wiki-18-e5-index, then cat part_* > e5_Flat.index)")
    if not cpath.is_file():
        raise ConfigError(f"corpus {cpath} does not exist; pass --corpus PATH/wiki-18.jsonl (gunzip wiki-18.jsonl.gz first)")
    index = read_faiss_index(ipath)
    out = Path(out_dir).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = _staging_dir(out)
    try:
        docs = MappedCorpus.open(cpath, staging / OFFSETS_NAME)
        if index.ntotal != len(docs):
            raise ConfigError(f"{ipath} holds {index.ntotal} vectors but {cpath} has {len(docs)} passages; "
                              "pass the corpus file the index was built from (row i of the index is line i of the corpus)")
        encoder = E5Encoder(model, query_prefix=query_prefix, passage_prefix=passage_prefix, max_length=max_length,
                            device=device)
        if index.d != encoder.dim:
            raise ConfigError(f"{ipath} has dimension {index.d} but encoder {encoder.model_name!r} gives {encoder.dim}; "
                              "pass --model with the encoder the index was built with (intfloat/e5-base-v2 for e5_Flat.index)")
        st = ipath.stat()
        manifest = {
            "format": FORMAT, "version": VERSION, "backend": "dense",
            "corpus": {"path": str(cpath), "fingerprint": docs.fingerprint, "num_docs": len(docs)},
            "params": {"faiss": faiss_kind_of(index), "faiss_file": str(ipath), "faiss_file_size": st.st_size,
                       "metric": "inner_product" if index.metric_type == 0 else "l2" if index.metric_type == 1 else str(index.metric_type),
                       "imported_from": "search-r1"},
            "model": encoder.describe(),
        }
        write_json_atomic(staging / MANIFEST_NAME, manifest, indent=2)
        _replace_dir(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out
