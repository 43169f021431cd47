"""The board against hostile submissions (issue 15, items 4 to 7 and 12): bad fields are rejected with a
message and the other files still go in; stored text is shown literally by every printer (rich
markup, Markdown, matplotlib maths); piped output stays readable.

Why the earlier tests missed these: they built every record with ``make_record`` (well-typed by
construction), so only the hand-written checks' own cases were tried; the one hostile label in the
render test (``<b>rookie</b>``) was asserted to appear *verbatim* in ``LEADERBOARD.md`` (the test pinned
the bug); no test printed stored text through rich or drew a label with ``$`` in it; and the CLI tests
set ``COLUMNS=250``, so the 80-column fallback of piped output never showed.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from typer.testing import CliRunner

from stratagym.eval.records import finalize_record
from stratagym.leaderboard.render import render_board
from stratagym.leaderboard.store import Leaderboard, SubmissionError, metrics_table, results
from lb_helpers import ENV, make_record


def _app():
    from stratagym.cli import _load_plugins, app

    _load_plugins()
    return app


def _resign(rec: dict) -> dict:
    rec = copy.deepcopy(rec)
    rec.pop("record_id", None)
    return finalize_record(rec)


def _with(path: str, value):
    """A fresh valid record with the field at dotted ``path`` set to ``value`` (record_id recomputed)."""

    def build() -> dict:
        rec = make_record("victim", 0.5)
        obj = rec
        *parents, last = path.split(".")
        for p in parents:
            obj = obj[p]
        obj[last] = value
        return _resign(rec)

    return build


#: (case id, record builder, text the rejection must contain)
HOSTILE = [
    ("dict-as-label", _with("agent.label", {"a": 1}), "agent.label"),
    ("list-as-metrics", _with("metrics", [1, 2]), "metrics"),
    ("list-as-env", _with("env", ["stratagym/SearchStrata-v0"]), "env"),
    ("surrogate-label", _with("agent.label", "x\ud800"), "agent.label"),
    ("surrogate-in-episode", lambda: _resign({**make_record("v", 0.5), "extra": {"note": "\udcff"}}), "extra.note"),
    ("n_tasks-2^63", _with("n_tasks", 2**63), "n_tasks"),
    ("n_tasks-2^31", _with("n_tasks", 2**31), "n_tasks"),
    ("metric-n-2^63", _with("metrics.success.n", 2**63), "metrics.success.n"),
    ("seed-2^64", _with("seeds", [2**64]), "seeds[0]"),
    ("label-301-chars", _with("agent.label", "x" * 301), "agent.label"),
    ("label-NUL", _with("agent.label", "a\x00b"), "agent.label"),
    ("algorithm-list", _with("agent.algorithm", ["grpo"]), "agent.algorithm"),
    ("across-seeds-list", _with("across_seeds", [1]), "across_seeds"),
    ("training-list", _with("training", []), "training"),
    ("curve-text", _with("training", {"curve": [{"step": "one", "reward": 1}]}), "training.curve"),
    ("nan-anywhere", _with("config", {"lr": float("nan")}), "config.lr"),
]


@pytest.mark.parametrize("case,build,where", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_bad_fields_are_rejected_with_their_place(tmp_path, case, build, where):
    lb = Leaderboard(tmp_path / "b.db")
    with pytest.raises(SubmissionError) as info:
        lb.submit(build())
    assert where in str(info.value), str(info.value)
    assert len(lb) == 0
    lb.close()


def test_schema_bounds_are_the_store_columns():
    """Every VARCHAR column's size is the schema's bound for the field that fills it (no drift)."""
    from stratagym.leaderboard.schema import COLUMN_LENGTHS, ResultRecord

    lengths = {c.name: c.type.length for c in results.columns if getattr(c.type, "length", None)}
    lengths["metric_name"] = metrics_table.c.name.type.length
    assert lengths == COLUMN_LENGTHS
    schema = ResultRecord.model_json_schema()
    agent = schema["$defs"]["AgentInfo"]["properties"]
    assert agent["label"]["maxLength"] == lengths["agent_label"] == 300
    assert agent["kind"]["maxLength"] == lengths["agent_kind"]
    assert schema["properties"]["split"]["maxLength"] == lengths["split"]


def test_cli_submit_reports_each_bad_file_and_carries_on(tmp_path):
    """One crash used to stop the CLI from submitting the remaining files."""
    files = []
    for case, build, _ in HOSTILE:
        p = tmp_path / f"{case}.json"
        p.write_text(json.dumps(build()), encoding="utf-8")  # json escapes surrogates as \\udXXX
        files.append(p)
    undecodable = tmp_path / "latin1.json"
    undecodable.write_bytes(b'{"label": "caf\xe9"}')
    files.append(undecodable)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(make_record("survivor", 0.7)))
    files.append(good)
    res = CliRunner().invoke(_app(), ["leaderboard", "submit", *map(str, files), "--board", str(tmp_path / "b.db")])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 1
    rejected = [ln for ln in res.output.splitlines() if ln.startswith("rejected ")]
    assert len(rejected) == len(HOSTILE) + 1  # every bad file named, on one line each...
    for (case, _, where), line in zip(HOSTILE, rejected):
        assert f"{case}.json: " in line and where in line, line
    assert "not UTF-8" in res.output
    assert "accepted" in res.output and "good.json" in res.output  # ...and the last one still submitted
    assert f"{len(HOSTILE) + 1} of {len(files)} record(s) rejected" in res.output


def test_postgres_rejects_what_its_columns_cannot_hold(postgres_url):
    """On PostgreSQL an over-long label or a NUL raised from the driver (a traceback); now a rejection.
    A label of exactly the column size is accepted (the bound is the column, not smaller)."""
    lb = Leaderboard(postgres_url)
    for build in (_with("agent.label", "x" * 301), _with("agent.label", "a\x00b"), _with("agent.algorithm", "a" * 101)):
        with pytest.raises(SubmissionError):
            lb.submit(build())
    lb.submit(_with("agent.label", "é" * 300)())
    assert len(lb) == 1 and lb.records()[0]["agent"]["label"] == "é" * 300
    lb.close()


HOSTILE_LABELS = ["[/]x", "[bold red]boom[/]", r"$\foo$", "<script>alert(1)</script>", '<img src=x onerror="alert(2)">',
                  "a|b", "*em* _u_ `code` [link](javascript:alert(3))", "$x$ and $y$"]


@pytest.fixture
def hostile_board(tmp_path):
    lb = Leaderboard(tmp_path / "hostile.db")
    for i, label in enumerate(HOSTILE_LABELS):
        lb.submit(make_record(label, 0.1 + 0.1 * i, algorithm=("[/]alg" if i == 1 else None)))
    lb.close()
    return tmp_path / "hostile.db"


def test_render_survives_maths_and_escapes_markdown(hostile_board, tmp_path):
    """``$\\foo$`` failed the whole render (matplotlib maths in tick labels); Markdown copied tags verbatim."""
    lb = Leaderboard(hostile_board)
    paths = render_board(lb, tmp_path / "site")
    lb.close()
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "<script>" not in md and "<img" not in md and "[link](javascript" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert r"\$\\foo\$" in md  # no maths on code hosts either
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| rank")]
    assert len(rows) == len(HOSTILE_LABELS)
    n_cols = md.splitlines()[[i for i, ln in enumerate(md.splitlines()) if ln.startswith("| rank")][0]].count(" | ")
    assert all(len(re.split(r"(?<!\\) \| ", r)) == n_cols + 1 for r in rows)  # "a|b" did not add a column
    assert paths["plot:" + next(k[5:] for k in paths if k.startswith("plot:"))].read_bytes()[:4] == b"\x89PNG"
    page = paths["html"].read_text(encoding="utf-8")
    assert "<script>alert" not in page and "onerror=\"alert" not in page


def test_show_prints_markup_literally_and_dashes_missing_algorithm(hostile_board):
    """``[/]x`` crashed ``leaderboard show`` (rich markup); a scripted agent's algorithm printed ``nan``."""
    res = CliRunner().invoke(_app(), ["leaderboard", "show", "--board", str(hostile_board)])
    assert res.exit_code == 0, res.output
    for label in HOSTILE_LABELS:
        assert label in res.output
    assert "[/]alg" in res.output
    assert "nan" not in res.output.split()
    line = next(ln for ln in res.output.splitlines() if ln.split()[1:2] == ["$x$"])
    assert line.split()[1:5] == ["$x$", "and", "$y$", "-"]  # algorithm column: "-"


