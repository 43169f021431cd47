"""An env family's commands come from its EnvSpec (``cli``), so a new family needs no line in
stratagym/cli.py (issue 29 item 3: the "one place to change" table made true)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stratagym.cli import CLI_PLUGINS, plugin_modules

REPO = Path(__file__).resolve().parents[2]


def test_builtin_families_bring_their_commands_from_their_specs():
    modules = plugin_modules()
    for family in ("search_qa", "alfworld", "webshop"):
        assert f"stratagym.envs.{family}.cli" in modules
        assert f"stratagym.envs.{family}.cli" not in CLI_PLUGINS
    assert len(modules) == len(set(modules))  # WebShop's two specs name one module: loaded once


def test_a_new_family_adds_a_command_through_its_spec():
    code = (
        "from stratagym.envs.registry import EnvSpec, register_env\n"
        "register_env(EnvSpec(id='probe/Cli-v0', entry_point='stratagym.envs.synthetic.cue_corridor:CueCorridorEnv',\n"
        "                     description='probe', cli='tests.core._cli_probe'))\n"
        "from stratagym.cli import main\n"
        "main(['probe-hello'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hello from the probe family" in done.stdout
