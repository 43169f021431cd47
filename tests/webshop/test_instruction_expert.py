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


def test_it_reads_results_in_both_text_modes_and_shops_identically_in_text_rich():
    """``text_rich`` lists a result as the lines ``[button] ASIN [button_]``, title, price (``[clicked button]``
    once opened); the expert must read them as it reads ``text``'s ``ASIN [SEP] title [SEP] price``."""
    from stratagym.envs.webshop.agents import _parse_results

    listed = ["click[back to search]", "click[next >]", "click[b0aaaaaaaa]", "click[b0bbbbbbbb]"]
    text = ("Instruction: [SEP] find me a lotion [SEP] Back to Search [SEP] Page 1 (Total results: 2) [SEP] Next > [SEP] "
            "B0AAAAAAAA [SEP] Acme Lotion [SEP] $6.14 [SEP] B0BBBBBBBB [SEP] Bolt Lotion, Fragrance Free [SEP] $18.6 to $29.35")
    rich = ("Instruction:\nfind me a lotion\n[button] Back to Search [button_]\nPage 1 (Total results: 2)\n"
            "[button] Next > [button_]\n\n[clicked button] B0AAAAAAAA [clicked button_]\nAcme Lotion\n$6.14\n\n"
            "[button] B0BBBBBBBB [button_]\nBolt Lotion, Fragrance Free\n$18.6 to $29.35\n")
    expected = [("click[b0aaaaaaaa]", "Acme Lotion", 6.14), ("click[b0bbbbbbbb]", "Bolt Lotion, Fragrance Free", 18.6)]
    assert _parse_results(text, listed) == expected
    assert _parse_results(rich, listed) == expected
    # the whole agent plays the first test goals the same way in both modes (same actions, same rewards)
    plays = {}
    for mode in ("text", "text_rich"):
        env = gym.make("stratagym/WebShop-v0", split="test", observation_mode=mode)
        plays[mode] = [(r.total_reward, r.turns) for r in play_records([env], InstructionExpert(None), [(i, 0) for i in range(8)])]
    assert plays["text"] == plays["text_rich"]


def test_its_reasons_name_the_instructions_options_and_what_is_chosen():
    from stratagym.envs.episode import EpisodeKey

    agent = InstructionExpert(None)
    ep = EpisodeKey("webshop-0", 0)
    instruction = "find me a shampoo with scent lavender in size 16 fl oz, and price lower than 40.00 dollars"
    item = ["click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
            "click[buy now]", "click[8 fl oz]", "click[16 fl oz]", "click[coconut]", "click[lavender]"]

    def step(page: str, admissible: list[str], observation: str = "", n: int = 1) -> tuple[str, str]:
        info = {"step": n, "instruction": instruction, "page": page, "admissible_actions": admissible}
        return agent.act_with_reasons([observation], [info], [ep])[0]

    assert agent.act_with_reasons(["WebShop"], [{"step": 0, "instruction": instruction,
                                                 "admissible_actions": ["search[<your query>]", "click[search]"]}], [ep])[0] == \
        ("I search with the words of the instruction.", "search[shampoo with scent lavender in size 16 fl oz]")
    assert step("results", ["click[back to search]", "click[b0aaaaaaaa]"],
                "Back to Search [SEP] B0AAAAAAAA [SEP] Trihal Lavender Shampoo [SEP] $8.43") == \
        ("The result that fits the instruction best is Trihal Lavender Shampoo.", "click[b0aaaaaaaa]")
    assert step("results", ["click[back to search]"], "Back to Search") == \
        ("No product is listed here; I go back to the search.", "click[back to search]")
    assert step("item", item) == ("The instruction asks for the options 16 fl oz, lavender; chosen so far: none. "
                                  "I choose 16 fl oz.", "click[16 fl oz]")
    assert step("item", item) == ("The instruction asks for the options 16 fl oz, lavender; chosen so far: 16 fl oz. "
                                  "I choose lavender.", "click[lavender]")
    assert step("item", item) == ("The instruction asks for the options 16 fl oz, lavender, and all are chosen. I buy it.",
                                  "click[buy now]")
    assert step("item", item[:6] + ["click[8 fl oz]"]) == \
        ("The instruction names none of the listed options. I buy it.", "click[buy now]")
    # the reasons never change the actions: act() is act_with_reasons() without them
    assert agent.act(["WebShop"], [{"step": 0, "instruction": instruction, "admissible_actions": ["search[<your query>]"]}],
                     [ep]) == ["search[shampoo with scent lavender in size 16 fl oz]"]


def test_reasoned_demonstrations_write_the_reason_as_the_think_text():
    from stratagym.training.demos import collect_demos

    plain = collect_demos("stratagym/WebShop-v0", "scripted:expert", split="train", n=4, memory_k=0)
    reasoned = collect_demos("stratagym/WebShop-v0", "scripted:expert", split="train", n=4, memory_k=0, reasons=True)
    assert [d["task_id"] for d in plain] == [d["task_id"] for d in reasoned] and reasoned
    for p, r in zip(plain, reasoned):
        assert r["reasons"] is True and "reasons" not in p
        assert [t["prompt"] for t in p["turns"]] == [t["prompt"] for t in r["turns"]]  # same prompts, same actions
        for tp, tr in zip(p["turns"], r["turns"]):
            assert tp["completion"].split("</think>")[1] == tr["completion"].split("</think>")[1]
            assert tp["completion"].startswith("<think>The expert plan's next step is to ")
            assert not tr["completion"].startswith("<think>The expert plan's")
    assert reasoned[0]["turns"][0]["completion"].startswith("<think>I search with the words of the instruction.</think>")


def test_reasons_from_an_agent_that_gives_none_are_refused():
    import pytest

    from stratagym.errors import ConfigError
    from stratagym.training.demos import collect_demos

    with pytest.raises(ConfigError, match="states no reasons"):
        collect_demos("stratagym/WebShop-v0", "scripted:oracle", split="train", n=1, reasons=True)
