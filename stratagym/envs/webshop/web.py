"""The WebShop web site: Flask over :class:`~stratagym.envs.webshop.site.ShopSite`.

Every page is the same :class:`~stratagym.envs.webshop.site.Page` the text env shows, rendered to HTML
by one Jinja template (autoescaped: anything echoed, instructions and search queries included, is
escaped). The shopper's position lives in the URL, so any page can be shared or reloaded; the server
keeps only per-session facts (the goal, searches made, purchase and score).

URLs (``<sid>`` a session id)::

    GET  /                                   start page (links to a random or chosen goal)
    GET  /start?task_id=webshop-3            new session on that goal (or task_index=3; none: random)
    GET  /fixed_<n>                          WebShop-style session on goal n
    GET  /s/<sid>/                           search page
    GET  /s/<sid>/results?q=...&page=2       results page
    GET  /s/<sid>/item/<asin>?q=&page=&opt=  item page (opt: JSON object of chosen options)
    GET  /s/<sid>/item/<asin>/<Sub>?...      Description / Features / Reviews / Attributes
    POST /s/<sid>/buy/<asin>?q=&page=&opt=   purchase: the score page
    GET  /s/<sid>/state.json                 the session's goal id, searches, purchase and score

Every response carries ``X-Content-Type-Options: nosniff`` and a Content-Security-Policy (pages: no script;
JSON: nothing), so a purchased option's text in ``state.json`` is never sniffed into running markup.

The server binds 127.0.0.1 unless told otherwise (``stratagym serve webshop --host``).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, quote

from flask import Flask, abort, redirect, render_template, request
from markupsafe import escape

from stratagym.serving import add_flask_security_headers
from stratagym.envs.webshop.site import Page, ShopSite, View

__all__ = ["create_app", "view_url"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: The pages need their inline <style>, a data: favicon and forms posting back here; no script at all.
HTML_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
            "base-uri 'none'; frame-ancestors 'none'")
MAX_SESSIONS = 10_000


@dataclass
class Session:
    task_id: str
    goal: dict[str, Any]
    searches: int = 0
    done: bool = False
    score: float | None = None
    purchased: dict[str, Any] = field(default_factory=dict)


class SessionStore:
    """In-memory sessions, least recently used dropped beyond ``MAX_SESSIONS`` (thread-safe)."""

    def __init__(self, limit: int = MAX_SESSIONS):
        self.limit = limit
        self._data: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, session: Session, sid: str | None = None) -> str:
        sid = sid or secrets.token_urlsafe(9)
        with self._lock:
            self._data[sid] = session
            self._data.move_to_end(sid)
            while len(self._data) > self.limit:
                self._data.popitem(last=False)
        return sid

    def get(self, sid: str) -> Session | None:
        with self._lock:
            s = self._data.get(sid)
            if s is not None:
                self._data.move_to_end(sid)
            return s


def _opt_param(options: tuple[tuple[str, str], ...]) -> str:
    return json.dumps(dict(options), ensure_ascii=False, separators=(",", ":"))


def view_url(sid: str, view: View) -> str:
    """The URL that shows ``view`` in session ``sid`` (``done`` views: the purchase form's action)."""
    base = f"/s/{quote(sid, safe='')}"
    if view.kind == "results":
        return f"{base}/results?" + urlencode({"q": view.query, "page": view.page})
    if view.kind in ("item", "sub", "done"):
        params = urlencode({"q": view.query, "page": view.page, "opt": _opt_param(view.options)})
        asin = quote(view.asin, safe="")
        if view.kind == "item":
            return f"{base}/item/{asin}?{params}"
        if view.kind == "sub":
            return f"{base}/item/{asin}/{quote(view.sub, safe='')}?{params}"
        return f"{base}/buy/{asin}?{params}"
    return f"{base}/"


def _parse_options(raw: str | None) -> tuple[tuple[str, str], ...]:
    if not raw:
        return ()
    try:
        data = json.loads(raw)
    except (ValueError, TypeError):
        return ()
    if not isinstance(data, dict):
        return ()
    options = tuple((k, v) for k, v in data.items() if isinstance(k, str) and isinstance(v, str))
    for k, v in options:
        try:
            (k + v).encode("utf-8")
        except UnicodeEncodeError:  # JSON's "\ud800" escape: text no page can show
            raise ValueError(f"option {k.encode('utf-8', 'backslashreplace').decode()!r} is not valid Unicode text "
                             "(it holds a lone surrogate)") from None
    return options


def _page_no(raw: str | None) -> int:
    try:
        return max(1, min(int(raw or 1), 1000))
    except ValueError:
        return 1


def create_app(site: ShopSite, *, split: str = "all") -> Flask:
    """A Flask app serving ``site``; sessions draw goals from ``split``."""
    app = Flask(__name__, template_folder=str(TEMPLATES))
    add_flask_security_headers(app, HTML_CSP)
    sessions = SessionStore()
    catalog = site.catalog
    task_ids = catalog.task_ids(split)
    app.extensions["webshop_sessions"] = sessions
    app.extensions["webshop_site"] = site

    def render(sid: str, page: Page, *, breakdown: dict[str, Any] | None = None) -> str:
        selected = set(page.view.options)

        return render_template(
            "webshop_page.html",
            page=page,
            url=lambda v: view_url(sid, v),
            selected=lambda e: (e.group, e.key) in selected,
            search_action=f"/s/{quote(sid, safe='')}/results",
            options_json=json.dumps(dict(page.view.options), ensure_ascii=False),
            reward_info_json=json.dumps(breakdown or {}, ensure_ascii=False),
        )

    def session_or_404(sid: str) -> Session:
        s = sessions.get(sid)
        if s is None:
            abort(404, description="unknown or expired session; start a new one at /start")
        return s

    def new_session(task_id: str) -> str:
        return sessions.create(Session(task_id=task_id, goal=catalog.goal(task_id)))

    @app.get("/")
    def index() -> str:
        sample = task_ids[:5]
        links = "".join(f'<li><a href="/start?task_id={escape(t)}">{escape(t)}</a></li>' for t in sample)
        return (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>WebShop</title></head><body>"
            f"<h1>WebShop</h1><p>{len(task_ids)} goals, {len(catalog.products)} products.</p>"
            "<p><a href='/start'>Start with a random goal</a></p>"
            f"<form action='/start' method='get'><input name='task_id' placeholder='webshop-0'><button>Start</button></form>"
            f"<ul>{links}</ul></body></html>"
        )

    @app.get("/start")
    def start():
        task_id = request.args.get("task_id")
        index_arg = request.args.get("task_index")
        if task_id:
            if task_id not in catalog.by_task:
                abort(404, description=f"unknown task_id {task_id}")
        elif index_arg is not None:
            try:
                task_id = task_ids[int(index_arg)]
            except (ValueError, IndexError):
                abort(404, description="task_index out of range")
        else:
            task_id = task_ids[secrets.randbelow(len(task_ids))]
        return redirect(f"/s/{new_session(task_id)}/", code=303)

    @app.get("/fixed_<int:n>")
    def fixed(n: int):
        if not 0 <= n < len(catalog.goals):
            abort(404, description="goal index out of range")
        return redirect(f"/s/{new_session(catalog.goals[n]['task_id'])}/", code=303)

    @app.get("/s/<sid>/")
    def search_page(sid: str) -> str:
        s = session_or_404(sid)
        return render(sid, site.render(View("search"), s.goal["instruction_text"]))

    @app.get("/s/<sid>/results")
    def results(sid: str) -> str:
        s = session_or_404(sid)
        query = request.args.get("q", "")
        if request.args.get("src") == "search":
            s.searches += 1
        view = View("results", query=query.lower(), page=_page_no(request.args.get("page")))
        return render(sid, site.render(view, s.goal["instruction_text"]))

    def item_view(kind: str, asin: str, sub: str = "") -> View:
        if asin not in catalog.by_asin:
            abort(404, description="unknown product")
        try:
            options = _parse_options(request.args.get("opt"))
        except ValueError as exc:
            abort(400, description=f"bad opt parameter: {exc}")
        return View(kind, query=request.args.get("q", ""), page=_page_no(request.args.get("page")), asin=asin,
                    options=options, sub=sub)

    @app.get("/s/<sid>/item/<asin>")
    def item(sid: str, asin: str) -> str:
        s = session_or_404(sid)
        return render(sid, site.render(item_view("item", asin), s.goal["instruction_text"]))

    @app.get("/s/<sid>/item/<asin>/<sub>")
    def item_sub(sid: str, asin: str, sub: str) -> str:
        s = session_or_404(sid)
        return render(sid, site.render(item_view("sub", asin, sub), s.goal["instruction_text"]))

    @app.post("/s/<sid>/buy/<asin>")
    def buy(sid: str, asin: str) -> str:
        s = session_or_404(sid)
        view = item_view("done", asin)
        score, breakdown = site.purchase(s.goal, asin, view.options_dict())
        s.done, s.score = True, score
        s.purchased = {"asin": asin, "options": view.options_dict(), "reward_info": breakdown}
        return render(sid, site.render(view, s.goal["instruction_text"], score=score), breakdown=breakdown)

    @app.get("/s/<sid>/state.json")
    def state(sid: str):
        s = session_or_404(sid)
        return {"task_id": s.task_id, "searches": s.searches, "done": s.done, "score": s.score, "purchased": s.purchased}

    return app
