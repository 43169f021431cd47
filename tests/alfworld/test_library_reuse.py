"""Closed engines hand their copy of fast-downward to the next engine, and nothing an engine sees changes.

Each copy is mapped until the process ends (its deleted file keeps 33 MB of disk): before the hand-over, a
study worker that made engine after engine filled the disk.
"""

from __future__ import annotations

import random

import pytest

from stratagym.envs.alfworld.engine import AlfredEngine
from stratagym.envs.alfworld.runtime import load_engine_modules


def _play(engine: AlfredEngine, game_file: str, seed: int, n_steps: int = 12) -> list:
    rng = random.Random(seed)
    state = engine.load(game_file)
    out = [(state.feedback, state.admissible_commands, state.won, state.expert_plan)]
    for _ in range(n_steps):
        command = rng.choice(state.admissible_commands + ["jump"])
        state = engine.step(command)
        out.append((command, state.feedback, state.admissible_commands, state.won, state.expert_plan))
    out.append(("<plan>", engine.plan()))
    return out


def test_a_closed_engines_library_is_reused_and_play_is_unchanged(train_games, one_game_per_type):
    by_id = train_games.by_id()
    game = by_id[one_game_per_type["pick_and_place_simple"]].game_file
    other = by_id[one_game_per_type["pick_two_obj_and_place"]].game_file
    pool = load_engine_modules().fast_downward.load_lib

    fresh = AlfredEngine(expert="planner")  # a copy nobody used before it...
    busy = AlfredEngine(expert="planner")  # ...while this one holds another copy
    try:
        assert fresh._pddl.downward_lib is not busy._pddl.downward_lib
        _play(busy, other, seed=1)  # leaves the state of another game in its copy
        expected = _play(fresh, game, seed=7)
    finally:
        fresh.close()
    lib = busy._pddl.downward_lib
    busy.close()

    loaded = pool.loaded
    reused = AlfredEngine(expert="planner")
    try:
        assert reused._pddl.downward_lib is lib  # the last copy handed back is taken first
        assert pool.loaded == loaded  # no new copy was mapped
        assert _play(reused, game, seed=7) == expected
    finally:
        reused.close()

    for _ in range(3):  # engine after engine: still no new copy
        AlfredEngine().close()
    assert pool.loaded == loaded

    with pytest.raises(RuntimeError, match="closed"):  # its copy may be another engine's now
        busy.reset()
    busy.close()  # closing twice hands nothing back twice
    a, b = AlfredEngine(), AlfredEngine()
    try:
        assert a._pddl.downward_lib is not b._pddl.downward_lib
    finally:
        a.close()
        b.close()
