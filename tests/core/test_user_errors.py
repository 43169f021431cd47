"""Every user error of every layer is a :class:`stratagym.errors.UserError`, so the CLI prints it as one
line (exit 2) without a table of names to keep in step (issue 29 item 5); a new one joins by subclassing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stratagym.bench.runner import BenchError
from stratagym.cli import user_error_message
from stratagym.errors import ConfigError, UserError
from stratagym.eval.agents import AgentSpecError
from stratagym.eval.harness import EvalError
from stratagym.eval.records import RecordError
from stratagym.eval.suite import SuiteError
from stratagym.leaderboard.validate import SubmissionError


@pytest.mark.parametrize("cls, base", [(ConfigError, ValueError), (RecordError, ValueError), (AgentSpecError, ValueError),
                                       (EvalError, RuntimeError), (SuiteError, ValueError), (SubmissionError, ValueError),
                                       (BenchError, RuntimeError)])
def test_each_is_a_user_error_and_keeps_its_builtin_base(cls, base):
    assert issubclass(cls, UserError) and issubclass(cls, base)
    assert user_error_message(cls("the fix is X")).endswith("the fix is X")  # SubmissionError prefixes "submission rejected: "


def test_a_bug_is_not_a_user_error():
    assert user_error_message(KeyError("x")) is None and user_error_message(ValueError("x")) is None


def test_a_new_user_error_needs_no_registration():
    code = (
        "import sys, typer\n"
        "from stratagym.errors import UserError\n"
        "from stratagym import cli\n"
        "class PluginError(UserError): pass\n"
        "@cli.app.command('boom')\n"
        "def boom():\n"
        "    raise PluginError('plugin says: pass --fix')\n"
        "cli.main(['boom'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("error: plugin says: pass --fix") and "Traceback" not in done.stderr
