"""``stratagym eval`` and ``stratagym bench``: evaluate an agent; train, evaluate and rank a suite.

Heavy imports stay inside the command functions so ``stratagym --help`` stays fast.
"""

from __future__ import annotations

import os

import re
from pathlib import Path
from typing import Any, Optional

import typer

from stratagym.cli_support import parse_key_values
from stratagym.display import esc, print_table
from stratagym.errors import ConfigError
from stratagym.eval.transcripts import read_transcripts
from stratagym.paths import slug

DEFAULT_OUT_DIR = Path("runs/eval")


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-4"`` (inclusive) or a mix: ``"0-2,7"``."""
    seeds: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        m = re.fullmatch(r"(-?\d+)-(-?\d+)", part)
        try:
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise typer.BadParameter(f"seeds must look like 0,1,2 or 0-4, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise typer.BadParameter(f"seeds must be distinct integers, got {text!r}")
    return seeds


def parse_env_args(items: list[str], *, flag: str = "--env-arg") -> dict[str, Any]:
    """``["k=v", ...]`` -> dict, each value read as YAML (``3`` -> int, ``true`` -> bool, ``a`` -> str); a
    value that is not YAML is kept as the text given (env and policy arguments are often free text)."""
    return parse_key_values(items, flag, keep_text=True)


def _seeds_tag(seeds: list[int]) -> str:
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"s{seeds[0]}-{seeds[-1]}"
    tag = "s" + "_".join(map(str, seeds))
    if len(tag) > 40:
        import hashlib

        tag = "s" + hashlib.sha256(tag.encode()).hexdigest()[:10]
    return tag


def default_out(agent_label: str, env_id: str, split: str | None, n: int | None = None, seeds: list[int] | None = None) -> Path:
    """``runs/eval/<agent>__<env>__<split>__n<N>__s<seeds>.json``: evals that differ get different files
    (and progress files), the same eval rerun resumes its own."""
    parts = [slug(agent_label), slug(env_id), slug(split or "default"), f"n{n if n is not None else 'all'}", _seeds_tag(seeds or [0])]
    return DEFAULT_OUT_DIR / ("__".join(parts) + ".json")


def print_summary(console: Any, records: list[dict[str, Any]], title: str) -> None:
    """One row per record with its primary metric, 95% CI and seed spread: a rich table on a terminal, a
    plain one when piped (:func:`stratagym.display.print_table`); labels are printed literally."""
    from stratagym.eval.aggregate import primary_metric  # lazy: ~8 ms of imports; `stratagym --help` stays fast

    rows = []
    parts = False
    for r in records:
        pm = primary_metric(r["env"]["id"])
        if pm not in r["metrics"]:
            pm = "success"
        m = r["metrics"][pm]
        spread = r.get("across_seeds", {}).get(pm)
        # the metric on tasks that overlap the train split (answerable from memory) and on the rest
        ov, no = r["metrics"].get(f"{pm}/overlap"), r["metrics"].get(f"{pm}/no_overlap")
        parts = parts or bool(ov or no)
        rows.append([
            r["agent"]["label"], r["env"]["id"].split("/")[-1], r["split"], str(r["n_episodes"]), pm,
            f"{m['value']:.4g}", f"[{m['ci_low']:.3g}, {m['ci_high']:.3g}]",
            f"{spread['std']:.3g} ({spread['n_seeds']})" if spread else "-",
            " / ".join(f"{x['value']:.3g} (n={x['n']})" if x else "-" for x in (ov, no)),
        ])
    columns = ["agent", "env", "split", "episodes", "metric", "value", "95% CI", "seed std", "overlap / no overlap"]
    if not parts:  # no env here reports train/test overlap
        columns, rows = columns[:-1], [row[:-1] for row in rows]
    print_table(console, title, columns, rows)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add ``eval`` and ``bench`` to the root ``stratagym`` app."""

    @app.command("eval")
    def eval_cmd(
        agent: str = typer.Argument(..., help="scripted:<name> | checkpoint folder | hf:<model> | openai:<model>@<url>"),
        env: list[str] = typer.Option([], "--env", "-e", help="Env id (repeatable). Or use --suite."),
        suite: Optional[Path] = typer.Option(None, "--suite", help="Evaluate every env of a suite YAML."),
        split: list[str] = typer.Option([], "--split", help="Split (repeatable: each env is evaluated on each, e.g. "
                                        "--split test --split test_unseen; default: the env's default / the suite's)."),
        n: Optional[int] = typer.Option(None, "--n", "-n", help="Number of tasks (the first n of the split; default all)."),
        seeds: Optional[str] = typer.Option(None, help="Seeds: 0,1,2 or 0-4; each task is played once per seed (default 0, or the suite's)."),
        batch_size: int = typer.Option(8, "--batch-size", "-b", help="Envs played in parallel (one batched act per turn)."),
        max_steps: Optional[int] = typer.Option(None, help="Per-episode turn limit (default: the env's)."),
        env_arg: list[str] = typer.Option([], "--env-arg", "-E", help="Env constructor argument key=value (YAML value; repeatable)."),
        policy_arg: list[str] = typer.Option([], "--policy-arg", "-P", help="LLM agent option key=value (YAML value; "
                                             "repeatable), the policy: section's fields, e.g. -P backend=vllm "
                                             "-P 'vllm={max_model_len: 1024}' -P memory_k=4."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Record path (one env) or folder (several). Default runs/eval/."),
        resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue a killed eval from its progress file."),
        transcripts: bool = typer.Option(True, "--transcripts/--no-transcripts", help="Keep each episode's turns in the "
                                         "progress file (<out>.progress.jsonl) for `stratagym leaderboard site`."),
        label: Optional[str] = typer.Option(None, help="Display name on the leaderboard."),
        algorithm: Optional[str] = typer.Option(None, help="The algorithm that trained the agent (for the leaderboard)."),
        retriever_ablation: bool = typer.Option(False, "--retriever-ablation", help="SearchQA: also evaluate with no "
                                                "retrieval, random passages and gold passages shuffled across questions, "
                                                "and add the record's search-dependence block (docs/eval.md)."),
        submit: bool = typer.Option(False, "--submit", help="Submit the record(s) to the leaderboard."),
        board: Optional[str] = typer.Option(None, "--board", help="Leaderboard store URL or SQLite path (default leaderboard/board.db)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    ) -> None:
        """Evaluate an agent on one env or a suite and write a versioned result record (JSON)."""
        from rich.console import Console

        # lazy: the harness loads torch, the agent and suite parsers ~20 ms more; `stratagym --help` stays fast
        from stratagym.eval.agents import AgentSpecError, parse_agent_spec
        from stratagym.eval.harness import EvalConfig, EvalError, evaluate
        from stratagym.eval.suite import EvalEntry, SuiteError, load_suite

        console = Console(stderr=True, soft_wrap=True)
        try:
            spec = parse_agent_spec(agent)
            seed_list = parse_seeds(seeds) if seeds is not None else [0]
            if suite is not None:
                s = load_suite(suite)
                entries = [e for e in s.evals if not env or e.env in env]
                if seeds is None:
                    seed_list = list(s.seeds)
            elif env:
                entries = [EvalEntry(env=e) for e in env]
            else:
                raise typer.BadParameter("give --env ENV_ID (repeatable) or --suite SUITE.yaml")
            records = []
            for e, sp in [(e, sp) for e in entries for sp in (split or [e.split])]:
                n_tasks = n if n is not None else e.n
                target = out
                name = default_out(label or spec.label, e.env, sp, n_tasks, seed_list).name
                if target is None:
                    target = DEFAULT_OUT_DIR / name
                elif len(entries) > 1 or target.suffix != ".json":
                    target = target / name
                cfg = EvalConfig(
                    agent=agent, env_id=e.env, split=sp, n=n_tasks, seeds=seed_list,
                    batch_size=batch_size, env_kwargs={**e.env_kwargs, **parse_env_args(env_arg)}, max_steps=max_steps or e.max_steps,
                    label=label, algorithm=algorithm, agent_options=parse_env_args(policy_arg, flag="--policy-arg"),
                )
                if retriever_ablation and not e.env.startswith("stratagym/SearchQA"):
                    raise EvalError(f"--retriever-ablation applies to SearchQA envs (stratagym/SearchQA-v0), not {e.env}")
                record = evaluate(cfg, out=target, resume=resume, progress=not quiet, transcripts=transcripts)
                if retriever_ablation:  # lazy: three more evals' helpers, only with --retriever-ablation
                    from stratagym.eval.aggregate import primary_metric
                    from stratagym.eval.records import write_json_atomic
                    from stratagym.eval.search_dependence import run_ablations, search_dependence_block

                    ablated = run_ablations(cfg, target, evaluate, resume=resume, progress=not quiet, transcripts=transcripts)
                    record["search_dependence"] = search_dependence_block(record, ablated, metric=primary_metric(e.env))
                    write_json_atomic(target, record)
                records.append(record)
                console.print(f"[green]wrote[/green] {esc(target)}")
        except (AgentSpecError, EvalError, SuiteError) as exc:
            console.print(f"[red]error:[/red] {esc(exc)}")
            raise typer.Exit(2) from None
        print_summary(Console(), records, f"eval of {agent}")
        if submit:
            from stratagym.leaderboard.store import Leaderboard, SubmissionError  # lazy: SQLAlchemy, pydantic

            lb = Leaderboard(board)
            refused = 0
            for r in records:  # every record is tried: one refusal does not hold back the others
                try:
                    rid = lb.submit(r)
                    console.print(f"[green]submitted[/green] {r['record_id'][:12]} as #{rid} to {esc(lb.url)}")
                except SubmissionError as exc:
                    refused += 1
                    console.print(f"[red]rejected:[/red] {esc(exc)}")
            if refused:
                raise typer.Exit(1)

    @app.command("failures")
    def failures_cmd(
        record: Path = typer.Argument(..., help="An eval record (JSON) whose progress file kept transcripts, or a "
                                                "committed board record with its transcript archive."),
        transcripts: Optional[Path] = typer.Option(None, "--transcripts", help="The progress file holding its transcripts "
                                                   "(default: <record>.progress.jsonl, else the archive the record "
                                                   "names in --archives)."),
        archives: Path = typer.Option(Path("leaderboard") / "transcripts", "--archives",
                                      help="Folder of committed transcript archives (a board record's transcripts)."),
        window: int = typer.Option(10, help="Turns at the end of an episode the loop and invalid checks read."),
        max_distinct: int = typer.Option(2, help="A loop repeats at most this many distinct actions."),
    ) -> None:
        """Where an eval's episodes fail: won, finished (a wrong final decision), loop, invalid, step limit."""
        import json

        from rich.console import Console

        # lazy: the harness module loads torch, the failure report ~5 ms; `stratagym --help` stays fast
        from stratagym.eval.failures import failure_report
        from stratagym.eval.harness import progress_path

        if window < 1 or max_distinct < 1:
            raise ConfigError("--window and --max-distinct must be >= 1")
        try:
            rec = json.loads(record.read_text())
            episodes = rec["episodes"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{record} is not a readable eval record ({exc}); pass the JSON file `stratagym eval -o` wrote") from exc
        if transcripts is not None:
            source, (_, found) = transcripts, read_transcripts(transcripts)
        else:  # the eval's progress file, else (a committed board record) the archive it names
            from stratagym.eval.transcript_archive import record_transcripts

            found, source = record_transcripts(rec, progress_path(record), archives)
        report = failure_report(episodes, found, window=window, max_distinct=max_distinct)
        console = Console(soft_wrap=True)
        print_table(console, f"where {len(episodes)} episodes end ({report.total - report.without_transcript} with transcripts)",
                    ["outcome", "episodes", "share", "first example"],
                    [(label, n, f"{share:.2f}", ex) for label, n, share, ex in report.rows()])
        if report.finished_with_parts:
            print_table(console, f"what the {report.finished_with_parts} wrong final decisions missed (the env's reward "
                        "parts; one may miss several)", ["part", "decisions", "share", "first example"],
                        [(part, n, f"{share:.2f}", ex) for part, n, share, ex in report.miss_rows()])
        if report.without_transcript:
            console.print(f"{report.without_transcript} episode(s) have no transcript in {source}: "
                          "loops and invalid streaks among them count as step_limit", markup=False)

    @app.command("bench")
    def bench_cmd(
        suite: Path = typer.Option(Path("suites/quick.yaml"), "--suite", "-s", help="Suite YAML (default suites/quick.yaml)."),
        board: Optional[str] = typer.Option(None, "--board", help="Leaderboard store URL or SQLite path (default <runs-dir>/board.db; with --update-committed leaderboard/board.db)."),
        board_dir: Optional[Path] = typer.Option(None, "--board-dir", help="Where records/, LEADERBOARD.md, index.html and plots are written (default <runs-dir>/board: the checkout stays clean)."),
        runs_dir: Path = typer.Option(Path("runs/bench"), "--runs-dir", help="Checkpoints, training logs and eval records."),
        update_committed: bool = typer.Option(False, "--update-committed", help="Write the records and the board into the committed leaderboard/ folder (maintainers; see docs/leaderboard.md)."),
        resume: bool = typer.Option(True, "--resume/--no-resume", help="Reuse finished runs and eval progress of an earlier bench."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    ) -> None:
        """Train every (algorithm, env, seed) of a suite, evaluate, submit to the leaderboard and render it."""
        from rich.console import Console

        # lazy: the bench runner loads torch, the suite parser ~12 ms; `stratagym --help` stays fast
        from stratagym.bench.runner import BenchError, run_bench
        from stratagym.eval.suite import SuiteError

        console = Console(soft_wrap=True)
        # A demo writes where a run's outputs go; only --update-committed touches the committed board
        # (whose records the demo's board still shows: they are read, never rewritten).
        committed = Path("leaderboard")
        if board_dir is None:
            board_dir = committed if update_committed else runs_dir / "board"
        if board is None and not update_committed and not os.environ.get("STRATAGYM_BOARD"):
            board = str(runs_dir / "board.db")
        records = committed / "records"
        seed_records = records if records.is_dir() and board_dir.resolve() != committed.resolve() else None
        try:
            result = run_bench(suite, board=board, board_dir=board_dir, runs_dir=runs_dir, resume=resume, progress=not quiet,
                               console=console, committed_records=seed_records)
        except (BenchError, SuiteError) as exc:
            console.print(f"[red]error:[/red] {esc(exc)}")
            raise typer.Exit(2) from None
        print_summary(console, result.records, f"bench {result.suite.name}: {len(result.records)} results")
        console.print(f"leaderboard: {esc(result.markdown)}  and  {esc(result.html)}")
