"""A pytest plugin: a session fails when tests skip beyond the committed allowance (tests/skip_allowance.txt).

Optional parts (Java, Chromium, PostgreSQL, the C speed-ups, extras such as ray or spacy) are guarded by
skips, so a broken install used to turn into green skips (issue 29). `make test` installs all of them, so
there a skip means something is missing: this plugin collects every skip of the session (of a test or of a
whole module at collection) and, at the end, sets the exit status to 1 and lists the skips when

* a skip's reason matches none of the allowed patterns, or
* more tests skip than ``max_skips``, or
* a test marked ``vllm`` skips (the vLLM session, `make test`'s second, must skip nothing).

Deselected tests (``-m "not vllm"``) are not skips. Where a partial install is known and wanted (a laptop
without the system packages), ``STRATAGYM_ALLOW_SKIPS=1`` turns the check off; `make test` never sets it.
``STRATAGYM_SKIP_ALLOWANCE`` names another allowance file (the plugin's own test uses it).

File format: ``max_skips: N`` on one line; every other non-blank line that is not a comment (``#``) is a
regular expression, searched in the skip's reason.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

DEFAULT_FILE = Path(__file__).resolve().parent / "skip_allowance.txt"


def read_allowance(path: Path) -> tuple[int, list[re.Pattern[str]]]:
    """``(max_skips, reason patterns)`` from an allowance file; a file without ``max_skips`` allows none."""
    max_skips, patterns = 0, []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("max_skips:"):
            max_skips = int(line.split(":", 1)[1])
        else:
            patterns.append(re.compile(line))
    return max_skips, patterns


def _reason(report) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


class SkipAllowance:
    def __init__(self, path: Path):
        self.path = path
        self.skips: list[tuple[str, str]] = []  # (node id, reason)
        self.vllm_skips: list[str] = []
        self.problems: list[str] = []

    def pytest_runtest_logreport(self, report) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((report.nodeid, _reason(report)))
            if "vllm" in report.keywords:
                self.vllm_skips.append(report.nodeid)

    def pytest_collectreport(self, report) -> None:
        if report.skipped:
            self.skips.append((report.nodeid, _reason(report)))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        max_skips, patterns = read_allowance(self.path)
        unexpected = [(node, why) for node, why in self.skips if not any(p.search(why) for p in patterns)]
        self.problems = [f"skip not in the allowance: {node}: {why}" for node, why in unexpected]
        self.problems += [f"a vllm test skipped (the vLLM session allows none): {node}" for node in self.vllm_skips]
        if len(self.skips) > max_skips:
            self.problems.append(f"{len(self.skips)} tests skipped, the allowance is {max_skips}")
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.problems:
            return
        terminalreporter.section("skip allowance", sep="=", red=True, bold=True)
        for line in self.problems:
            terminalreporter.line(line, red=True)
        terminalreporter.line(f"(allowance: {self.path}; every skip of this session: -rs lists them. A skip here "
                              "usually means a missing extra or system package: `make setup` installs them.)")


def pytest_configure(config) -> None:
    if os.environ.get("STRATAGYM_ALLOW_SKIPS") == "1":
        return
    path = Path(os.environ.get("STRATAGYM_SKIP_ALLOWANCE") or DEFAULT_FILE)
    config.pluginmanager.register(SkipAllowance(path), "stratagym-skip-allowance")
