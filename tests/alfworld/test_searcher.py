"""The searching expert (issue 48 item 5): the planner held to what the agent has seen.

Unit tests drive :class:`SearchingExpert` with a planner that returns fixed plans, so every command is a
known answer; the engine test plays one bundled train game of each task type on the real engine and checks
that it wins without a command the transcript does not justify.
"""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest

import stratagym  # noqa: F401  (registers the env)
from stratagym.envs.alfworld.agents import SearchingExpertAgent
from stratagym.envs.alfworld.generator import TASK_TYPES
from stratagym.envs.alfworld.searcher import SearchingExpert, location_prior, needed_objects

ROOM = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
        "a cabinet 1, a countertop 1, and a drawer 1.\n\nYour task is to: put some mug on shelf.")
GO = ["go to cabinet 1", "go to countertop 1", "go to drawer 1", "go to shelf 1"]
#: what the hidden state says: the planner would take mug 1 from the closed drawer
HIDDEN_PLAN = ["go to drawer 1", "open drawer 1", "take mug 1 from drawer 1", "go to shelf 1", "put mug 1 in/on shelf 1"]


def test_needed_objects_counts_what_a_plan_takes_or_uses():
    assert needed_objects(HIDDEN_PLAN) == {"mug": 1}
    assert needed_objects(["take pencil 1 from desk 1", "put pencil 1 in/on drawer 1", "take pencil 3 from bed 1",
                           "put pencil 3 in/on drawer 1"]) == {"pencil": 2}
    assert needed_objects(["take laptop 3 from bed 1", "go to sidetable 1", "use desklamp 1"]) == {"laptop": 1,
                                                                                                  "desklamp": 1}


def test_it_explores_in_listed_order_opens_what_is_closed_and_takes_the_mug_it_saw():
    expert = SearchingExpert(lambda: list(HIDDEN_PLAN))
    # the shelf is reachable but not listed first: the listed order comes from the observation
    assert expert.reset(ROOM, GO, HIDDEN_PLAN) == "go to cabinet 1"
    assert expert.step("go to cabinet 1", True, "You arrive at cabinet 1. The cabinet 1 is closed.",
                       GO + ["open cabinet 1"]) == "open cabinet 1"
    assert expert.step("open cabinet 1", True, "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing.",
                       GO + ["close cabinet 1"]) == "go to countertop 1"
    # a mug is seen: it stops exploring and, where the plan names the unseen mug 1, takes the mug 2 it saw
    here = GO + ["take mug 2 from countertop 1", "take apple 1 from countertop 1"]
    assert expert.step("go to countertop 1", True,
                       "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a mug 2.",
                       here) == "take mug 2 from countertop 1"
    assert expert.privileged == 0


def test_location_prior_counts_objects_per_receptacle_not_per_kind(tmp_path):
    games = tmp_path / "train.jsonl"
    # one kitchen: 3 cabinets and a fridge; 2 tomatoes in the fridge, 1 in a cabinet, a mug in a cabinet,
    # and a sink's basin named by its last id part, as the compact games store it
    game = {"receptacles": [["Cabinet|1", "Cabinet", "loc"], ["Cabinet|2", "Cabinet", "loc"], ["Cabinet|3", "Cabinet", "loc"],
                            ["Fridge|1", "Fridge", "loc"], ["Sink|1|SinkBasin", "SinkBasin", "loc"]],
            "objects": [["Tomato|1", "Tomato", "Fridge|1"], ["Tomato|2", "Tomato", "Fridge|1"],
                        ["Tomato|3", "Tomato", "Cabinet|2"], ["Mug|1", "Mug", "Cabinet|1"],
                        ["Mug|2", "Mug", "Sink|1|SinkBasin"]]}
    games.write_text(json.dumps(game) + "\n")
    assert location_prior(games) == {"tomato": {"fridge": 2.0, "cabinet": 1 / 3},
                                     "mug": {"cabinet": 1 / 3, "sinkbasin": 1.0}}


