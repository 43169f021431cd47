"""stratagym/WebShop-v0: pages in WebShop's text format, navigation, metadata, the oracle."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.core import ConfigError, EpisodeKey, stable_hash
from stratagym.envs.webshop.agents import OracleAgent
from stratagym.envs.webshop.text_env import WebShopTextEnv, parse_action


@pytest.fixture(scope="module")
def env():
    e = gym.make("stratagym/WebShop-v0").unwrapped
    yield e
    e.close()


def test_parse_action_is_webshops():
    assert parse_action("click[Buy Now]") == ("click", "Buy Now")
    assert parse_action("  search[red shoes] \n") == ("search", "red shoes")
    assert parse_action("search[a]\n[b]") == ("search", "a")  # the argument never spans lines
    assert parse_action("look") == ("look", None)


def test_search_page(env):
    obs, info = env.reset(options={"task_index": 0})
    goal = env.goal()
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal['instruction_text']} [SEP] Search"
    assert info["admissible_actions"] == ["search[<your query>]", "click[search]"]  # as verl-agent lists them
    assert info["page"] == "search" and info["instruction"] == goal["instruction_text"]
    assert info["state_hash"] == stable_hash(obs) and info["context_hashes"] == [stable_hash(obs)]


def test_navigation_through_results_item_and_sub_pages(env):
    obs, info = env.reset(options={"task_index": 0})
    instr = env.goal()["instruction_text"]
    obs, r, term, trunc, info = env.step("search[Shampoo]")
    assert info["action_valid"] and info["search_count"] == 1 and info["tool_calls"] == {"search": 1}
    assert obs.startswith(f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B0")
    assert "click[< prev]" not in info["admissible_actions"]
    page1 = obs
    obs, *_, info = env.step("click[Next >]")  # WebShop lower-cases the argument
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs and info["action_valid"]
    obs, *_, info = env.step("click[< prev]")
    assert obs == page1
    asin = next(a[6:-1] for a in info["admissible_actions"] if a.startswith("click[b0"))
    product = env.catalog.by_asin[asin.upper()]
    obs, *_, info = env.step(f"click[{asin}]")
    assert info["page"] == "item"
    parts = obs.split(" [SEP] ")
    assert parts[:4] == ["Instruction:", instr, "Back to Search", "< Prev"]
    assert parts[-7:] == [product["Title"], f"Price: {product['Price']}", "Rating: N.A.",  # WebShop loads no ratings
                          "Description", "Features", "Reviews", "Buy Now"]
    for name, values in product["options"].items():
        assert " [SEP] ".join([name, *values]) in obs
    item_obs = obs
    obs, *_, info = env.step("click[description]")
    assert obs == f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev [SEP] {product['Description']}"
    assert env.step("click[< prev]")[0] == item_obs
    obs, *_ = env.step("click[features]")
    assert obs.endswith(" [SEP] ".join(product["BulletPoints"]))
    env.step("click[< prev]")
    obs, *_ = env.step("click[reviews]")
    assert obs == f"Instruction: [SEP] {instr} [SEP] Back to Search [SEP] < Prev"  # WebShop loads no reviews
    env.step("click[< prev]")
    obs, *_, info = env.step("click[< prev]")  # item -> its results page
    assert obs == page1
    obs, *_, info = env.step("click[back to search]")
    assert obs.startswith("WebShop [SEP] Instruction:") and info["search_count"] == 1
    assert info["step"] == 12 and len(info["context_hashes"]) == 5


def test_invalid_actions_change_nothing(env):
    obs0, info0 = env.reset(options={"task_index": 1})
    for bad in ["click[buy now]", "search[]", "buy", "", "click[b0nothere]"]:
        obs, r, term, trunc, info = env.step(bad)
        assert obs == obs0 and r == 0.0 and not term and info["action_valid"] is False
        assert info["state_hash"] == info0["state_hash"]
    obs, r, term, trunc, info = env.step("click[search]")  # listed (verl-agent), does nothing (WebShop)
    assert obs == obs0 and r == 0.0 and not term and info["action_valid"] is True


def test_buying_ends_the_episode_with_webshops_reward(env):
    env.reset(options={"task_index": 2})
    goal = env.goal()
    env.step("search[" + env.catalog.by_asin[goal["asin"]]["Title"] + "]")
    obs, r, term, trunc, info = env.step(f"click[{goal['asin'].lower()}]")
    obs, r, term, trunc, info = env.step("click[buy now]")  # no options chosen
    assert term and info["page"] == "done" and info["purchased_asin"] == goal["asin"]
    # WebShop's done page as its text env renders it (done_page.html: MTurk code, hidden stats, score)
    assert obs.startswith("Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk "
                          f"interface.) [SEP] Purchased [SEP] asin [SEP] {goal['asin']} [SEP] options [SEP] {{}}")
    assert obs.endswith(f"Reward [SEP] Your score (min 0.0, max 1.0) [SEP] {r!r} [SEP] Reward Details [SEP] None")
    n = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    assert r == pytest.approx((len(goal["attributes"]) + 1) / n)
    assert info["score"] == r and info["won"] == (r == 1.0) and info["reward_info"]["r_type"] == 1.0
    obs, r, term, trunc, info = env.step("click[buy now]")
    assert info["action_valid"] is False and r == 0.0


def test_wrong_product_scores_less(env):
    env.reset(options={"task_index": 3})
    goal = env.goal()
    obs, r, term, trunc, info = env.step("search[zzz unrelated " + goal["query"] + "]")
    other = next(a for a in info["admissible_actions"] if a.startswith("click[b0") and a != f"click[{goal['asin'].lower()}]")
    env.step(other)
    obs, r, term, trunc, info = env.step("click[buy now]")
    assert term and 0.0 <= r < 1.0 and not info["won"]


def test_oracle_scores_one_on_every_bundled_goal():
    env = WebShopTextEnv(split="all")
    agent = OracleAgent(env)
    scores, steps = [], []
    for i in range(len(env.task_ids())):
        obs, info = env.reset(options={"task_index": i})
        for t in range(15):
            obs, r, term, trunc, info = env.step(agent.act([obs], [info], [EpisodeKey(info["task_id"], None)])[0])
            if term or trunc:
                break
        scores.append(r)
        steps.append(t + 1)
    assert scores == [1.0] * 600
    assert max(steps) <= 6


def test_reset_is_deterministic_and_splits_are_disjoint():
    a, b = WebShopTextEnv(), WebShopTextEnv()
    assert a.reset(seed=7) == b.reset(seed=7)
    tests, trains = set(WebShopTextEnv("test").task_ids()), set(WebShopTextEnv("train").task_ids())
    assert len(tests) == 100 and len(trains) == 400 and not tests & trains
    with pytest.raises(ConfigError, match="unknown WebShop split"):
        WebShopTextEnv("dev")
    with pytest.raises(ConfigError, match="search backend"):
        WebShopTextEnv(search_backend="elastic")


def test_webshop_files_through_the_env(tiny_dir):
    env = WebShopTextEnv("test", data_dir=str(tiny_dir))
    obs, info = env.reset(options={"task_index": 0})
    assert len(env.task_ids()) == 2 and "Instruction:" in obs
    env2 = WebShopTextEnv("all", items_path=str(tiny_dir / "items_shuffle.json"), attrs_path=str(tiny_dir / "items_ins_v2.json"),
                          human_ins_path=str(tiny_dir / "items_human_ins.json"), search_backend="bm25s")  # auto: pyserini
    assert len(env2.task_ids()) == 3


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=60), st.sampled_from(
    ["search[shampoo]", "click[next >]", "click[< prev]", "click[back to search]", "click[buy now]", "click[description]"])),
    max_size=8))
def test_step_never_raises(env, actions):
    env.reset(seed=0)
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        assert isinstance(obs, str) and 0.0 <= r <= 1.0
        if term or trunc:
            break


def test_random_shopper_searches_the_instruction_then_clicks():
    from stratagym.envs.webshop.agents import RandomShopper

    env = WebShopTextEnv()
    runs = []
    for _ in range(2):
        agent, rewards = RandomShopper(env, seed=3), []
        for i in range(10):
            obs, info = env.reset(options={"task_index": i})
            first = agent.act([obs], [info], [EpisodeKey(info["task_id"], None)])[0]
            assert first.startswith("search[") and "price lower than" not in first
            obs, r, term, trunc, info = env.step(first)
            while not (term or trunc):
                obs, r, term, trunc, info = env.step(agent.act([obs], [info], [EpisodeKey(info["task_id"], None)])[0])
            rewards.append(r)
        runs.append(rewards)
    assert runs[0] == runs[1] and all(0.0 <= r <= 1.0 for r in runs[0])
