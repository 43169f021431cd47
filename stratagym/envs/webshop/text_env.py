"""``stratagym/WebShop-v0``: WebShop in text mode.

Observations are WebShop's simple text pages (visible strings joined by ``" [SEP] "``), or with
``observation_mode="text_rich"`` WebShop's rich text mode; actions are ``search[<keywords>]`` (from any
page, as in WebShop's ``WebAgentTextEnv.step``; ``info["admissible_actions"]`` lists it where there is a
search bar) and ``click[<key>]`` for a key listed in ``info["admissible_actions"]``. ``click[search]`` is
listed on the search page (verl-agent lists it) and, as in WebShop, does nothing. Any other text is an
invalid step: reward 0, nothing changes, the same page comes back. "Buy Now" ends the episode with
WebShop's reward. docs/fidelity.md lists what matches WebShop and the options that differ from it.

Extra info keys: ``instruction`` (the goal text), ``page`` (search | results | item | sub | done),
and after a purchase ``purchased_asin``, ``purchased_options`` and ``reward_info`` (WebShop's verbose
breakdown).
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

from stratagym.envs.core import ConfigError, StepResult, TextEnv
from stratagym.envs.webshop.reward import noun_backend_name
from stratagym.envs.webshop.site import BACK_TO_SEARCH, SEARCH_BUTTON, Page, View
from stratagym.envs.webshop.site_config import SiteConfig, build_site, resolve_search_backend

# SiteConfig, build_site and resolve_search_backend live in site_config.py; imported here for old callers
__all__ = ["WebShopEnvBase", "WebShopTextEnv", "parse_action", "build_site", "OBSERVATION_MODES", "resolve_search_backend",
           "SiteConfig"]

#: WebShop's text observation modes (``WebAgentTextEnv.observation``); ``html`` and ``url`` are not offered.
OBSERVATION_MODES = ("text", "text_rich")

_ACTION_RE = re.compile(r"(.+)\[(.+)\]")


def parse_action(action: str) -> tuple[str, str | None]:
    """WebShop's ``parse_action``: ``"click[Buy Now]"`` -> ``("click", "Buy Now")``.

    Surrounding whitespace is ignored and the action name is case-insensitive; like WebShop's regex the
    argument cannot span lines.
    """
    m = _ACTION_RE.match(action.strip())
    if m is None:
        return action.strip().lower(), None
    name, arg = m.groups()
    return name.strip().lower(), arg


class WebShopEnvBase(TextEnv):
    """What both WebShop front ends share: the site (catalog, search engine, page model) and a split's goals."""

    #: the tools protocol (``protocol="tools"``): one tool, ``act(command)``
    tool_set = "stratagym.envs.webshop.tools:TOOLS"

    def _open_site(self, split: str, config: SiteConfig) -> None:
        self._site_config = config
        self.site = build_site(config)
        self.catalog = self.site.catalog
        self.split = split
        self._ids = self.catalog.task_ids(split)  # raises ConfigError on a bad split
        if not self._ids:
            raise ConfigError(f"the WebShop split {split!r} has no goals in {self.catalog.source}")
        self._goal: dict[str, Any] = {}

    def task_ids(self) -> Sequence[str]:
        return self._ids

    def protocol_data(self) -> dict[str, Any]:
        """The catalog as played (products, prices, goals, splits) by content, the search backend and the
        title-noun backend the reward uses, for the protocol fingerprint (paths left out)."""
        import hashlib
        import json

        cat = self.catalog
        digest = getattr(cat, "_protocol_digest", None)
        if digest is None:  # hashed once per catalog (shared by every env of the process)
            body = json.dumps({"products": cat.products, "prices": cat.prices, "goals": cat.goals, "splits": cat.splits},
                              sort_keys=True, ensure_ascii=False, default=str)
            digest = "sha256:" + hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
            object.__setattr__(cat, "_protocol_digest", digest)
        backend = resolve_search_backend(self._site_config.search_backend, self._site_config.items_path)
        nouns = noun_backend_name()
        libraries = ["rapidfuzz", *(["bm25s", "PyStemmer"] if backend == "bm25s" else ["pyserini"]),
                     *(["spacy"] if nouns not in ("fallback",) else [])]
        return {"catalog": digest, "search_backend": backend, "title_nouns": nouns, "libraries": libraries}

    def goal(self, task_id: str | None = None) -> dict[str, Any]:
        """The goal of ``task_id`` (default: the current task) in WebShop's goal form."""
        return self.catalog.goal(task_id or self._task_id or "")


