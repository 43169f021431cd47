"""``stratagym leaderboard submit | show | render | rebuild | site | attach | diff | compare``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from stratagym.cli_support import command_group
from stratagym.display import esc, print_table
from stratagym.errors import UserError
from stratagym.eval.records import RecordError, load_record, write_json_atomic
from stratagym.eval.transcripts import episodes_by_key, find_transcripts, same_outcome

#: What `leaderboard compare` pairs when no --metric is given: outcomes every env's episodes carry, the env's
#: score (0-1: WebShop's score / 100, SearchQA's EM) and whether the episode was won.
COMPARE_METRICS = ("score", "won")
_BOARD_HELP = "Store: a SQLAlchemy URL (postgresql+psycopg2://...) or a SQLite path (default leaderboard/board.db; env STRATAGYM_BOARD)."


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    lb_app = command_group(app, groups, "leaderboard", "Submit result records, show rankings, render the board.")

    @lb_app.command("submit")
    def submit(
        records: list[Path] = typer.Argument(..., help="Result record JSON files written by `stratagym eval`."),
        board: Optional[str] = typer.Option(None, "--board", help=_BOARD_HELP),
        render: bool = typer.Option(False, "--render", help="Render the board after submitting."),
        out_dir: Path = typer.Option(Path("leaderboard"), "--out-dir", help="Where --render writes."),
    ) -> None:
        """Validate and store result records; each refused one is listed with the reason and the rest are
        still submitted (exit 1 if any was refused)."""
        from rich.console import Console

        # lazy: the store loads SQLAlchemy and pydantic, the renderer ~15 ms more; `stratagym --help` stays fast
        from stratagym.leaderboard.render import render_board
        from stratagym.leaderboard.store import Leaderboard, SubmissionError

        console = Console(soft_wrap=True)  # a message is one line, also in logs
        lb = Leaderboard(board)
        failed = 0
        for path in records:
            try:
                rid = lb.submit(load_record(path))
                console.print(f"[green]accepted[/green] {esc(path)} as #{rid}")
            except (RecordError, SubmissionError) as exc:
                failed += 1
                console.print(f"[red]rejected[/red] {esc(path)}: {esc(exc)}")
        if render:
            paths = render_board(lb, out_dir)
            console.print(f"rendered {esc(paths['markdown'])} and {esc(paths['html'])}")
        if failed:
            console.print(f"{failed} of {len(records)} record(s) rejected")
        raise typer.Exit(1 if failed else 0)

    @lb_app.command("show")
    def show(
        env: Optional[str] = typer.Option(None, "--env", "-e", help="Only this env."),
        split: Optional[str] = typer.Option(None, "--split", help="Only this split."),
        metric: Optional[str] = typer.Option(None, "--metric", "-m", help="Rank by this metric (default: the env's primary)."),
        board: Optional[str] = typer.Option(None, "--board", help=_BOARD_HELP),
        limit: int = typer.Option(20, help="Rows per board."),
    ) -> None:
        """Print the rankings with 95% CIs: one table per (env, split, protocol fingerprint), as on the
        rendered board, each after the first of its split saying how its protocol differs (``topk 1 vs 3``).

        On a terminal: rich tables; piped or logged: plain tables with every id whole (see
        :mod:`stratagym.display`). Scripted agents have no algorithm: shown as ``-``, as on the HTML board.
        """
        from rich.console import Console

        # lazy: the store loads SQLAlchemy and pydantic, the renderer ~15 ms more; `stratagym --help` stays fast
        from stratagym.leaderboard.render import protocol_text, board_tables
        from stratagym.leaderboard.store import Leaderboard

        console = Console(soft_wrap=True)  # a message is one line, also in logs
        lb = Leaderboard(board)
        boards = [(e, s) for e, s in lb.boards() if (env is None or e == env) and (split is None or s == split)]
        if not boards:
            console.print(f"no results on {esc(lb.url)}" + (f" for {esc(env)} {esc(split or '')}" if env else ""))
            return
        tables = board_tables(lb, rank_by=metric, boards=boards)
        for e, s in boards:
            if metric is not None and not any(t.env == e and t.split == s for t in tables):
                console.print(f"{esc(e)} / {esc(s)}: no result has metric {esc(repr(metric))}; have {esc(lb.metric_names(e, s))}")
        for t in tables:
            rows = []
            for r in t.rows[:limit]:
                value, lo, hi = r["metric"]
                rows.append([
                    r["rank"], r["agent"], _or_dash(r["algorithm"]), f"{value:.4g}", f"[{lo:.3g}, {hi:.3g}]",
                    "-" if r["seed_std"] is None else f"{r['seed_std']:.3g}", r["n"], r["seeds"], r["record_id"],
                ])
            # the protocol line is plain text (escaped), never a table title: rich would wrap a long one
            console.print(esc(f"{t.env} / {t.split}" + ("" if t.main else " (another protocol)") + ": " + protocol_text(t)))
            print_table(console, f"{t.env} / {t.split}: ranked by {t.metric}" + ("" if t.main else " (another protocol)"),
                        ["rank", "agent", "algorithm", t.metric, "95% CI", "seed std", "n", "seeds", "record"], rows)

    @lb_app.command("render")
    def render(
        board: Optional[str] = typer.Option(None, "--board", help=_BOARD_HELP),
        out_dir: Path = typer.Option(Path("leaderboard"), "--out-dir", "-o", help="Folder for LEADERBOARD.md, index.html, plots/."),
        plots: bool = typer.Option(True, "--plots/--no-plots", help="Draw metric and training-curve plots (matplotlib)."),
    ) -> None:
        """Write LEADERBOARD.md, a static index.html with sortable tables, and plots."""
        from rich.console import Console

        # lazy: the store loads SQLAlchemy and pydantic, the renderer ~15 ms more; `stratagym --help` stays fast
        from stratagym.leaderboard.render import render_board
        from stratagym.leaderboard.store import Leaderboard

        store = Leaderboard(board)
        committed = list((out_dir / "records").glob("*.json"))
        if len(store) == 0 and committed:  # a clone's default store is empty: it would blank the committed board
            raise UserError(f"the board {store!r} holds no record, and {esc(out_dir)} holds {len(committed)} record files: "
                            f"rendering would replace their LEADERBOARD.md and index.html with an empty board. To "
                            f"regenerate the board from those records run `stratagym leaderboard rebuild`; or name a "
                            f"board that holds records with --board")
        paths = render_board(store, out_dir, plots=plots)
        Console(soft_wrap=True).print(f"wrote {esc(paths['markdown'])} and {esc(paths['html'])}" + (f" (+{len(paths) - 2} plots)" if len(paths) > 2 else ""))


    @lb_app.command("rebuild")
    def rebuild(
        records: Path = typer.Option(Path("leaderboard") / "records", "--records", help="Folder of record JSON files (the board's source)."),
        out_dir: Path = typer.Option(Path("leaderboard"), "--out-dir", "-o", help="Folder for LEADERBOARD.md, index.html, plots/."),
        plots: bool = typer.Option(True, "--plots/--no-plots", help="Draw metric and training-curve plots (matplotlib)."),
    ) -> None:
        """Render the board from a records folder alone, through a fresh temporary store: the documented way
        to regenerate the committed board (the same records give the same bytes on every machine)."""
        import tempfile

        from rich.console import Console

        from stratagym.leaderboard.render import render_board  # lazy: ~15 ms of imports; `stratagym --help` stays fast

        console = Console(soft_wrap=True)
        with tempfile.TemporaryDirectory() as tmp:
            lb, refused = _store_from_records(records, Path(tmp) / "board.db", console)
            try:
                paths = render_board(lb, out_dir, plots=plots)
            finally:
                lb.close()
        console.print(f"rendered {len(_record_files(records)) - refused} record(s) into {esc(paths['markdown'])} and {esc(paths['html'])}")
        raise typer.Exit(1 if refused else 0)

    @lb_app.command("site")
    def site(
        out: Path = typer.Argument(..., help="Folder for the site (index.html, records/*.html); an earlier site there is replaced."),
        records: Path = typer.Option(Path("leaderboard") / "records", "--records", help="Folder of record JSON files "
                                     "(the board's source), read through a fresh temporary store."),
        board: Optional[str] = typer.Option(None, "--board", help="Read this store instead of --records. " + _BOARD_HELP),
        transcripts: list[Path] = typer.Option([], "--transcripts", "-t", help="Folder searched (recursively) for eval "
                                               "progress files (*.progress.jsonl) holding episode transcripts; repeatable "
                                               "(e.g. runs/). Matched to records by the eval's identity."),
        archives: Optional[Path] = typer.Option(None, "--archives", help="Folder of the committed transcript archives "
                                                "the records name (default: 'transcripts' beside the --records folder)."),
    ) -> None:
        """Write a static site (opens from disk, no server): the board's tables, narrow, and per record its
        episodes, filterable, each with its transcript: from the committed archive the record names (checked
        against the record), else from an eval's progress file."""
        import tempfile

        from rich.console import Console

        # lazy: the store loads SQLAlchemy and pydantic, the site builder ~20 ms more; `stratagym --help` stays fast
        from stratagym.eval.transcript_archive import archived_transcripts
        from stratagym.leaderboard.site import build_site
        from stratagym.leaderboard.store import Leaderboard

        console = Console(soft_wrap=True)
        missing = [p for p in transcripts if not p.is_dir()]
        if missing:
            raise UserError(f"--transcripts {missing[0]} is not a folder; give the folder holding the evals' "
                            "*.progress.jsonl files (e.g. runs/)")
        with tempfile.TemporaryDirectory() as tmp:
            if board is not None:
                lb = Leaderboard(board)
                refused = 0
            else:
                lb, refused = _store_from_records(records, Path(tmp) / "board.db", console)
            try:
                recs = lb.records()
                found = find_transcripts(transcripts, recs) if transcripts else {}
                found.update(archived_transcripts(recs, archives if archives is not None else records.parent / "transcripts"))
                result = build_site(lb, out, transcripts=found)
            finally:
                lb.close()
        console.print(f"wrote {esc(result['index'])}: {result['records']} record page(s), "
                      f"{result['transcribed_episodes']} episode(s) with a transcript")
        raise typer.Exit(1 if refused else 0)

    @lb_app.command("attach")
    def attach(
        records: list[Path] = typer.Argument(..., help="Record JSON files to attach transcripts to (e.g. leaderboard/records/*.json)."),
        progress: list[Path] = typer.Option([], "--progress", "-p", help="An eval progress file (*.progress.jsonl, "
                                            "gzipped or not) or a folder searched for them; repeatable. Matched to "
                                            "each record by the eval's identity, not by name."),
        rerun: list[Path] = typer.Option([], "--rerun", help="A record of the same evaluation run again (same agent "
                                         "content hash, env, split, data and episode outcomes) whose search_dependence "
                                         "block (`stratagym eval --retriever-ablation`) is copied in; repeatable."),
        archives: Path = typer.Option(Path("leaderboard") / "transcripts", "--archives", help="Folder of the "
                                      "content-addressed transcript archives (committed beside the records)."),
        budget_mb: float = typer.Option(2.0, "--budget-mb", help="Compressed size one record's archive may take; a "
                                        "larger one keeps the first episodes of every seed that fit."),
    ) -> None:
        """Commit-ready transcripts: write each record's episodes' turns into a compressed archive named by its
        content hash and store that hash in the record's ``transcripts`` field (the record id does not change).
        Exit 1 if a record found no transcripts; the others are still attached."""
        from rich.console import Console

        from stratagym.eval.transcript_archive import ArchiveError, write_archive  # lazy: only `attach` writes archives

        console = Console(soft_wrap=True)
        if budget_mb <= 0:
            raise UserError(f"--budget-mb must be positive, got {budget_mb}")
        if not progress and not rerun:
            raise UserError("give --progress (transcripts) and/or --rerun (a search_dependence block) to attach")
        missing = [p for p in [*progress, *rerun] if not p.exists()]
        if missing:
            raise UserError(f"{missing[0]} does not exist; give an eval's *.progress.jsonl file (or a folder holding "
                            "them) to --progress, a record JSON file to --rerun")
        loaded = [(path, load_record(path)) for path in records]
        reruns = [load_record(p) for p in rerun]
        failed = 0
        for path, rec in loaded:
            again = next((r for r in reruns if "search_dependence" in r and _same_evaluation(rec, r)), None)
            if rerun and again is None:
                failed += 1
                console.print(f"[red]no search dependence for[/red] {esc(path)}: no --rerun record with a "
                              "search_dependence block evaluated the same agent (content hash), env, split and "
                              "episodes with the same outcomes (a rerun that differs in any episode is another evaluation)")
            elif again is not None:
                rec["search_dependence"] = again["search_dependence"]
                write_json_atomic(path, rec)
                console.print(f"attached the search dependence of {esc(path)}")
        if not progress:
            raise typer.Exit(1 if failed else 0)
        found = find_transcripts(progress, [rec for _, rec in loaded])
        for path, rec in loaded:
            try:
                ref = write_archive(rec, found.get(str(rec["record_id"]), {}), archives,
                                    budget_bytes=int(budget_mb * 1_000_000))
            except ArchiveError as exc:
                failed += 1
                console.print(f"[red]not attached[/red] {esc(path)}: {esc(exc)}")
                continue
            rec["transcripts"] = ref
            write_json_atomic(path, rec)
            console.print(f"attached {ref['episodes']} of {ref['of']} episode transcript(s) to {esc(path)} "
                          f"({esc(ref['sha256'][:12])})")
        raise typer.Exit(1 if failed else 0)

    @lb_app.command("diff")
    def diff(
        a: str = typer.Argument(..., help="A record: its JSON file, or its record id (or a unique prefix) on the board."),
        b: str = typer.Argument(..., help="The other record, the same way."),
        board: Optional[str] = typer.Option(None, "--board", help=_BOARD_HELP),
    ) -> None:
        """Say field by field why two records are or are not comparable (the protocol fingerprint, env and
        split; docs/protocol.md). Exit 0: comparable (one ranking); 1: not comparable; 2: a record not found."""
        from rich.console import Console

        # lazy: the protocol comparison loads the fingerprint module (~3 ms); `stratagym --help` stays fast
        from stratagym.leaderboard.protocols import compare_records, protocol_for

        console = Console(soft_wrap=True)
        ra, rb = _find_record(a, board), _find_record(b, board)
        for name, rec in (("A", ra), ("B", rb)):
            p = protocol_for(rec)
            console.print(f"{name}: {esc(rec.get('agent', {}).get('label', '?'))} on {esc(rec.get('env', {}).get('id', '?'))} "
                          f"/ {esc(rec.get('split', '?'))}: protocol {esc(p['fingerprint'][:19])} ({esc(p['source'])})")
        reasons = compare_records(ra, rb)
        if not reasons:
            console.print("comparable: the same env, split and protocol; the board ranks them together")
            raise typer.Exit(0)
        console.print(f"not comparable ({len(reasons)} difference{'s' if len(reasons) > 1 else ''}, A vs B):")
        for r in reasons:
            console.print(f"  {esc(r)}")
        raise typer.Exit(1)

    @lb_app.command("compare")
    def compare_cmd(
        records: list[str] = typer.Argument(..., help="The new arm's records (one per training seed): JSON files or record ids on the board."),
        base: list[str] = typer.Option(..., "--base", "-b", help="The baseline record: once for all records, or once per record in their order."),
        metric: list[str] = typer.Option(list(COMPARE_METRICS), "--metric", "-m", help="Per-episode outcome to pair (repeat; default score and won; em for SearchQA)."),
        across_protocols: bool = typer.Option(False, "--across-protocols", help="Pair records evaluated under different protocols (dtype, kwargs) and print the differences."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the comparison as JSON here."),
        changes: bool = typer.Option(False, "--changes", help="Then list each episode whose outcome on the first metric "
                                     "moved, with the actions both records took (their progress files, else the "
                                     "committed transcript archives)."),
        archives: Path = typer.Option(Path("leaderboard") / "transcripts", "--archives",
                                      help="Folder of committed transcript archives (for --changes)."),
        board: Optional[str] = typer.Option(None, "--board", help=_BOARD_HELP),
    ) -> None:
        """Paired difference of each record from its baseline on the same tasks (unit: the task), and with
        several records (one per seed) the reading over training runs (unit: the run) beside it."""
        from rich.console import Console

        # lazy: the statistics load scipy (~0.2 s); `stratagym --help` stays fast
        from stratagym.leaderboard.compare import compare_metric, pair_baselines, protocol_differences, report_lines

        console = Console(soft_wrap=True)
        pairs = pair_baselines([_find_record(b, board) for b in base], [_find_record(r, board) for r in records])
        differences = protocol_differences(pairs, across_protocols=across_protocols)
        results = [compare_metric(pairs, m) for m in dict.fromkeys(metric)]
        for line in differences:
            console.print(f"protocol difference: {esc(line)}")
        for res in results:
            for line in report_lines(res):
                console.print(line, markup=False, highlight=False)
        if changes:
            _print_changes(console, pair_baselines(base, records), pairs, metric[0], archives)
        if json_out is not None:
            write_json_atomic(json_out, {"protocol_differences": differences, "metrics": [r.to_dict() for r in results]})
            console.print(f"wrote {esc(json_out)}")


def _print_changes(console: object, refs: list[tuple[str, str]], pairs: list, metric: str, archives: Path) -> None:
    """``compare --changes``: each pair's moved episodes with both action sequences. A record given as a file
    reads its eval's progress file when it is there, else (like a record id) the archive it names."""
    from stratagym.eval.harness import progress_path  # lazy: the harness loads torch, only for --changes
    from stratagym.eval.transcript_archive import ArchiveError, record_transcripts
    from stratagym.leaderboard.compare import change_lines

    def transcripts(ref: str, record: dict) -> dict:
        progress = progress_path(ref) if Path(ref).is_file() else None  # else a record id on the board
        try:
            return record_transcripts(record, progress, archives)[0]
        except ArchiveError as exc:
            console.print(f"no transcripts for {esc(ref)}: {esc(exc)}")
            return {}

    for (base_ref, new_ref), (base, new) in zip(refs, pairs):
        lines = change_lines(base, new, metric, transcripts(base_ref, base), transcripts(new_ref, new))
        for line in lines:
            console.print(line, markup=False, highlight=False)


def _same_evaluation(record: dict, rerun: dict) -> bool:
    """``rerun`` evaluated ``record``'s agent (by content hash) on its env, split and data, and every
    episode's outcome agrees on every field ``record`` holds (newer code may add fields, e.g. ``prompt_cuts``)."""
    if rerun.get("record_id") == record.get("record_id"):
        return True
    same = all((record.get(k) or {}).get(f) == (rerun.get(k) or {}).get(f)
               for k, f in (("agent", "content_hash"), ("env", "id"), ("env", "data_hash"))) and record.get("split") == rerun.get("split")
    theirs, mine = episodes_by_key(rerun), episodes_by_key(record)
    return same and len(theirs) == len(mine) and all(same_outcome(e, theirs.get(k)) for k, e in mine.items())


def _record_files(records: Path) -> list[Path]:
    """The record files of a records folder, in name order."""
    return sorted(records.glob("*.json")) if records.is_dir() else []


def _store_from_records(records: Path, db: Path, console: object) -> tuple[object, int]:
    """A fresh store at ``db`` holding every record of the folder ``records``, and how many were refused
    (each printed with its reason); a folder without records is a user error."""
    from stratagym.leaderboard.store import Leaderboard, SubmissionError  # lazy: SQLAlchemy and pydantic

    files = _record_files(records)
    if not files:
        raise UserError(f"no record files (*.json) in {records}; give --records FOLDER")
    lb = Leaderboard(db)
    refused = 0
    for path in files:
        try:
            lb.submit(load_record(path))
        except (RecordError, SubmissionError) as exc:
            refused += 1
            console.print(f"[red]not on the board[/red] {esc(path)}: {esc(exc)}")  # type: ignore[attr-defined]
    return lb, refused


def _find_record(ref: str, board: Optional[str]) -> dict:
    """A record from a JSON file path, else by record id (or unique prefix) on the board; a clear
    one-line error (exit 2) when neither finds one."""
    from pathlib import Path as _Path

    if _Path(ref).suffix == ".json" or _Path(ref).is_file():
        return load_record(ref)
    from stratagym.leaderboard.store import Leaderboard  # lazy: SQLAlchemy and pydantic, only for a record id

    found = [r for r in Leaderboard(board).records() if str(r.get("record_id", "")).startswith(ref)] if ref else []
    if len(found) != 1:
        raise UserError(f"{'no' if not found else 'more than one'} record on the board matches {ref!r}; give a record "
                        "JSON file or a longer record id (`stratagym leaderboard show` lists them)")
    found[0].pop("_board_id", None)
    return found[0]


def _missing(value: object) -> bool:
    """None or a pandas missing value (NaN), which is how an absent algorithm or spread comes back."""
    return value is None or (isinstance(value, float) and value != value)


def _or_dash(value: object) -> str:
    return "-" if _missing(value) or value == "" else str(value)
