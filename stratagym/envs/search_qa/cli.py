"""CLI: ``stratagym index build|info|import-search-r1``, ``stratagym serve retrieval`` and ``stratagym envs
audit`` (train/test overlap of a QA dataset). Heavy imports stay
inside commands. A ``ConfigError`` (bad backend, missing file, mismatched index) is not caught here: the one
error boundary, :func:`stratagym.cli.main`, prints it and exits with code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from stratagym.cli_support import command_group
from stratagym.display import print_table
from stratagym.errors import ConfigError
from stratagym.provenance import TRAINING_DATA_FILE, read_provenance, training_sets_for


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    index_app = command_group(app, groups, "index", "Build and inspect retrieval indexes.")
    index_app.command("build")(index_build)
    index_app.command("info")(index_info)
    index_app.command("import-search-r1")(index_import_search_r1)
    groups["serve"].command("retrieval")(serve_retrieval)
    groups["envs"].command("audit")(envs_audit)


def envs_audit(
    dataset: str = typer.Argument("bundled", help="'bundled', a directory of {split}.jsonl/.parquet files, or one "
                                  "eval split file with its train file beside it (FlashRAG jsonl, Search-R1 parquet)."),
    split: list[str] = typer.Option([], "--split", help="Eval split(s) to audit (repeatable); default: every split "
                                    "but the train split."),
    train_split: str = typer.Option("train", "--train-split", help="The split the eval splits are compared with."),
    threshold: float = typer.Option(0.8, "--threshold", min=0.0, max=1.0,
                                    help="IDF-weighted token-set Jaccard at or above which two questions are near-duplicates."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON instead of a table."),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", help="Compare with the questions this checkpoint trained on (its training_data.json: "
        "SFT demonstrations and RL tasks), instead of the dataset's train split."),
) -> None:
    """Train/test overlap of a QA dataset: per eval split, the share of questions whose gold answer is a
    train answer, whose supporting passages all support train questions, and that near-duplicate a train
    question (see stratagym.envs.search_qa.overlap), and of those overlapping in any of the three ways.
    With --checkpoint, "train" means exactly what that checkpoint was trained on."""
    import json

    from rich.console import Console

    from stratagym.envs.search_qa.overlap import audit_dataset  # lazy: ~10 ms of imports; `stratagym --help` stays fast

    if threshold <= 0:
        raise typer.BadParameter("--threshold must be > 0")
    sets = None
    against = f"split {train_split!r}"
    if checkpoint is not None:
        sets = _training_sets(checkpoint)
        n_tasks = sum(len(s["task_ids"]) for s in sets)
        against = f"the {n_tasks} questions {checkpoint} trained on ({', '.join(s['stage'] for s in sets)})"
    results = audit_dataset(dataset, split or None, train_split=train_split, threshold=threshold, training_sets=sets)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in results], indent=2))
        return

    def share(k: int, n: int) -> str:
        return f"{k}/{n} ({k / n:.1%})" if n else "n/a"

    rows = [[r.split, str(r.n), share(r.answer, r.n), share(r.passages, r.passages_known), share(r.question, r.n),
             share(r.any, r.n)] for r in results]
    print_table(Console(), f"train/test overlap of {dataset} (against {against})",
                ["split", "questions", "answer in train", "passages all in train", "near-dup question",
                 "any overlap"], rows)


def _training_sets(checkpoint: Path) -> list[dict[str, Any]]:
    """The SearchQA training sets a checkpoint's provenance names; a ConfigError with the fix when none."""
    if not checkpoint.is_dir():
        raise ConfigError(f"--checkpoint {checkpoint}: not a checkpoint folder")
    sets = training_sets_for(read_provenance(checkpoint), "stratagym/SearchQA-v0")
    if not sets:
        raise ConfigError(f"--checkpoint {checkpoint} has no {TRAINING_DATA_FILE} naming SearchQA training data "
                          "(checkpoints trained before provenance existed have none); audit against the dataset's "
                          "train split by leaving --checkpoint out")
    return sets


def _print_manifest(path: Path, headline: str) -> None:
    """Print ``headline`` (``{num_docs}`` filled from the manifest) with the index path, then the manifest."""
    import json

    from stratagym.envs.search_qa.index import read_manifest  # lazy: ~10 ms of imports; `stratagym --help` stays fast

    manifest = read_manifest(path)
    typer.echo(f"{headline.format(num_docs=manifest['corpus']['num_docs'])} -> {path}")
    typer.echo(json.dumps(manifest, indent=2))


