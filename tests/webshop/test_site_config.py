"""One WebShop site config: the text env, the browser env and ``stratagym serve webshop`` take the site's
options under SiteConfig's names and defaults and build their site from exactly them."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
import typer

from stratagym.envs.webshop.browser_env import WebShopBrowserEnv
from stratagym.envs.webshop.site_config import SiteConfig, build_site
from stratagym.envs.webshop.text_env import WebShopTextEnv
from stratagym.errors import ConfigError

FIELDS = [(f.name, f.default) for f in fields(SiteConfig)]


@pytest.mark.parametrize("cls", [WebShopTextEnv, WebShopBrowserEnv])
def test_env_constructors_take_every_site_option_with_its_default(cls):
    params = inspect.signature(cls.__init__).parameters
    missing = [name for name, _ in FIELDS if name not in params]
    assert not missing, f"{cls.__name__} lacks site options {missing}"
    assert [(name, params[name].default) for name, _ in FIELDS] == FIELDS
    site_params = [n for n in params if n in dict(FIELDS)]
    assert site_params == [name for name, _ in FIELDS]  # in SiteConfig's order


def test_serve_webshop_options_are_site_options_with_its_defaults():
    from stratagym.envs.webshop.cli import register

    app, group = typer.Typer(), typer.Typer()
    app.add_typer(group, name="serve")
    app.command("noop")(lambda: None)  # a second command keeps "serve" a group
    register(app, {"serve": group})
    serve = typer.main.get_command(app).commands["serve"].commands["webshop"]  # type: ignore[attr-defined]
    defaults = dict(FIELDS)
    site_opts = {p.name: p.default for p in serve.params if p.name in defaults}
    assert {"data_dir", "items_path", "search_backend", "show_attrs"} <= set(site_opts)
    assert site_opts == {name: defaults[name] for name in site_opts}


def test_an_env_builds_its_site_from_exactly_its_options():
    env = WebShopTextEnv(show_attrs=True, collapse_whitespace=True, max_steps=7)
    try:
        assert env._site_config == SiteConfig(show_attrs=True, collapse_whitespace=True)
        assert env.site.show_attrs is True
    finally:
        env.close()


def test_build_site_names_unknown_options_and_the_fields():
    with pytest.raises(ConfigError, match=r"not \['show_atrs'\]; the fields: data_dir, items_path, "):
        build_site(show_atrs=True)
    with pytest.raises(ConfigError, match="not both"):
        build_site(SiteConfig(), show_attrs=True)
