"""Product catalogs and shopping goals in WebShop's own file formats.

WebShop ships its data as JSON files (see ``setup.sh`` in princeton-nlp/WebShop):

* ``items_shuffle*.json``: a list of raw products ``{asin, name, full_description, small_description,
  pricing, customization_options {name: [{value, image}]}, category, query, product_category, images}``;
* ``items_ins_v2*.json``: ``asin -> {attributes, instruction, instruction_attributes}``;
* ``items_human_ins.json``: ``asin -> [{instruction, instruction_attributes, instruction_options}]``;
* ``reviews.json`` (optional): ``[{asin, reviews: [{title, stars, review}], average_rating}]``.

:func:`load_webshop` turns those into a :class:`Catalog` the way ``engine.load_products`` and
``goal.get_goals`` do: processed products (``Title``, ``Description``, ``BulletPoints``, ``Attributes``,
lower-cased ``options``, ``pricing``/``Price``...), a price per product (listed price, uniform between
the two listed values for a range, 100.0 when missing) and goals with a price bound (", and price lower
than X dollars"), shuffled with seed 233 and split test / eval / train (first 500 / next 1000 / rest).

WebShop draws the range prices and price bounds from Python's unseeded global ``random``; here they come
from ``random.Random(price_seed)`` so a catalog loads identically in every process. The shuffle uses seed
233 like WebShop, so goal order (hence the splits) matches WebShop's for the same goal list.

The bundled catalog under ``data/webshop/`` is written in the same formats by
``scripts/make_webshop_data.py``; its ``manifest.json`` gives the split sizes (100 / 100 / rest).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Mapping, Sequence

from stratagym.errors import ConfigError

__all__ = [
    "Catalog",
    "PRICE_RANGE",
    "bundled_data_dir",
    "load_bundled",
    "load_webshop",
    "load_catalog",
    "process_products",
    "parse_pricing",
    "product_prices",
    "human_goals",
    "synthetic_goals",
]

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # WebShop's goal price bounds
SHUFFLE_SEED = 233
WEBSHOP_SPLITS = {"test": 500, "eval": 1000}
SPLITS = ("test", "eval", "train", "all")


@dataclass
class Catalog:
    """Processed products, their prices and the goals, with the task ids of each split.

    ``goals[i]["task_id"]`` is ``"webshop-<i>"`` where ``i`` is the goal's index after the seed-233
    shuffle: WebShop's ``session_int``. ``splits`` maps ``test``/``eval``/``train``/``all`` to goal
    indices.
    """

    products: list[dict[str, Any]]
    prices: dict[str, float]
    goals: list[dict[str, Any]]
    splits: dict[str, list[int]]
    source: str = ""
    by_asin: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_task: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}
        self.by_task = {g["task_id"]: g for g in self.goals}

    def task_ids(self, split: str) -> list[str]:
        if split not in self.splits:
            raise ConfigError(f"unknown WebShop split {split!r}; use one of {sorted(self.splits)}")
        return [self.goals[i]["task_id"] for i in self.splits[split]]

    def goal(self, task_id: str) -> dict[str, Any]:
        return self.by_task[task_id]


# --------------------------------------------------------------------------------------------------
# Products
# --------------------------------------------------------------------------------------------------


def parse_pricing(pricing: Any) -> list[float]:
    """WebShop's parse of a raw ``pricing`` string (``"$12.99"``, ``"$10.99 - $15.99"``): the dollar
    amounts, at most two; an empty/missing value gives ``[100.0]``."""
    if isinstance(pricing, (list, tuple)):
        values = [float(p) for p in pricing]
        return values[:2] if values else [100.0]
    if pricing is None or not str(pricing).strip():
        return [100.0]
    values = []
    for part in str(pricing).split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            values.append(float(Decimal(digits)))
        except (InvalidOperation, ValueError):
            continue
    return values[:2] if values else [100.0]


def _price_tag(pricing: Sequence[float]) -> str:
    return f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"


def process_products(
    raw_products: Sequence[Mapping[str, Any]],
    attributes: Mapping[str, Mapping[str, Any]] | None = None,
    reviews: Sequence[Mapping[str, Any]] | None = None,
    *,
    num_products: int | None = None,
) -> list[dict[str, Any]]:
    """WebShop's ``load_products`` processing of raw products into the form the site and reward use."""
    attributes = attributes or {}
    all_reviews: dict[str, list[dict[str, Any]]] = {}
    all_ratings: dict[str, Any] = {}
    for r in reviews or []:
        all_reviews[r["asin"]] = r.get("reviews") or []
        all_ratings[r["asin"]] = r.get("average_rating", "N.A.")
    if num_products is not None:
        raw_products = raw_products[:num_products]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in raw_products:
        asin = str(raw.get("asin", ""))
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        p: dict[str, Any] = {
            "asin": asin,
            "name": str(raw.get("name", "")),
            "category": raw.get("category", ""),
            "query": str(raw.get("query", "")).lower().strip(),
            "product_category": raw.get("product_category", ""),
            "Title": str(raw.get("name", "")),
            "Description": str(raw.get("full_description") or ""),
        }
        small = raw.get("small_description")
        p["BulletPoints"] = [str(b) for b in small] if isinstance(small, list) else [str(small or "")]
        revs = []
        for r in all_reviews.get(asin, []):
            r = dict(r)
            if "score" not in r:
                r["score"] = r.pop("stars", 0)
            r["body"] = str(r.pop("review", r.get("body", "")) or "")
            revs.append(r)
        p["Reviews"] = revs
        p["Rating"] = all_ratings.get(asin, "N.A.")
        pricing = parse_pricing(raw.get("pricing"))
        p["pricing"] = pricing
        p["Price"] = _price_tag(pricing)
        options: dict[str, list[str]] = {}
        option_to_image: dict[str, Any] = {}
        for option_name, contents in (raw.get("customization_options") or {}).items():
            if contents is None:
                continue
            values = []
            for content in contents:
                value = str(content["value"]).strip().replace("/", " | ").lower()
                values.append(value)
                option_to_image[value] = content.get("image")
            options[str(option_name).lower()] = values
        p["options"] = options
        p["option_to_image"] = option_to_image
        attrs = attributes.get(asin) or {}
        p["Attributes"] = list(attrs["attributes"]) if attrs.get("attributes") else ["DUMMY_ATTR"]
        p["instruction_text"] = attrs.get("instruction")
        p["instruction_attributes"] = attrs.get("instruction_attributes")
        images = raw.get("images") or [""]
        p["MainImage"] = images[0] if images else ""
        out.append(p)
    return out