def test_the_prior_sends_it_to_the_likeliest_receptacle_first_and_then_on_for_what_is_still_missing():
    plan = ["go to sidetable 1", "take laptop 1 from sidetable 1", "go to desk 1", "use desklamp 1"]
    room = ROOM.replace("a cabinet 1, a countertop 1, and a drawer 1", "a drawer 1, a bed 1, a desk 1, and a sidetable 1")
    go = ["go to drawer 1", "go to bed 1", "go to desk 1", "go to sidetable 1"]
    prior = {"laptop": {"bed": 0.9, "desk": 0.5}, "desklamp": {"desk": 0.2, "sidetable": 0.6}}
    expert = SearchingExpert(lambda: list(plan), prior)
    assert expert.reset(room, go, plan) == "go to bed 1"  # the likeliest place for either
    # the bed held the laptop: now only the lamp is missing, and the side table is likelier than the desk
    assert expert.step("go to bed 1", True, "You arrive at bed 1. On the bed 1, you see a laptop 2.", go) == \
        "go to sidetable 1"


def test_a_command_that_did_not_happen_changes_nothing_it_knows():
    expert = SearchingExpert(lambda: list(HIDDEN_PLAN))
    expert.reset(ROOM, GO, HIDDEN_PLAN)
    # a rejected command: not arrived, nothing seen, so it asks for the same move again
    assert expert.step("go to cabinet 1", False, "Nothing happens. a mug 7", GO) == "go to cabinet 1"
    assert expert.step("go to cabinet 1", True, "You arrive at cabinet 1. The cabinet 1 is closed.",
                       GO + ["open cabinet 1"]) == "open cabinet 1"
    assert expert.step("open cabinet 1", True, "You open the cabinet 1. The cabinet 1 is open. In it, you see a mug 3.",
                       GO + ["take mug 3 from cabinet 1"]) == "take mug 3 from cabinet 1"


def test_it_follows_the_plan_once_the_plan_uses_what_it_saw():
    seen_plan = ["take mug 2 from countertop 1", "go to shelf 1", "put mug 2 in/on shelf 1"]
    expert = SearchingExpert(lambda: list(seen_plan))
    expert.reset(ROOM, GO, HIDDEN_PLAN)
    expert.step("go to cabinet 1", True, "You arrive at cabinet 1. On the cabinet 1, you see nothing.", GO)
    assert expert.step("go to countertop 1", True, "You arrive at countertop 1. On the countertop 1, you see a mug 2.",
                       GO + ["take mug 2 from countertop 1"]) == "take mug 2 from countertop 1"


def test_pick_two_keeps_searching_until_two_and_never_reuses_the_placed_one():
    plan = ["go to desk 1", "take pencil 1 from desk 1", "go to drawer 1", "put pencil 1 in/on drawer 1",
            "go to bed 1", "take pencil 2 from bed 1", "go to drawer 1", "put pencil 2 in/on drawer 1"]
    room = ROOM.replace("a cabinet 1, a countertop 1, and a drawer 1", "a desk 1, a sidetable 1, a bed 1, and a drawer 1")
    go = ["go to desk 1", "go to sidetable 1", "go to bed 1", "go to drawer 1"]
    current = list(plan)
    expert = SearchingExpert(lambda: list(current))
    assert expert.reset(room, go, plan) == "go to desk 1"
    # one pencil seen: not enough for a pick-two, it explores on
    assert expert.step("go to desk 1", True, "You arrive at desk 1. On the desk 1, you see a pencil 1.",
                       go + ["take pencil 1 from desk 1"]) == "go to sidetable 1"
    current[:] = ["go to desk 1", "take pencil 1 from desk 1", "go to drawer 1", "put pencil 1 in/on drawer 1",
                  "go to bed 1", "take pencil 2 from bed 1", "go to drawer 1", "put pencil 2 in/on drawer 1"]
    # the second pencil is seen on the side table; the plan's pencil 2 (on the bed) is not, pencil 3 stands in
    assert expert.step("go to sidetable 1", True, "You arrive at sidetable 1. On the sidetable 1, you see a pencil 3.",
                       go) == "go to desk 1"
    expert.step("go to desk 1", True, "You arrive at desk 1. On the desk 1, you see a pencil 1.", go)
    expert.step("take pencil 1 from desk 1", True, "You pick up the pencil 1 from the desk 1.", go)
    expert.step("go to drawer 1", True, "You arrive at drawer 1. On the drawer 1, you see nothing.", go)
    current[:] = ["go to bed 1", "take pencil 2 from bed 1", "go to drawer 1", "put pencil 2 in/on drawer 1"]
    # pencil 1 is placed: the stand-in for the unseen pencil 2 is pencil 3, on the side table
    assert expert.step("put pencil 1 in/on drawer 1", True, "You put the pencil 1 in/on the drawer 1.", go) == \
        "go to sidetable 1"
    assert expert.privileged == 0


