"""Nothing is written outside the project's data/cache folders; real ALFWorld data layouts load."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

import stratagym  # noqa: F401
from stratagym.envs.alfworld import paths

REPO = Path(__file__).resolve().parents[2]


def _tree(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*"))}


def test_nothing_written_outside_cache_and_argv_kept(tmp_path):
    """A fresh process (empty HOME, TMPDIR and cwd) creates the env, plays, closes: only the cache grows."""
    home, tmp, cwd, cache = (tmp_path / d for d in ("home", "tmp", "cwd", "cache"))
    for d in (home, tmp, cwd):
        d.mkdir()
    data_before = _tree(paths.bundled_dir())
    script = textwrap.dedent(
        """
        import sys
        sys.argv = ["my-trainer", "--lr", "1e-6"]
        import gymnasium as gym
        import stratagym
        env = gym.make("stratagym/ALFWorld-v0", expert="planner")
        obs, info = env.reset(seed=0)
        for _ in range(3):
            obs, r, term, trunc, info = env.step(info["expert_action"])
        env.step("take the moon")
        env.close()
        env = gym.make("stratagym/ALFWorld-v0", expert="handcoded", split="out_of_distribution")
        obs, info = env.reset(seed=1)
        env.step(info["expert_action"])
        env.close()
        assert sys.argv == ["my-trainer", "--lr", "1e-6"], sys.argv
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ALFWORLD_DATA", "XDG_CACHE_HOME", "STRATAGYM_ALFWORLD_SAS_CACHE")}
    env.update(HOME=str(home), TMPDIR=str(tmp), STRATAGYM_ALFWORLD_CACHE=str(cache),
               PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK")
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == [] and list(cwd.iterdir()) == []
    assert (cache / "alfworld-data").is_dir()  # what `import alfworld` insists on creating
    assert any((cache / "games").iterdir())
    assert any((cache / "alfworld-sas").iterdir())  # the translation cache lives under the same root
    assert _tree(paths.bundled_dir()) == data_before


def _copy_game(src_split_dir: Path, task_id: str, dest_split_dir: Path, rename: str | None = None) -> Path:
    dest = dest_split_dir / (rename or task_id)
    shutil.copytree(src_split_dir / task_id, dest)
    return dest


def test_real_alfworld_data_layout_is_used_when_present(tmp_path, monkeypatch, train_games):
    """$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen} is picked up, with ALFWorld's skip rules."""
    root = tmp_path / "alfworld"
    entries = train_games.entries
    by_type: dict[str, list] = {}
    for e in entries:
        by_type.setdefault(e.task_type, []).append(e.task_id)
    src = train_games.split_dir
    for folder in ("train", "valid_seen", "valid_unseen"):
        split_dir = root / "json_2.1.1" / folder
        for t, ids in by_type.items():
            _copy_game(src, ids[0], split_dir)
    train_dir = root / "json_2.1.1" / "train"
    # games ALFWorld skips: movable/sliced paths, unsolvable, missing game file
    t, ids = next(iter(by_type.items()))
    _copy_game(src, ids[1], train_dir, rename="pick_and_place_with_movable_recep-X-Y-Z-1/trial_1")
    _copy_game(src, ids[2], train_dir, rename="pick_and_place_simple-AppleSliced-None-Z-1/trial_1")
    unsolvable = _copy_game(src, ids[3], train_dir, rename="unsolvable/trial_1")
    game = json.loads((unsolvable / "game.tw-pddl").read_text())
    game["solvable"] = False
    (unsolvable / "game.tw-pddl").write_text(json.dumps(game))
    missing = _copy_game(src, ids[4], train_dir, rename="missing/trial_1")
    (missing / "game.tw-pddl").unlink()

    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    env = gym.make("stratagym/ALFWorld-v0", expert="planner")
    try:
        u = env.unwrapped
        assert u.games.source == str(root)
        assert sorted(u.task_ids()) == sorted(ids_[0] for ids_ in by_type.values())
        obs, info = u.reset(seed=0)
        for _ in range(50):
            obs, r, term, trunc, info = u.step(info["expert_action"])
            if term or trunc:
                break
        assert info["won"]
    finally:
        env.close()
    env = gym.make("stratagym/ALFWorld-v0", split="valid_unseen")
    assert env.unwrapped.games.split_dir == root / "json_2.1.1" / "valid_unseen"
    env.close()
    # an explicit data_path wins over ALFWORLD_DATA, and "bundled" forces the bundled games
    env = gym.make("stratagym/ALFWorld-v0", data_path="bundled")
    assert env.unwrapped.games.source == "bundled"
    env.close()
    env = gym.make("stratagym/ALFWorld-v0", data_path=str(root / "json_2.1.1" / "valid_seen"))
    assert len(env.unwrapped.task_ids()) == 6
    env.close()


def test_bundled_games_materialise_once_and_match_their_digests(train_games):
    from stratagym.envs.alfworld.games import load_records, materialise_bundled, problem_digest

    root = materialise_bundled()
    assert root == materialise_bundled()
    assert train_games.split_dir == root / "train"
    for record, digest in load_records("train")[:5]:
        assert problem_digest(record) == digest
        game = json.loads((root / "train" / record.key / "game.tw-pddl").read_text())
        assert game["solvable"] is True and game["walkthrough"] == record.walkthrough
        assert "Your task is to: " + record.task_desc + "." in game["grammar"]
    with pytest.raises(Exception):
        load_records("nonsense")
