#!/usr/bin/env python3
"""WebShop throughput: text-mode steps/s (goal: >= 200 on one core) and browser seconds/action.

Run with OMP_NUM_THREADS=1 (the Makefile's `make bench` does). Prints one line per figure:

* text mode, oracle over every bundled goal (each episode one fresh, uncached search + clicks);
* text mode, the random shopper (searches the instruction, then random clicks);
* search latency per fresh query for bm25s (and Lucene with --pyserini);
* browser mode (headless Chromium + local Flask), seconds per action, unless --no-browser or no Chromium.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("SE_OFFLINE", "true")

import numpy as np  # noqa: E402

from stratagym.envs.core import EpisodeKey  # noqa: E402
from stratagym.envs.webshop.agents import OracleAgent, RandomShopper  # noqa: E402
from stratagym.envs.webshop.text_env import WebShopTextEnv  # noqa: E402


def run(env, agent, n_episodes: int, *, start: int = 0) -> tuple[int, float, float]:
    steps, total = 0, 0.0
    ids = env.task_ids()
    t0 = time.perf_counter()
    for e in range(n_episodes):
        obs, info = env.reset(options={"task_id": ids[(start + e) % len(ids)]})
        episode = EpisodeKey(info["task_id"], None, e)  # agents keep per-episode state by this key
        while True:
            obs, r, term, trunc, info = env.step(agent.act([obs], [info], [episode])[0])
            steps += 1
            if term or trunc:
                total += r
                break
    return steps, time.perf_counter() - t0, total / n_episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=600)
    parser.add_argument("--browser-episodes", type=int, default=4)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--pyserini", action="store_true", help="also time the Lucene backend (starts a JVM)")
    args = parser.parse_args()

    t0 = time.perf_counter()
    env = WebShopTextEnv(split="all")
    print(f"text: catalog + bm25s index + env built in {time.perf_counter() - t0:.2f} s "
          f"({len(env.catalog.products)} products, {len(env.task_ids())} goals)")
    steps, dt, mean = run(env, OracleAgent(env), args.episodes)
    print(f"text: oracle      {steps} steps in {dt:.2f} s = {steps / dt:,.0f} steps/s (mean score {mean:.3f})")
    steps, dt, mean = run(env, RandomShopper(env, seed=0), args.episodes)
    print(f"text: random      {steps} steps in {dt:.2f} s = {steps / dt:,.0f} steps/s (mean score {mean:.3f})")

    queries = [g["instruction_text"] + " benchmark" for g in env.catalog.goals[:200]]  # fresh: not cached
    t0 = time.perf_counter()
    for q in queries:
        env.site.engine.search(q)
    dt = time.perf_counter() - t0
    print(f"search: bm25s     {len(queries)} fresh queries, {1000 * dt / len(queries):.2f} ms/query")
    if args.pyserini:
        from stratagym.envs.webshop.search import PyseriniEngine

        t0 = time.perf_counter()
        lucene = PyseriniEngine(env.catalog.products)
        print(f"search: pyserini  index ready + JVM in {time.perf_counter() - t0:.2f} s")
        t0 = time.perf_counter()
        for q in queries:
            lucene.search(q)
        dt = time.perf_counter() - t0
        print(f"search: pyserini  {len(queries)} fresh queries, {1000 * dt / len(queries):.2f} ms/query")

    if args.no_browser or not os.access("/usr/bin/chromium", os.X_OK):
        print("browser: skipped (--no-browser or no /usr/bin/chromium)")
        return
    from stratagym.envs.webshop.browser_env import WebShopBrowserEnv

    t0 = time.perf_counter()
    benv = WebShopBrowserEnv(split="all")
    benv.reset(options={"task_index": 0})
    print(f"browser: server + Chromium started, first page in {time.perf_counter() - t0:.2f} s")
    try:
        per_action = []
        agent = OracleAgent(benv)
        for e in range(args.browser_episodes):
            obs, info = benv.reset(options={"task_index": e})
            episode = EpisodeKey(info["task_id"], None, e)
            while True:
                a = agent.act([obs], [info], [episode])[0]
                t0 = time.perf_counter()
                obs, r, term, trunc, info = benv.step(a)
                per_action.append((a.split("[")[0], time.perf_counter() - t0))
                if term or trunc:
                    break
        all_t = np.array([t for _, t in per_action])
        search_t = np.array([t for k, t in per_action if k == "search"])
        click_t = np.array([t for k, t in per_action if k == "click"])
        print(f"browser: {len(all_t)} actions, {all_t.mean():.3f} s/action "
              f"(search {search_t.mean():.3f} s, click {click_t.mean():.3f} s)")
    finally:
        benv.close()


if __name__ == "__main__":
    main()
