"""Play the searching expert on every game of an ALFWorld split and count what only the hidden state justified.

``stratagym eval scripted:searcher`` gives its success and turns (and the board rows); this adds, per game, how
many of its commands came from the planner's hidden-state plan (``AlfredEngine.privileged_commands``), which
an eval record does not carry. docs/envs/alfworld.md quotes its output.

    python scripts/alfworld_searcher_check.py in_distribution [--max-steps 50] [--data-path bundled]
"""

from __future__ import annotations

import argparse
from collections import Counter

import gymnasium as gym

import stratagym  # noqa: F401  (registers the envs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("split")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--data-path", default="bundled")
    args = parser.parse_args()
    env = gym.make("stratagym/ALFWorld-v0", split=args.split, data_path=args.data_path, expert="searcher",
                   max_steps=args.max_steps)
    won, games, turns, privileged = Counter(), Counter(), [], 0
    try:
        for task in env.unwrapped.task_ids():
            obs, info = env.reset(seed=0, options={"task_id": task})
            done, n = False, 0
            while not done:
                obs, reward, terminated, truncated, info = env.step(info["expert_action"])
                done, n = terminated or truncated, n + 1
            p = env.unwrapped._engine.privileged_commands
            kind = info["task_type"]
            games[kind] += 1
            won[kind] += int(info["won"])
            turns.append(n)
            privileged += p
            print(f"{task}\t{'won' if info['won'] else 'lost'}\t{n} turns\t{p} privileged", flush=True)
    finally:
        env.close()
    print(f"{args.split}: won {sum(won.values())}/{sum(games.values())}, mean turns {sum(turns) / len(turns):.1f}, "
          f"privileged commands {privileged}; per type " + ", ".join(f"{k} {won[k]}/{games[k]}" for k in sorted(games)))


if __name__ == "__main__":
    main()
