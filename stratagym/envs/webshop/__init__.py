"""WebShop: a web-shopping environment (Yao et al., 2022) in text mode and as a real site + browser.

* ``stratagym/WebShop-v0``: text mode (:class:`~stratagym.envs.webshop.text_env.WebShopTextEnv`).
* ``stratagym/WebShopBrowser-v0``: the same pages served by a local Flask site and driven through
  headless Chromium with Selenium (:class:`~stratagym.envs.webshop.browser_env.WebShopBrowserEnv`).

Both use the bundled catalog under ``data/webshop/`` by default (or WebShop's own data files), product
search with BM25 (bm25s by default, Pyserini/Lucene selectable) and WebShop's reward
(:mod:`stratagym.envs.webshop.reward`). This module stays import-light: only the specs live here.
"""

from __future__ import annotations

from stratagym.envs.metric_spec import MetricSpec
from stratagym.envs.registry import EnvSpec

#: What the rest of stratagym knows about both WebShop envs (see EnvSpec): a search tool, listed
#: actions, the think/action prompt, success = a full score, ranked by WebShop's score.
_COMMON = dict(
    tools=("search",),
    lists_actions=True,
    prompt_template="think_action",
    primary_metric="webshop_score",
    success_from_score=True,
    record_info_keys=("reward_breakdown",),
    # WebShop's "score" in the paper: the mean reward x 100
    metrics=(MetricSpec("webshop_score", "mean", field="total_reward", scale=100.0),),
    behaviour_version=1,  # bump with every change to what the env does (docs/protocol.md)
    data_kwargs=("data_dir", "items_path", "attrs_path", "human_ins_path", "reviews_path", "index_dir"),
    reward="webshop_reward (WebShop's get_reward: attributes, options, type, price)",
    board_columns=("success", "turns"),
)
_AGENTS = {
    "oracle": "stratagym.envs.webshop.agents:OracleAgent",
    "expert": "stratagym.envs.webshop.agents:InstructionExpert",
    "random": "stratagym.envs.webshop.agents:RandomShopper",
}

ENV_SPECS = [
    EnvSpec(
        cli="stratagym.envs.webshop.cli",
        id="stratagym/WebShop-v0",
        entry_point="stratagym.envs.webshop.text_env:WebShopTextEnv",
        description="WebShop text mode: search and click through a product catalog to buy what the instruction asks for",
        requires=("bm25s", "Stemmer", "rapidfuzz"),
        extra="webshop",
        agents=_AGENTS,
        **_COMMON,
    ),
    EnvSpec(
        cli="stratagym.envs.webshop.cli",
        id="stratagym/WebShopBrowser-v0",
        entry_point="stratagym.envs.webshop.browser_env:WebShopBrowserEnv",
        description="WebShop as a real local web site driven by headless Chromium (Selenium); same pages as the text mode",
        requires=("bm25s", "Stemmer", "rapidfuzz", "flask", "selenium"),
        requires_executables=("/usr/bin/chromium", "/usr/bin/chromedriver"),
        extra="webshop",
        agents=_AGENTS,
        max_parallel=1,
        neutral_kwargs=("base_url", "chromium", "chromedriver", "page_timeout"),
        **_COMMON,
    ),
]
