"""Resuming an eval from whatever a kill can leave behind (issue 15 item 3).

Why the earlier tests missed it: ``tests/eval/test_cli_resume.py`` kills the eval only after 8 episodes
are in the progress file, so the window between creating the file and writing its header (an empty
file, or a torn header line) was never hit.
"""

from __future__ import annotations

import json

import pytest

from stratagym.eval.harness import EvalConfig, EvalError, evaluate, progress_path, read_progress

ENV = "stratagym/SearchStrata-v0"


def _cfg() -> EvalConfig:
    return EvalConfig(agent="scripted:oracle", env_id=ENV, n=6, seeds=[0, 1], batch_size=3)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return evaluate(_cfg(), out=tmp_path_factory.mktemp("u") / "rec.json", progress=False)


def _same_result(a: dict, b: dict) -> None:
    assert a["metrics"] == b["metrics"] and a["episodes"] == b["episodes"]


@pytest.mark.parametrize("left_behind", [b"", b'{"identity": {"agent": "scri', b'{"type": "header", "identity_hash": "ab'])
def test_a_progress_file_without_a_complete_line_is_no_progress(tmp_path, uninterrupted, left_behind):
    """An empty file blocked every resume ("not a stratagym progress file") until deleted by hand."""
    out = tmp_path / "rec.json"
    progress_path(out).write_bytes(left_behind)
    record = evaluate(_cfg(), out=out, progress=False)
    _same_result(record, uninterrupted)
    header, episodes = read_progress(progress_path(out))
    assert header is not None and len(episodes) == 12


def test_a_foreign_file_is_still_refused_not_overwritten(tmp_path):
    """A complete line that is not our header is someone's file: refuse, do not clobber it."""
    out = tmp_path / "rec.json"
    progress_path(out).write_text("my notes\n")
    with pytest.raises(EvalError, match="not a stratagym progress file"):
        evaluate(_cfg(), out=out, progress=False)
    assert progress_path(out).read_text() == "my notes\n"


def test_resume_after_a_torn_episode_line_and_junk_bytes(tmp_path, uninterrupted):
    """A kill mid-write leaves a torn last line (possibly bytes that are not UTF-8): cut, then resumed."""
    out = tmp_path / "rec.json"
    evaluate(_cfg(), out=out, progress=False)
    lines = progress_path(out).read_bytes().split(b"\n")
    progress_path(out).write_bytes(b"\n".join(lines[:5]) + b"\n" + b'{"type": "episode", "key": [1, "\xff\xfe')
    out.unlink()
    record = evaluate(_cfg(), out=out, progress=False)
    _same_result(record, uninterrupted)
    rows = [json.loads(x) for x in progress_path(out).read_bytes().splitlines()]
    keys = [tuple(r["key"]) for r in rows if r.get("type") == "episode"]
    assert len(keys) == len(set(keys)) == 12