def test_show_piped_keeps_ids_whole_and_rows_on_one_line(tmp_path):
    """Without a terminal rich fell back to 80 columns and wrapped each cell over several lines."""
    lb = Leaderboard(tmp_path / "b.db")
    long_label = "a-rather-long-agent-label-that-would-not-fit-in-eighty-columns-at-all"
    lb.submit(make_record(long_label, 0.5, algorithm="stratified+hadw"))
    lb.submit(make_record("short", 0.4))
    lb.close()
    res = CliRunner(env={"COLUMNS": "80"}).invoke(_app(), ["leaderboard", "show", "--board", str(tmp_path / "b.db")])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(ln.startswith(ENV) for ln in lines)  # the title: the whole env id
    row = next(ln for ln in lines if long_label in ln)
    assert row.split()[:3] == ["1", long_label, "stratified+hadw"]
    assert "…" not in res.output


def test_submit_rejection_with_markup_prints(tmp_path):
    """Printing a rejected submission whose message holds markup (an unknown split ``[/]``) crashed."""
    rec = make_record("x", 0.5, split="[/]")
    p = tmp_path / "r.json"
    p.write_text(json.dumps(rec))
    res = CliRunner().invoke(_app(), ["leaderboard", "submit", str(p), "--board", str(tmp_path / "b.db")])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.exception
    assert "unknown split '[/]'" in res.output


def test_a_value_the_database_refuses_is_a_rejection_not_a_crash(postgres_url):
    """Defence in depth: with validation off, PostgreSQL's own refusal (a NUL) becomes a SubmissionError."""
    lb = Leaderboard(postgres_url, validate=False)
    with pytest.raises(SubmissionError, match="the database refused the record"):
        lb.submit(_with("agent.label", "a\x00b")())
    lb.submit(make_record("fine", 0.5))
    assert len(lb) == 1
    lb.close()


def test_render_of_a_board_stored_before_validation_survives_bad_curves(tmp_path):
    """Records stored by an older stratagym (no schema check) can hold a curve of text or NaN: the
    training plot skips those points instead of failing the whole render."""
    lb = Leaderboard(tmp_path / "old.db", validate=False)
    bad = make_record("old", 0.5, algorithm="grpo", training={"algorithm": "grpo", "curve": [
        {"step": "one", "reward": 1}, {"step": 2, "reward": None}, [3, "1e999"], {"step": 4, "reward": 0.5}, "x"]})
    lb.submit(bad)
    paths = render_board(lb, tmp_path / "site")
    assert "plot:_training" in paths and paths["plot:_training"].read_bytes()[:4] == b"\x89PNG"
    lb.close()