def product_prices(products: Sequence[Mapping[str, Any]], rng: random.Random) -> dict[str, float]:
    """WebShop's ``generate_product_prices`` with a seeded generator."""
    prices: dict[str, float] = {}
    for p in products:
        pricing = p["pricing"]
        if not pricing:
            prices[p["asin"]] = 100.0
        elif len(pricing) == 1:
            prices[p["asin"]] = float(pricing[0])
        else:
            prices[p["asin"]] = rng.uniform(*pricing[:2])
    return prices


# --------------------------------------------------------------------------------------------------
# Goals
# --------------------------------------------------------------------------------------------------


def _price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, upper = sorted(rng.sample(price_range, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000.0, ""


def human_goals(
    products: Sequence[Mapping[str, Any]],
    human_instructions: Mapping[str, Sequence[Mapping[str, Any]]],
    prices: Mapping[str, float],
    rng: random.Random,
) -> list[dict[str, Any]]:
    """WebShop's ``get_human_goals``: one goal per human instruction with attributes."""
    goals = []
    for item in products:
        asin = item["asin"]
        for ins in human_instructions.get(asin) or []:
            attributes = list(ins.get("instruction_attributes") or [])
            if not attributes:
                continue
            price_upper, price_text = _price_bound(prices[asin], rng)
            goals.append(
                {
                    "asin": asin,
                    "category": item["category"],
                    "query": item["query"],
                    "name": item["name"],
                    "product_category": item["product_category"],
                    "instruction_text": str(ins["instruction"]).strip(".") + price_text,
                    "attributes": attributes,
                    "price_upper": price_upper,
                    "goal_options": list(ins.get("instruction_options") or []),
                    "weight": 1,
                }
            )
    return goals


def synthetic_goals(products: Sequence[Mapping[str, Any]], prices: Mapping[str, float], rng: random.Random) -> list[dict[str, Any]]:
    """WebShop's ``get_synthetic_goals``: one goal per option combination of each product with an
    instruction in ``items_ins_v2``."""
    goals = []
    counts: dict[str, int] = {}
    for product in products:
        if not product.get("instruction_text"):
            continue
        attributes = list(product.get("instruction_attributes") or [])
        if not attributes:
            continue
        asin = product["asin"]
        price_upper, price_text = _price_bound(prices[asin], rng)
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(
                {
                    "asin": asin,
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
                    "attributes": attributes,
                    "price_upper": price_upper,
                    "goal_options": goal_options,
                }
            )
            for a in attributes:
                counts[a] = counts.get(a, 0) + 1
    for g in goals:
        g["weight"] = sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
    return goals


def _split(goals: list[dict[str, Any]], sizes: Mapping[str, int]) -> dict[str, list[int]]:
    n_test, n_eval = int(sizes.get("test", 500)), int(sizes.get("eval", 1000))
    n = len(goals)
    return {
        "test": list(range(0, min(n_test, n))),
        "eval": list(range(min(n_test, n), min(n_test + n_eval, n))),
        "train": list(range(min(n_test + n_eval, n), n)),
        "all": list(range(n)),
    }


def _finish(goals: list[dict[str, Any]], split_sizes: Mapping[str, int]) -> tuple[list[dict[str, Any]], dict[str, list[int]]]:
    random.Random(SHUFFLE_SEED).shuffle(goals)
    for i, g in enumerate(goals):
        g["task_id"] = f"webshop-{i}"
    return goals, _split(goals, split_sizes)


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def _read_json(path: str | os.PathLike[str], what: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"WebShop {what} file not found: {path}; check the path (see docs/envs/webshop.md)")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"WebShop {what} file {path} is not valid JSON ({exc}); re-download or regenerate it") from exc


def load_webshop(
    items_path: str | os.PathLike[str],
    attrs_path: str | os.PathLike[str] | None = None,
    human_ins_path: str | os.PathLike[str] | None = None,
    reviews_path: str | os.PathLike[str] | None = None,
    *,
    human_goals_: bool = True,
    num_products: int | None = None,
    price_seed: int = SHUFFLE_SEED,
    split_sizes: Mapping[str, int] = WEBSHOP_SPLITS,
) -> Catalog:
    """Load WebShop's own files (``items_shuffle*.json`` + ``items_ins_v2*.json`` +
    ``items_human_ins.json``) into a :class:`Catalog`.

    ``human_goals_=True`` builds goals from the human instructions (the WebShop benchmark), else the
    synthetic goals from ``items_ins_v2``.
    """
    raw = _read_json(items_path, "products")
    if not isinstance(raw, list):
        raise ConfigError(f"WebShop products file {items_path} must hold a JSON list of products")
    attributes = _read_json(attrs_path, "attributes") if attrs_path else {}
    reviews = _read_json(reviews_path, "reviews") if reviews_path else []
    try:
        products = process_products(raw, attributes, reviews, num_products=num_products)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"WebShop products file {items_path} has an unexpected layout ({exc!r})") from exc
    rng = random.Random(price_seed)
    prices = product_prices(products, rng)
    if human_goals_:
        if not human_ins_path:
            raise ConfigError("human goals need items_human_ins.json: pass human_ins_path (or human_goals=False)")
        instructions = _read_json(human_ins_path, "human instructions")
        goals = human_goals(products, instructions, prices, rng)
    else:
        goals = synthetic_goals(products, prices, rng)
    if not goals:
        raise ConfigError(f"no goals could be built from {items_path}; check the instruction files")
    goals, splits = _finish(goals, split_sizes)
    return Catalog(products=products, prices=prices, goals=goals, splits=splits, source=str(items_path))


