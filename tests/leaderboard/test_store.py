"""The store: validation with clear rejections, ranking with CIs, pandas views, CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stratagym.errors import UserError
from stratagym.eval.records import finalize_record
from stratagym.leaderboard.store import Leaderboard, SubmissionError
from lb_helpers import ENV, make_record


@pytest.fixture
def lb(tmp_path):
    board = Leaderboard(tmp_path / "board.db")
    yield board
    board.close()


def _resign(rec):
    rec = copy.deepcopy(rec)
    rec.pop("record_id")
    return finalize_record(rec)


def test_submit_rank_and_dataframe(lb):
    ids = [lb.submit(make_record(name, rate, algorithm=alg)) for name, rate, alg in
           [("mid", 0.5, "grpo"), ("best", 0.9, "stratified"), ("worst", 0.1, None), ("mid2", 0.5, "rloo")]]
    assert len(ids) == len(set(ids)) == 4 and len(lb) == 4
    r = lb.ranking(ENV, "default")
    assert list(r["agent"]) == ["best", "mid", "mid2", "worst"]
    assert list(r["rank"]) == [1, 2, 2, 4]  # ties share a rank
    assert r.loc[0, "value"] == pytest.approx(0.9) and r.loc[0, "ci_low"] < 0.9 < r.loc[0, "ci_high"]
    assert r.loc[0, "n"] == 10 and r.loc[0, "algorithm"] == "stratified"
    # lower-is-better metric ranks ascending
    t = lb.ranking(ENV, "default", "turns")
    assert list(t["value"]) == sorted(t["value"])
    wide = lb.dataframe()
    assert {"success", "success_ci_low", "success_ci_high", "success_seed_std", "turns"} <= set(wide.columns)
    assert sorted(wide["agent"]) == ["best", "mid", "mid2", "worst"]
    long = lb.dataframe(wide=False)
    assert set(long["metric"]) >= {"success", "score", "turns", "search_count", "valid_ratio"}
    assert lb.boards() == [(ENV, "default")]
    assert len(lb.records(ENV, "default")) == 4


def test_rejections_say_why(lb):
    good = make_record("a", 0.5)
    lb.submit(good)
    with pytest.raises(SubmissionError, match="duplicate: this exact record is already on the board"):
        lb.submit(copy.deepcopy(good))
    bad = copy.deepcopy(good)
    bad["metrics"]["success"]["value"] = float("inf")
    with pytest.raises(SubmissionError, match="metrics.success.value: must be a finite number"):
        lb.submit(_resign(bad))
    bad = copy.deepcopy(good)
    del bad["agent"]
    with pytest.raises(SubmissionError, match="agent: missing"):
        lb.submit(bad)
    bad = copy.deepcopy(good)
    bad["schema"] = "stratagym.result/99"
    with pytest.raises(SubmissionError, match="unsupported schema"):
        lb.submit(bad)
    with pytest.raises(SubmissionError, match="unknown env 'someone/Else-v3'"):
        lb.submit(make_record("b", 0.5, env="someone/Else-v3"))
    with pytest.raises(SubmissionError, match="unknown split 'sometime'"):
        lb.submit(make_record("c", 0.5, split="sometime"))
    edited = copy.deepcopy(good)
    edited["metrics"]["success"]["value"] = 0.6
    with pytest.raises(SubmissionError, match="record_id does not match"):
        lb.submit(edited)
    bad = copy.deepcopy(good)
    bad["metrics"]["success"]["value"] = 0.99  # outside its CI
    with pytest.raises(SubmissionError, match="outside its CI"):
        lb.submit(_resign(bad))
    assert len(lb) == 1
    # nothing half-written: a refused record leaves no metric rows
    assert len(lb.dataframe(wide=False)) == len(good["metrics"])


def test_splits_and_extra_splits(tmp_path):
    lb = Leaderboard(tmp_path / "b.db", extra_splits={ENV: ["holdout"]})
    lb.submit(make_record("x", 0.5, split="holdout"))
    lb.submit(make_record("x", 0.5, split="test"))
    assert lb.boards() == [(ENV, "holdout"), (ENV, "test")]


def test_leaderboard_cli_submit_show_render(tmp_path):
    from typer.testing import CliRunner

    from stratagym.cli import _load_plugins, app

    _load_plugins()
    files = []
    for name, rate in [("alpha", 0.3), ("beta", 0.8)]:
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(make_record(name, rate)))
        files.append(str(p))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    board = str(tmp_path / "cli.db")
    runner = CliRunner(env={"COLUMNS": "250"})
    res = runner.invoke(app, ["leaderboard", "submit", *files, str(bad), "--board", board])
    assert res.exit_code == 1 and res.output.count("accepted") == 2 and "not valid JSON" in res.output
    res = runner.invoke(app, ["leaderboard", "submit", files[0], "--board", board])
    assert res.exit_code == 1 and "duplicate" in res.output
    res = runner.invoke(app, ["leaderboard", "show", "--board", board])
    assert res.exit_code == 0 and res.output.index("beta") < res.output.index("alpha")
    out = tmp_path / "site"
    res = runner.invoke(app, ["leaderboard", "render", "--board", board, "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "LEADERBOARD.md").read_text()
    assert md.index("| 1 | beta") < md.index("| 2 | alpha")
    assert (out / "index.html").exists() and list((out / "plots").glob("*.png"))
    # an empty store (a clone's default board.db) never blanks a folder of committed records' board
    (out / "records").mkdir()
    (out / "records" / "alpha.json").write_text(Path(files[0]).read_text())
    before = (out / "LEADERBOARD.md").read_text()
    res = runner.invoke(app, ["leaderboard", "render", "--board", str(tmp_path / "empty.db"), "--out-dir", str(out)])
    # a UserError: the console script prints it as `error: ...` with exit code 2 (stratagym.cli.main)
    assert isinstance(res.exception, UserError) and "stratagym leaderboard rebuild" in str(res.exception), res.output
    assert (out / "LEADERBOARD.md").read_text() == before
