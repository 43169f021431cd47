"""``stratagym envs check-gem GEM_ID``: stratagym's env checks and a soak on any GEM env, in this process,
through ``stratagym/GEM-v0`` (the same checks ``check-openenv`` runs on an OpenEnv server). Heavy imports
stay inside the command; user errors (GEM missing, unknown GEM id, bad ``-K``) are ConfigErrors: exit 2."""

from __future__ import annotations

import os
from typing import Any

import typer

from stratagym.interop.openenv.cli import parse_env_kwargs, print_check_results, print_soak_report


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    groups["envs"].command("check-gem")(check_gem)


def check_gem(
    gem_id: str = typer.Argument(..., help="A GEM env id (e.g. game:GuessTheNumber-v0-easy), or a stratagym env id "
                                 "played through GEM's API (e.g. stratagym/SearchStrata-v0)."),
    gem_kwarg: list[str] = typer.Option([], "-K", "--gem-kwarg", help="key=value passed to gem.make (repeatable; JSON values)."),
    tasks: int = typer.Option(100, "--tasks", min=1, help="GEM reset seeds 0..N-1 as tasks (GEM's own envs)."),
    max_steps: int = typer.Option(50, "--max-steps", min=1, help="Turns before an episode is truncated."),
    soak_episodes: int = typer.Option(0, "--soak", help="Also play this many episodes and watch this process's resources."),
    sessions: int = typer.Option(4, "--sessions", min=1, help="Concurrent envs (threads) in the soak."),
) -> None:
    """Contract, fuzz and determinism checks (and a soak) on a GEM env, through stratagym/GEM-v0."""
    from rich.console import Console

    # lazy: ~15 ms of imports; `stratagym --help` stays fast
    from stratagym.interop.gem.gem_env import GEMTextEnv
    from stratagym.interop.openenv.check import check_envs, soak_envs

    kwargs: dict[str, Any] = {"gem_id": gem_id, "gem_kwargs": parse_env_kwargs(gem_kwarg), "tasks": tasks,
                              "max_steps": max_steps}
    GEMTextEnv(**kwargs).close()  # a missing GEM or an unknown id is the user's to fix: exit 2, not a failed check
    console = Console()
    failed = print_check_results(console, check_envs(lambda: GEMTextEnv(**kwargs)))
    if soak_episodes > 0:
        report = soak_envs(lambda: GEMTextEnv(**kwargs), episodes=soak_episodes, sessions=sessions,
                           max_steps=max_steps, pid=os.getpid())
        failed += print_soak_report(console, report, sessions, peak_label="this process's peak",
                                    change_label="before -> after")
    raise typer.Exit(1 if failed else 0)
