"""WebShop's purchase reward, with WebShop's own function shapes.

A port of ``web_agent_site/engine/goal.py`` (princeton-nlp/WebShop) so people porting WebShop code find
the same functions: :func:`type_reward`, :func:`attribute_reward`, :func:`option_reward` and
:func:`reward` (WebShop's ``get_reward(..., verbose=True)``). Products and goals are dicts in WebShop's
processed form:

* product: ``query``, ``product_category``, ``name``, ``Attributes``, ``Title``, ``BulletPoints``,
  ``Description`` (what :mod:`stratagym.envs.webshop.catalog` produces);
* goal: ``query``, ``product_category``, ``name``, ``attributes``, ``goal_options`` (a list of values,
  or a dict name -> value), ``price_upper``.

The score::

    total = (attribute matches + option matches + price_ok) / (n_attrs + n_options + 1) * r_type

* an attribute matches when ``token_set_ratio`` with one of the product's attributes is > 85, else when
  it is a substring of the lower-cased title, bullet points or description;
* an option matches when, after colour normalisation, ``token_set_ratio`` with a purchased option is
  > 85;
* ``price_ok = price <= price_upper``;
* ``r_type`` is 1, 0.5 when none of (same query, >= 2 shared product-category levels, title-noun overlap
  > 0.2), 0.1 when the title-noun overlap is < 0.1, 0 when it is 0.

Fuzzy matching is thefuzz's ``token_set_ratio`` (WebShop's dependency) reproduced with rapidfuzz: both
strings are "fully processed" (non-ASCII dropped, non-alphanumerics -> spaces, lower-cased, trimmed) and
the score is rounded to an integer before the ``> 85`` test, exactly as thefuzz does.

Title nouns: WebShop tags the product names with spaCy (``en_core_web_lg``) and keeps tokens whose POS
is NOUN/PROPN. :func:`set_noun_backend` chooses the tagger: ``"auto"`` (the default) uses the first
installed of ``en_core_web_lg``, ``en_core_web_md``, ``en_core_web_sm`` and otherwise the deterministic
fallback; a loaded spaCy ``Language`` object can be passed directly. The fallback
(:func:`fallback_nouns`) keeps the lower-cased alphabetic word tokens that are not in a fixed list of
function words and common product adjectives (:data:`NON_NOUNS`) and do not end in ``-ly``: a
documented heuristic, not a tagger, so absolute ``title_score`` values can differ from WebShop's
between *different* products; the same product always matches itself.

Where WebShop's code cannot run, these choices are made (and tested):

* a goal with no attributes: ``r_att`` is None and attributes add nothing (WebShop divides by zero);
* a goal without a positive ``price_upper``: there is no price constraint, it counts as met (WebShop
  adds ``None``); ``r_price`` is then absent from the breakdown, as in WebShop;
* a missing purchase price (``price=None``): the price constraint is not met (the catalog loader gives
  products without pricing WebShop's default of 100.0, so this only happens through direct calls);
* ``goal_options`` given as a dict: its values are matched (WebShop's later ``.items()`` variant would
  compare (name, value) tuples, a known bug).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from stratagym.errors import ConfigError

__all__ = [
    "COLOR_SET",
    "FUZZY_THRESHOLD",
    "NOUN_TAGS",
    "NON_NOUNS",
    "normalize_color",
    "token_set_ratio",
    "fallback_nouns",
    "title_nouns",
    "set_noun_backend",
    "noun_backend_name",
    "type_reward",
    "attribute_reward",
    "option_reward",
    "reward",
]

FUZZY_THRESHOLD = 85
NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")  # WebShop's list ('PNOUN' is not a spaCy tag; kept for fidelity)
SPACY_MODELS = ("en_core_web_lg", "en_core_web_md", "en_core_web_sm")

#: WebShop's ``web_agent_site/engine/normalize.py`` colour list, in its order (the first hit wins).
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure",
    "banana", "beige", "black", "blue", "blush", "bordeaux", "bronze",
    "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee",
    "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark",
    "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather", "indigo",
    "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac",
    "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive",
    "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red",
    "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)


def normalize_color(color_string: str) -> str:
    """WebShop's ``normalize_color``: the first colour of :data:`COLOR_SET` found as a substring, else
    the string unchanged (``"black forest"`` -> ``"black"``, ``"violet lavender"`` -> ``"lavender"``)."""
    for norm_color in COLOR_SET:
        if norm_color in color_string:
            return norm_color
    return color_string


def _full_process(text: str) -> str:
    """thefuzz's ``full_process(s, force_ascii=True)``."""
    return default_process("".join(c for c in str(text) if ord(c) < 128))


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``fuzz.token_set_ratio`` (full processing, integer result), computed by rapidfuzz."""
    pa, pb = _full_process(a), _full_process(b)
    if not pa or not pb:
        return 0
    return int(round(fuzz.token_set_ratio(pa, pb)))


# --------------------------------------------------------------------------------------------------
# Title nouns
# --------------------------------------------------------------------------------------------------

#: Words the fallback never counts as nouns: function words and adjectives common in product titles.
NON_NOUNS: frozenset[str] = frozenset(
    """
    a an the this that these those some any each every all both either neither no not nor and or but
    so yet for of in on at by to from with without into onto upon over under above below between among
    through during before after about against across along around behind beyond near off out up down
    per via plus than as is are was were be been being am do does did has have had will would can could
    shall should may might must i me my we our you your he him his she her it its they them their who
    whom whose which what when where why how
    new best great good premium perfect ideal easy soft hard light heavy large small big little mini
    extra super ultra high low long short wide narrow thin thick tall deep full half double single
    multi multiple several many more most less least very
    black white red blue green yellow pink purple orange brown grey gray beige navy silver golden
    dark bright clear
    natural organic fresh pure original classic modern vintage elegant cute casual formal stylish
    comfortable breathable lightweight heavyweight durable portable adjustable waterproof washable
    wireless rechargeable compatible professional universal reusable disposable sturdy smooth
    gentle sensitive dry oily normal daily everyday free non
    women's men's womens mens kids kid's girls boys unisex adult adults baby
    """.split()
)

_WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)?")


def fallback_nouns(text: str) -> list[str]:
    """The deterministic title-noun heuristic used when no spaCy pipeline is installed.

    Lower-cased alphabetic word tokens (an internal apostrophe allowed), minus :data:`NON_NOUNS`, minus
    words ending in ``-ly`` and one-letter words. Numbers and units written with digits are dropped.
    """
    return [
        t for t in _WORD_RE.findall(str(text).lower())
        if len(t) > 1 and t not in NON_NOUNS and not t.endswith("ly")
    ]


class _NounBackend:
    """The active title-noun tagger (spaCy pipeline or the fallback), with a per-text cache."""

    def __init__(self) -> None:
        self.name = "unset"
        self._fn: Callable[[str], tuple[str, ...]] | None = None

    def configure(self, backend: Any = "auto") -> str:
        if backend is None or backend == "auto":
            for model in SPACY_MODELS:
                if importlib.util.find_spec(model) is not None:
                    return self.configure(model)
            return self.configure("fallback")
        if backend == "fallback":
            self._set("fallback", lambda text: tuple(fallback_nouns(text)))
            return self.name
        if isinstance(backend, str):
            try:
                import spacy

                nlp = spacy.load(backend, disable=["parser", "ner", "lemmatizer"])
            except (ImportError, OSError) as exc:
                raise ConfigError(
                    f"cannot load the spaCy pipeline {backend!r} for WebShop title nouns ({exc}); install it "
                    f"(e.g. `pip install {backend}` from a spaCy models wheel) or use title_nouns='fallback'"
                ) from exc
            return self._spacy(nlp, f"spacy:{backend}")
        if callable(backend):  # a loaded spaCy Language (or anything returning tokens with .pos_)
            meta = getattr(backend, "meta", {}) or {}
            return self._spacy(backend, f"spacy:{meta.get('lang', '?')}_{meta.get('name', 'custom')}")
        raise TypeError(f"noun backend must be 'auto', 'fallback', a spaCy model name or a spaCy Language; got {backend!r}")

    def _spacy(self, nlp: Any, name: str) -> str:
        def nouns(text: str) -> tuple[str, ...]:
            return tuple(t.text.lower() for t in nlp(text) if t.pos_ in NOUN_TAGS)

        self._set(name, nouns)
        return self.name

    def _set(self, name: str, fn: Callable[[str], tuple[str, ...]]) -> None:
        self.name = name
        self._fn = functools.lru_cache(maxsize=65536)(fn)

    def __call__(self, text: str) -> tuple[str, ...]:
        if self._fn is None:
            self.configure("auto")
        assert self._fn is not None
        return self._fn(str(text))


_NOUNS = _NounBackend()


def set_noun_backend(backend: Any = "auto") -> str:
    """Choose how title nouns are found: ``"auto"``, ``"fallback"``, a spaCy model name, or a loaded
    spaCy ``Language``. Returns the backend's name (e.g. ``"fallback"``, ``"spacy:en_core_web_lg"``).

    The choice is process-wide (WebShop also holds one global ``nlp``).
    """
    return _NOUNS.configure(backend)


def noun_backend_name() -> str:
    """Name of the active title-noun backend (configures ``"auto"`` on first use)."""
    if _NOUNS.name == "unset":
        _NOUNS.configure("auto")
    return _NOUNS.name


def title_nouns(text: str) -> list[str]:
    """Lower-cased noun tokens of a product name with the active backend."""
    return list(_NOUNS(text))


# --------------------------------------------------------------------------------------------------
# Reward components
# --------------------------------------------------------------------------------------------------


def _categories(path: str) -> set[str]:
    return {x.strip() for x in str(path or "").split("›")}


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """WebShop's ``get_type_reward``: is the purchased product the kind of thing the goal asks for?

    Returns ``{"r_type", "query_match", "category_match", "title_score"}``.
    """
    query_match = product.get("query") == goal.get("query")
    category_match = len(_categories(product.get("product_category", "")) & _categories(goal.get("product_category", ""))) >= 2
    purchased = title_nouns(product.get("name", ""))
    desired = title_nouns(goal.get("name", ""))
    if len(desired) == 0:
        title_score = 0.2
    else:
        title_score = len(set(purchased) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> tuple[float | None, int]:
    """WebShop's ``get_attribute_reward``: ``(fraction of goal attributes matched, number matched)``.

    ``r_attr`` is None for a goal without attributes.
    """
    goal_attrs: Sequence[str] = goal.get("attributes") or []
    purchased_attrs: Sequence[str] = product.get("Attributes") or []
    title = str(product.get("Title", "")).lower()
    bullets = " ".join(str(b) for b in (product.get("BulletPoints") or [])).lower()
    description = str(product.get("Description", "")).lower()
    n = 0
    for g_attr in goal_attrs:
        if any(token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in purchased_attrs):
            n += 1
        elif g_attr in title or g_attr in bullets or g_attr in description:
            n += 1
    if not goal_attrs:
        return None, 0
    return n / len(goal_attrs), n


def _goal_option_values(goal_options: Any) -> list[str]:
    if isinstance(goal_options, Mapping):
        return [str(v) for v in goal_options.values()]
    return [str(v) for v in (goal_options or [])]


def option_reward(purchased_options: Iterable[str], goal_options: Iterable[str] | Mapping[str, str]) -> tuple[float | None, int]:
    """WebShop's ``get_option_reward``: ``(fraction of goal options matched or None, number matched)``.

    Both sides are colour-normalised, then each goal option matches if some purchased option has
    ``token_set_ratio > 85`` with it. ``r_option`` is None when the goal has no options.
    """
    if isinstance(purchased_options, Mapping):
        purchased_options = purchased_options.values()
    purchased = [normalize_color(str(o)) for o in purchased_options]
    goals = [normalize_color(o) for o in _goal_option_values(goal_options)]
    n = 0
    for g_option in goals:
        for p_option in purchased:
            if token_set_ratio(p_option, g_option) > FUZZY_THRESHOLD:
                n += 1
                break
    return (n / len(goals) if goals else None), n


def reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float | None,
    options: Mapping[str, str] | Sequence[str] | None,
) -> tuple[float, dict[str, Any]]:
    """WebShop's ``get_reward(product, goal, price, options, verbose=True)``: ``(score, breakdown)``.

    ``options`` are the purchased options (dict option name -> value, as the site records them, or a
    list of values). ``breakdown`` has WebShop's verbose keys (``r_type``, ``r_att``, ``w_att``,
    ``query_match``, ``category_match``, ``title_score``, and ``r_option``/``w_option``,
    ``r_price``/``w_price`` where defined) plus the match counts.
    """
    type_info = type_reward(product, goal)
    price_upper = goal.get("price_upper")
    has_bound = price_upper is not None and float(price_upper) > 0
    if has_bound:
        r_price: bool | None = price is not None and float(price) <= float(price_upper)
    else:
        r_price = None
    r_att, n_attr = attribute_reward(product, goal)
    purchased = list(options.values()) if isinstance(options, Mapping) else list(options or [])
    goal_options = _goal_option_values(goal.get("goal_options"))
    r_option, n_option = option_reward(purchased, goal_options)
    n_attrs = len(goal.get("attributes") or [])
    denominator = n_attrs + len(goal_options) + 1
    price_term = 1.0 if r_price is None else float(r_price)
    score = (n_attr + n_option + price_term) / denominator * type_info["r_type"]
    breakdown: dict[str, Any] = {
        "r_type": type_info["r_type"],
        "r_att": r_att,
        "w_att": n_attrs / denominator,
        "query_match": type_info["query_match"],
        "category_match": type_info["category_match"],
        "title_score": type_info["title_score"],
        "n_attr_matches": n_attr,
        "n_option_matches": n_option,
    }
    if r_option is not None:
        breakdown["r_option"] = r_option
        breakdown["w_option"] = len(goal_options) / denominator
    if r_price is not None:
        breakdown["r_price"] = r_price
        breakdown["w_price"] = 1 / denominator
    return float(score), breakdown
