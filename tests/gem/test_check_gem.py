"""``stratagym envs check-gem GEM_ID`` (issue 30 items 4 and 5): the contract, fuzz and determinism checks
and the soak that ``check-openenv`` runs, on a GEM env in-process through ``stratagym/GEM-v0``. GEM's Guess
The Number passes with this process's resources flat; a GEM env that leaks an open file per episode is
named; bad input (an unknown GEM id, GEM not installed) exits 2 with one line naming the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stratagym import cli

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

LEAKY = textwrap.dedent('''
    import gem
    from stratagym.cli import main

    OPEN = []

    class Leaky(gem.Env):
        """Opens a file on every reset and never closes it (the bug the soak exists to find)."""
        def __init__(self, **_):
            super().__init__()

        def reset(self, seed=None):
            OPEN.append(open(__file__))
            return "episode", {}

        def step(self, action):
            return "over", 1.0, True, False, {}

    gem.register("leaky:Leaky-v0", Leaky)
    main(["envs", "check-gem", "leaky:Leaky-v0", "--soak", "600", "--sessions", "3"])
''')


def _run(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    argv = ["-c", code] if code is not None else ["-m", "stratagym.cli", *args]
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def test_gems_guess_the_number_passes_the_checks_and_the_soak():
    out = _run("envs", "check-gem", "game:GuessTheNumber-v0-easy", "--soak", "400", "--sessions", "3")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in ("contract", "fuzz", "determinism"):
        assert f"ok   {name}" in out.stdout
    assert "soak: 400 resets" in out.stdout and "0 failed episodes" in out.stdout and "open_files" in out.stdout
    assert "LEAK" not in out.stdout


def test_a_gem_env_leaking_a_file_per_episode_is_named(tmp_path):
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY)
    out = _run(code=script.read_text().replace("open(__file__)", f"open({str(script)!r})"))
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "LEAK open_files grew" in out.stdout and "LEAK rss_mib" not in out.stdout


def test_an_unknown_gem_id_exits_2_naming_the_fix(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["envs", "check-gem", "game:NoSuchGame-v0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "unknown GEM env id 'game:NoSuchGame-v0'" in err and "gem.print_envs()" in err


def test_gem_not_installed_exits_2_naming_the_extra():
    # `import gem` fails as it does where gem-llm is not installed (None in sys.modules stops the import)
    code = ("import sys; sys.modules['gem'] = None\n"
            "from stratagym.cli import main\n"
            "main(['envs', 'check-gem', 'game:GuessTheNumber-v0-easy'])")
    out = _run(code=code)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stderr.strip() == ("error: GEM is not installed (gem): pip install 'stratagym[gem]' "
                                  "(GEM, package gem-llm==0.1.0)")
    listing = _run(code="import sys; sys.modules['gem'] = None\nfrom stratagym.cli import main\n"
                        "main(['envs', 'list'])")
    (row,) = [line for line in listing.stdout.splitlines() if line.startswith("stratagym/GEM-v0")]
    assert row.endswith("needs extra: gem (pip install 'stratagym[gem]')")
