#!/usr/bin/env python3
"""Wiki-scale dense index build: time, peak memory, search q/s, and resume after ``kill -9``. Prints
figures, asserts nothing.

Generates ``--passages`` short synthetic passages (a Search-R1 style ``{"id", "contents"}`` jsonl under
``--workdir``, /tmp by default) and a very small local BERT encoder (built with transformers from a
config, WordPiece tokenizer trained on a sample of the corpus, ``save_pretrained``; no hub). Then:

1. ``stratagym index build --backend dense --faiss flat`` in a subprocess, killed with SIGKILL once
   ``--kill-after`` shards are complete;
2. the same command again: it resumes. Reported: shards re-encoded vs total (the ones complete at the
   kill must not be), wall time, encode throughput, peak RSS of the build process (``os.wait4``);
3. ``--faiss ivf`` / ``ivfpq`` / ``hnsw`` builds over the kept shards (no encoding: all shards reused),
   each with its merge time and peak RSS;
4. per index, in a fresh process: load time, peak RSS, queries/s batched (64) and one at a time, and
   recall@10 against the flat index;
5. a spot check that the resumed flat index holds the vectors a fresh encoder gives for random passages.

    OMP_NUM_THREADS=1 python benchmarks/dense_index.py                      # 1M passages (~25 min, 1 core)
    OMP_NUM_THREADS=1 python benchmarks/dense_index.py --passages 100000 --shard-size 10000   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

SYLLABLES = ["ka", "ru", "to", "mi", "sel", "dor", "an", "pe", "zu", "lo", "vin", "thar", "ek", "os", "bra", "qui",
             "nal", "fe", "gor", "is", "tem", "ul", "xa", "por"]
FILLER = ["the", "of", "in", "a", "river", "city", "was", "founded", "by", "near", "is", "known", "for", "and", "its",
          "guild", "king", "north", "south", "built", "year", "people", "mountain", "lake", "trade", "old"]


def generate_corpus(path: Path, n: int, seed: int = 0) -> None:
    """``n`` passages '"Title"\\ntext' of 12-24 words: invented names + filler, streamed to ``path``."""
    rng = np.random.default_rng(seed)
    names = ["".join(rng.choice(SYLLABLES, size=int(k))).capitalize() for k in rng.integers(2, 4, size=20_000)]
    vocab = np.array(names + FILLER * 40)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            lens = rng.integers(12, 25, size=m)
            words = rng.choice(vocab, size=int(lens.sum()))
            titles = rng.choice(len(names), size=m)
            pos = 0
            lines = []
            for i in range(m):
                text = " ".join(words[pos:pos + lens[i]])
                pos += lens[i]
                lines.append(json.dumps({"id": str(start + i), "contents": f'"{names[titles[i]]}"\n{text}.'}))
            fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def build_encoder(path: Path, corpus: Path) -> Path:
    from stratagym.testing.tiny_encoder import TinyEncoderConfig, build_tiny_encoder

    texts = []
    with corpus.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= 20_000:
                break
            texts.append(json.loads(line)["contents"])
    cfg = TinyEncoderConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, vocab_size=2000,
                            max_position=64)
    return build_tiny_encoder(path, cfg, texts)


def _cmd(args, corpus: Path, model: Path, out: Path, work: Path, kind: str, extra=()) -> list[str]:
    return [sys.executable, "-c", "from stratagym.cli import main; main()", "index", "build", "--backend", "dense",
            "--corpus", str(corpus), "--model", str(model), "--out", str(out), "--work-dir", str(work),
            "--shard-size", str(args.shard_size), "--batch-size", str(args.batch_size), "--max-length", "48",
            "--faiss", kind, "--keep-shards", "--no-progress", *extra]


def _run(cmd: list[str], log: Path, kill_when=None) -> dict:
    """Run ``cmd``; SIGKILL it when ``kill_when()`` turns true; wall time and peak RSS via wait4."""
    t0 = time.perf_counter()
    with log.open("ab") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        killed = False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if kill_when is not None and not killed and kill_when():
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": time.perf_counter() - t0, "peak_rss_mb": ru.ru_maxrss / 1024, "rc": proc.returncode,
            "killed": killed}


def _complete_shards(work: Path) -> int:
    try:
        return int(json.loads((work / "progress.json").read_text())["shards_complete"])
    except (OSError, ValueError, KeyError):
        return 0


def search_child(index: str, queries_file: str, k: int) -> None:
    """Runs in a fresh process: load an index, time searches, print JSON."""
    t0 = time.perf_counter()
    from stratagym.envs.search_qa.index import load_index

    r = load_index(index)
    load_s = time.perf_counter() - t0
    queries = json.loads(Path(queries_file).read_text())
    if hasattr(r.index, "nprobe"):
        r.set_search_params(nprobe=32)
    r.set_search_params(ef_search=64)
    r.batch_search(queries[:64], k)  # warm
    t = time.perf_counter()
    hits = []
    for s in range(0, len(queries), 64):
        hits += r.batch_search(queries[s:s + 64], k)
    batched = len(queries) / (time.perf_counter() - t)
    one = queries[: max(1, len(queries) // 4)]
    t = time.perf_counter()
    for q in one:
        r.search(q, k)
    single = len(one) / (time.perf_counter() - t)
    print(json.dumps({"load_s": load_s, "qps_batched": batched, "qps_single": single,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "ids": [[h.id for h in hs] for hs in hits]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=1_000_000)
    ap.add_argument("--shard-size", type=int, default=50_000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--kill-after", type=int, default=6, help="SIGKILL the first build once this many shards are done")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--kinds", default="ivf,ivfpq,hnsw")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/stratagym-dense-bench"))
    ap.add_argument("--search-child", nargs=3, metavar=("INDEX", "QUERIES", "K"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.search_child:
        search_child(args.search_child[0], args.search_child[1], int(args.search_child[2]))
        return

    wd = args.workdir / f"n{args.passages}"
    wd.mkdir(parents=True, exist_ok=True)
    log = wd / "build.log"
    corpus, model, work = wd / "corpus.jsonl", wd / "encoder", wd / "shards"
    t = time.perf_counter()
    if not corpus.exists():
        generate_corpus(corpus, args.passages)
    print(f"corpus: {args.passages} passages, {corpus.stat().st_size / 2**20:.0f} MiB ({time.perf_counter() - t:.1f}s) at {corpus}")
    if not (model / "config.json").exists():
        build_encoder(model, corpus)
    for p in [work, *wd.glob("idx-*")]:
        shutil.rmtree(p, ignore_errors=True)
    n_shards = -(-args.passages // args.shard_size)
    print(f"encoder: {json.loads((model / 'config.json').read_text())['hidden_size']}-d BERT, 1 layer; "
          f"{n_shards} shards of {args.shard_size}; OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")

    # 1. build, killed mid-encoding
    flat = wd / "idx-flat"
    first = _run(_cmd(args, corpus, model, flat, work, "flat"), log,
                 kill_when=lambda: _complete_shards(work) >= args.kill_after)
    at_kill = len(list(work.glob("emb-*.npy")))
    print(f"build #1: SIGKILL after {first['wall_s']:.0f}s with {at_kill}/{n_shards} shards complete "
          f"(killed={first['killed']}, rc={first['rc']}, peak RSS {first['peak_rss_mb']:.0f} MiB); index exists: {flat.exists()}")
    # 2. resume
    second = _run(_cmd(args, corpus, model, flat, work, "flat"), log)
    m = json.loads((flat / "manifest.json").read_text())
    b = m["build"]
    print(f"build #2 (resume): rc={second['rc']} {second['wall_s']:.0f}s, re-encoded {b['shards_encoded']}/{n_shards} shards "
          f"(reused {b['shards_reused']}; expected {n_shards - at_kill}), encode {b['passages_per_s']:.0f} passages/s, "
          f"merge {b['merge_s']:.1f}s, peak RSS {second['peak_rss_mb']:.0f} MiB")
    total = first["wall_s"] + second["wall_s"]
    print(f"flat build total (both runs): {total:.0f}s = {total / 60:.1f} min for {args.passages} passages")
    results = {"flat": {"build_s": total, "peak_rss_mb": max(first["peak_rss_mb"], second["peak_rss_mb"])}}
    # 3. other kinds from the kept shards
    extra = {"ivf": ["--nlist", "1024"], "ivfpq": ["--nlist", "1024", "--pq-m", "16"], "hnsw": ["--hnsw-m", "16"]}
    for kind in [k for k in args.kinds.split(",") if k]:
        res = _run(_cmd(args, corpus, model, wd / f"idx-{kind}", work, kind, extra.get(kind, [])), log)
        mk = json.loads((wd / f"idx-{kind}" / "manifest.json").read_text())["build"]
        print(f"build {kind}: rc={res['rc']} {res['wall_s']:.0f}s (shards encoded {mk['shards_encoded']}, merge {mk['merge_s']:.1f}s), "
              f"peak RSS {res['peak_rss_mb']:.0f} MiB")
        results[kind] = {"build_s": res["wall_s"], "peak_rss_mb": res["peak_rss_mb"]}
    # 4. search in fresh processes
    rng = np.random.default_rng(1)
    from stratagym.envs.search_qa.data import MappedCorpus

    docs = MappedCorpus.open(corpus, flat / "corpus_offsets.npy")
    picks = rng.choice(len(docs), size=args.queries, replace=False)
    queries = [" ".join(docs.doc(int(i))[1].split()[1:6]) for i in picks]
    qfile = wd / "queries.json"
    qfile.write_text(json.dumps(queries))
    ref = None
    for kind in results:
        out = subprocess.run([sys.executable, __file__, "--search-child", str(wd / f"idx-{kind}"), str(qfile), "10"],
                             capture_output=True, text=True)
        if out.returncode:
            print(f"search {kind}: failed\n{out.stderr[-2000:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ref = r["ids"] if kind == "flat" else ref
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(r["ids"], ref)]) if ref else float("nan")
        print(f"search {kind}: load {r['load_s']:.1f}s, {r['qps_batched']:.0f} q/s batched(64), {r['qps_single']:.0f} q/s "
              f"one at a time, recall@10 vs flat {recall:.3f}, search process peak RSS {r['peak_rss_mb']:.0f} MiB")
    # 5. the resumed index holds the vectors of a fresh encoding
    import faiss

    from stratagym.envs.search_qa.retrievers.dense import E5Encoder

    idx = faiss.read_index(str(flat / "faiss.index"), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    enc = E5Encoder(model, max_length=48, batch_size=args.batch_size, device="cpu")
    rows = np.sort(rng.choice(len(docs), size=500, replace=False))
    fresh = enc.encode([docs.doc(int(i))[1] for i in rows], is_query=False)
    stored = np.stack([idx.reconstruct(int(i)) for i in rows])
    print(f"spot check: max |stored - fresh| over 500 random passages = {np.abs(stored - fresh).max():.2e}")
    print(f"peak RSS, any build process: {max(v['peak_rss_mb'] for v in results.values()):.0f} MiB")


if __name__ == "__main__":
    main()
