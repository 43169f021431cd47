"""The offline generator: ALFWorld-format game folders the real engine plays, for every task type."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import stratagym  # noqa: F401
from stratagym.envs.alfworld import generator as g
from stratagym.envs.alfworld.games import eval_exclusions, load_records, logic_files


def test_generated_game_folder_has_alfworld_format(tmp_path):
    (rec,) = g.generate_games("pick_and_place_simple", 1, seed=123)
    domain, grammar = logic_files()
    game_file = g.write_game_folder(rec, tmp_path, domain, grammar)
    game = json.loads(game_file.read_text())
    traj = json.loads((game_file.parent / "traj_data.json").read_text())
    assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
    assert game["solvable"] is True and game["walkthrough"] == rec.walkthrough and rec.walkthrough
    assert "UNKNOWN GOAL" not in game["grammar"] and rec.task_desc in game["grammar"]
    problem = game["pddl_problem"]
    assert "(:domain alfred)" in problem and "(= (total-cost) 0)" in problem
    assert "_bar_" in problem and "(atLocation agent1 loc_bar_" in problem
    assert traj["task_type"] == "pick_and_place_simple"
    assert set(traj["pddl_params"]) == {"object_target", "parent_target", "toggle_target", "mrecep_target", "object_sliced"}
    task, obj, _, recep, scene = rec.key.split("/")[0].split("-")
    assert (task, obj, recep) == ("pick_and_place_simple", rec.pddl_params["object_target"], rec.pddl_params["parent_target"])
    assert int(scene) == rec.floor_plan


def test_generation_is_deterministic_and_respects_exclusions():
    a = g.generate_games("look_at_obj_in_light", 2, seed=9, verify=False)
    b = g.generate_games("look_at_obj_in_light", 2, seed=9, verify=False)
    assert [r.to_json() for r in a] == [r.to_json() for r in b]
    assert all(r.pddl_params["toggle_target"] == "DeskLamp" and g.room_type(r.floor_plan) in ("LivingRoom", "Bedroom") for r in a)
    excluded = {g.combo(r) for r in a}
    c = g.generate_games("look_at_obj_in_light", 3, seed=9, verify=False, exclude_combos=excluded)
    assert not excluded & {g.combo(r) for r in c}
    with pytest.raises(stratagym.ConfigError, match="task type"):
        g.generate_games("pick_and_dance", 1)


def test_exclude_problems_skips_exactly_those_games():
    first = g.generate_games("pick_and_place_simple", 2, seed=3, verify=False)
    again = g.generate_games("pick_and_place_simple", 2, seed=3, verify=False,
                             exclude_problems={g.problem_digest(first[0])})
    # the excluded game is gone, the next one moves up, and no other game changes
    assert again[0].to_json() == first[1].to_json()
    assert g.problem_digest(first[0]) not in {g.problem_digest(r) for r in again}


def test_eval_exclusions_cover_every_bundled_eval_game():
    held_out = eval_exclusions()
    seen = [r for r, _ in load_records("in_distribution")]
    unseen = [r for r, _ in load_records("out_of_distribution")]
    assert {g.problem_digest(r) for r in seen + unseen} == held_out.problems and len(held_out.problems) == 60
    assert held_out.combos == {g.combo(r) for r in unseen}
    # stored digests (written at generation) agree with the moved problem_digest
    assert all(d == g.problem_digest(r) for r, d in load_records("in_distribution"))


def test_bundled_splits_are_out_of_distribution_where_they_should_be():
    train = [r for r, _ in load_records("train")]
    seen = [r for r, _ in load_records("in_distribution")]
    unseen = [r for r, _ in load_records("out_of_distribution")]
    for records in (train, seen, unseen):
        assert {r.task_type for r in records} == set(g.TASK_TYPES)
        assert all(r.walkthrough for r in records)  # planner-verified when generated
    assert not {r.floor_plan for r in train + seen} & set(g.UNSEEN_FLOOR_PLANS)
    assert {r.floor_plan for r in unseen} <= set(g.UNSEEN_FLOOR_PLANS)
    assert not {g.combo(r) for r in train} & {g.combo(r) for r in unseen}
    assert not {r.key for r in train} & {r.key for r in seen}


def test_cli_generate_then_play(tmp_path):
    from stratagym.cli import _load_plugins, app

    _load_plugins()
    out = tmp_path / "games"
    result = CliRunner().invoke(app, ["alfworld", "generate", "--task-type", "pick_and_place_simple",
                                      "--task-type", "3", "--n", "1", "--seed", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(list(out.rglob("game.tw-pddl"))) == 2 and not list(out.glob(".game-*"))
    env = gym.make("stratagym/ALFWorld-v0", data_path=str(out), expert="planner")
    try:
        for tid in env.unwrapped.task_ids():
            obs, info = env.reset(options={"task_id": tid})
            while True:
                obs, r, term, trunc, info = env.step(info["expert_action"])
                if term or trunc:
                    break
            assert info["won"], tid
    finally:
        env.close()
    result = CliRunner().invoke(app, ["alfworld", "list", "--data-path", str(out)])
    assert result.exit_code == 0 and "pick_clean_then_place_in_recep" in result.output
    result = CliRunner().invoke(app, ["alfworld", "generate", "--task-type", "nope", "--out", str(out)])
    assert result.exit_code == 2 and "unknown ALFWorld task type" in result.output


@pytest.mark.slow
def test_every_task_type_generates_and_is_won_by_the_planner():
    for task_type in g.TASK_TYPES:
        (rec,) = g.generate_games(task_type, 1, seed=77)
        assert rec.walkthrough and rec.task_type == task_type
