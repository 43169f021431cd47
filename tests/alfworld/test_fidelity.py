"""Fidelity to stock ALFWorld (issue 13, items 14-15), read from alfworld/alfworld at commit
ca98194122f6759fdc11960e56f520d6175fd960 (see docs/fidelity.md): which data an evaluation used, and what
the admissible actions hold."""

from __future__ import annotations

import shutil

import gymnasium as gym
import pytest

import stratagym  # noqa: F401  (registers the env)
from stratagym.envs.alfworld import paths
from stratagym.envs.alfworld.games import materialise_bundled, resolve_games
from stratagym.errors import ConfigError
from stratagym.eval.harness import build_record
from stratagym.eval.records import content_hash_text
from stratagym.leaderboard.render import board_tables, render_html, render_markdown
from stratagym.leaderboard.store import Leaderboard

ENV_ID = "stratagym/ALFWorld-v0"


@pytest.fixture
def train_only_alfworld_data(tmp_path, monkeypatch):
    """An ALFWORLD_DATA folder with real-layout train games (one bundled game copied) and no eval splits."""
    src_split = materialise_bundled() / paths.REAL_SPLIT_DIRS["train"]
    game = next(p.parent for p in sorted(src_split.rglob("game.tw-pddl")))
    dst = tmp_path / "alfworld" / "json_2.1.1" / "train" / game.relative_to(src_split)
    shutil.copytree(game, dst)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "alfworld"))
    return tmp_path / "alfworld"


# ---- item 14: data source ------------------------------------------------------------------------------


def test_missing_eval_split_in_real_data_is_refused(train_only_alfworld_data):
    """alfred_tw_env.py L154-195 (``collect_game_files``) reads each split only from the configured data
    folder; it never substitutes other games. stratagym used to fall back to its generated games
    silently; now it refuses, and the generated games must be asked for by name."""
    games = resolve_games("train")
    assert games.source == str(train_only_alfworld_data) and len(games.entries) == 1
    for split in ("in_distribution", "out_of_distribution"):
        with pytest.raises(ConfigError, match="valid_(seen|unseen)/ folder.*data_path='bundled'"):
            resolve_games(split)
    assert resolve_games("in_distribution", "bundled").source == "bundled"


def test_env_reports_its_data_source(train_only_alfworld_data):
    """The env says which data it plays (``env.data_source``), so records can say it too."""
    env = gym.make(ENV_ID, split="train")
    try:
        assert env.unwrapped.data_source == str(train_only_alfworld_data)
    finally:
        env.close()
    env = gym.make(ENV_ID, split="in_distribution", data_path="bundled")
    try:
        assert env.unwrapped.data_source == "bundled"
    finally:
        env.close()


def _record(label: str, data_source: str | None) -> dict:
    episodes = [{"task_id": f"t{i}", "seed": 0, "total_reward": float(i % 2), "won": bool(i % 2), "score": float(i % 2),
                 "turns": 3, "search_count": 0, "valid_actions": 3, "truncated": False, "extra": {}, "valid_ratio": 1.0}
                for i in range(6)]
    agent = {"spec": f"scripted:{label}", "kind": "scripted", "label": label, "content_hash": content_hash_text(label)}
    return build_record(agent=agent, env_id=ENV_ID, data_hash=content_hash_text(label), split="in_distribution",
                        seeds=[0], episodes=episodes, data_source=data_source)


def test_records_and_leaderboard_show_the_data_source(tmp_path):
    """Every result record carries ``env.data_source`` when the env declares one, and the board shows it in
    a "data" column, so a result on generated games never passes for one on ALFWorld's own."""
    rec = _record("planner", "bundled")
    assert rec["env"]["data_source"] == "bundled"
    assert "data_source" not in _record("legacy", None)["env"]  # envs without a source: no field
    lb = Leaderboard(tmp_path / "board.db")
    try:
        lb.submit(rec)
        lb.submit(_record("real", "/data/alfworld"))
        (table,) = board_tables(lb)
    finally:
        lb.close()
    assert table.show_data and {r["agent"]: r["data"] for r in table.rows} == {"planner": "bundled", "real": "/data/alfworld"}
    md = render_markdown([table])
    assert "| seeds | data |" in md and "| bundled |" in md and "| /data/alfworld |" in md
    assert '<th class="t" data-col="data">data</th>' in render_html([table])


# ---- item 15: admissible actions and the finished episode ---------------------------------------------------


def test_admissible_actions_include_help_as_stock_lists_them():
    """alfred_tw_env.py L254 (``init_env``): ``textworld.EnvInfos(admissible_commands=True, ...)`` and the
    commands are handed on unfiltered, so "help" is among them (TextWorld lists it, sorted with the rest);
    ``hide_help=True`` restores stratagym's old list."""
    env = gym.make(ENV_ID, data_path="bundled")
    hidden = gym.make(ENV_ID, data_path="bundled", hide_help=True)
    try:
        _, info = env.reset(seed=1)
        _, info_hidden = hidden.reset(seed=1)
        actions = info["admissible_actions"]
        assert "help" in actions and actions == sorted(actions)
        assert info_hidden["admissible_actions"] == [a for a in actions if a != "help"]
        obs, r, term, trunc, info = env.step("help")
        assert info["action_valid"] and "Available commands:" in obs and "help" in info["admissible_actions"]
    finally:
        env.close()
        hidden.close()


def test_acting_after_the_end_is_a_documented_stratagym_message():
    """Stock ALFWorld keeps stepping a finished game and repeats its last state; stratagym answers a step
    after the end with its own message, reward 0 and ``action_valid=False`` (documented in
    docs/fidelity.md: gymnasium asks for reset() there, and repeating a won state could pay twice)."""
    env = gym.make(ENV_ID, data_path="bundled", max_steps=1)
    try:
        env.reset(seed=0)
        _, _, term, trunc, _ = env.step("look")
        assert term or trunc
        obs, r, term, trunc, info = env.unwrapped.step("look")
        assert obs.startswith("The episode is over") and r == 0.0 and info["action_valid"] is False
    finally:
        env.close()


def test_prompt_leaves_help_out_as_verl_agent_does():
    """verl-agent ``agent_system/environments/env_manager.py`` (``AlfWorldEnvironmentManager.build_text_obs``):
    the prompt lists ``f"'{s}'" for s in admissible_actions[i] if s != 'help'``; the env's info keeps it."""
    from stratagym.agents.prompts import THINK_ACTION

    (msg,) = THINK_ACTION.build("You are in a room.", {"admissible_actions": ["go to desk 1", "help", "look"]}, [], 2)
    assert "'help'" not in msg["content"] and "['go to desk 1', 'look']" in msg["content"]
