"""Output read through a pipe or a log (issue 15 items 5 and 12): without a terminal rich assumed 80
columns, cut env ids to ``strat…`` and wrapped each cell over several lines; user text went through
rich markup. Now tables print plain, one line per row, every id whole, text literal.

Why the earlier tests missed it: they gave rich a wide console (``width=200``, ``COLUMNS=250``), which
no pipe has, and used labels without brackets.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import stratagym
from stratagym.cli import main
from stratagym.demo import run_scripted_demo
from stratagym.display import plain_table, print_table


def test_plain_table_aligns_wide_characters_and_folds_newlines():
    text = plain_table("t", ["a", "bb"], [["日本", "x\ny"], ["[/]", None]])
    lines = text.splitlines()
    assert lines[0] == "t"
    assert lines[1] == "a     bb" and lines[2] == "----  ---"
    assert lines[3] == "日本  x y" and lines[4] == "[/]   -"


def test_print_table_on_a_pipe_is_plain_and_on_a_terminal_is_rich():
    rows = [["stratagym/DifficultyShared-v0", "[bold]x[/]", "0.5"]]
    pipe = io.StringIO()
    print_table(Console(file=pipe, width=80), "title", ["env", "agent", "v"], rows)
    assert "stratagym/DifficultyShared-v0  [bold]x[/]  0.5" in pipe.getvalue()
    tty = io.StringIO()
    print_table(Console(file=tty, width=200, force_terminal=True), "title", ["env", "agent", "v"], rows)
    assert "[bold]x[/]" in tty.getvalue() and "┃" in tty.getvalue()  # literal text inside a rich table


def test_demo_table_keeps_env_ids_whole_when_piped(monkeypatch):
    specs = [s for s in stratagym.list_envs() if s.id in ("stratagym/DifficultyMix-v0", "stratagym/DifficultyShared-v0")]
    monkeypatch.setattr(stratagym, "list_envs", lambda **_: specs)
    out = io.StringIO()
    run_scripted_demo(episodes=2, console=Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert "…" not in out.getvalue()
    for env_id in ("stratagym/DifficultyMix-v0", "stratagym/DifficultyShared-v0"):
        assert [ln.split()[:2] for ln in lines if ln.startswith(env_id)] == [[env_id, "oracle"], [env_id, "random"]]


def test_eval_summary_prints_a_markup_label_literally_on_one_line(capsys, tmp_path):
    """The eval summary crashed on a label holding ``[/]`` (after the record was written, before
    --submit) and, piped, wrapped each cell over several lines."""
    with pytest.raises(SystemExit) as info:
        main(["eval", "scripted:oracle", "--env", "stratagym/DifficultyShared-v0", "-n", "2", "-q",
              "--label", "[/]my agent", "--out", str(tmp_path / "r.json")])
    out = capsys.readouterr()
    assert info.value.code in (0, None), out.err
    row = next(ln for ln in out.out.splitlines() if ln.startswith("[/]my agent"))
    assert row.split()[2:5] == ["DifficultyShared-v0", "default", "2"]


def test_eval_submit_tries_every_record_after_a_refusal(capsys, tmp_path):
    """``eval --suite ... --submit`` stopped at the first refused record; the others now still go in."""
    from stratagym.leaderboard.store import Leaderboard

    suite = tmp_path / "s.yaml"
    suite.write_text("evals:\n  - {env: stratagym/DifficultyMix-v0, n: 2}\n  - {env: stratagym/DifficultyShared-v0, n: 2}\n")
    board = tmp_path / "b.db"
    args = ["eval", "scripted:oracle", "--suite", str(suite), "-q", "--submit", "--board", str(board), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit):
        main(args)
    capsys.readouterr()
    lb = Leaderboard(board)
    lb.delete(lb.records()[-1]["_board_id"])  # the first record is now a duplicate, the second new again
    lb.close()
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    assert info.value.code == 1
    lines = out.err.splitlines()
    assert sum(ln.startswith("rejected:") for ln in lines) == 1 and sum(ln.startswith("submitted") for ln in lines) == 1
