"""stratagym/WebShopBrowser-v0 in a real headless Chromium: same observations and rewards as the text env.

One Flask server and one browser for the whole module (they are slow to start)."""

from __future__ import annotations

import os

import pytest

from stratagym.envs.core import EpisodeKey
from stratagym.envs.webshop.agents import OracleAgent

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not (os.access("/usr/bin/chromium", os.X_OK) and os.access("/usr/bin/chromedriver", os.X_OK)),
                       reason="needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"),
]


@pytest.fixture(scope="module")
def envs():
    import gymnasium as gym

    import stratagym  # noqa: F401

    browser = gym.make("stratagym/WebShopBrowser-v0").unwrapped
    text = gym.make("stratagym/WebShop-v0").unwrapped
    yield browser, text
    browser.close()
    text.close()


def _same(a, b):
    assert a[0] == b[0], f"observations differ:\n{a[0]}\n{b[0]}"
    if len(a) > 2:  # step: reward, terminated, truncated
        assert a[1:4] == b[1:4]
    assert a[-1] == b[-1]


def test_server_is_local(envs):
    browser, _ = envs
    assert browser.base_url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("task_index", [0, 5, 11])
def test_oracle_script_gives_identical_trajectories(envs, task_index):
    browser, text = envs
    agent = OracleAgent(text)
    b, t = browser.reset(options={"task_index": task_index}), text.reset(options={"task_index": task_index})
    _same(b, t)
    obs, info = t
    for _ in range(10):
        action = agent.act([obs], [info], [EpisodeKey(info["task_id"], None)])[0]
        b, t = browser.step(action), text.step(action)
        _same(b, t)
        obs, reward, term, trunc, info = t
        if term:
            break
    assert term and reward == 1.0 and b[-1]["won"]


def test_wandering_script_gives_identical_trajectories(envs):
    browser, text = envs
    goal = text.goal(text.task_ids()[7])
    script = [
        "search[" + goal["query"] + " <b>bold</b>]", "click[next >]", "click[next >]",
        "click[< prev]", "FIRST_PRODUCT", "click[features]", "click[< prev]", "click[reviews]",
        "click[back to search]", "search[  " + goal["query"].upper() + "\tdeluxe ]", "FIRST_PRODUCT", "OPTION",
        "click[description]", "click[< prev]", "click[buy now]",
    ]  # 15 actions: the env's step limit
    b, t = browser.reset(options={"task_index": 7}), text.reset(options={"task_index": 7})
    _same(b, t)
    info = t[-1]
    for action in script:
        if action == "FIRST_PRODUCT":
            action = next(a for a in info["admissible_actions"] if a.startswith("click[b0"))
        elif action == "OPTION":
            fixed = {"click[back to search]", "click[< prev]", "click[description]", "click[features]",
                     "click[reviews]", "click[buy now]"}
            action = next((a for a in info["admissible_actions"] if a not in fixed), "click[nothing]")
        b, t = browser.step(action), text.step(action)
        _same(b, t)
        info = t[-1]
        if t[2] or t[3]:
            break
    assert t[2] and 0.0 <= t[1] <= 1.0 and info["search_count"] == 2
    assert b[-1]["reward_info"] == info["reward_info"] and b[-1]["purchased_options"] == info["purchased_options"]


def test_injected_markup_is_shown_not_run(envs):
    browser, _ = envs
    browser.reset(options={"task_index": 0})
    obs, *_ = browser.step('search[<script>window.pwned=1</script><img src=x onerror="window.pwned=2">]')
    driver = browser.driver
    assert driver.execute_script("return typeof window.pwned") == "undefined"
    assert driver.title == 'WebShop: results for <script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in driver.page_source
    assert driver.find_elements("tag name", "img") == []
