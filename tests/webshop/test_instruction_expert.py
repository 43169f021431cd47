"""The instruction-only WebShop expert (issue 48 item 1): it shops from what an agent sees, so a model can
imitate it. Hand-worked cases for each decision, then the whole agent on the bundled goals."""

from __future__ import annotations

import gymnasium as gym

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.webshop.agents import InstructionExpert, instruction_query
from tests.helpers import play_records


def test_the_query_is_the_instructions_words_without_request_and_price():
    assert instruction_query("i need double sided, insert included and living room throw pillow in teal color, "
                             "and price lower than 70.00 dollars") == \
        "double sided, insert included and living room throw pillow in teal color"
    assert instruction_query("Find me a body lotion that is fragrance free, and price lower than 40.00 dollars") == \
        "body lotion that is fragrance free"
    assert instruction_query("i am looking for a keratin conditioner") == "keratin conditioner"
    assert instruction_query("i need") == "i need"  # nothing left: the instruction itself, never an empty search


def test_the_result_that_fits_best_is_affordable_first_then_holds_most_instruction_words():
    instruction = "i need a teal throw pillow for the living room, and price lower than 40.00 dollars"
    results = [("click[a1]", "Acme Throw Pillow for The Bedroom", 10.0),         # throw, pillow: 2 words
               ("click[a2]", "Bolt Living Room Throw Pillow, Teal", 55.0),       # 5 words, but over 40 dollars
               ("click[a3]", "Cozy Living Room Throw Pillow", 39.99),            # living, room, throw, pillow: 4
               ("click[a4]", "Dune Throw Pillow for the Living Room", None)]     # 4 words, no price shown
    assert InstructionExpert.pick_result(instruction, results) == "click[a3]"
    # without a price limit the most words win; ties go to the search engine's order
    assert InstructionExpert.pick_result("i need a teal living room throw pillow", results) == "click[a2]"
    assert InstructionExpert.pick_result("i need a throw pillow", results) == "click[a1]"
    assert InstructionExpert.pick_result("anything", []) is None


def test_options_named_by_the_instruction_are_clicked_longest_first_never_a_part_of_a_longer_one():
    buttons = ["click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
               "click[buy now]"]
    listed = buttons + ["click[black]", "click[black | white]", "click[white]", "click[13.5 fl oz]", "click[3.5 fl oz]"]
    assert InstructionExpert.option_clicks("find me a throw pillow, color black | white, size 13.5 fl oz", listed) == \
        ["click[13.5 fl oz]", "click[black | white]"]
    assert InstructionExpert.option_clicks("i want a black pillow in 3.5 fl oz", listed) == \
        ["click[3.5 fl oz]", "click[black]"]
    # a value is named only as whole words: "white" is not in "whiteboard", the buttons are never options
    assert InstructionExpert.option_clicks("a whiteboard with features and reviews", listed) == []


def test_it_needs_no_goal_and_shops_every_step_validly():
    env = gym.make("stratagym/WebShop-v0", split="test")
    agent = InstructionExpert(None)  # no env: it cannot read the goal's product
    records = play_records([env], agent, [(i, 0) for i in range(12)])
    assert all(r.valid_ratio == 1.0 for r in records)
    assert all(r.search_count == 1 for r in records)
    scores = [r.total_reward for r in records]
    # measured on the first 12 test goals: 10 bought exactly, 2 partly (a product or option the words miss)
    assert sum(s == 1.0 for s in scores) >= 9 and min(scores) > 0.3, scores


def test_it_is_registered_and_scores_near_the_oracle_on_the_test_goals():
    from stratagym.eval.harness import EvalConfig, evaluate

    record = evaluate(EvalConfig(agent="scripted:expert", env_id="stratagym/WebShop-v0", split="test", n=100,
                                 batch_size=25), progress=False)
    m = record["metrics"]
    # measured: score 96.7, success 0.88, 3.79 turns (the oracle 100 / 1.00 / 3.89; the random shopper 31.6 / 0.11)
    assert round(m["webshop_score"]["value"], 1) == 96.7 and m["success"]["value"] == 0.88
    assert m["search_count"]["value"] == 1.0 and m["valid_ratio"]["value"] == 1.0


def test_demonstrations_come_from_train_goals_only():
    import pytest

    from stratagym.errors import ConfigError
    from stratagym.training.demos import collect_demos

    for split in ("test", "eval", "all"):  # "all" holds the test goals too
        with pytest.raises(ConfigError, match="train split"):
            collect_demos("stratagym/WebShop-v0", "scripted:expert", split=split, n=2)
    demos = collect_demos("stratagym/WebShop-v0", "scripted:expert", split="train", n=6)
    env = gym.make("stratagym/WebShop-v0", split="train").unwrapped
    held_out = set(env.catalog.task_ids("test")) | set(env.catalog.task_ids("eval"))
    assert demos and not {d["task_id"] for d in demos} & held_out
    # the demonstrations teach the expert's actions in the think_action form, admissible actions listed
    first = demos[0]["turns"][0]
    assert "admissible actions" in first["prompt"][-1]["content"]
    assert first["completion"].endswith(f"<action> search[{instruction_query(env.catalog.goal(demos[0]['task_id'])['instruction_text'])}] </action>")
