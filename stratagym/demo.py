"""The scripted demo: every available env played by each of its scripted agents, one results table."""

from __future__ import annotations

import time

import gymnasium as gym
from rich.console import Console

import stratagym
from stratagym.agents.scripted import ScriptedPolicy
from stratagym.display import esc, print_table
from stratagym.errors import ConfigError
from stratagym.envs.registry import agent_env_kwargs, make_agent, scripted_agent_names
from stratagym.eval.episodes import EpisodeRecord
from stratagym.training.rollout import InProcessPool, play


def run_scripted_demo(*, episodes: int = 8, seed: int = 0, console: Console | None = None, batch: int = 4) -> list[dict]:
    """Play ``episodes`` episodes per (env, scripted agent); print and return the rows."""
    console = console or Console()
    rows = []
    cells: list[list[str]] = []  # printed by print_table: env ids whole also when piped (make demo logs)
    for spec in stratagym.list_envs():
        if not spec.available:
            console.print(f"[yellow]skip[/yellow] {spec.id}: {esc(spec.availability())}")
            continue
        n_envs = min(batch, spec.max_parallel or batch)
        for name in scripted_agent_names(spec.id):
            try:
                envs = [gym.make(spec.id, **agent_env_kwargs(spec.id, name)) for _ in range(n_envs)]
            except ConfigError as exc:  # e.g. data not built: say why and go on with the others
                console.print(f"[yellow]skip[/yellow] {spec.id} ({name}): {esc(exc)}")
                break
            try:
                agent = ScriptedPolicy(make_agent(spec.id, name, envs[0], seed=seed))
                tasks = list(envs[0].unwrapped.task_ids())
                wanted = [(tasks[i % len(tasks)], seed + i) for i in range(episodes)]
                t0 = time.perf_counter()
                trajs = play(agent, wanted, pool=InProcessPool.from_envs(envs), batch_size=n_envs)
                recs = [EpisodeRecord.from_trajectory(t) for t in trajs]
                dt = (time.perf_counter() - t0) / max(len(recs), 1)
                n = len(recs)
                row = {
                    "env": spec.id,
                    "agent": name,
                    "mean_reward": sum(r.total_reward for r in recs) / n,
                    "success": sum(r.won for r in recs) / n,
                    "mean_score": sum(r.score for r in recs) / n,
                    "turns": sum(r.turns for r in recs) / n,
                    "searches": sum(r.search_count for r in recs) / n,
                    "valid": sum(r.valid_ratio for r in recs) / n,
                    "s_per_episode": dt,
                }
                rows.append(row)
                cells.append([
                    spec.id, name, f"{row['mean_reward']:.3f}", f"{row['success']:.2f}", f"{row['mean_score']:.3f}",
                    f"{row['turns']:.1f}", f"{row['searches']:.2f}", f"{row['valid']:.2f}", f"{dt:.3f}",
                ])
            finally:
                for env in envs:
                    env.close()
    print_table(console, f"stratagym scripted demo ({episodes} episodes each, seed {seed})",
                ["env", "agent", "mean reward", "success", "mean score", "turns", "searches", "valid", "s/episode"], cells)
    return rows

