"""Scripted WebShop agents.

:class:`OracleAgent` knows each task's goal (looked up by ``info["task_id"]`` in the env's catalog) and
shops like a careful human: search the goal product's title, page through the results to its asin,
open it, click each goal option, buy. It scores 1 on every bundled goal (a test pins this).

:class:`RandomShopper` (registered as ``random``) is the uniform-random baseline made meaningful for
WebShop: on the search page it searches the instruction itself (the placeholder ``search[<your query>]``
that a blind random agent would pick finds nothing), elsewhere it clicks uniformly at random.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from stratagym.envs.core import EpisodeKey, EpisodeRngs
from stratagym.envs.webshop.reward import normalize_color, token_set_ratio

__all__ = ["OracleAgent", "RandomShopper"]

_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars$")


class OracleAgent:
    """Buys the goal's product with the goal's options through ordinary search/click actions.

    One instance acts for a batch of envs: it reads the goal from ``info["task_id"]`` and keeps, per
    episode (keyed by its :class:`EpisodeKey`, never by batch position), which options it still has to
    click (reset when ``info["step"] == 0``).
    """

    def __init__(self, env: gym.Env, *, seed: int = 0):
        self.env = env.unwrapped
        self.catalog = self.env.catalog
        self._todo: dict[EpisodeKey, list[str]] = {}

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        return [self._one(episode, info) for episode, info in zip(episodes, infos)]

    def option_clicks(self, goal: dict[str, Any]) -> list[str]:
        """The product option values that best match each goal option (WebShop's option matching)."""
        product = self.catalog.by_asin[goal["asin"]]
        goal_options = goal["goal_options"]
        wanted = list(goal_options.values()) if isinstance(goal_options, dict) else list(goal_options)
        clicks: list[str] = []
        for g in wanted:
            best, best_score = None, -1
            for values in product["options"].values():
                for v in values:
                    s = 1000 if v == g else token_set_ratio(normalize_color(v), normalize_color(g))
                    if s > best_score:
                        best, best_score = v, s
            if best is not None and best not in clicks:
                clicks.append(best)
        return clicks

    def _one(self, episode: EpisodeKey, info: dict[str, Any]) -> str:
        goal = self.catalog.goal(info["task_id"])
        asin = goal["asin"]
        if info.get("step", 0) == 0:
            self._todo[episode] = self.option_clicks(goal)
        admissible = info.get("admissible_actions") or []
        page = info.get("page")
        if "search[<your query>]" in admissible:
            return f"search[{self.catalog.by_asin[asin]['Title'].lower()}]"
        if page == "results":
            if f"click[{asin.lower()}]" in admissible:
                return f"click[{asin.lower()}]"
            # WebShop offers "Next >" on every results page, past the last result too: page on only
            # while this page lists products
            nav = {"click[back to search]", "click[< prev]", "click[next >]"}
            if "click[next >]" in admissible and any(a not in nav for a in admissible):
                return "click[next >]"
            return "click[back to search]"
        if page == "sub":
            return "click[< prev]"
        if page == "item":
            todo = self._todo.get(episode, [])
            while todo:
                value = todo.pop(0)
                if f"click[{value}]" in admissible:
                    return f"click[{value}]"
            return "click[buy now]"
        return admissible[0] if admissible else "click[buy now]"


class RandomShopper:
    """Searches the instruction (price clause dropped), then clicks uniformly at random."""

    def __init__(self, env: gym.Env | None = None, *, seed: int = 0):
        self.rngs = EpisodeRngs(seed)

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        return [self._one(info, self.rngs.get(episode, info)) for episode, info in zip(episodes, infos)]

    def _one(self, info: dict[str, Any], rng: np.random.Generator) -> str:
        admissible = info.get("admissible_actions") or []
        if "search[<your query>]" in admissible:
            return f"search[{_PRICE_CLAUSE.sub('', info.get('instruction', ''))}]"
        if not admissible:
            return "click[back to search]"
        return str(admissible[int(rng.integers(len(admissible)))])
