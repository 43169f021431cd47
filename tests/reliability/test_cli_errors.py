"""User errors through the real ``stratagym`` entry point (issue 15 item 10): exit code 2 and one
message that names the problem and the fix, never a traceback.

Why the earlier tests missed these: CLI tests invoked the typer app through ``CliRunner``, which
swallows exceptions into ``result.exception``, and asserted on good input; no test fed a data file
that is not UTF-8, a ``golden_answers`` that is not a list or a ``.json`` list of numbers, and the
eval CLI caught only its own error types, so a ``ConfigError`` from an env escaped as a traceback.
Every case here goes through :func:`stratagym.cli.main`, the console script's function.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stratagym.cli import main

QA = "stratagym/SearchQA-v0"
TINY_RECIPE = str(Path(__file__).resolve().parents[2] / "recipes" / "cpu" / "hgpo-tiny-cuecorridor.yaml")


def run_cli(capsys, *args: str) -> tuple[int, str]:
    """Run ``stratagym ARGS`` in-process; return (exit code, stderr + stdout)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out = capsys.readouterr()
    code = info.value.code if isinstance(info.value.code, int) else (0 if info.value.code is None else 1)
    return code, out.err + out.out


def assert_user_error(code: int, text: str, *fragments: str) -> None:
    assert code == 2, text
    assert "Traceback" not in text and "╭─" not in text, text  # no plain or rich traceback
    for f in fragments:
        assert f in text, (f, text)


@pytest.fixture
def data(tmp_path):
    (tmp_path / "latin1.jsonl").write_bytes(b'{"question": "caf\xe9?", "golden_answers": ["x"]}\n')
    (tmp_path / "gold5.jsonl").write_text('{"question": "q?", "golden_answers": 5}\n')
    (tmp_path / "numbers.json").write_text("[1, 2, 3]")
    (tmp_path / "a_file").write_text("not a folder")
    return tmp_path


def _eval(data: Path, *extra: str) -> list[str]:
    return ["eval", "scripted:oracle", "--env", QA, "-n", "1", "-q", "--out", str(data / "rec.json"), *extra]


def test_invalid_utf8_in_a_jsonl_data_file(capsys, data):
    code, text = run_cli(capsys, *_eval(data, "-E", f"dataset={data / 'latin1.jsonl'}"))
    assert_user_error(code, text, "latin1.jsonl is not UTF-8 text", "re-save it as UTF-8")


def test_golden_answers_that_is_not_a_list(capsys, data):
    code, text = run_cli(capsys, *_eval(data, "-E", f"dataset={data / 'gold5.jsonl'}"))
    assert_user_error(code, text, "'golden_answers' must be a list of strings", "got int")


def test_a_json_data_file_holding_numbers(capsys, data):
    code, text = run_cli(capsys, *_eval(data, "-E", f"dataset={data / 'numbers.json'}"))
    assert_user_error(code, text, "numbers.json: item 0 is a int", "expected a JSON list of objects")


@pytest.mark.parametrize("argv", [
    ["envs", "check", "stratagym/SerchQA-v0"],
    ["eval", "scripted:oracle", "--env", "stratagym/SerchQA-v0", "-n", "1", "-q"],
])
def test_unknown_env_id_lists_close_matches(capsys, argv):
    code, text = run_cli(capsys, *argv)
    assert_user_error(code, text, "unknown stratagym env", "did you mean stratagym/SearchQA-v0")


def test_unknown_env_keyword_lists_the_valid_ones(capsys, data):
    code, text = run_cli(capsys, *_eval(data, "-E", "datset=x.jsonl"))
    assert_user_error(code, text, "has no argument 'datset'", "did you mean 'dataset'", "valid ones:", "topk")


def test_train_output_dir_that_is_a_file(capsys, data):
    code, text = run_cli(capsys, "train", "--config", TINY_RECIPE, "--output-dir", str(data / "a_file"))
    assert_user_error(code, text, "train.output_dir", "is a file", "give a folder path")


def test_train_unknown_env_id_and_keyword(capsys, data):
    code, text = run_cli(capsys, "train", "--config", TINY_RECIPE, "--output-dir", str(data / "r1"),
                         "--set", "env.id=stratagym/CueCoridor-v0")
    assert_user_error(code, text, "unknown stratagym env", "did you mean stratagym/CueCorridor-v0")
    code, text = run_cli(capsys, "train", "--config", TINY_RECIPE, "--output-dir", str(data / "r2"),
                         "--set", "env.kwargs={corridr: 3}")
    assert_user_error(code, text, "has no argument 'corridr'", "did you mean 'corridor'", "valid ones:")


def test_eval_output_inside_a_file_and_unusable_board(capsys, data):
    code, text = run_cli(capsys, "eval", "scripted:oracle", "--env", "stratagym/CueCorridor-v0", "-n", "1", "-q",
                         "--out", str(data / "a_file" / "rec.json"))
    assert_user_error(code, text, "a_file")
    code, text = run_cli(capsys, "leaderboard", "show", "--board", f"sqlite:///{data}/no/such/dir/b.db")
    assert_user_error(code, text, "cannot open the leaderboard", "folder exists")
    code, text = run_cli(capsys, "leaderboard", "show", "--board", "nosuchdb://x/y")
    assert_user_error(code, text, "cannot use leaderboard URL")


def test_markup_in_an_error_message_is_printed_literally(capsys, data):
    """The eval CLI printed its errors through rich markup: a message holding ``[/]`` crashed it."""
    code, text = run_cli(capsys, "eval", "scripted:[/]x", "--env", "stratagym/CueCorridor-v0", "-n", "1", "-q",
                         "--out", str(data / "m.json"))
    assert_user_error(code, text, "[/]x")


def test_the_console_script_itself_prints_no_traceback(data):
    """The same boundary holds for the installed entry point in a fresh process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "stratagym.cli", *_eval(data, "-E", f"dataset={data / 'latin1.jsonl'}")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("error: "), r.stderr


@pytest.mark.parametrize("command", [["train", "--config"], ["sft", "--config"], ["bench", "-q", "--suite"], ["study"]])
def test_a_yaml_file_that_is_not_utf8(capsys, data, command):
    (data / "binary.yaml").write_bytes(b"\xff\xfe name: x\n")
    code, text = run_cli(capsys, *command, str(data / "binary.yaml"))
    assert_user_error(code, text, "binary.yaml", "utf-8")


def test_a_suite_whose_evals_is_not_a_list_and_a_bad_max_steps(capsys, data):
    (data / "suite.yaml").write_text("evals: 5\n")
    code, text = run_cli(capsys, "bench", "-q", "--suite", str(data / "suite.yaml"))
    assert_user_error(code, text, "'evals' must be a list")
    code, text = run_cli(capsys, "eval", "scripted:oracle", "--env", "stratagym/CueCorridor-v0", "-n", "1", "-q",
                         "-E", "max_steps=abc", "--out", str(data / "r.json"))
    assert_user_error(code, text, "max_steps must be an integer >= 1, got 'abc'")
