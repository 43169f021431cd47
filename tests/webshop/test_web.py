"""The Flask site without a browser: HTML text equals the text env's pages; escaping; sessions; CLI."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from stratagym.envs.webshop.site import SEP, View, clean_text
from stratagym.envs.webshop.text_env import WebShopTextEnv, build_site
from stratagym.envs.webshop.web import create_app, view_url


class VisibleText(HTMLParser):
    """Text nodes outside head/title/script/style, like WebShop's tag_visible (and the browser env)."""

    SKIP = {"script", "style", "title", "head", "meta"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.texts: list[str] = []
        self.keys: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-key" in attrs:
            self.keys.append(attrs["data-key"])
        if tag not in ("meta", "link", "input", "br"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()

    def handle_data(self, data):
        if not (set(self.stack) & self.SKIP) and clean_text(data):
            self.texts.append(clean_text(data))


def visible(html: str) -> tuple[str, list[str]]:
    p = VisibleText()
    p.feed(html)
    return SEP.join(p.texts), p.keys


@pytest.fixture(scope="module")
def client():
    app = create_app(build_site())
    app.testing = True
    return app.test_client()


def start(client, task_id="webshop-0"):
    r = client.get(f"/start?task_id={task_id}")
    assert r.status_code == 303
    return r.headers["Location"].split("/s/")[1].strip("/")


def test_pages_match_the_text_env(client):
    env = WebShopTextEnv()
    obs, info = env.reset(options={"task_id": "webshop-0"})
    sid = start(client)
    script = ["search[shampoo argan]", "click[next >]", None, "click[description]", "click[< prev]", None, "click[buy now]"]
    html = client.get(f"/s/{sid}/").get_data(as_text=True)
    for action in script:
        text, keys = visible(html)
        assert text == obs
        # the same clickables; their order is WebShop's action order in the env, page order on the site
        assert sorted(f"click[{k}]" for k in dict.fromkeys(keys) if k != "search") == sorted(
            a for a in info["admissible_actions"] if a.startswith("click[") and a != "click[search]")
        if action is None:  # click the first product link / the first option
            action = next(a for a in info["admissible_actions"] if a.startswith("click[b0")) if env.view.kind == "results" else \
                next((a for a in info["admissible_actions"][2:] if "[" in a and a not in (
                    "click[description]", "click[features]", "click[reviews]", "click[buy now]")), "click[buy now]")
        obs, r, term, trunc, info = env.step(action)
        url = view_url(sid, env.view)
        if action.startswith("search["):
            html = client.get(f"/s/{sid}/results", query_string={"q": action[7:-1], "src": "search"}).get_data(as_text=True)
        elif term:
            html = client.post(url).get_data(as_text=True)
        else:
            html = client.get(url).get_data(as_text=True)
        if term:
            assert visible(html)[0] == obs
            score = float(re.search(r'data-score="([^"]+)"', html).group(1))
            assert score == r
            break
    state = client.get(f"/s/{sid}/state.json").get_json()
    assert state["done"] and state["score"] == r and state["searches"] == 1 and state["task_id"] == "webshop-0"


def test_search_query_is_escaped(client):
    sid = start(client)
    q = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    html = client.get(f"/s/{sid}/results", query_string={"q": q}).get_data(as_text=True)
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    # the query travels escaped in every link of the page
    assert all("<script>" not in href for href in re.findall(r'href="([^"]*)"', html))


def test_instruction_is_escaped(tiny_dir):
    app = create_app(build_site(data_dir=str(tiny_dir)))
    client = app.test_client()
    goal = next(g for g in app.extensions["webshop_site"].catalog.goals if "<script>" in g["instruction_text"])
    sid = start(client, goal["task_id"])
    html = client.get(f"/s/{sid}/").get_data(as_text=True)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert visible(html)[0].split(SEP)[2] == goal["instruction_text"]  # shown as text, verbatim


def test_urls_are_shareable_and_bad_input_is_handled(client):
    sid = start(client, "webshop-1")
    site = client.application.extensions["webshop_site"]
    asin = site.catalog.goals[1]["asin"]
    name, values = next(iter(site.catalog.by_asin[asin]["options"].items()), ("size", ["x"]))
    view = View("item", query="q", page=1, asin=asin, options=((name, values[0]),))
    r = client.get(view_url(sid, view))
    assert r.status_code == 200 and 'class="option selected"' in r.get_data(as_text=True)
    other = start(client, "webshop-1")
    assert visible(client.get(view_url(other, view)).get_data(as_text=True))[0] == \
        visible(r.get_data(as_text=True))[0]  # same URL in another session: same page
    assert client.get(f"/s/{sid}/item/{asin}?opt=not-json&page=zz").status_code == 200
    assert client.get(f"/s/{sid}/item/B0NOTHERE0").status_code == 404
    assert client.get("/s/nosuchsession/").status_code == 404
    assert client.get("/start?task_id=nope").status_code == 404
    assert client.get("/start?task_index=99999").status_code == 404
    assert client.get(f"/s/{sid}/buy/{asin}").status_code == 405  # purchases are POSTs
    assert client.get("/fixed_3").status_code == 303
    assert client.get("/").status_code == 200


def test_cli_registers_serve_webshop():
    from typer.testing import CliRunner

    from stratagym.cli import _load_plugins, app

    _load_plugins()
    result = CliRunner().invoke(app, ["serve", "webshop", "--help"])
    assert result.exit_code == 0 and "127.0.0.1" in result.output
