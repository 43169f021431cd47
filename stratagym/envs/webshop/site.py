"""The WebShop site as a pure state machine: views, pages and clicks, shared by every front end.

One :class:`ShopSite` drives the text env, the Flask site and (through the Flask site) the browser env,
so all three show the same pages by construction:

* a :class:`View` is where the shopper is (search page, results page n for a query, an item with chosen
  options, one of its sub-pages, the purchase page); it is immutable and is exactly what the web site
  encodes in its URLs;
* :meth:`ShopSite.render` turns a view into a :class:`Page`: an ordered list of :class:`Element` (text,
  buttons, product links, options), each clickable one knowing the key an agent clicks
  (``click[<key>]``) and the view it leads to;
* :attr:`Page.text` is the observation in WebShop's text format: the visible strings joined by
  ``" [SEP] "``, e.g. ``"WebShop [SEP] Instruction: [SEP] i need ... [SEP] Search"``.

Navigation follows WebShop's text env (``web_agent_text_env.SimServer.receive``): "Back to Search" goes
to the search page; "Next >" / "< Prev" page through results ("Next >" is always there, even past the
last result, as in WebShop's ``results_page.html``); "< Prev" on an item goes back to its results page
and on a sub-page back to the item (options kept); a product link opens the item with no options
chosen; an option click sets that option; "Buy Now" purchases. Clickable keys are the lower-cased
button texts, the lower-cased asins and the option values (already lower-cased by the catalog loader).
WebShop dispatches a click by its name before it looks at what was clicked, so an option value equal to
a button's text ("features") leads where the button leads, and an option named like a sub-page opens
that sub-page. Actions are listed as WebShop's ``get_available_actions`` lists them: buttons, then
product links, then option values.

Search keywords starting with WebShop's prefixes are lookups, not BM25 searches (``engine.py``
``get_top_n_product_from_keywords``): ``<r>`` 50 random products, ``<a> attr`` products with that
attribute, ``<c> category`` products of that category, ``<q> query`` products scraped for that query.

Text: each visible string is stripped at both ends and kept otherwise as scraped (runs of spaces and
newlines included), and empty strings are dropped: WebShop's ``convert_html_to_text``. The browser front
end reads the same strings from the DOM. ``collapse_whitespace=True`` (not WebShop) collapses runs.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from stratagym.envs.webshop.catalog import Catalog
from stratagym.envs.webshop.reward import reward as webshop_reward
from stratagym.envs.webshop.search import PRODUCT_WINDOW, SEARCH_RETURN_N, SearchEngine

__all__ = [
    "END_BUTTON",
    "NEXT_PAGE",
    "PREV_PAGE",
    "BACK_TO_SEARCH",
    "SUB_PAGES",
    "SEP",
    "View",
    "Element",
    "Page",
    "ShopSite",
    "clean_text",
    "is_shown",
]

END_BUTTON = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SEARCH_BUTTON = "Search"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
SEP = " [SEP] "
#: WebShop's search prefixes (``engine.get_top_n_product_from_keywords``).
SEARCH_PREFIXES = ("<r>", "<a>", "<c>", "<q>")
_BUTTON_ROLES = ("button", "buy", "search")


def clean_text(text: Any, collapse: bool = False) -> str:
    """One visible string as WebShop's text mode reads it: stripped at both ends (``t.strip()``), inner
    whitespace kept; ``collapse=True`` also collapses whitespace runs (the pre-2026-11-23 stratagym form)."""
    return " ".join(str(text).split()) if collapse else str(text).strip()


def is_shown(text: Any) -> bool:
    """Whether WebShop's text modes show a string (as an entry, maybe empty, of the page).

    BeautifulSoup turns a whitespace-only text node into ``'\n'`` when it holds a newline, else into
    ``' '``; ``convert_html_to_text`` then skips exactly the ``'\n'`` ones. So a string with visible
    characters is shown, an empty one does not exist as a node, a blank one with a newline is skipped, and
    a blank one without (an empty bullet point, written ``" {{bulletpoint}}"`` by the template) is shown:
    as an empty entry in simple mode, a ``" "`` line in rich mode.
    """
    text = str(text)
    return bool(text.strip()) or (text != "" and "\n" not in text)


@dataclass(frozen=True)
class View:
    """Where the shopper is. ``kind``: search | results | item | sub | done."""

    kind: str = "search"
    query: str = ""
    page: int = 1
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()
    sub: str = ""

    def options_dict(self) -> dict[str, str]:
        return dict(self.options)

    def with_option(self, name: str, value: str) -> "View":
        opts = dict(self.options)
        opts[name] = value  # keeps first-set order, like WebShop's session dict
        return replace(self, options=tuple(opts.items()))


@dataclass(frozen=True)
class Element:
    """One visible string; clickable when ``key`` is set.

    ``role``: text | heading | button | product | option | search | buy. ``target`` is the view a click
    leads to (for ``buy``: the purchase of ``target.asin`` with ``target.options``).
    """

    text: str
    role: str = "text"
    key: str | None = None
    target: View | None = None
    group: str = ""  # the option name for role "option"; the HTML section for layout


def clickable_order(keyed: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """WebShop's ``text_to_clickable`` for ``(key, role, thing)`` in page order: buttons first, then product
    links (``buttons + product_links``), then option values; a key seen again keeps its first place.

    WebShop then overwrites a button's entry with a same-named option, but dispatches the click by name
    (``SimServer.receive``), so the click still does what the button does: the button is what counts.
    """
    out: dict[str, Any] = {}
    for wanted in (_BUTTON_ROLES, ("product",), ("option",)):
        for key, role, thing in keyed:
            if role in wanted and key not in out:
                out[key] = thing
    return out


@dataclass
class Page:
    view: View
    elements: list[Element]
    has_search_bar: bool = False
    title: str = "WebShop"
    clickables: dict[str, Element] = field(default_factory=dict)
    total: int = 0
    collapse_whitespace: bool = False

    def __post_init__(self) -> None:
        self.clickables = clickable_order([(e.key, e.role, e) for e in self.elements if e.key is not None])

    @property
    def texts(self) -> list[str]:
        return [clean_text(e.text, self.collapse_whitespace) for e in self.elements if is_shown(e.text)]

    @property
    def text(self) -> str:
        return SEP.join(self.texts)

    def rich_text(self, visited_asins: frozenset[str] | set[str] = frozenset()) -> str:
        """WebShop's ``text_rich`` observation (``convert_html_to_text(simple=False)``): one line per
        visible string; buttons as ``[button] t [button_]``; option values as ``  [button] t [button_]``,
        or ``  [clicked button] t [clicked button_]`` when chosen (and then ``You have clicked t.`` is put
        in front of the page); product asins on a new line, ``[clicked button]`` once opened in this
        session (since the last reset / "Back to Search").

        Other strings are emitted as the templates hold them (``"Instruction: "`` on the search page,
        ``" <bullet>"`` on Features); the templates' indentation never shows (BeautifulSoup reduces it to
        ``'\n'`` nodes, which are skipped).
        """
        chosen = json.dumps(dict(self.view.options))  # WebShop tests f'"{t}"' in the page URL, which holds this
        out = ""
        for e in self.elements:
            t = str(e.text)
            if not is_shown(t):
                continue
            t = t if t.strip() else " "  # BeautifulSoup's blank node
            if e.role in _BUTTON_ROLES:
                line = f"[button] {t} [button_]"
            elif e.role == "option":
                if f'"{t}"' in chosen:
                    line = f"  [clicked button] {t} [clicked button_]"
                    out = f"You have clicked {t}.\n" + out
                else:
                    line = f"  [button] {t} [button_]"
            elif e.role == "product":
                mark = "clicked button" if t in visited_asins else "button"
                line = f"\n[{mark}] {t} [{mark}_]"
            else:
                line = t
            out += line + "\n"
        return out

    def admissible_actions(self, *, click_search: bool = True) -> list[str]:
        """verl-agent's ``format_avail_actions`` over WebShop's ``get_available_actions``: ``search[<your
        query>]`` where there is a search bar, then ``click[k]`` for every clickable, ``click[search]``
        included (``click_search=False`` leaves it out, as stratagym did before 2026-11-23)."""
        actions = ["search[<your query>]"] if self.has_search_bar else []
        actions.extend(f"click[{k}]" for k in self.clickables if click_search or k != SEARCH_BUTTON.lower())
        return actions


class ShopSite:
    """Renders views of a :class:`Catalog` and applies purchases; stateless and shareable."""

    def __init__(self, catalog: Catalog, engine: SearchEngine, *, show_attrs: bool = False, show_reviews: bool = False,
                 collapse_whitespace: bool = False):
        self.catalog = catalog
        self.engine = engine
        self.show_attrs = bool(show_attrs)
        #: WebShop's loader never loads reviews (``load_products`` has the review file commented out):
        #: "Rating: N.A." and an empty Reviews page. True shows the catalog's ratings and reviews.
        self.show_reviews = bool(show_reviews)
        self.collapse_whitespace = bool(collapse_whitespace)
        self._by_attribute: dict[str, list[str]] | None = None

    # ---- searching ------------------------------------------------------------------------------
    def results(self, query: str, rng: random.Random | None = None) -> list[str]:
        """Asins for ``query`` in rank order: BM25's top 50, or a prefix lookup (``<r>``, ``<a>``, ``<c>``,
        ``<q>``) as in WebShop's ``get_top_n_product_from_keywords``; lookups are not cut to 50.

        ``<r>`` draws 50 products with ``rng`` (each render draws again, as WebShop does)."""
        keywords = str(query).split(" ")  # WebShop's SimBrowser.search: keywords.split(' ')
        head = keywords[0]
        products = self.catalog.products
        if head == "<r>":
            rng = rng or random.Random()
            return [p["asin"] for p in rng.sample(products, k=min(SEARCH_RETURN_N, len(products)))]
        if head == "<a>":
            attribute = " ".join(keywords[1:]).strip()
            return list(self._attribute_index().get(attribute, []))
        if head == "<c>":
            category = keywords[1].strip() if len(keywords) > 1 else ""
            return [p["asin"] for p in products if p.get("category") == category]
        if head == "<q>":
            wanted = " ".join(keywords[1:]).strip()
            return [p["asin"] for p in products if p.get("query") == wanted]
        return self.engine.search(query, SEARCH_RETURN_N)

    def _attribute_index(self) -> dict[str, list[str]]:
        """WebShop's ``attribute_to_asins`` (built in ``load_products``), asins in catalog order."""
        if self._by_attribute is None:
            index: dict[str, list[str]] = {}
            for p in self.catalog.products:
                for a in dict.fromkeys(p.get("Attributes") or []):
                    index.setdefault(a, []).append(p["asin"])
            self._by_attribute = index
        return self._by_attribute

    @staticmethod
    def search_view(query: str) -> View:
        """The view a search leads to (WebShop lower-cases the keywords)."""
        return View(kind="results", query=str(query).lower(), page=1)

    # ---- rendering ------------------------------------------------------------------------------
    def render(self, view: View, instruction: str, *, score: float | None = None, rng: random.Random | None = None) -> Page:
        page = self._render(view, instruction, score, rng)
        page.collapse_whitespace = self.collapse_whitespace
        return page

    def _render(self, view: View, instruction: str, score: float | None, rng: random.Random | None) -> Page:
        kind = view.kind
        if kind == "results":
            return self._results(view, instruction, rng)
        if kind in ("item", "sub") and view.asin in self.catalog.by_asin:
            return self._item(view, instruction) if kind == "item" else self._sub(view, instruction)
        if kind == "done":
            return self._done(view, score)
        return self._search(instruction)

    def _header(self, instruction: str, heading: str = "Instruction:") -> list[Element]:
        return [Element(heading, "heading", group="instruction"), Element(instruction, "text", group="instruction")]

    def _search(self, instruction: str) -> Page:
        # search_page.html writes "Instruction: <br>" (a space the other templates do not have)
        elements = [Element("WebShop", "heading", group="logo"), *self._header(instruction, "Instruction: "),
                    Element(SEARCH_BUTTON, "search", key=SEARCH_BUTTON.lower())]
        return Page(View("search"), elements, has_search_bar=True, title="WebShop")

    def _results(self, view: View, instruction: str, rng: random.Random | None = None) -> Page:
        asins = self.results(view.query, rng)
        total = len(asins)
        # WebShop renders any page number, past the last result too ("Page 7 (Total results: 50)", no
        # products), and always offers "Next >" (results_page.html).
        page_no = max(1, int(view.page))
        view = replace(view, page=page_no, asin="", options=(), sub="")
        elements = [*self._header(instruction), _button(BACK_TO_SEARCH, View("search")),
                    Element(f"Page {page_no} (Total results: {total})", "text", group="nav")]
        if page_no > 1:
            elements.append(_button(PREV_PAGE, replace(view, page=page_no - 1)))
        elements.append(_button(NEXT_PAGE, replace(view, page=page_no + 1)))
        for asin in asins[(page_no - 1) * PRODUCT_WINDOW: page_no * PRODUCT_WINDOW]:
            p = self.catalog.by_asin[asin]
            item_view = View("item", query=view.query, page=page_no, asin=asin)
            elements.append(Element(asin, "product", key=asin.lower(), target=item_view, group=asin))
            elements.append(Element(p["Title"], "text", group=asin))
            elements.append(Element(p["Price"], "text", group=asin))
        return Page(view, elements, title=f"WebShop: results for {view.query}", total=total)

    def _item_header(self, view: View, instruction: str, back: View) -> list[Element]:
        return [*self._header(instruction), _button(BACK_TO_SEARCH, View("search")), _button(PREV_PAGE, back)]

    def _item(self, view: View, instruction: str) -> Page:
        p = self.catalog.by_asin[view.asin]
        view = replace(view, sub="")
        back = View("results", query=view.query, page=view.page)
        elements = self._item_header(view, instruction, back)
        sub_names = {s.lower(): s for s in SUB_PAGES}
        for name, values in p["options"].items():
            elements.append(Element(name, "heading", group=f"option:{name}"))
            for value in values:
                # WebShop's receive() sends a click named like a sub-page to that sub-page, option or not
                target = (replace(view, kind="sub", sub=sub_names[value]) if value in sub_names
                          else view.with_option(name, value))
                elements.append(Element(value, "option", key=value, target=target, group=name))
        elements.append(Element(p["Title"], "heading", group="product"))
        elements.append(Element(f"Price: {p['Price']}", "text", group="product"))
        rating = p["Rating"] if self.show_reviews else "N.A."
        elements.append(Element(f"Rating: {rating}", "text", group="product"))
        subs = SUB_PAGES if self.show_attrs else SUB_PAGES[:3]
        for sub in subs:
            elements.append(_button(sub, replace(view, kind="sub", sub=sub)))
        elements.append(Element(END_BUTTON, "buy", key=END_BUTTON.lower(), target=replace(view, kind="done")))
        return Page(view, elements, title=f"WebShop: {p['Title']}")

    def _sub(self, view: View, instruction: str) -> Page:
        p = self.catalog.by_asin[view.asin]
        sub = view.sub if view.sub in SUB_PAGES else "Description"
        view = replace(view, sub=sub)
        elements = self._item_header(view, instruction, replace(view, kind="item", sub=""))
        if sub == "Description":
            elements.append(Element(p["Description"], "text", group="content"))
        elif sub == "Features":
            # features_page.html: <p class="product-info"> {{bulletpoint}}</p> (note the space)
            elements.extend(Element(f" {b}", "text", group="content") for b in p["BulletPoints"])
        elif sub == "Reviews":
            if not self.show_reviews:
                pass  # WebShop: no reviews loaded, the page holds only its two buttons
            elif p["Reviews"]:
                for r in p["Reviews"]:
                    elements.append(Element(f'"{r.get("title", "")}"', "heading", group="review"))
                    elements.append(Element(str(r.get("score", "")), "text", group="review"))
                    elements.append(Element(r.get("body", ""), "text", group="review"))
            else:
                elements.append(Element("No reviews found", "heading", group="content"))
        else:
            # attributes_page.html: " {{attribute}}" per attribute, then category, query and product category
            elements.extend(Element(f" {a}", "text", group="content") for a in p["Attributes"])
            elements.extend(Element(str(p.get(k) or ""), "text", group="content")
                            for k in ("category", "query", "product_category"))
        return Page(view, elements, title=f"WebShop: {sub}")

    def _done(self, view: View, score: float | None) -> Page:
        """WebShop's done page as its text env renders it (``done_page.html`` with only reward, asin and
        options given: the MTurk code, purchased attributes, goal and reward details print as ``None`` or
        nothing). Strings keep the template's spaces (``"Your code: "``), which only ``text_rich`` shows."""
        texts = ["Your code: ", "None", " (Paste it in your MTurk interface.)", "Purchased",
                 "asin", view.asin, "options", _htmlsafe_json(dict(view.options)),
                 "attrs", "None", "category", "None", "query", "None", "product category", "None",
                 "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
                 "product category", "query", "Goal ", "None", "Reward"]
        elements = [Element("Thank you for shopping with us!", "heading", group="done"),
                    *(Element(t, "text", group="done") for t in texts),
                    Element("Your score (min 0.0, max 1.0)", "heading", group="done"),
                    Element(repr(float(score)) if score is not None else "", "text", group="score"),
                    Element("Reward Details ", "text", group="done"), Element("None", "text", group="done")]
        return Page(view, elements, title="WebShop: thank you")

    # ---- purchasing -----------------------------------------------------------------------------
    def purchase(self, goal: Mapping[str, Any], asin: str, options: Mapping[str, str]) -> tuple[float, dict[str, Any]]:
        """WebShop's reward for buying ``asin`` with ``options`` under ``goal``."""
        product = self.catalog.by_asin[asin]
        return webshop_reward(product, goal, self.catalog.prices.get(asin), dict(options))


def _htmlsafe_json(obj: Any) -> str:
    """Jinja's/Flask's ``tojson`` filter: sorted keys, and ``< > & '`` as ``\\u`` escapes."""
    text = json.dumps(obj, sort_keys=True)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        text = text.replace(ch, esc)
    return text


def _button(text: str, target: View) -> Element:
    return Element(text, "button", key=text.lower(), target=target)
