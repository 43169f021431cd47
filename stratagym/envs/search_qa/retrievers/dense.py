"""Dense retrieval, E5 style: a transformers encoder + a faiss inner-product index.

The E5 recipe (Search-R1 uses ``intfloat/e5-base-v2``): prefix queries with ``"query: "`` and passages
with ``"passage: "``, mean-pool the last hidden states over the attention mask, L2-normalise, cosine
similarity = inner product. Any local model directory works (a sentence-transformers MiniLM with empty
prefixes, a tiny test BERT); model *names* load only from the local HF cache, never the network here,
and fail with a message saying how to download and pass a path.

faiss index kinds: ``flat`` (exact, ``IndexFlatIP``), ``ivf`` (``IndexIVFFlat``, ``nlist`` cells, ``nprobe``
probed), ``ivfpq`` (``IndexIVFPQ``: ``pq_m`` sub-quantizers of ``nbits`` bits, ~``pq_m`` bytes per passage
instead of ``4 d``), ``hnsw`` (``IndexHNSWFlat``, ``M`` links, ``efSearch``), all with the inner-product
metric. Searches run on the GPU when faiss was built with GPU support and one is visible (flat and IVF
kinds; faiss has no GPU HNSW); otherwise on the CPU. Wiki-scale builds go through
:mod:`stratagym.envs.search_qa.dense_build` (sharded, resumable encoding, streaming merge).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from stratagym.errors import ConfigError
from stratagym.hub_kernels import load_kwargs
from stratagym.envs.search_qa.data import Corpus, MappedCorpus
from stratagym.envs.search_qa.retrievers.base import CorpusRetriever, Hit

__all__ = ["E5Encoder", "DenseRetriever", "build_faiss_index", "new_faiss_index", "read_faiss_index", "index_to_gpu",
           "faiss_gpu_available", "DEFAULT_DENSE_MODEL", "FAISS_KINDS"]

DEFAULT_DENSE_MODEL = "intfloat/e5-base-v2"
FAISS_KINDS = ("flat", "ivf", "ivfpq", "hnsw")


def faiss_gpu_available() -> bool:
    """True when the installed faiss has GPU support and sees a GPU (``faiss-gpu``; ``faiss-cpu`` never)."""
    import faiss

    try:
        return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    except Exception:  # pragma: no cover - a broken CUDA install: fall back to the CPU
        return False


def index_to_gpu(index: Any) -> Any:
    """``index`` copied to GPU 0 when :func:`faiss_gpu_available` and faiss supports its kind, else itself.

    Untested here (no faiss-gpu on the development machine); HNSW stays on the CPU in faiss.
    """
    import faiss

    if not faiss_gpu_available() or isinstance(index, faiss.IndexHNSW):
        return index
    try:
        res = faiss.StandardGpuResources()
        gpu = faiss.index_cpu_to_gpu(res, 0, index)
        gpu._stratagym_res = res  # keep the resources alive as long as the index
        return gpu
    except Exception:  # pragma: no cover - kinds faiss cannot move: search on the CPU
        return index


def new_faiss_index(kind: str, d: int, n: int, *, nlist: int | None = None, m: int = 32, ef_construction: int = 64,
                    pq_m: int | None = None, nbits: int = 8, seed: int = 0) -> Any:
    """An empty (untrained) inner-product index of ``kind`` for ``n`` vectors of dimension ``d``."""
    import faiss

    if kind not in FAISS_KINDS:
        raise ConfigError(f"unknown faiss index kind {kind!r}; use one of {FAISS_KINDS}")
    if kind == "flat":
        return faiss.IndexFlatIP(d)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, int(m), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(ef_construction)
        return index
    nlist = int(nlist or default_nlist(n))
    quantizer = faiss.IndexFlatIP(d)
    if kind == "ivf":
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    else:
        pq_m = int(pq_m or _default_pq_m(d))
        if d % pq_m:
            raise ConfigError(f"ivfpq needs pq_m dividing the dimension {d}; got pq_m={pq_m} (try {_default_pq_m(d)})")
        index = faiss.IndexIVFPQ(quantizer, d, nlist, pq_m, int(nbits), faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = int(seed)
    return index


def default_nlist(n: int) -> int:
    """~4 sqrt(n) cells, but at least 39 training points per cell (faiss warns below that)."""
    return max(1, min(4 * int(np.sqrt(n)), n // 39 or 1))


def _default_pq_m(d: int) -> int:
    """The largest of 64, 32, 16, 8, 4, 2, 1 sub-quantizers that divides ``d`` and leaves >= 2 dims each."""
    for m in (64, 32, 16, 8, 4, 2):
        if d % m == 0 and d // m >= 2:
            return m
    return 1


class E5Encoder:
    """Text -> L2-normalised float32 vectors with mean pooling (batched, no gradients)."""

    def __init__(self, model: str | os.PathLike = DEFAULT_DENSE_MODEL, *, query_prefix: str = "query: ",
                 passage_prefix: str = "passage: ", max_length: int = 256, batch_size: int = 64,
                 device: str | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.model_name = str(model)
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.max_length, self.batch_size = int(max_length), int(batch_size)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        local = Path(self.model_name).expanduser()
        try:
            if local.exists():
                self.tokenizer = AutoTokenizer.from_pretrained(str(local))
                self.model = AutoModel.from_pretrained(str(local), **load_kwargs())
            else:
                self.tokenizer = AutoTokenizer.from_pretrained(self.model_name, local_files_only=True)
                self.model = AutoModel.from_pretrained(self.model_name, local_files_only=True, **load_kwargs())
        except Exception as exc:
            raise ConfigError(
                f"could not load the encoder {self.model_name!r} from disk ({type(exc).__name__}: {str(exc)[:200]}). "
                f"Download it with `huggingface-cli download {self.model_name} --local-dir models/{self.model_name.split('/')[-1]}` "
                "and pass that directory as the model (--model / dense_model=)."
            ) from None
        self.model.eval().to(self.device)
        self.dim = int(self.model.config.hidden_size)

    def describe(self) -> dict[str, Any]:
        return {"model": self.model_name, "query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix,
                "max_length": self.max_length, "dim": self.dim}

    def encode(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        import torch

        prefix = self.query_prefix if is_query else self.passage_prefix
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # Sort by length so each batch pads little; restore order on the way out.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = self.tokenizer([prefix + str(texts[i]) for i in idx], padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
                out[idx] = pooled.float().cpu().numpy()
        return out


def build_faiss_index(embeddings: np.ndarray, kind: str = "flat", *, nlist: int | None = None, m: int = 32,
                      ef_construction: int = 64, pq_m: int | None = None, nbits: int = 8, seed: int = 0) -> Any:
    """A faiss inner-product index of ``kind`` over L2-normalised ``embeddings`` (n x d float32)."""
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    n, d = x.shape
    index = new_faiss_index(kind, d, n, nlist=nlist, m=m, ef_construction=ef_construction, pq_m=pq_m, nbits=nbits,
                            seed=seed)
    if not index.is_trained:
        index.train(x)
    index.add(x)
    return index


class DenseRetriever(CorpusRetriever):
    """Top-k passages by cosine similarity of E5-style embeddings (exact or approximate via faiss)."""

    backend = "dense"

    def __init__(self, corpus: Corpus | MappedCorpus, encoder: E5Encoder, index: Any = None, *, kind: str = "flat",
                 nprobe: int = 16, ef_search: int = 64, index_params: dict[str, Any] | None = None,
                 gpu: bool | None = None):
        self.corpus, self.encoder, self.kind = corpus, encoder, kind
        self.index_params = dict(index_params or {})
        if index is None:
            embeddings = encoder.encode(corpus.contents, is_query=False)
            index = build_faiss_index(embeddings, kind, **self.index_params)
        if index.ntotal != len(corpus):
            raise ConfigError(f"the faiss index holds {index.ntotal} vectors but the corpus has {len(corpus)} passages; rebuild the index")
        if index.d != encoder.dim:
            raise ConfigError(f"the faiss index has dimension {index.d} but encoder {encoder.model_name!r} gives {encoder.dim}; "
                              "load the index with the model it was built with")
        self.index = index
        self.set_search_params(nprobe=nprobe, ef_search=ef_search)
        if gpu or (gpu is None and faiss_gpu_available()):
            self.index = index_to_gpu(self.index)

    def set_search_params(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        import faiss

        if nprobe is not None and hasattr(self.index, "nprobe"):
            self.index.nprobe = int(nprobe)
        elif nprobe is not None and hasattr(faiss, "GpuParameterSpace") and "Gpu" in type(self.index).__name__:
            try:  # pragma: no cover - GPU IVF indexes take nprobe through the parameter space
                faiss.GpuParameterSpace().set_index_parameter(self.index, "nprobe", int(nprobe))
            except Exception:
                pass
        if ef_search is not None and isinstance(self.index, faiss.IndexHNSW):
            self.index.hnsw.efSearch = int(ef_search)
        self.nprobe, self.ef_search = nprobe, ef_search

    def _search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        q = self.encoder.encode(list(queries), is_query=True)
        scores, docs = self.index.search(q, k)
        doc = self.corpus.doc  # a MappedCorpus reads each hit from disk: read each passage once
        return [[Hit(*doc(d), float(s)) for d, s in zip(row_d, row_s) if d >= 0]
                for row_d, row_s in zip(docs.tolist(), scores.tolist())]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "num_docs": len(self), "faiss": self.kind, **self.encoder.describe()}

    # ---- persistence ----------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        import faiss

        index = faiss.index_gpu_to_cpu(self.index) if "Gpu" in type(self.index).__name__ else self.index
        faiss.write_index(index, str(Path(directory) / "faiss.index"))

    @classmethod
    def load(cls, directory: str | Path, corpus: Corpus | MappedCorpus, encoder: E5Encoder, *, kind: str,
             index_file: str | Path | None = None, **kw: Any) -> "DenseRetriever":
        index = read_faiss_index(index_file or Path(directory) / "faiss.index")
        return cls(corpus, encoder, index, kind=kind, **kw)


def read_faiss_index(path: str | Path) -> Any:
    """Read a faiss index, memory-mapped where faiss can (flat and IVF codes stay in the page cache, not
    in this process's private memory), else into memory. A missing file is a :class:`ConfigError`."""
    import faiss

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"faiss index file {p} does not exist; pass the path of an existing index (e.g. e5_Flat.index)")
    try:
        return faiss.read_index(str(p), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    except Exception:
        try:
            return faiss.read_index(str(p))
        except Exception as exc:
            raise ConfigError(f"{p} is not a faiss index faiss can read ({str(exc).splitlines()[0][:200]}); "
                              "pass a file written by faiss.write_index") from None
