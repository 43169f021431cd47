"""``stratagym study``: run the controlled algorithm studies (see docs/studies.md)."""

from __future__ import annotations

from typing import Any, Optional

import typer


def register(app: typer.Typer, groups: dict[str, Any]) -> None:
    def study_list() -> None:
        from stratagym.studies.definitions import STUDIES

        for s in STUDIES.values():
            budget = f"{s.iterations} iterations x {s.tasks_per_iteration} tasks x G={s.group_size}"
            typer.echo(f"{s.name:18s} {s.env_id:28s} {', '.join(m.label for m in s.methods)}  [{budget}, {s.n_seeds} seeds]")

    @app.command("study")
    def study_run(
        name: str = typer.Argument(..., help="Study name, or 'list' to list the studies."),
        out: Optional[str] = typer.Option(None, "--out", help="Output folder (default studies/<name>)."),
        seeds: int = typer.Option(0, "--seeds", help="Number of seeds 0..n-1 (default: the study's, 5)."),
        iterations: int = typer.Option(0, "--iterations", help="Override the training iterations (same for every method)."),
        board: Optional[str] = typer.Option(None, "--board", help="Also submit the records to this leaderboard (path or URL)."),
        no_records: bool = typer.Option(False, "--no-records", help="Skip the leaderboard records."),
        report_only: bool = typer.Option(False, "--report-only", help="Re-render table.md and curves.png from results.json."),
    ) -> None:
        """Run controlled study NAME (search-strata, difficulty, context, alfworld-context, search-strata-bias,
        context-valued, difficulty-shared; 'list' lists them):
        every method x seed, then results.json, table.md, curves.png and leaderboard records."""
        import os

        if name == "list":
            study_list()
            return

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from stratagym.studies.definitions import get_study
        from stratagym.studies.runner import run_study

        try:
            study = get_study(name)
        except KeyError as exc:
            raise typer.BadParameter(str(exc.args[0])) from None
        out = out or os.path.join("studies", name)
        if report_only:
            import json

            from stratagym.studies.runner import render

            path = os.path.join(out, "results.json")
            if not os.path.exists(path):
                typer.echo(f"no {path}: run the study first", err=True)
                raise typer.Exit(2)
            with open(path) as fh:
                results = json.load(fh)
            results["study"].setdefault("compare_to", list(study.compare_to))
            render(results, out)
            typer.echo(f"rendered {out}/table.md and curves.png")
            return
        study = study.with_overrides(n_seeds=seeds or None, iterations=iterations or None)
        if study.requires_env:
            import gymnasium as gym

            import stratagym

            from stratagym.errors import ConfigError

            spec = next((s for s in stratagym.list_envs() if s.id == study.env_id), None)
            why = None
            if spec is None or not spec.available:
                why = "is not registered" if spec is None else spec.availability()
            else:
                try:
                    gym.make(study.env_id, **study.env_kwargs).close()
                except (ConfigError, ImportError) as exc:
                    why = f"cannot be built here: {exc}"
            if why is not None:
                typer.echo(f"study {name}: env {study.env_id} {why}; nothing to run", err=True)
                raise typer.Exit(2)
        run_study(study, out, board=board, records=not no_records, log=typer.echo)
