"""``stratagym/WebShopBrowser-v0``: WebShop through a real browser.

The env serves the WebShop site (:mod:`stratagym.envs.webshop.web`) from a thread on 127.0.0.1 (a free
port), or talks to one already running (``base_url``), and drives it with Selenium and headless
Chromium (Debian's ``/usr/bin/chromium`` + ``/usr/bin/chromedriver`` by default; Selenium Manager is
never used). Each step reads the page back from the live DOM: the observation is the page's visible text
nodes joined by ``" [SEP] "`` (each stripped, as the text mode does), the admissible actions are
the elements carrying ``data-key``, and a purchase's score is read from the score element. So for the
same actions it gives the same observations, admissible actions and rewards as ``WebShop-v0`` (a test
checks this on several goals), at browser speed (~0.1-0.3 s per action).

``search[...]`` types into the search box (by setting its value, so any text is typed exactly) and
clicks the Search button; from a page without one it first clicks "Back to Search" (WebShop runs a search
from any page). ``click[...]`` clicks the element; ``click[search]`` does nothing (as in WebShop).
Invalid actions touch nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from stratagym.envs.core import ConfigError, StepResult
from stratagym.envs.webshop.site import BACK_TO_SEARCH, SEARCH_BUTTON, SEP, clean_text, clickable_order, is_shown
from stratagym.envs.webshop.site_config import SiteConfig
from stratagym.envs.webshop.text_env import WebShopEnvBase, parse_action
from stratagym.serving import serve_in_thread

__all__ = ["WebShopBrowserEnv", "chrome_options", "CHROMIUM", "CHROMEDRIVER"]

CHROMIUM = os.environ.get("STRATAGYM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("STRATAGYM_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROME_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--disable-extensions", "--window-size=1280,1024",
)

# Reads the page in one round trip: visible text nodes, clickables (with their elements), search bar,
# page kind and, on the score page, the purchase.
_READ_PAGE_JS = r"""
const SKIP = new Set(['SCRIPT', 'STYLE', 'TITLE', 'HEAD', 'META', 'NOSCRIPT', 'TEMPLATE']);
const texts = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walker.nextNode()) {
  const node = walker.currentNode;
  if (!SKIP.has(node.parentElement.tagName)) texts.push(node.data);
}
const items = Array.from(document.querySelectorAll('[data-key]'));
const score = document.getElementById('score');
return {
  texts: texts,
  keys: items.map(e => e.getAttribute('data-key')),
  roles: items.map(e => e.getAttribute('data-role')),
  elements: items,
  search: document.getElementById('search_input') !== null,
  page: document.body.getAttribute('data-page') || '',
  score: score ? score.getAttribute('data-score') : null,
  asin: score ? score.getAttribute('data-asin') : null,
  options: score ? score.getAttribute('data-options') : null,
  reward_info: score ? score.getAttribute('data-reward-info') : null,
};
"""


def chrome_options(user_data_dir: str, *, binary: str = CHROMIUM):
    from selenium.webdriver.chrome.options import Options

    opts = Options()
    opts.binary_location = binary
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={user_data_dir}")
    return opts


class WebShopBrowserEnv(WebShopEnvBase):
    """WebShop driven through headless Chromium; same pages, actions and rewards as the text mode.

    Args (besides :class:`~stratagym.envs.webshop.text_env.WebShopTextEnv`'s data/search options):
        base_url: a running WebShop site (``stratagym serve webshop``) on the same catalog; default:
            serve one from this process on 127.0.0.1 and a free port.
        chromium, chromedriver: browser and driver binaries.
        page_timeout: seconds to wait for a page.
    """

    max_observation_chars = 1 << 18
    max_action_chars = 4096
    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        split: str = "test",
        *,
        base_url: str | None = None,
        chromium: str = CHROMIUM,
        chromedriver: str = CHROMEDRIVER,
        page_timeout: float = 20.0,
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
        for path, what in ((chromium, "chromium"), (chromedriver, "chromedriver")):
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ConfigError(
                    f"{what} not found at {path}; install it (Debian: apt-get install chromium chromium-driver) "
                    f"or pass {what}=/path (env STRATAGYM_{what.upper()})"
                )
        try:
            import selenium  # noqa: F401
        except ImportError as exc:
            raise ConfigError("the browser env needs `pip install selenium flask` (stratagym[webshop])") from exc
        self._open_site(split, SiteConfig.from_options(locals()))
        self.list_click_search = bool(list_click_search)
        self._chromium, self._chromedriver = chromium, chromedriver
        self.page_timeout = float(page_timeout)
        self._base_url = base_url.rstrip("/") if base_url else None
        self._server = None
        self._driver = None
        self._profile: str | None = None
        self._state: dict[str, Any] = {}

    # ---- lifecycle ------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self._base_url is None:
            from stratagym.envs.webshop.web import create_app  # lazy: flask (~250 ms), only once a page is asked for

            self._server = serve_in_thread(create_app(self.site, split="all"), name="webshop-server")
            self._base_url = self._server.url
        return self._base_url

    @property
    def driver(self):
        if self._driver is None:
            os.environ.setdefault("SE_OFFLINE", "true")
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service

            self._profile = tempfile.mkdtemp(prefix="stratagym-chromium-")
            self._driver = webdriver.Chrome(
                service=Service(self._chromedriver), options=chrome_options(self._profile, binary=self._chromium)
            )
            self._driver.set_page_load_timeout(self.page_timeout)
        return self._driver

    def close(self) -> None:
        if self._driver is not None:
            try:
                self._driver.quit()
            finally:
                self._driver = None
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None
        if self._server is not None:
            self._server.stop()
            self._server = None
        super().close()

    def __del__(self) -> None:  # best effort: never leave a browser behind
        try:
            self.close()
        except Exception:
            pass

    # ---- TextEnv API ----------------------------------------------------------------------------
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        from urllib.parse import urlencode

        self._goal = self.catalog.goal(task_id)
        self.driver.get(f"{self.base_url}/start?" + urlencode({"task_id": task_id}))
        self._read()
        return self._obs(), self._extra()

    def _step(self, action: str) -> StepResult:
        name, arg = parse_action(action)
        state = self._state
        if name == "search" and arg is not None and arg != "":
            if not state.get("search"):
                back = state.get("clickables", {}).get(BACK_TO_SEARCH.lower())
                if back is None:
                    return StepResult(self._obs(), action_valid=False, info=self._extra())
                self._navigate(back)
            box = self.driver.find_element("id", "search_input")
            self.driver.execute_script("arguments[0].value = arguments[1];", box, arg)
            self._navigate(self._state["clickables"][SEARCH_BUTTON.lower()])
            return StepResult(self._obs(), tool="search", info=self._extra())
        if name == "click" and arg is not None:
            key = arg.lower()
            element = state.get("clickables", {}).get(key)
            if element is not None and key == SEARCH_BUTTON.lower() and self.list_click_search:
                return StepResult(self._obs(), info=self._extra())  # WebShop ignores it; verl-agent lists it
            if element is not None and key != SEARCH_BUTTON.lower():
                self._navigate(element)
                if self._state.get("page") == "done" and self._state.get("score") is not None:
                    return self._bought()
                return StepResult(self._obs(), info=self._extra())
        return StepResult(self._obs(), action_valid=False, info=self._extra())

    def admissible_actions(self) -> list[str] | None:
        if not self._state:
            return None
        actions = ["search[<your query>]"] if self._state.get("search") else []
        actions.extend(f"click[{k}]" for k in self._state["clickables"]
                       if self.list_click_search or k != SEARCH_BUTTON.lower())
        return actions

    # ---- browser helpers ------------------------------------------------------------------------
    def _navigate(self, element) -> None:
        """Click ``element`` and wait until the page it leads to has fully loaded.

        The current document is marked with a window variable before the click; a new document does not
        have it. Waiting for "marker gone and readyState complete" needs no handle on an old element,
        whose staleness Chromium sometimes reports as an "unknown error" ("Node with given id does not
        belong to the document") instead of a stale-element error; such transient driver errors while
        the page is swapped are retried until ``page_timeout``.
        """
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.execute_script("window.__stratagymPage = true;")
        element.click()
        wait = WebDriverWait(self.driver, self.page_timeout, ignored_exceptions=(WebDriverException,))
        wait.until(lambda d: d.execute_script(
            "return window.__stratagymPage === undefined && document.readyState === 'complete';"))
        self._read()

    def _read(self) -> None:
        raw = self.driver.execute_script(_READ_PAGE_JS)
        texts = [clean_text(x, self.site.collapse_whitespace) for x in raw["texts"] if is_shown(x)]
        self._state = {
            "text": SEP.join(texts),
            # same order and precedence as Page.clickables
            "clickables": clickable_order(list(zip(raw["keys"], raw["roles"], raw["elements"]))),
            "search": bool(raw["search"]),
            "page": raw["page"],
            "score": raw["score"],
            "asin": raw["asin"],
            "options": raw["options"],
            "reward_info": raw["reward_info"],
        }

    def _obs(self) -> str:
        return self._state.get("text", "")

    def _extra(self) -> dict[str, Any]:
        return {"instruction": self._goal.get("instruction_text", ""), "page": self._state.get("page", "")}

    def _bought(self) -> StepResult:
        score = float(self._state["score"])
        extra = self._extra()
        extra.update(
            purchased_asin=self._state["asin"],
            purchased_options=json.loads(self._state["options"] or "{}"),
            reward_info=json.loads(self._state["reward_info"] or "{}"),
        )
        return StepResult(self._obs(), reward=score, terminated=True, won=score == 1.0, score=score, info=extra)
