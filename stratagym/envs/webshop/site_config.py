"""One WebShop site config: :class:`SiteConfig` and :func:`build_site`, shared by the text env, the browser
env and ``stratagym serve webshop``.

A WebShop site is a catalog (bundled, or WebShop's own files), a product search engine over it and a page
model that renders its pages. Every front end builds its site from one :class:`SiteConfig`, so an option
is defined here once: its name, its default and how the site uses it. The env classes keep the options as
explicit constructor keywords (what ``gymnasium.make`` users read and what the protocol fingerprint
inspects) and gather them with :meth:`SiteConfig.from_options`;
``tests/webshop/test_site_config.py`` fails when a constructor's keywords or defaults drift from the
fields here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from stratagym.envs.webshop.catalog import Catalog, load_catalog
from stratagym.envs.webshop.reward import noun_backend_name, set_noun_backend
from stratagym.envs.webshop.search import make_search_engine
from stratagym.envs.webshop.site import ShopSite
from stratagym.errors import ConfigError

__all__ = ["SiteConfig", "build_site", "resolve_search_backend"]


def resolve_search_backend(search_backend: str, items_path: str | None) -> str:
    """``"auto"``: Pyserini (Lucene, WebShop's exact rankings) on WebShop's own files (``items_path``),
    bm25s (fast, close but not identical rankings) on the bundled catalog; anything else unchanged."""
    if search_backend == "auto":
        return "pyserini" if items_path else "bm25s"
    return search_backend


@dataclass(frozen=True)
class SiteConfig:
    """The options of a WebShop site: the catalog, its search engine and how pages render.

    One definition for the text env, the browser env and ``stratagym serve webshop``, which all build
    their site from it (:func:`build_site`; see the module docstring).
    """

    data_dir: str | None = None
    items_path: str | None = None
    attrs_path: str | None = None
    human_ins_path: str | None = None
    reviews_path: str | None = None
    human_goals: bool = True
    num_products: int | None = None
    search_backend: str = "auto"
    index_dir: str | None = None
    title_nouns: Any = "auto"
    show_attrs: bool = False
    show_reviews: bool = False
    collapse_whitespace: bool = False

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "SiteConfig":
        """The site fields of ``options`` (e.g. an env constructor's ``locals()``); others are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in names})


def build_site(config: SiteConfig | None = None, **options: Any) -> ShopSite:
    """The catalog + search engine + site the envs and the web server share (catalog and engine cached
    per process). Pass a :class:`SiteConfig`, or its fields as keywords."""
    valid = [f.name for f in fields(SiteConfig)]
    unknown = sorted(set(options) - set(valid))
    if unknown or (config is not None and options):
        raise ConfigError(f"build_site takes a SiteConfig or its fields as keywords, not {unknown or 'both'}; "
                          f"the fields: {', '.join(valid)}")
    c = config if config is not None else SiteConfig(**options)
    catalog: Catalog = load_catalog(
        c.data_dir, items_path=c.items_path, attrs_path=c.attrs_path, human_ins_path=c.human_ins_path,
        reviews_path=c.reviews_path, human_goals=c.human_goals, num_products=c.num_products,
    )
    backend = resolve_search_backend(c.search_backend, c.items_path)
    engine = make_search_engine(catalog.products, backend, index_dir=c.index_dir, cache_key=id(catalog))
    if c.title_nouns != "auto":
        set_noun_backend(c.title_nouns)
    else:
        noun_backend_name()  # configures "auto" once per process unless someone chose already
    return ShopSite(catalog, engine, show_attrs=c.show_attrs, show_reviews=c.show_reviews,
                    collapse_whitespace=c.collapse_whitespace)
