"""The board ranks only like with like (issue 32): one table per protocol fingerprint, the difference
named, `leaderboard diff`, refusals at submit naming the field, legacy records recomputed or marked,
hostile protocol text escaped, and renders that do not depend on submission order."""

from __future__ import annotations

import copy
import json

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import stratagym  # noqa: F401
from stratagym.envs.fingerprint import fingerprint_of, protocol_of
from stratagym.eval.harness import build_record
from stratagym.eval.records import content_hash_text, finalize_record
from stratagym.leaderboard.protocols import compare_records, protocol_for
from stratagym.leaderboard.render import board_tables, render_board, render_html, render_markdown
from stratagym.leaderboard.store import Leaderboard, SubmissionError

from .lb_helpers import make_record

ENV = "stratagym/SearchStrata-v0"


def measured(label: str, rate: float, n: int = 6, **kwargs) -> dict:
    """A schema-2 record of ``ENV`` whose protocol the env family computed for ``kwargs``."""
    env = gym.make(ENV, **kwargs)
    try:
        tasks = list(env.unwrapped.task_ids())[:n]
        protocol = protocol_of(env, ENV, kwargs, tasks, "default")
    finally:
        env.close()
    k = round(rate * n)
    episodes = [{"task_id": t, "seed": 0, "total_reward": float(i < k), "won": i < k, "score": float(i < k), "turns": 2,
                 "search_count": 1, "valid_actions": 2, "truncated": False, "extra": {}, "valid_ratio": 1.0}
                for i, t in enumerate(tasks)]
    agent = {"spec": f"scripted:{label}", "kind": "scripted", "label": label, "content_hash": content_hash_text(label)}
    return build_record(agent=agent, env_id=ENV, data_hash="sha256:x", split="default", seeds=[0], episodes=episodes,
                        env_kwargs=kwargs, protocol=protocol, config={})


def _edit(record: dict, fn) -> dict:
    rec = copy.deepcopy(record)
    fn(rec)
    rec.pop("record_id", None)
    return finalize_record(rec)


def test_different_protocols_are_separate_tables_with_the_difference_named(tmp_path):
    lb = Leaderboard(tmp_path / "b.db")
    for rec in (measured("a", 0.5), measured("b", 1.0), measured("c", 0.9, max_steps=3)):
        lb.submit(rec)
    tables = [t for t in board_tables(lb) if t.env == ENV]
    assert [len(t.rows) for t in tables] == [2, 1] and tables[0].main and not tables[1].main
    assert [r["agent"] for r in tables[0].rows] == ["b", "a"] and tables[1].rows[0]["rank"] == 1
    assert tables[1].differences == ["max_steps 3 vs None"]  # SearchStrata's default: None (its own rule)
    md = render_markdown(tables)
    assert "another protocol" in md and "max\\_steps 3 vs" not in md and "max_steps 3 vs" in md
    assert md.count("| rank |") == 2


def test_show_prints_one_ranking_per_protocol_with_the_difference_named(tmp_path):
    from stratagym.cli import _load_plugins, app

    _load_plugins()
    lb = Leaderboard(tmp_path / "b.db")
    for rec in (measured("a", 0.5), measured("b", 1.0), measured("c", 0.9, max_steps=3)):
        lb.submit(rec)
    lb.close()
    out = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["leaderboard", "show", "--board", str(tmp_path / "b.db")])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    # c (0.9, another turn limit) must not rank between b (1.0) and a (0.5): two tables, each ranked from 1
    first = next(i for i, ln in enumerate(lines) if "ranked by success" in ln and "another protocol" not in ln)
    second = next(i for i, ln in enumerate(lines) if "ranked by success (another protocol)" in ln)
    rows = lambda block: [ln.split()[:2] for ln in block if ln.split()[:1] and ln.split()[0].isdigit()]  # noqa: E731
    assert rows(lines[first:second]) == [["1", "b"], ["2", "a"]]
    assert rows(lines[second:]) == [["1", "c"]]
    assert any("another protocol" in ln and "max_steps 3 vs None" in ln for ln in lines), out.output
    # --metric ranks by another metric within each protocol; a metric no record has is named, not a crash
    turns = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["leaderboard", "show", "--board", str(tmp_path / "b.db"), "-m", "turns"])
    assert turns.exit_code == 0 and turns.output.count("ranked by turns") == 2, turns.output
    none = CliRunner().invoke(app, ["leaderboard", "show", "--board", str(tmp_path / "b.db"), "-m", "nope"])
    assert none.exit_code == 0 and "no result has metric 'nope'" in none.output and "ranked by" not in none.output


