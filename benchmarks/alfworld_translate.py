#!/usr/bin/env python
"""Where one PDDL -> SAS translation of an ALFWorld game spends its CPU time: stock vs stratagym's path.

    OMP_NUM_THREADS=1 python benchmarks/alfworld_translate.py [--games 8] [--repeats 3]

Translates ``--games`` bundled train games (evenly spaced) with fast-downward's stock translator and
with :mod:`stratagym.envs.alfworld.speedups` active (per-game caches emptied first and the on-disk cache
off: a game never seen; domain-level caches -- compiled rule shapes, recorded rule splits -- warm),
each stage wrapped with a CPU timer; prints ms per translation, best of ``--repeats``, and whether the
SAS texts are identical (exits 1 if not).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

STAGES = ["parse", "normalize", "datalog program", "model", "ground actions", "fact groups", "SAS operators",
          "variable order", "SAS text", "total"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--games", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    saved_argv = sys.argv
    sys.argv = ["translate.py", "domain", "task"]  # fast_downward's options module parses argv on import
    import fast_downward
    from fast_downward.translate import (build_model, fact_groups, instantiate, normalize, pddl_to_prolog,
                                         sas_tasks, variable_order)
    from fast_downward.translate import translate as fd_translate
    from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions
    sys.argv = saved_argv

    from stratagym.envs.alfworld import fast_translate, speedups
    from stratagym.envs.alfworld.games import load_records, logic_files, problem_pddl

    domain, _ = logic_files()
    records = [r for r, _ in load_records("train")]
    problems = [problem_pddl(r) for r in records[::max(1, len(records) // args.games)]][:args.games]
    speedups.install()
    acc: dict[str, float] = defaultdict(float)

    def wrap(mod, name, label):
        fn = getattr(mod, name)

        def timed(*a, **k):
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                acc[label] += time.process_time() - t0
        setattr(mod, name, timed)

    wrap(lisp_parser, "parse_nested_list", "parse")
    wrap(parsing_functions, "parse_task", "parse")
    wrap(normalize, "normalize", "normalize")
    wrap(pddl_to_prolog, "translate", "datalog program")
    wrap(build_model, "compute_model", "model")
    wrap(fast_translate, "compute_model", "model")
    wrap(instantiate, "instantiate", "ground actions")
    wrap(fact_groups, "compute_groups", "fact groups")
    wrap(fd_translate, "translate_task", "SAS operators")
    wrap(variable_order, "find_and_apply_variable_order", "variable order")
    wrap(sas_tasks.SASTask, "output", "SAS text")

    def run(fast: bool):
        acc.clear()
        texts = []
        t0 = time.process_time()
        for p in problems:
            if fast:
                speedups.clear_caches(games_only=True)
                with speedups.active(disk_cache=False):
                    texts.append(fast_downward.pddl2sas(domain, p)[1])
            else:
                texts.append(fast_downward.pddl2sas(domain, p)[1])
        parts = {k: 1000 * v / len(problems) for k, v in acc.items()}
        parts["total"] = 1000 * (time.process_time() - t0) / len(problems)
        return parts, texts

    run(True), run(False)  # imports, compiled rule shapes
    best = {"stock": defaultdict(lambda: float("inf")), "fast": defaultdict(lambda: float("inf"))}
    identical = True
    for _ in range(args.repeats):
        stock_parts, stock_texts = run(False)
        fast_parts, fast_texts = run(True)
        identical &= stock_texts == fast_texts
        for kind, parts in (("stock", stock_parts), ("fast", fast_parts)):
            for k, v in parts.items():
                best[kind][k] = min(best[kind][k], v)
    print(f"{len(problems)} games, ms per translation, best of {args.repeats}:")
    print(f"{'stage':18s} {'stock':>8s} {'fast':>8s}")
    for k in STAGES:
        print(f"{k:18s} {best['stock'][k]:8.1f} {best['fast'][k]:8.1f}")
    print(f"SAS texts identical: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
