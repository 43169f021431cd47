"""``stratagym alfworld ...``: generate ALFWorld games offline, list the games a split would play.

Heavy imports (alfworld, textworld) stay inside the command functions so ``stratagym --help`` is fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from stratagym.atomic import publish_folder
from stratagym.display import esc
from stratagym.errors import ConfigError

__all__ = ["register"]


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add the ``alfworld`` command group to the root ``stratagym`` app."""
    alf = typer.Typer(no_args_is_help=True, help="ALFWorld: generate games offline, list splits.")

    @alf.command("generate")
    def generate(
        task_type: List[str] = typer.Option(
            ["all"], "--task-type", "-t",
            help="Task type (repeatable): pick_and_place_simple, look_at_obj_in_light, pick_clean_then_place_in_recep, "
                 "pick_heat_then_place_in_recep, pick_cool_then_place_in_recep, pick_two_obj_and_place, an id 1-6, or 'all'.",
        ),
        n: int = typer.Option(5, "--n", "-n", help="Games per task type."),
        seed: int = typer.Option(0, "--seed", help="Generation seed (same seed, same games)."),
        out: Path = typer.Option(..., "--out", "-o", help="Folder to write game folders into (like json_2.1.1/train)."),
        rooms: str = typer.Option("all", "--rooms", help="Floor plans: all, seen (not held out) or unseen (held out)."),
        verify: bool = typer.Option(True, "--verify/--no-verify", help="Check every game is won by the planner."),
        avoid_eval: bool = typer.Option(
            True, "--avoid-eval/--allow-eval",
            help="Leave out any game that is a bundled evaluation game, or shares a (task, object, receptacle) "
                 "combination with an out_of_distribution game, so new games can train a model without "
                 "leaking into either evaluation split (default on).",
        ),
    ) -> None:
        """Write ALFWorld game folders (game.tw-pddl + traj_data.json) for the real engine."""
        import json
        import shutil
        import tempfile

        from rich.console import Console

        # lazy: the game modules load the engine and translator modules (~40 ms); `stratagym --help` stays fast
        from stratagym.envs.alfworld import generator as g
        from stratagym.envs.alfworld.games import canonical_task_types, eval_exclusions, logic_files

        console = Console()
        try:
            types = g.TASK_TYPES if "all" in task_type else canonical_task_types(task_type)
            if rooms not in ("all", "seen", "unseen"):
                raise ConfigError(f"--rooms must be all, seen or unseen, got {rooms!r}")
            unseen = {"all": None, "seen": False, "unseen": True}[rooms]
            domain, grammar = logic_files()
            held_out = eval_exclusions() if avoid_eval else None
            out.mkdir(parents=True, exist_ok=True)
            written = 0
            for t in types:
                records = g.generate_games(
                    t, n, seed=seed, floor_plans=g.floor_plans_for(t, unseen=unseen), verify=verify,
                    exclude_combos=held_out.combos if held_out else (),
                    exclude_problems=held_out.problems if held_out else (),
                )
                for rec in records:
                    # build each game folder beside its destination, then rename it into place
                    tmp = Path(tempfile.mkdtemp(prefix=".game-", dir=out))
                    try:
                        g.write_game_folder(rec, tmp, domain, grammar)
                        dest = out / rec.key
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        publish_folder(tmp / rec.key, dest)
                    finally:
                        shutil.rmtree(tmp, ignore_errors=True)
                    written += 1
                    console.print(f"{esc(rec.key)}  [dim]{esc(rec.task_desc)}; walkthrough {len(rec.walkthrough)} steps[/dim]")
            console.print(f"[green]wrote {written} games to {esc(out)}[/green]")
            console.print(esc(json.dumps({"play_with": f"gymnasium.make('stratagym/ALFWorld-v0', data_path='{out}')"})))
        except ConfigError as exc:
            console.print(f"[red]error:[/red] {esc(exc)}")
            raise typer.Exit(2)

    @alf.command("list")
    def list_games(
        split: str = typer.Option("train", "--split", help="train, in_distribution (valid_seen), out_of_distribution (valid_unseen)."),
        data_path: Optional[str] = typer.Option(None, "--data-path", help="ALFWorld data root, game folder, or 'bundled'."),
        show: int = typer.Option(0, "--show", help="Also print the first N task ids."),
    ) -> None:
        """Count the playable games of a split per task type."""
        import collections

        from rich.console import Console
        from rich.table import Table

        # lazy: the game modules load the engine and translator modules (~40 ms); `stratagym --help` stays fast
        from stratagym.envs.alfworld.games import resolve_games

        console = Console()
        try:
            games = resolve_games(split, data_path)
        except ConfigError as exc:
            console.print(f"[red]error:[/red] {esc(exc)}")
            raise typer.Exit(2)
        counts = collections.Counter(e.task_type for e in games.entries)
        table = Table(title=esc(f"ALFWorld {games.split} ({games.source}: {games.split_dir})"))
        table.add_column("task type")
        table.add_column("games", justify="right")
        for t, c in sorted(counts.items()):
            table.add_row(t, str(c))
        table.add_row("all", str(len(games.entries)))
        console.print(table)
        for e in games.entries[:show]:
            console.print(e.task_id)

    app.add_typer(alf, name="alfworld")
