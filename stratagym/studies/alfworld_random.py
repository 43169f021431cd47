"""How often uniform random play wins ALFWorld, per task type and step limit (the untrained scorer is
uniform over the admissible actions, so this is its success rate before any training).

One pass plays each game ``episodes`` times up to the largest limit and records the step of the win;
a win within ``L`` steps is a win of an ``L``-step episode (the same actions up to the truncation), so
every limit comes from the same episodes. Actions are drawn by one generator (``seed``) in the order
the games are listed; episode ``e`` of a game is reset with ``seed=e``.

Run: ``OMP_NUM_THREADS=1 python -m stratagym.studies.alfworld_random [--split train] [--episodes 5]``;
docs/studies.md §10 holds the output as measured (train split, 5 episodes a game: 149 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence

import numpy as np

import stratagym  # noqa: F401  (registers the envs, also when this file is run as a script)

__all__ = ["random_win_rates", "format_rates", "main"]


def random_win_rates(split: str = "train", *, episodes: int = 5, limits: Sequence[int] = (15, 30, 50),
                     task_types: Sequence[str] | None = None, max_games: int | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """``{"per_type": {task_type: {"episodes", "wins@L"...}}, "steps", "seconds"}`` on the bundled (or
    real) ALFWorld games of ``split`` (the first ``max_games`` only, if given)."""
    import gymnasium as gym

    limits = sorted(int(x) for x in limits)
    horizon = limits[-1]
    kw: dict[str, Any] = {"split": split, "max_steps": horizon, "context_k": 0}
    if task_types:
        kw["task_types"] = list(task_types)
    env = gym.make("stratagym/ALFWorld-v0", **kw)
    rng = np.random.default_rng(seed)
    won_at: dict[str, list[int | None]] = {}
    steps, t0 = 0, time.perf_counter()
    try:
        for tid in list(env.unwrapped.task_ids())[:max_games]:
            for e in range(episodes):
                _, info = env.reset(seed=e, options={"task_id": tid})
                won = None
                for t in range(horizon):
                    actions = info["admissible_actions"]
                    _, _, term, trunc, info = env.step(actions[rng.integers(len(actions))])
                    steps += 1
                    if info.get("won"):
                        won = t + 1
                        break
                    if term or trunc:
                        break
                won_at.setdefault(str(info.get("task_type")), []).append(won)
    finally:
        env.close()
    per_type = {
        tt: {"episodes": len(w), **{f"wins@{L}": sum(1 for x in w if x is not None and x <= L) for L in limits}}
        for tt, w in sorted(won_at.items())}
    return {"split": split, "episodes_per_game": episodes, "limits": limits, "per_type": per_type,
            "steps": steps, "seconds": time.perf_counter() - t0}


def format_rates(res: dict[str, Any]) -> str:
    """A Markdown table: per task type, wins / episodes (rate) at each limit."""
    limits = res["limits"]
    lines = ["| task type | episodes | " + " | ".join(f"won within {L} steps" for L in limits) + " |",
             "|---|---|" + "---|" * len(limits)]
    for tt, r in res["per_type"].items():
        n = r["episodes"]
        lines.append(f"| {tt} | {n} | " + " | ".join(f"{r[f'wins@{L}']} ({r[f'wins@{L}'] / n:.3f})" for L in limits) + " |")
    lines.append(f"\n{res['steps']} steps in {res['seconds']:.0f} s ({res['steps'] / max(res['seconds'], 1e-9):.0f} steps/s)")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stratagym.studies.alfworld_random", description=__doc__.split("\n")[0])
    parser.add_argument("--split", default="train")
    parser.add_argument("--episodes", type=int, default=5, help="episodes per game")
    parser.add_argument("--limits", default="15,30,50", help="step limits, comma-separated")
    parser.add_argument("--task-types", default="", help="comma-separated task types (default: all six)")
    args = parser.parse_args(argv)
    res = random_win_rates(args.split, episodes=args.episodes, limits=[int(x) for x in args.limits.split(",")],
                           task_types=[t for t in args.task_types.split(",") if t] or None)
    print(format_rates(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
