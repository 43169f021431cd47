"""``stratagym study``: run the controlled algorithm studies (see docs/studies.md).

A study is a YAML file in ``suites/studies/`` (see :mod:`stratagym.studies.definitions`); its outputs go
to ``studies/<name>/``. A bad file, an unknown study or an env that cannot be built here is a user
error: one message on stderr, exit code 2, no traceback.
"""

from __future__ import annotations

from typing import Any, Optional

import typer

import stratagym
from stratagym.errors import ConfigError, UserError


def _fail(message: str) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(2)


def _env_problem(study: Any) -> str | None:
    """Why ``study``'s env cannot be trained here (not registered, missing extras or data), or None."""
    spec = next((s for s in stratagym.list_envs() if s.id == study.env), None)
    if spec is None:
        return "is not a registered env (see `stratagym envs list`)"
    if not study.requires_env:
        return None
    if not spec.available:
        return spec.availability()
    import gymnasium as gym

    try:
        gym.make(study.env, **study.env_kwargs).close()
    except (ConfigError, ImportError) as exc:
        return f"cannot be built here: {exc}"
    return None


def register(app: typer.Typer, groups: dict[str, Any]) -> None:
    def study_list() -> None:
        from stratagym.studies.definitions import STUDY_DIR, load_studies  # lazy: ~12 ms; `stratagym --help` stays fast

        try:
            studies = load_studies()
        except ConfigError as exc:
            _fail(str(exc))
        if not studies:
            _fail(f"no study files in {STUDY_DIR}")
        for s in studies.values():
            budget = f"{s.iterations} iterations x {s.tasks_per_iteration} tasks x G={s.group_size}"
            typer.echo(f"{s.name:18s} {s.env:28s} {', '.join(m.label for m in s.methods)}  [{budget}, {s.n_seeds} seeds]")

    @app.command("study")
    def study_run(
        name: str = typer.Argument(..., help="Study name (suites/studies/NAME.yaml), a study YAML path, or 'list'."),
        out: Optional[str] = typer.Option(None, "--out", help="Output folder (default studies/<name>)."),
        seeds: int = typer.Option(0, "--seeds", help="Number of seeds 0..n-1 (default: the study's, 5)."),
        iterations: int = typer.Option(0, "--iterations", help="Override the training iterations (same for every method)."),
        board: Optional[str] = typer.Option(None, "--board", help="Also submit the records to this leaderboard (path or URL)."),
        no_records: bool = typer.Option(False, "--no-records", help="Skip the leaderboard records."),
        report_only: bool = typer.Option(False, "--report-only", help="Re-render table.md and curves.png from results.json."),
        jobs: int = typer.Option(1, "--jobs", "-j", help="Runs trained at once, one process and one thread each "
                                 "(the results do not depend on it)."),
        heldout: list[str] = typer.Option([], "--heldout", help="Train nothing: write each arm's greedy record on "
                                          "every task of this eval split (repeatable) from the finished study's "
                                          "saved policies, with transcripts (records/<method>--<split>.json)."),
        restart: bool = typer.Option(False, "--restart", help="Train every run again, even when OUT holds a "
                                     "stopped start of this study (by default its finished runs are kept)."),
    ) -> None:
        """Run controlled study NAME (a file of suites/studies/, or a path to one; 'list' lists them):
        every method x seed, then results.json, table.md, curves.png and leaderboard records in
        studies/NAME/."""
        import os

        if name == "list":
            study_list()
            return
        if seeds < 0 or iterations < 0:
            _fail("--seeds and --iterations must be >= 0 (0: the study's own)")
        if jobs < 1:
            _fail(f"--jobs must be >= 1, got {jobs}")

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from stratagym.studies.definitions import get_study, results_dir, study_path  # lazy: ~12 ms; `stratagym --help` stays fast

        try:
            study = get_study(name)
        except ConfigError as exc:
            _fail(str(exc))
        out_dir = out or str(results_dir(study))
        if report_only:
            from stratagym.studies.runner import rerender  # lazy: the runner loads torch (after OMP_NUM_THREADS is set)

            try:
                rerender(study, out_dir)
            except ConfigError as exc:
                _fail(str(exc))
            typer.echo(f"rendered {out_dir}/table.md and curves.png")
            return
        if heldout:
            from stratagym.studies.runner import heldout_records  # lazy: the runner loads torch (after OMP_NUM_THREADS is set)

            try:
                for split in heldout:
                    heldout_records(study, out_dir, split, log=typer.echo, board=board)
            except ConfigError as exc:
                _fail(f"study {study.name}: {exc}")
            return
        study = study.with_overrides(n_seeds=seeds or None, iterations=iterations or None)
        why = _env_problem(study)
        if why is not None:
            _fail(f"study {study.name}: env {study.env} {why}; nothing to run")
        from stratagym.studies.runner import run_study  # lazy: the runner loads torch (after OMP_NUM_THREADS is set)

        try:
            run_study(study, out_dir, board=board, records=not no_records, log=typer.echo,
                      study_file=study_path(name), jobs=jobs, resume=not restart)
        except ConfigError as exc:
            _fail(f"study {study.name}: {exc}")

    @app.command("study-llm")
    def study_llm(
        name: str = typer.Argument(..., help="LLM study name (suites/studies/llm/NAME.yaml), a study file path, or 'list'."),
        out: Optional[str] = typer.Option(None, "--out", help="Records and comparison (default studies/llm/<name>)."),
        runs_dir: Optional[str] = typer.Option(None, "--runs-dir", help="Training runs (default: the study's runs, else runs/studies/<name>)."),
        check: bool = typer.Option(False, "--check", help="Only check the pre-registration against the study."),
        show_plan: bool = typer.Option(False, "--plan", help="Print the train and eval commands; run nothing."),
        report_only: bool = typer.Option(False, "--report-only", help="Compare the existing eval records; run nothing."),
        allow_uncommitted: bool = typer.Option(False, "--allow-uncommitted-preregistration",
                                               help="Run with a pre-registration git does not hold unchanged (the report says so)."),
        jobs: int = typer.Option(1, "--jobs", "-j", min=1,
                                 help="Arm-seed runs at once (each its own train then eval; 2 on a 2-core machine with threads 1)."),
    ) -> None:
        """Run LLM study NAME: `stratagym train` + `stratagym eval` per arm and seed, then the paired comparison
        its pre-registration fixes (refused without a complete, consistent, committed pre-registration)."""
        from pathlib import Path

        from stratagym.studies import llm  # lazy: ~35 ms of imports; `stratagym --help` stays fast

        if name == "list":
            for n in llm.llm_study_names():
                try:
                    s = llm.get_llm_study(n)
                except ConfigError as exc:
                    _fail(str(exc))
                typer.echo(f"{s.name:28s} {s.eval.env} {s.eval.split or 'default'}: {', '.join(a.label for a in s.arms)} "
                           f"[{s.steps} steps, seeds {', '.join(map(str, s.seeds))}]")
            return
        try:
            study = llm.get_llm_study(name)
            pre, proof = llm.check_study(study, require_commit=not allow_uncommitted)
            out_dir = Path(out or f"studies/llm/{study.name}")
            runs = Path(runs_dir) if runs_dir else llm.default_runs(study)
            if check:
                typer.echo(f"{study.name}: pre-registration {pre.path} holds ({len(pre.hypotheses)} hypotheses, "
                           f"{len(pre.seeds)} seeds, {pre.test} test at alpha {pre.alpha}"
                           + (f"; commit {proof['commit'][:10]})" if proof else "; not checked against git)"))
                return
            if show_plan:
                for stage, arm, seed, argv in llm.plan(study, out_dir, runs):
                    typer.echo(f"[{stage}] OMP_NUM_THREADS={study.threads} stratagym {' '.join(argv)}")
                return
            if report_only:
                res = llm.compare_study(study, pre, proof, out=out_dir, runs_root=runs)
            else:
                res = llm.run_llm_study(study, out=out_dir, runs_root=runs, require_commit=not allow_uncommitted,
                                        jobs=jobs, log=typer.echo)
        except UserError as exc:  # bad files, a refused pre-registration, a failed command, a missing record
            _fail(str(exc))
        for h in res["hypotheses"]:
            c = h["pooled"]
            typer.echo(f"{h['arm']} vs {h['baseline']}: {c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}], "
                       f"{pre.test} p {c[pre.test + '_p']:.3g}: {h['verdict']}")
        typer.echo(f"wrote {out_dir}/comparison.json and comparison.md")
