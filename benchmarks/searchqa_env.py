#!/usr/bin/env python3
"""SearchQA with bm25s: the retriever's speed-up from the lean query tokenizer, and the env's overhead.

    OMP_NUM_THREADS=1 python benchmarks/searchqa_env.py [--passages 100000] [--repeats 3] [--clock cpu|wall]

On a generated invented-world corpus (the bundled benchmark's generator, scaled to ``--passages``):

1. **retriever**: one query at a time, bm25s's own query path (``bm25s.tokenize`` + ``get_tokens_ids``,
   what ``BM25sRetriever`` ran first), the lean :class:`QueryTokenizer` path with the top-k on a copy
   of the scores (the default before), and the default (lean tokenizer, top-k marked in the score
   vector itself), same scoring; alternating, ``--repeats`` times; ratios with their range. The
   rankings are compared for every query (the script exits 1 if any differs).
2. **env overhead**: oracle episodes (every hop's query, then the answer) through ``SearchQAEnv`` with
   the retriever wrapped in a timer; overhead per search step = step time minus the retriever's own
   time (wall clock per step, medians over the steps), as a share of the retriever's time (the issue's
   goal: < 10 %), for each of the three retrievers (a faster retriever makes the share harder); alternating,
   ``--repeats`` times. The env keeps whole results it has met before in a table (``PASSAGE_TABLE``;
   with the C speed-ups from the second meeting, and the rest is formatted straight from the contents;
   in Python each passage's formatted text and hash piece from its second meeting, and whole results
   whose passages it knows): the lean and stock rows empty the table first (every passage is new to a
   repeat); the "same results before" row plays the episodes three times unmeasured first (a GRPO
   group repeating a query); the "passages met before" row does too, then forgets the whole results
   (known passages, new lists: the Python path's passage table is warm, the C path does not use it).
   Every row runs twice per repeat, with the C speed-ups (``stratagym.envs._speedups``) and with the
   pure-Python fallback (``speedups.use(False)``: what ``STRATAGYM_NO_SPEEDUPS=1`` or an install without
   a compiler runs), in alternating order; the C/Python ratio of the env's own time is per repeat.
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
# CPU time of this process by default: on a shared, busy machine wall time mostly measures the wait
# for a core; --clock wall switches back.
CLOCK = time.process_time
sys.path.insert(0, str(REPO))


def _generator():
    spec = importlib.util.spec_from_file_location("make_search_qa_data", REPO / "scripts" / "make_search_qa_data.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_search_qa_data"] = mod
    spec.loader.exec_module(mod)
    return mod


def spread(values, fmt="{:.1f}") -> str:
    return f"{fmt.format(statistics.mean(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    import bm25s

    from stratagym.envs import speedups
    from stratagym.envs.search_qa.data import load_corpus, load_qa
    from stratagym.envs.search_qa.env import PASSAGE_TABLE, SearchQAEnv
    from stratagym.envs.search_qa.retrievers.base import Hit, Retriever
    from stratagym.envs.search_qa.retrievers.bm25 import BM25sRetriever, top_k_positive

    print(f"# SearchQA env + bm25s (clock: {args.clock}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores)")
    tmp = Path(tempfile.mkdtemp(prefix="stratagym-sqa-bench-"))
    t0 = CLOCK()
    _generator().generate(tmp, scale=args.passages / 2791, n_test=max(500, args.episodes), n_train=10)
    corpus = load_corpus(tmp / "corpus.jsonl")
    questions = load_qa(tmp / "test.jsonl")
    t1 = CLOCK()
    lean = BM25sRetriever(corpus)
    print(f"corpus: {len(corpus)} passages (generated in {t1 - t0:.1f}s, indexed in {CLOCK() - t1:.1f}s)")
    queries = [q for ex in questions for q in ex.oracle_queries][: args.queries]

    class CopyTopK(Retriever):
        """The same index and scoring with the top-k on a copy of the scores, after ``token_ids``:
        bm25s's own query tokenizer (``BM25sRetriever`` before the lean one) or the lean tokenizer (the
        default retriever before the in-place top-k)."""

        def __init__(self, backend, token_ids):
            self.backend, self.token_ids = backend, token_ids

        def batch_search(self, qs, k=3):
            out = []
            for query in qs:
                ids = self.token_ids(query)
                if not ids:
                    out.append([])
                    continue
                scores = lean._model.get_scores_from_ids(ids)
                out.append([Hit(corpus.ids[d], corpus.contents[d], s) for d, s in top_k_positive(scores, k)])
            return out

    def bm25s_token_ids(query):
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=lean._stemmer, return_ids=False, show_progress=False)
        return lean._model.get_tokens_ids(tokens[0])

    stock = CopyTopK("bm25s-stock-tokenizer", bm25s_token_ids)
    lean_copy = CopyTopK("bm25s-lean-copy", lean._tokenizer.ids)
    retrievers = {"stock": stock, "lean-copy": lean_copy, "lean": lean}
    same = all([(h.id, h.score) for h in a] == [(h.id, h.score) for h in b] == [(h.id, h.score) for h in c]
               for q in queries for a, b, c in [[r.batch_search([q], 3)[0] for r in (lean, stock, lean_copy)]])
    print(f"rankings identical (ids and scores, top-3, {len(queries)} queries): {same}")

    def qps(r) -> float:
        t = CLOCK()
        for q in queries:
            r.batch_search([q], 3)
        return len(queries) / (CLOCK() - t)

    rates = {name: [] for name in retrievers}
    for i in range(args.repeats):
        for name in (list(rates) if i % 2 == 0 else list(rates)[::-1]):
            rates[name].append(qps(retrievers[name]))
    speedup = [b / a for a, b in zip(rates["stock"], rates["lean"])]
    copy_speedup = [b / a for a, b in zip(rates["lean-copy"], rates["lean"])]
    print(f"\nretriever, one query at a time: bm25s tokenizer {spread(rates['stock'], '{:.0f}')} q/s, lean tokenizer "
          f"{spread(rates['lean-copy'], '{:.0f}')} q/s, lean + in-place top-k (default) {spread(rates['lean'], '{:.0f}')} "
          f"q/s: {spread(speedup, '{:.2f}')}x bm25s's query path, {spread(copy_speedup, '{:.2f}')}x the lean tokenizer alone")

    class Timed(Retriever):
        """Records the wall time of each retriever call (perf_counter: ~0.1 us per reading here, where
        reading the process CPU clock costs ~4 us, as much as a tenth of what is measured)."""

        def __init__(self, inner):
            self.inner, self.last, self.backend = inner, 0.0, inner.backend

        def batch_search(self, qs, k=3):
            t = time.perf_counter()
            try:
                return self.inner.batch_search(qs, k)
            finally:
                self.last = time.perf_counter() - t

    episodes = questions[: args.episodes]

    def overhead(inner, warm: str = "") -> tuple[float, float, float]:
        """Median env overhead per search step (step minus its retriever call) as % of the median
        retriever call, and both medians in us. Medians, because on a shared machine a few steps are
        interrupted by other jobs and their wall time says nothing about the code.

        ``warm=""`` empties the env's table of formatted passages first, so every passage takes the
        plain path the first time a repeat meets it (the conservative figure); ``warm="results"`` first
        plays the episodes three times unmeasured, so every passage and every whole result is in the table (as
        when a GRPO group's rollouts repeat a query); ``warm="passages"`` then forgets the whole results,
        so every passage is known but each result is assembled from its pieces (popular passages met
        in new combinations)."""
        PASSAGE_TABLE.clear()
        timed = Timed(inner)
        if warm:
            env = SearchQAEnv(dataset=str(tmp / "test.jsonl"), split="test", retriever=timed)
            for _ in range(3):  # a passage joins the table the 2nd time it is met, a whole result the 3rd
                for ex in episodes:
                    env.reset(options={"task_id": ex.id})
                    for q in ex.oracle_queries:
                        env.step(f"<think>hop</think>\n<search> {q} </search>")
            env.close()
            if warm == "passages":
                PASSAGE_TABLE.clear(blocks_only=True)
        env = SearchQAEnv(dataset=str(tmp / "test.jsonl"), split="test", retriever=timed)
        extra, retrieval = [], []
        for ex in episodes:
            env.reset(options={"task_id": ex.id})
            for q in ex.oracle_queries:
                action = f"<think>hop</think>\n<search> {q} </search>"
                t = time.perf_counter()
                env.step(action)
                dt = time.perf_counter() - t
                extra.append(dt - timed.last)
                retrieval.append(timed.last)
            env.step(f"<answer> {ex.golden_answers[0]} </answer>")
        env.close()
        e, r = statistics.median(extra), statistics.median(retrieval)
        return 100 * e / r, 1e6 * e, 1e6 * r

    import numpy as np

    canned = {q: lean.batch_search([q], 3)[0] for ex in episodes for q in ex.oracle_queries}

    class Canned(Retriever):
        """The default retriever's results, looked up (no retrieval), after reading and writing
        ``sweep`` bytes of memory or not: what the same env code costs with its code and data still in
        the core's caches, and after a retrieval-sized memory sweep evicted them (a bm25s query at 100k
        passages writes and reads ~1 MB: a 400 KB score vector, the postings, the top-k passes)."""

        backend = "canned"

        def __init__(self, sweep: int):
            self.buffer = np.zeros(sweep // 4, np.float32) if sweep else None

        def batch_search(self, qs, k=3):
            if self.buffer is not None:
                self.buffer += 1.0  # read + write every line
                self.buffer.argmax()
            return [canned[q] for q in qs]

    retrievers["canned"], retrievers["canned-sweep"] = Canned(0), Canned(1 << 20)
    rows = ["lean", "stock", "lean-copy", "lean-passages", "lean-results", "canned", "canned-sweep"]
    modes = ("C", "Python") if speedups.available() else ("Python",)
    res = {(name, mode): [] for name in rows for mode in modes}
    warmth = {"lean-passages": "passages", "lean-results": "results", "canned": "results", "canned-sweep": "results"}
    before = speedups.ENABLED
    try:
        for i in range(args.repeats):
            for j, name in enumerate(rows if i % 2 == 0 else rows[::-1]):
                for mode in (modes if (i + j) % 2 == 0 else modes[::-1]):  # A/B order alternates too
                    speedups.use(mode == "C")
                    res[name, mode].append(overhead(retrievers.get(name, lean), warm=warmth.get(name, "")))
    finally:
        speedups.use(before)
    print(f"\nenv overhead per search step ({len(episodes)} oracle episodes, "
          f"{sum(len(ex.oracle_queries) for ex in episodes)} searches per repeat; C: with the C speed-ups, "
          f"Python: the pure-Python fallback{'' if 'C' in modes else ' -- the C speed-ups are not built here'}):")
    for name, label in (("lean", "default retriever"), ("lean-passages", "default, passages met before"),
                        ("lean-results", "default, same results before"), ("lean-copy", "lean tokenizer, top-k on a copy"),
                        ("stock", "bm25s's query path")):
        for mode in modes:
            got = res[name, mode]
            print(f"  {label if mode == modes[0] else '':32s} {mode:6s}: {spread([x[0] for x in got])} % of the "
                  f"retriever's time (medians per step: {spread([x[1] for x in got], '{:.1f}')} us of env code over "
                  f"{spread([x[2] for x in got], '{:.0f}')} us of retrieval)")
        if len(modes) == 2:
            ratio = [c[1] / p[1] for c, p in zip(res[name, "C"], res[name, "Python"])]
            print(f"  {'':32s} C/Python env time: {spread(ratio, '{:.2f}')}")
    for mode in modes:
        kept, cold = res["canned", mode], res["canned-sweep", mode]
        print(f"  {mode}: the same env code on looked-up results (same results before), caches kept: "
              f"{spread([x[1] for x in kept], '{:.1f}')} us; after a 1 MB memory sweep: "
              f"{spread([x[1] for x in cold], '{:.1f}')} us (sweep {spread([x[2] for x in cold], '{:.0f}')} us)")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