def test_when_nothing_is_left_to_search_the_planner_answers_and_is_counted():
    expert = SearchingExpert(lambda: list(HIDDEN_PLAN))
    expert.reset(ROOM, GO, HIDDEN_PLAN)
    for place in ("cabinet 1", "countertop 1", "drawer 1"):
        action = expert.step(f"go to {place}", True, f"You arrive at {place}. On the {place}, you see nothing.", GO)
    assert action == "go to shelf 1"  # reachable though not listed: still searched
    assert expert.step("go to shelf 1", True, "You arrive at shelf 1. On the shelf 1, you see nothing.", GO) == \
        "go to drawer 1" and expert.privileged == 1


def test_each_command_comes_with_its_reason_what_is_still_to_find_then_the_steps_left():
    """The think text of reasoned demonstrations (``demos.reasons``), pinned by hand: the task's needs, what is
    still to be found while exploring, then the plan's remaining steps with the seen mug standing in."""
    expert = SearchingExpert(lambda: list(HIDDEN_PLAN))
    assert expert.reset(ROOM, GO, HIDDEN_PLAN) == "go to cabinet 1"
    assert expert.reason == "The task needs a mug. Still to find: a mug. I look in cabinet 1."
    expert.step("go to cabinet 1", True, "You arrive at cabinet 1. The cabinet 1 is closed.", GO + ["open cabinet 1"])
    assert expert.reason == "The task needs a mug. Still to find: a mug. The cabinet 1 is closed: I open it."
    expert.step("open cabinet 1", True, "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing.", GO)
    assert expert.step("go to countertop 1", True, "You arrive at countertop 1. On the countertop 1, you see a mug 2.",
                       GO + ["take mug 2 from countertop 1"]) == "take mug 2 from countertop 1"
    # the plan names the hidden mug 1 in the drawer; the reason names the mug 2 seen, where it was seen
    assert expert.reason == ("The task needs a mug. All found. "
                             "Left: take mug 2 from countertop 1, put mug 2 in/on shelf 1.")


def test_pick_two_reasons_count_what_is_still_missing():
    plan = ["go to desk 1", "take pencil 1 from desk 1", "go to drawer 1", "put pencil 1 in/on drawer 1",
            "go to bed 1", "take pencil 2 from bed 1", "go to drawer 1", "put pencil 2 in/on drawer 1"]
    room = ROOM.replace("a cabinet 1, a countertop 1, and a drawer 1", "a desk 1, a sidetable 1, a bed 1, and a drawer 1")
    go = ["go to desk 1", "go to sidetable 1", "go to bed 1", "go to drawer 1"]
    expert = SearchingExpert(lambda: list(plan))
    expert.reset(room, go, plan)
    assert expert.reason == "The task needs two pencils. Still to find: two pencils. I look in desk 1."
    expert.step("go to desk 1", True, "You arrive at desk 1. On the desk 1, you see a pencil 1.", go)
    assert expert.reason == "The task needs two pencils. Still to find: another pencil. I look in sidetable 1."
    assert expert.step("go to sidetable 1", True, "You arrive at sidetable 1. On the sidetable 1, you see a pencil 3.",
                       go) == "go to desk 1"
    # the unseen pencil 2 (on the bed) is replaced by pencil 3, taken from the side table where it was seen
    assert expert.reason == ("The task needs two pencils. All found. Left: take pencil 1 from desk 1, put pencil 1 "
                             "in/on drawer 1, take pencil 3 from sidetable 1, put pencil 3 in/on drawer 1.")