def test_diff_command_names_each_field(tmp_path):
    from stratagym.cli import _load_plugins, app

    _load_plugins()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(measured("a", 0.5)))
    b.write_text(json.dumps(measured("b", 0.5, max_steps=3)))
    out = CliRunner().invoke(app, ["leaderboard", "diff", str(a), str(b)])
    assert out.exit_code == 1 and "not comparable" in out.output and "max_steps" in out.output, out.output
    same = CliRunner().invoke(app, ["leaderboard", "diff", str(a), str(a)])
    assert same.exit_code == 0 and "comparable" in same.output
    import subprocess
    import sys

    bad = subprocess.run([sys.executable, "-m", "stratagym.cli", "leaderboard", "diff", str(a), str(tmp_path / "nope.json")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr + bad.stdout and "no result record" in bad.stderr + bad.stdout


@pytest.mark.parametrize("mutate,field", [
    (lambda r: r["protocol"]["fields"].pop("data"), "protocol.fields.data: missing"),
    (lambda r: r["protocol"].pop("fingerprint"), "protocol.fingerprint: missing"),
    (lambda r: r["protocol"]["fields"].update(behaviour_version=99), "protocol.fields.behaviour_version: unknown env version"),
    (lambda r: r["protocol"]["fields"]["task_kwargs"].update(max_steps=99), "protocol.fingerprint: does not match"),
    (lambda r: r["env"]["kwargs"].update(n_tasks=3), "protocol.fields.task_kwargs"),
    (lambda r: r["protocol"]["fields"].update(tasks="sha256:0"), "protocol.fields.tasks"),
    (lambda r: r.pop("protocol"), "missing field 'protocol'"),
])
def test_submit_refuses_a_protocol_that_is_incomplete_unknown_or_not_the_records_own(tmp_path, mutate, field):
    lb = Leaderboard(tmp_path / "b.db")
    rec = _edit(measured("a", 0.5), mutate)
    with pytest.raises(SubmissionError) as exc:
        lb.submit(rec)
    assert field in str(exc.value)


def test_a_fingerprint_edited_to_agree_with_edited_fields_is_still_checked_against_the_config(tmp_path):
    def forge(r):
        r["protocol"]["fields"]["task_kwargs"]["max_steps"] = 99
        r["protocol"]["fingerprint"] = fingerprint_of(r["protocol"]["fields"])
    with pytest.raises(SubmissionError, match="task_kwargs: does not match the record's env.kwargs"):
        Leaderboard(tmp_path / "b.db").submit(_edit(measured("a", 0.5), forge))


def test_same_id_different_content_is_refused_and_the_first_kept(tmp_path):
    lb = Leaderboard(tmp_path / "b.db")
    first = measured("a", 0.5)
    lb.submit(first)
    again = dict(first, created="2030-01-01T00:00:00.000000Z")  # same id: created is not part of it
    with pytest.raises(SubmissionError, match="different content"):
        lb.submit(again)
    assert lb.records()[0]["created"] == first["created"]
    with pytest.raises(SubmissionError, match="exact record is already on the board"):
        lb.submit(first)


def test_legacy_records_are_recomputed_where_their_config_allows_else_marked(tmp_path):
    legacy = make_record("old", 0.5, env=ENV)  # schema 1: no protocol
    p = protocol_for(legacy)
    assert p["source"] == "recomputed" and p["fields"]["behaviour_version"] is None and p["fields"]["task_kwargs"]
    assert protocol_for(dict(legacy, env={**legacy["env"], "id": "other/Unknown-v0"}))["source"] == "legacy"
    assert any("behaviour_version: unknown vs 1" in d for d in compare_records(legacy, measured("a", 0.5, n=10)))
    lb = Leaderboard(tmp_path / "b.db")
    lb.submit(legacy)
    lb.submit(measured("new", 0.5, n=10))
    tables = [t for t in board_tables(lb) if t.env == ENV]
    assert [t.source for t in tables] == ["measured", "recomputed"]


def test_hostile_protocol_text_is_escaped_in_every_view(tmp_path):
    hostile = "<img src=x onerror=alert(1)>|*b*`[l](j:x)"
    lb = Leaderboard(tmp_path / "b.db", known_envs={"evil/Env-v0"})
    for label, value in (("a", "x"), ("b", hostile)):
        rec = make_record(label, 0.5, env="evil/Env-v0")
        fields = {"env_id": "evil/Env-v0", "behaviour_version": 1, "split": "default",
                  "tasks": protocol_for(make_record("t", 0.5, env=ENV))["fields"]["tasks"],
                  "task_kwargs": {"mode": value}, "data": {}, "prompt_template": None, "reward": value, "libraries": {}}
        rec["schema"] = "stratagym.result/2"
        rec["protocol"] = {"fingerprint": fingerprint_of(fields), "source": "measured", "fields": fields}
        rec.pop("record_id")
        lb.submit(finalize_record(rec))
    tables = [t for t in board_tables(lb) if t.env == "evil/Env-v0"]
    assert len(tables) == 2 and any(hostile in d for d in tables[1].differences)
    md, page = render_markdown(tables), render_html(tables)
    assert "<img" not in md and "<img src=x" not in page and "&lt;img" in page
    assert "\\|\\*b\\*" in md  # table pipes and emphasis escaped
    # the site's board and record pages (the protocol's fields, one by one) and the terminal view too
    from stratagym.cli import _load_plugins, app
    from stratagym.leaderboard.site import build_site

    build_site(lb, tmp_path / "site")
    pages = [tmp_path / "site" / "index.html", *sorted((tmp_path / "site" / "records").glob("*.html"))]
    assert len(pages) == 3 and all("<img" not in p.read_text() for p in pages)
    assert sum("mode" in p.read_text() and "&lt;img src=x onerror=alert(1)&gt;" in p.read_text() for p in pages) == 2
    _load_plugins()
    shown = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["leaderboard", "show", "--board", str(tmp_path / "b.db")])
    assert shown.exit_code == 0 and "mode <img src=x onerror=alert(1)>|*b*`[l](j:x) vs x" in shown.output  # literally


def test_the_render_is_byte_identical_twice_and_whatever_the_submission_order(tmp_path):
    recs = [measured("a", 0.5), measured("b", 0.5), measured("c", 0.5), measured("d", 1.0, max_steps=3),
            make_record("old", 0.5, env=ENV, n=6)]
    outs = []
    for i, order in enumerate((recs, recs[::-1], recs)):
        lb = Leaderboard(tmp_path / f"b{i}.db")
        for r in order:
            lb.submit(r)
        paths = render_board(lb, tmp_path / f"out{i}")
        outs.append({k: p.read_bytes() for k, p in paths.items()})
    assert outs[0].keys() == outs[1].keys() and len(outs[0]) > 2
    for k in outs[0]:
        assert outs[0][k] == outs[1][k] == outs[2][k], k
    first = [t for t in board_tables(lb) if t.env == ENV][0]
    assert [r["agent"] for r in first.rows] == ["a", "b", "c"] and {r["rank"] for r in first.rows} == {1}


def test_a_record_measured_before_its_env_gained_a_kwarg_is_still_accepted(tmp_path):
    def older(r):  # the env had no ``n_easy``-like kwarg then: its fingerprint lacks one the signature has now
        fields = r["protocol"]["fields"]
        fields["task_kwargs"].pop(sorted(fields["task_kwargs"])[0])
        r["protocol"]["fingerprint"] = fingerprint_of(fields)
    rec = _edit(measured("a", 0.5), older)
    Leaderboard(tmp_path / "b.db").submit(rec)