class WebShopTextEnv(WebShopEnvBase):
    """WebShop text mode over the bundled catalog (or WebShop's own files).

    Args:
        split: ``test`` (default), ``eval``, ``train`` or ``all`` goals.
        data_dir: a directory in the bundled layout (default: ``data/webshop``).
        items_path, attrs_path, human_ins_path, reviews_path: WebShop's own files instead.
        human_goals: with WebShop's files, build goals from human instructions (else synthetic).
        search_backend: ``auto`` (default: ``pyserini`` with WebShop's own files, whose rankings it
            reproduces exactly; ``bm25s`` on the bundled catalog), ``bm25s`` (fast; top-10 overlap with
            Lucene about 0.93) or ``pyserini`` (Lucene on Java 21).
        title_nouns: ``auto`` | ``fallback`` | a spaCy model name (see :mod:`.reward`).
        show_attrs: show WebShop's "Attributes" sub-page button.
        observation_mode: ``text`` (WebShop's simple mode, default) or ``text_rich``.
        show_reviews: show the catalog's ratings and reviews (WebShop never loads them: off).
        collapse_whitespace: collapse whitespace runs inside page texts (WebShop keeps them: off).
        list_click_search: list ``click[search]`` on the search page, as verl-agent does (on).
        max_steps: turns before truncation (15, as verl-agent's WebShop runs).
    """

    max_observation_chars = 1 << 18
    max_action_chars = 4096

    def __init__(
        self,
        split: str = "test",
        *,
        data_dir: str | None = None,
        items_path: str | None = None,
        attrs_path: str | None = None,
        human_ins_path: str | None = None,
        reviews_path: str | None = None,
        human_goals: bool = True,
        num_products: int | None = None,
        search_backend: str = "auto",
        index_dir: str | None = None,
        title_nouns: Any = "auto",
        show_attrs: bool = False,
        observation_mode: str = "text",
        show_reviews: bool = False,
        collapse_whitespace: bool = False,
        list_click_search: bool = True,
        max_steps: int = 15,
        context_k: int = 4,
        render_mode: str | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        super().__init__(max_steps=max_steps, context_k=context_k, render_mode=render_mode, protocol=protocol, tool_parser=tool_parser)
        if observation_mode not in OBSERVATION_MODES:
            raise ConfigError(f"unknown WebShop observation_mode {observation_mode!r}; use one of {OBSERVATION_MODES}")
        self.observation_mode = observation_mode
        self.list_click_search = bool(list_click_search)
        self._open_site(split, SiteConfig.from_options(locals()))
        self._view = View("search")
        self._page: Page | None = None
        self._visited: set[str] = set()  # asins opened since reset / "Back to Search" (text_rich marks them)
        self._rng = random.Random(0)

    # ---- TextEnv API ----------------------------------------------------------------------------
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._goal = self.catalog.goal(task_id)
        self._rng = random.Random(int(self.np_random.integers(1 << 62)))  # for "<r>" searches
        self._visited = set()
        self._show(View("search"))
        return self._obs(), self._extra()

    def _step(self, action: str) -> StepResult:
        name, arg = parse_action(action)
        page = self._page
        assert page is not None
        # WebShop's step: a search runs from any page (browser.search needs no search bar)
        if name == "search" and arg is not None and arg != "":
            self._show(self.site.search_view(arg))
            return StepResult(self._obs(), tool="search", info=self._extra())
        if name == "click" and arg is not None:
            key = arg.lower()
            element = page.clickables.get(key)
            if element is not None and key == SEARCH_BUTTON.lower() and self.list_click_search:
                # WebShop ignores click[search] (step: action_arg != 'search'); verl-agent lists it, so
                # it is an admissible action that leaves the page as it is
                return StepResult(self._obs(), info=self._extra())
            if element is not None and key != SEARCH_BUTTON.lower() and element.target is not None:
                if element.role == "buy":
                    return self._buy(element.target)
                if key == BACK_TO_SEARCH.lower():
                    self._visited = set()  # WebShop re-creates the session's asin set on the index page
                elif element.role == "product":
                    self._visited.add(element.target.asin)
                self._show(element.target)
                return StepResult(self._obs(), info=self._extra())
        return StepResult(self._obs(), action_valid=False, info=self._extra())

    def admissible_actions(self) -> list[str] | None:
        if self._page is None:
            return None
        return self._page.admissible_actions(click_search=self.list_click_search)

    # ---- helpers --------------------------------------------------------------------------------
    def _show(self, view: View, score: float | None = None) -> None:
        self._page = self.site.render(view, self._goal["instruction_text"], score=score, rng=self._rng)
        self._view = self._page.view

    def _obs(self) -> str:
        assert self._page is not None
        if self.observation_mode == "text_rich":
            return self._page.rich_text(self._visited)
        return self._page.text

    def _extra(self) -> dict[str, Any]:
        return {"instruction": self._goal.get("instruction_text", ""), "page": self._view.kind}

    def _buy(self, target: View) -> StepResult:
        score, breakdown = self.site.purchase(self._goal, target.asin, target.options_dict())
        self._show(target, score=score)
        extra = self._extra()
        extra.update(purchased_asin=target.asin, purchased_options=target.options_dict(), reward_info=breakdown)
        return StepResult(self._obs(), reward=score, terminated=True, won=score == 1.0, score=score, info=extra)

    @property
    def view(self) -> View:
        return self._view