def test_running_out_of_places_says_so():
    expert = SearchingExpert(lambda: list(HIDDEN_PLAN))
    expert.reset(ROOM, GO, HIDDEN_PLAN)
    for place in ("cabinet 1", "countertop 1", "drawer 1", "shelf 1"):
        expert.step(f"go to {place}", True, f"You arrive at {place}. On the {place}, you see nothing.", GO)
    assert expert.reason == "The task needs a mug. Still to find: a mug. Every place is searched: I follow the plan."


@pytest.mark.slow
def test_it_wins_a_game_of_every_type_on_the_engine_from_what_it_saw(one_game_per_type):
    env = gym.make("stratagym/ALFWorld-v0", data_path="bundled", **SearchingExpertAgent.env_kwargs)
    try:
        won = {}
        for task_type, task in one_game_per_type.items():
            obs, info = env.reset(seed=0, options={"task_id": task})
            transcript, done = obs, False
            while not done:
                action = info["expert_action"]
                reason = info["expert_reason"]  # every command the searcher gives comes with its reason
                assert reason.startswith("The task needs ") and reason.endswith("."), (task_type, reason)
                taken = re.match(r"(?:take|use) (\S+ \d+)", action)
                if taken:  # an object is only taken or used after the transcript has shown it
                    assert re.search(rf"\b{taken.group(1)}\b", transcript), (task_type, action)
                obs, reward, term, trunc, info = env.step(action)
                transcript += "\n" + obs
                done = term or trunc
            won[task_type] = (info["won"], env.unwrapped._engine.privileged_commands)
    finally:
        env.close()
    assert set(won) == set(TASK_TYPES)
    assert all(w == (True, 0) for w in won.values()), won


def test_the_agent_hands_out_the_reason_beside_the_command():
    infos = [{"expert_action": "go to cabinet 1", "expert_reason": "The task needs a mug. Still to find: a mug. "
              "I look in cabinet 1."}, {"expert_action": "look"}]
    assert SearchingExpertAgent().act_with_reasons(["", ""], infos, [None, None]) == [
        ("The task needs a mug. Still to find: a mug. I look in cabinet 1.", "go to cabinet 1"), ("", "look")]


def test_reasoned_searcher_demonstrations_keep_the_prompts_and_actions_and_think_the_reason():
    """``demos.reasons`` with the searcher (recipes/gpu/sft-smollm2-lora-alfworld-searcher-reasons.yaml): the same
    episodes, prompts and actions as the plain demonstrations; only the think text changes, to the reason."""
    from stratagym.training.demos import collect_demos

    kwargs = {"data_path": "bundled", "max_steps": 50, "context_k": 2}
    plain = collect_demos("stratagym/ALFWorld-v0", "scripted:searcher", split="train", n=2, env_kwargs=kwargs)
    reasoned = collect_demos("stratagym/ALFWorld-v0", "scripted:searcher", split="train", n=2, env_kwargs=kwargs,
                             reasons=True)
    assert [d["task_id"] for d in plain] == [d["task_id"] for d in reasoned] and len(reasoned) == 2
    for p, r in zip(plain, reasoned):
        assert [t["prompt"] for t in p["turns"]] == [t["prompt"] for t in r["turns"]]
        for tp, tr in zip(p["turns"], r["turns"]):
            assert tp["completion"].split("</think>")[1] == tr["completion"].split("</think>")[1]
            assert tr["completion"].startswith("<think>The task needs ")
        assert "All found. Left: " in r["turns"][-1]["completion"]
