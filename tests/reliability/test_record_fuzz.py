"""Hypothesis fuzz of record submission (issue 15 items 5-7): a valid record with one field replaced by
anything JSON can carry (wrong types, NaN, 1e400, huge integers, lone surrogates, NUL, markup, HTML,
very long text) is either stored or refused with :class:`SubmissionError`; never a crash. Whatever is
stored can be ranked, rendered (Markdown and HTML, escaped) and shown by ``leaderboard show``.

Records go through a JSON file and :func:`load_record`, as ``stratagym leaderboard submit`` reads them.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from lb_helpers import make_record
from stratagym.eval.records import finalize_record, load_record
from stratagym.leaderboard.render import board_tables, render_html, render_markdown
from stratagym.leaderboard.store import Leaderboard, SubmissionError

BASE = make_record("fuzz", 0.5, algorithm="grpo", seeds=(0, 1),
                   training={"algorithm": "grpo", "curve": [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}]})

_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["\ud800", "x\udfff", "a\x00b", "[/]x", "[bold]b[/]", "$\\foo$", "<script>alert(1)</script>",
                     "<img src=x onerror=alert(2)>", "a|b\nc", "x" * 400, "", " "]),
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
              st.sampled_from([2**31, 2**63, -(2**63) - 1, 0, -1]), st.floats(allow_nan=True, allow_infinity=True), _text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=8,
)


def _paths(obj, prefix=()):
    """Every path into the record (dict keys and list indexes), leaves and containers."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from _paths(v, prefix + (i,))


PATHS = [p for p in _paths(BASE) if p and p[0] not in ("record_id",)]


@st.composite
def hostile_records(draw):
    rec = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        obj = rec
        try:
            for p in path[:-1]:
                obj = obj[p]
        except (KeyError, IndexError, TypeError):  # an earlier replacement removed this path
            continue
        # A path into a container an earlier replacement changed (a list index into what is now a dict)
        # would make a record no JSON file can hold (an int key beside str keys); skip it.
        if isinstance(obj, dict) and isinstance(path[-1], str) or isinstance(obj, list) and isinstance(path[-1], int) and path[-1] < len(obj):
            obj[path[-1]] = draw(_json)
    if draw(st.booleans()):  # re-signed: the id matches, so only the content can be refused
        rec.pop("record_id", None)
        rec = finalize_record(rec)
    return rec


def _roundtrip(tmp_path, rec) -> dict:
    p = tmp_path / "r.json"
    p.write_text(json.dumps(rec, allow_nan=True), encoding="utf-8")  # what a hand-edited file may hold
    return load_record(p)


def _check_board(lb: Leaderboard) -> None:
    tables = board_tables(lb)
    md, page = render_markdown(tables), render_html(tables)
    md.encode("utf-8"), page.encode("utf-8")
    for bad in ("<script>alert", "<img src=x"):  # the page's own sorting <script> is fine
        assert bad not in page and bad not in md


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rec=hostile_records())
def test_fuzz_submission_sqlite(tmp_path_factory, rec):
    tmp = tmp_path_factory.mktemp("fz")
    lb = Leaderboard(tmp / "b.db")
    try:
        try:
            lb.submit(_roundtrip(tmp, rec))
        except SubmissionError as exc:
            str(exc).encode("utf-8")  # the message itself is printable
        _check_board(lb)
    finally:
        lb.close()


def test_fuzzed_boards_show_through_the_cli(tmp_path):
    """A board holding the accepted hostile records prints with ``leaderboard show`` (piped)."""
    from stratagym.cli import _load_plugins, app

    lb = Leaderboard(tmp_path / "b.db")
    for i, label in enumerate(["[/]x", "$\\foo$", "<script>x</script>", "a|b", "é" * 300]):
        lb.submit(make_record(label, 0.1 * (i + 1)))
    lb.close()
    _load_plugins()
    res = CliRunner().invoke(app, ["leaderboard", "show", "--board", str(tmp_path / "b.db")])
    assert res.exit_code == 0, res.output
    assert "[/]x" in res.output and "é" * 300 in res.output


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rec=hostile_records())
def test_fuzz_submission_postgres(postgres_url, tmp_path_factory, rec):
    """PostgreSQL is stricter than SQLite (VARCHAR sizes, 32-bit INTEGER, no NUL): the same property."""
    tmp = tmp_path_factory.mktemp("fzpg")
    lb = Leaderboard(postgres_url)
    try:
        try:
            lb.submit(_roundtrip(tmp, rec))
        except SubmissionError:
            pass
        _check_board(lb)
    finally:
        lb.close()