def index_build(
    corpus: str = typer.Option("bundled", help="Corpus jsonl ({'id', 'contents'} rows) or 'bundled'."),
    backend: str = typer.Option("bm25s", help="bm25s | pyserini | dense"),
    out: Path = typer.Option(..., help="Index directory to create (replaced atomically if it exists)."),
    model: Optional[str] = typer.Option(None, help="Dense only: local encoder directory (default name intfloat/e5-base-v2)."),
    faiss: str = typer.Option("flat", help="Dense only: flat | ivf | ivfpq | hnsw"),
    nlist: Optional[int] = typer.Option(None, help="Dense ivf/ivfpq only: number of cells (default ~4 sqrt(n))."),
    pq_m: Optional[int] = typer.Option(None, help="Dense ivfpq only: sub-quantizers (must divide the dimension)."),
    nbits: int = typer.Option(8, help="Dense ivfpq only: bits per sub-quantizer code."),
    train_size: Optional[int] = typer.Option(None, help="Dense ivf/ivfpq only: training sample (default 64 x nlist)."),
    hnsw_m: int = typer.Option(32, help="Dense hnsw only: links per node."),
    query_prefix: str = typer.Option("query: ", help="Dense only: prefix for queries ('' for non-E5 models)."),
    passage_prefix: str = typer.Option("passage: ", help="Dense only: prefix for passages."),
    max_length: int = typer.Option(256, help="Dense only: token limit per passage and query."),
    batch_size: int = typer.Option(64, help="Dense only: encoding batch size."),
    shard_size: int = typer.Option(100_000, help="Dense only: passages per resumable encoding shard."),
    work_dir: Optional[Path] = typer.Option(None, help="Dense only: shard folder (default OUT.shards); rerun to resume."),
    restart: bool = typer.Option(False, help="Dense only: delete shards of a build with other settings."),
    keep_shards: bool = typer.Option(False, help="Dense only: keep the shard folder after the index is built."),
    device: Optional[str] = typer.Option(None, help="Dense only: torch device for encoding (default cuda if present)."),
    progress: bool = typer.Option(True, help="Dense only: progress bars with throughput on stderr."),
    threads: int = typer.Option(1, help="Pyserini only: indexing threads."),
    k1: float = typer.Option(0.9, help="BM25 k1."),
    b: float = typer.Option(0.4, help="BM25 b."),
) -> None:
    """Build a retrieval index with a manifest (corpus fingerprint, backend, model).

    Dense builds encode in shards written atomically; after a crash or kill, the same command resumes
    from the last complete shard.
    """
    import time

    from stratagym.envs.search_qa.index import build_index  # lazy: ~10 ms of imports; `stratagym --help` stays fast

    t0 = time.perf_counter()
    if faiss in ("ivf", "ivfpq"):
        faiss_params = {k: v for k, v in {"nlist": nlist, "pq_m": pq_m if faiss == "ivfpq" else None}.items() if v}
        if faiss == "ivfpq":
            faiss_params["nbits"] = nbits
    else:
        faiss_params = {"m": hnsw_m} if faiss == "hnsw" else {}
    path = build_index(corpus, out, backend, model=model, faiss_kind=faiss, k1=k1, b=b, threads=threads,
                       batch_size=batch_size, query_prefix=query_prefix, passage_prefix=passage_prefix,
                       max_length=max_length, faiss_params=faiss_params or None, device=device,
                       shard_size=shard_size, work_dir=work_dir, restart=restart, keep_shards=keep_shards,
                       train_size=train_size, progress=progress)
    _print_manifest(path, f"built {backend} index of {{num_docs}} passages in {time.perf_counter() - t0:.1f}s")


def index_import_search_r1(
    index: Path = typer.Option(..., help="Search-R1 faiss index file (e.g. e5_Flat.index)."),
    corpus: Path = typer.Option(..., help="The corpus it was built from (e.g. wiki-18.jsonl): row i = line i."),
    model: str = typer.Option(..., help="Local directory of the encoder it was built with (e5-base-v2)."),
    out: Path = typer.Option(..., help="stratagym index directory to create (the faiss file is referenced, not copied)."),
    query_prefix: str = typer.Option("query: ", help="Query prefix (Search-R1's e5: 'query: ')."),
    passage_prefix: str = typer.Option("passage: ", help="Passage prefix (Search-R1's e5: 'passage: ')."),
    max_length: int = typer.Option(256, help="Query token limit (Search-R1's server: 256)."),
) -> None:
    """Wrap an existing Search-R1 dense index with a manifest; load it without re-encoding the corpus."""
    from stratagym.envs.search_qa.dense_build import import_search_r1  # lazy: ~10 ms of imports; `stratagym --help` stays fast

    path = import_search_r1(index, corpus, model, out, query_prefix=query_prefix, passage_prefix=passage_prefix,
                            max_length=max_length)
    _print_manifest(path, "imported Search-R1 index of {num_docs} passages")


def index_info(index: Path = typer.Argument(..., help="Index directory.")) -> None:
    """Print an index's manifest."""
    import json

    from stratagym.envs.search_qa.index import read_manifest  # lazy: ~10 ms of imports; `stratagym --help` stays fast

    typer.echo(json.dumps(read_manifest(index), indent=2))


def serve_retrieval(
    index: Optional[Path] = typer.Option(None, help="Prebuilt index directory (stratagym index build)."),
    corpus: Optional[str] = typer.Option(None, help="Corpus jsonl; default: the index's, or the bundled corpus."),
    backend: Optional[str] = typer.Option(None, help="bm25s | pyserini | dense (built in memory when no --index)."),
    model: Optional[str] = typer.Option(None, help="Dense only: encoder directory."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default; expose deliberately)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port."),
    max_batch: int = typer.Option(256, help="Queries merged into one retriever call."),
    max_wait_ms: float = typer.Option(0.0, help="Extra wait for more requests; 0: adaptive batching only."),
) -> None:
    """Serve a Search-R1-compatible POST /retrieve API (and GET /health)."""
    # lazy: ~10 ms of imports, and the server needs the search extra (fastapi, uvicorn); `stratagym --help` stays fast
    from stratagym.envs.search_qa.index import make_retriever
    from stratagym.envs.search_qa.server import ServerLimits, run_server

    retriever: Any = make_retriever(backend, corpus=corpus, index=index, dense_model=model, shared=False)
    typer.echo(f"serving {retriever.describe()} on http://{host}:{port}/retrieve")
    run_server(retriever, host=host, port=port, limits=ServerLimits(max_batch=max_batch, max_wait_ms=max_wait_ms))
