"""Scripted WebShop agents.

:class:`OracleAgent` knows each task's goal (looked up by ``info["task_id"]`` in the env's catalog) and
shops like a careful human: search the goal product's title, page through the results to its asin,
open it, click each goal option, buy. It scores 1 on every bundled goal (a test pins this).

:class:`InstructionExpert` (registered as ``expert``) shops from what the agent sees alone: it searches the
instruction's words, opens the result whose visible title and price best fit the instruction, clicks the
options the instruction names and buys. It is the demonstrator an imitating model can copy (the oracle's
title searches cannot be learned: the title is hidden).

:class:`RandomShopper` (registered as ``random``) is the uniform-random baseline made meaningful for
WebShop: on the search page it searches the instruction itself (the placeholder ``search[<your query>]``
that a blind random agent would pick finds nothing), elsewhere it clicks uniformly at random.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from stratagym.envs.episode import EpisodeKey, EpisodeRngs
from stratagym.envs.webshop.reward import normalize_color, token_set_ratio
from stratagym.envs.webshop.site import BACK_TO_SEARCH, END_BUTTON, NEXT_PAGE, PREV_PAGE, SUB_PAGES

__all__ = ["OracleAgent", "InstructionExpert", "RandomShopper", "instruction_query"]

_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars$")
_PRICE_LIMIT = re.compile(r"price lower than ([\d.]+) dollars")
_REQUEST = re.compile(r"^(?:i am looking for|i'm looking for|looking for|i want to buy|i would like|i want|i need|find me)"
                      r"(?: an?\b)?\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")
_PRICE = re.compile(r"\$([\d,]+(?:\.\d+)?)")
#: a ``text_rich`` button line, its label in group 1
_RICH_BUTTON = re.compile(r"^\s*\[(?:clicked )?button\] (.*) \[(?:clicked )?button_\]\s*$")
#: words that say nothing about which product fits ("i need a ... that is ... in ... color")
_FILLER = frozenset("a an and the that is in with for of to size color colour scent style i need want buy am looking "
                    "find me would like price lower than dollars".split())
#: the item page's buttons (everything else clickable there is an option value)
_ITEM_BUTTONS = frozenset(f"click[{b.lower()}]" for b in (BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, END_BUTTON, *SUB_PAGES))


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


def instruction_query(instruction: str) -> str:
    """The search an instruction-reading shopper types: the instruction without its price clause and its
    opening request ("i need", "find me a", ...), as WebShop's human shoppers search with its words."""
    return _REQUEST.sub("", _PRICE_CLAUSE.sub("", instruction.strip())).strip() or instruction.strip()


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _contains_phrase(words: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    return n > 0 and any(list(words[i:i + n]) == list(phrase) for i in range(len(words) - n + 1))


def _click_arg(action: str) -> str:
    """``"click[13.5 fl oz]"`` -> ``"13.5 fl oz"``."""
    return action[len("click["):-1] if action.startswith("click[") and action.endswith("]") else action


def _parse_results(observation: str, admissible: Sequence[str]) -> list[tuple[str, str, float | None]]:
    """The (click action, title, lowest price) of each product on a results page, in the page's order,
    read from the observation in either of WebShop's text modes: ``text`` lists each result as
    ``ASIN [SEP] title [SEP] $price``, ``text_rich`` as the lines ``[button] ASIN [button_]`` (``[clicked
    button]`` once opened), title, price."""
    if "[SEP]" in observation:
        parts = [p.strip() for p in observation.split("[SEP]")]
    else:
        parts = [_RICH_BUTTON.sub(r"\1", line).strip() for line in observation.splitlines() if line.strip()]
    products = {_click_arg(a) for a in admissible if a.startswith("click[") and a not in _ITEM_BUTTONS}
    found = []
    for i, part in enumerate(parts[:-1]):
        if part.lower() in products:
            title = parts[i + 1]
            prices = [float(m.replace(",", "")) for m in _PRICE.findall(parts[i + 2])] if i + 2 < len(parts) else []
            found.append((f"click[{part.lower()}]", title, min(prices) if prices else None))
    return found


class InstructionExpert:
    """An expert that uses only what the agent sees: the instruction, the page and its listed actions.

    * search page: ``search[<the instruction's words>]`` (:func:`instruction_query`);
    * results page: open the product whose title holds most of the instruction's content words, among
      those priced within the instruction's limit when any is (ties: the search engine's order);
    * item page: click each listed option value the instruction names as a phrase (a value that is part
      of a longer named value, "white" in "black | white", is not clicked), then ``click[buy now]``.

    It never looks at the goal's hidden product, attributes or options, so a model can learn to do what it
    does. One instance acts for a batch; per episode it remembers the options it clicked (keyed by
    :class:`EpisodeKey`, reset when ``info["step"] == 0``). :meth:`act_with_reasons` also says why, in one
    sentence built from the instruction and the page (the think text of reasoned demonstrations).
    """

    def __init__(self, env: gym.Env | None = None, *, seed: int = 0):
        self._clicked: dict[EpisodeKey, set[str]] = {}

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        return [action for _, action in self.act_with_reasons(observations, infos, episodes)]

    def act_with_reasons(self, observations: Sequence[str], infos: Sequence[dict[str, Any]],
                         episodes: Sequence[EpisodeKey]) -> list[tuple[str, str]]:
        """``(reason, action)`` per episode: the action :meth:`act` takes and one sentence that says why from
        what the page shows (the demonstrations' think text with ``demos.reasons``)."""
        return [self._one(obs, info, episode) for obs, info, episode in zip(observations, infos, episodes)]

    def _one(self, observation: str, info: dict[str, Any], episode: EpisodeKey) -> tuple[str, str]:
        if info.get("step", 0) == 0:
            self._clicked[episode] = set()
        instruction = info.get("instruction", "")
        admissible = info.get("admissible_actions") or []
        if "search[<your query>]" in admissible:
            return "I search with the words of the instruction.", f"search[{instruction_query(instruction)}]"
        page = info.get("page")
        if page == "results":
            results = _parse_results(observation, admissible)
            best = self.pick_result(instruction, results)
            if best is None:
                return "No product is listed here; I go back to the search.", "click[back to search]"
            title = next(t for a, t, _ in results if a == best)
            return f"The result that fits the instruction best is {title}.", best
        if page == "item":
            clicked = self._clicked.setdefault(episode, set())
            named = self.option_clicks(instruction, admissible)
            values = ", ".join(_click_arg(a) for a in named)
            for option in named:
                if option not in clicked:
                    chosen = ", ".join(_click_arg(a) for a in named if a in clicked) or "none"
                    clicked.add(option)
                    return (f"The instruction asks for the options {values}; chosen so far: {chosen}. "
                            f"I choose {_click_arg(option)}."), option
            if named:
                return f"The instruction asks for the options {values}, and all are chosen. I buy it.", "click[buy now]"
            return "The instruction names none of the listed options. I buy it.", "click[buy now]"
        if page == "sub":
            return "I go back to the product.", "click[< prev]"
        if "click[buy now]" in admissible:
            return "I buy it.", "click[buy now]"
        return "I take the first listed action.", admissible[0] if admissible else "click[back to search]"

    @staticmethod
    def pick_result(instruction: str, results: Sequence[tuple[str, str, float | None]]) -> str | None:
        """The click of the result that best fits ``instruction`` (see the class docstring), or None."""
        if not results:
            return None
        limit = _PRICE_LIMIT.search(instruction)
        cap = float(limit.group(1)) if limit else None
        wanted = {w for w in _words(_PRICE_CLAUSE.sub("", instruction)) if w not in _FILLER}

        def fit(item: tuple[int, tuple[str, str, float | None]]) -> tuple[int, int, int]:
            rank, (_, title, price) = item
            affordable = cap is None or (price is not None and price <= cap)
            return (int(affordable), len(wanted & set(_words(title))), -rank)

        return max(enumerate(results), key=fit)[1][0]

    @staticmethod
    def option_clicks(instruction: str, admissible: Sequence[str]) -> list[str]:
        """The listed option clicks whose value the instruction names as a phrase, longest values first,
        leaving out a value contained in a longer named one."""
        words = _words(_PRICE_CLAUSE.sub("", instruction))
        named = [(a, _words(_click_arg(a))) for a in admissible
                 if a.startswith("click[") and a not in _ITEM_BUTTONS]
        named = [(a, w) for a, w in named if _contains_phrase(words, w)]
        named.sort(key=lambda aw: -len(aw[1]))
        kept: list[tuple[str, list[str]]] = []
        for action, w in named:
            if not any(_contains_phrase(longer, w) for _, longer in kept):
                kept.append((action, w))
        return [a for a, _ in kept]


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
