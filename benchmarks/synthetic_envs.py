"""Steps per second of the synthetic envs under a uniform random policy over admissible actions.

Run: ``OMP_NUM_THREADS=1 python benchmarks/synthetic_envs.py [--seconds 2]``. Prints one line per env.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import stratagym  # noqa: F401

IDS = ["stratagym/SearchStrata-v0", "stratagym/DifficultyMix-v0", "stratagym/CueCorridor-v0"]


def bench(env_id: str, seconds: float = 2.0) -> tuple[float, float]:
    env = gym.make(env_id).unwrapped  # the bare env: the wrappers' checks are not what we time
    rng = np.random.default_rng(0)
    steps = episodes = 0
    t0 = time.perf_counter()
    _, info = env.reset(seed=0)
    while time.perf_counter() - t0 < seconds:
        acts = info["admissible_actions"]
        _, _, term, trunc, info = env.step(acts[int(rng.integers(len(acts)))])
        steps += 1
        if term or trunc:
            episodes += 1
            _, info = env.reset()
    dt = time.perf_counter() - t0
    return steps / dt, episodes / dt


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="time spent stepping each env")
    args = ap.parse_args()
    for eid in IDS:
        sps, eps = bench(eid, args.seconds)
        print(f"{eid:32s} {sps:9.0f} steps/s {eps:9.0f} episodes/s (reset + steps, 1 thread)")