def bundled_data_dir() -> Path:
    """Where the bundled catalog lives: ``$STRATAGYM_WEBSHOP_DATA`` or ``<repo>/data/webshop``."""
    env = os.environ.get("STRATAGYM_WEBSHOP_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "data" / "webshop"


def load_bundled(data_dir: str | os.PathLike[str] | None = None) -> Catalog:
    """Load the catalog that ships with stratagym (or any directory in the same layout)."""
    data_dir = Path(data_dir) if data_dir else bundled_data_dir()
    manifest_path = data_dir / "manifest.json"
    if not manifest_path.is_file():
        raise ConfigError(
            f"no WebShop catalog at {data_dir} (manifest.json missing); run `python scripts/make_webshop_data.py` "
            "or set STRATAGYM_WEBSHOP_DATA / pass data_dir"
        )
    manifest = _read_json(manifest_path, "manifest")
    files = manifest.get("files", {})
    return load_webshop(
        data_dir / files.get("items", "items_shuffle.json"),
        data_dir / files.get("attributes", "items_ins_v2.json"),
        data_dir / files.get("human_instructions", "items_human_ins.json"),
        data_dir / files["reviews"] if files.get("reviews") else None,
        price_seed=int(manifest.get("price_seed", SHUFFLE_SEED)),
        split_sizes=manifest.get("split_sizes", WEBSHOP_SPLITS),
    )


_CACHE: dict[tuple[Any, ...], Catalog] = {}


def load_catalog(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    items_path: str | None = None,
    attrs_path: str | None = None,
    human_ins_path: str | None = None,
    reviews_path: str | None = None,
    human_goals: bool = True,
    num_products: int | None = None,
) -> Catalog:
    """The bundled catalog, or WebShop's files when ``items_path`` is given; cached per process so
    many envs (``make_vec``) share one copy."""
    if items_path:
        key: tuple[Any, ...] = ("webshop", items_path, attrs_path, human_ins_path, reviews_path, human_goals, num_products)
    else:
        key = ("bundled", str(Path(data_dir).resolve()) if data_dir else str(bundled_data_dir().resolve()))
    cat = _CACHE.get(key)
    if cat is None:
        if items_path:
            cat = load_webshop(
                items_path, attrs_path, human_ins_path, reviews_path, human_goals_=human_goals, num_products=num_products
            )
        else:
            cat = load_bundled(data_dir)
        _CACHE[key] = cat
    return cat
