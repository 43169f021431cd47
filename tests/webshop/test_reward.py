"""WebShop's reward, component by component, from its definition (goal.py / normalize.py)."""

from __future__ import annotations

import importlib.util

import pytest

from stratagym.envs.core import ConfigError
from stratagym.envs.webshop import reward as R


def product(**kw):
    p = {
        "query": "shampoo", "product_category": "Beauty › Hair Care › Shampoos", "name": "Acme Shampoo Bottle",
        "Title": "Acme Shampoo Bottle", "Attributes": ["sulfate free", "argan oil"],
        "BulletPoints": ["Great for curly hair"], "Description": "Contains tea tree extract.",
    }
    p.update(kw)
    return p


def goal(**kw):
    g = {
        "query": "shampoo", "product_category": "Beauty › Hair Care › Shampoos", "name": "Acme Shampoo Bottle",
        "attributes": ["sulfate free"], "goal_options": ["16 fl oz"], "price_upper": 20.0,
    }
    g.update(kw)
    return g


# ---- colour normalisation and fuzzy matching -----------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("", ""), ("black forest", "black"), ("violet lavender", "lavender"), ("steelivy fuchsia", "fuchsia"),
    ("123alabaster", "alabaster"), ("webshop", "webshop"), ("dark grey heather", "dark"), ("navy blue", "blue"),
])
def test_normalize_color_is_webshops(text, expected):
    # the first six are WebShop's own test suite; COLOR_SET order decides ("blue" precedes "navy")
    assert R.normalize_color(text) == expected


def test_token_set_ratio_processes_like_thefuzz():
    assert R.token_set_ratio("Sulfate-Free!", "free sulfate") == 100
    assert R.token_set_ratio("sulfate free shampoo", "sulfate free") == 100  # intersection is one side
    assert R.token_set_ratio("", "x") == 0 and R.token_set_ratio("ééé", "x") == 0  # non-ASCII dropped
    # no shared token: the plain indel ratio, 4 of 6 characters (66.67), rounded to an int as thefuzz does
    score = R.token_set_ratio("abc", "abd")
    assert score == 67 and type(score) is int


# ---- options --------------------------------------------------------------------------------------

def test_option_reward_webshop_cases():
    assert R.option_reward(["pack of 12", "grey", "XL"], ["grey", "XL", "pack of 12"]) == (1.0, 3)
    r, n = R.option_reward(["pack of 12", "blue", "XL"], ["grey", "XL", "pack of 12"])
    assert n == 2 and r == pytest.approx(2 / 3)


def test_option_reward_no_goal_options_is_none():
    assert R.option_reward(["red"], []) == (None, 0)
    assert R.option_reward([], ["red"]) == (0.0, 0)


def test_option_reward_colour_normalisation():
    assert R.option_reward(["navy blue"], ["blue"]) == (1.0, 1)  # both normalise to "blue"
    assert R.option_reward(["dark grey"], ["grey"]) == (0.0, 0)  # "dark grey" normalises to "dark"
    assert R.option_reward({"color": "black | white"}, {"color": "black"}) == (1.0, 1)


# ---- attributes -----------------------------------------------------------------------------------

def test_attribute_reward_fuzzy_then_substring():
    p = product()
    assert R.attribute_reward(p, goal(attributes=["Sulfate-Free"])) == (1.0, 1)  # fuzzy vs Attributes
    assert R.attribute_reward(p, goal(attributes=["curly hair"])) == (1.0, 1)  # in a bullet point
    assert R.attribute_reward(p, goal(attributes=["tea tree"])) == (1.0, 1)  # in the description
    assert R.attribute_reward(p, goal(attributes=["bottle"])) == (1.0, 1)  # in the title
    assert R.attribute_reward(p, goal(attributes=["vegan", "argan oil"])) == (0.5, 1)
    assert R.attribute_reward(p, goal(attributes=[])) == (None, 0)


# ---- type -----------------------------------------------------------------------------------------

def test_type_reward_levels(fallback_nouns):
    base = dict(query="other", product_category="X › Y")
    # same query: r_type 1 even with a different name
    t = R.type_reward(product(name="Zed Lamp"), goal(name="Acme Shampoo Bottle", query="shampoo",
                                                    product_category="Q"))
    assert t["query_match"] and t["title_score"] == 0.0 and t["r_type"] == 0.0  # a zero title score wins
    # goal nouns: acme shampoo bottle case lid (5); one shared -> 0.2, not > 0.2, no query/category -> 0.5
    t = R.type_reward(product(name="Acme Lamp", **base), goal(name="Acme Shampoo Bottle Case Lid"))
    assert t["title_score"] == pytest.approx(0.2) and t["r_type"] == 0.5
    # two shared of five -> 0.4 > 0.2 -> 1
    t = R.type_reward(product(name="Acme Shampoo", **base), goal(name="Acme Shampoo Bottle Case Lid"))
    assert t["r_type"] == 1.0
    # one shared of eleven -> < 0.1 -> 0.1
    long_name = "acme shampoo bottle case lid cap pump jar tube sachet refill"
    t = R.type_reward(product(name="Acme", **base), goal(name=long_name))
    assert t["title_score"] == pytest.approx(1 / 11) and t["r_type"] == 0.1
    # category: >= 2 shared levels counts as a match
    t = R.type_reward(product(name="Acme Lamp", query="x", product_category="Beauty › Hair Care › Other"),
                      goal(name="Acme Shampoo Bottle Case Lid"))
    assert t["category_match"] and t["r_type"] == 1.0
    # a goal name without nouns scores 0.2
    t = R.type_reward(product(**base), goal(name="the new and best"))
    assert t["title_score"] == 0.2


def test_fallback_nouns_are_documented_heuristic():
    assert R.fallback_nouns("Acme Sulfate-Free Shampoo for Dry Hair, 16 Fl Oz (Pack of 2)") == [
        "acme", "sulfate", "shampoo", "hair", "fl", "oz", "pack"]
    assert R.fallback_nouns("quickly and easily") == []


# ---- total ----------------------------------------------------------------------------------------

def test_reward_total_and_breakdown(fallback_nouns):
    score, info = R.reward(product(), goal(), price=10.0, options={"size": "16 fl oz"})
    assert score == 1.0
    assert info["r_att"] == 1.0 and info["r_option"] == 1.0 and info["r_price"] is True
    assert info["w_att"] + info["w_option"] + info["w_price"] == pytest.approx(1.0)
    score, info = R.reward(product(), goal(), price=25.0, options={"size": "8 fl oz"})
    assert score == pytest.approx(1 / 3) and info["r_price"] is False and info["r_option"] == 0.0


def test_reward_price_edges(fallback_nouns):
    g = goal(goal_options=[])
    assert R.reward(product(), g, price=20.0, options={})[0] == 1.0  # exactly at the bound is fine
    assert R.reward(product(), g, price=20.01, options={})[0] == 0.5
    s, info = R.reward(product(), g, price=None, options={})  # missing price fails the bound
    assert s == 0.5 and info["r_price"] is False
    s, info = R.reward(product(), goal(goal_options=[], price_upper=0), price=999.0, options={})
    assert s == 1.0 and "r_price" not in info  # no bound: met, as WebShop's 1e6 bound would be


def test_reward_no_options_no_attributes(fallback_nouns):
    s, info = R.reward(product(), goal(attributes=[], goal_options=[]), price=1.0, options={})
    assert s == 1.0 and info["r_att"] is None and "r_option" not in info and info["w_att"] == 0.0
    s, _ = R.reward(product(), goal(goal_options={"size": "16 fl oz"}), price=1.0, options=["16 fl oz"])
    assert s == 1.0


def test_reward_is_scaled_by_type(fallback_nouns):
    s, info = R.reward(product(name="Zed Lamp", query="lamp", product_category="Home"), goal(), price=1.0,
                       options={"size": "16 fl oz"})
    assert info["r_type"] == 0.0 and s == 0.0
    s, _ = R.reward(product(name="Acme Lamp", query="lamp", product_category="Home"),
                    goal(name="Acme Shampoo Bottle Case Lid"), price=1.0, options={"size": "16 fl oz"})
    assert s == 0.5


# ---- spaCy path -----------------------------------------------------------------------------------

def _tiny_spacy_tagger():
    """A real spaCy pipeline whose POS tags come from an attribute ruler (no trained model is
    installable offline); it exercises exactly the code WebShop runs on spaCy tokens."""
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("attribute_ruler")
    for word, pos in [("shampoo", "NOUN"), ("bottle", "NOUN"), ("acme", "PROPN"), ("dry", "ADJ"), ("hair", "NOUN"),
                      ("for", "ADP"), ("lamp", "NOUN")]:
        ruler.add(patterns=[[{"LOWER": word}]], attrs={"POS": pos})
    return nlp


def test_spacy_path_uses_pos_tags():
    nlp = _tiny_spacy_tagger()
    previous = R._NOUNS.name, R._NOUNS._fn
    try:
        name = R.set_noun_backend(nlp)
        assert name.startswith("spacy:")
        assert R.title_nouns("Acme Shampoo for Dry Hair") == ["acme", "shampoo", "hair"]
        # "Zorbo" is untagged by this pipeline, so it is not a noun here (the fallback would count it)
        t = R.type_reward(product(name="Zorbo Lamp", query="x", product_category="Z"), goal(name="Zorbo Shampoo Bottle"))
        assert t["title_score"] == 0.0 and t["r_type"] == 0.0
        t = R.type_reward(product(name="Acme Shampoo", query="x", product_category="Z"), goal(name="Acme Shampoo Bottle"))
        assert t["title_score"] == pytest.approx(2 / 3) and t["r_type"] == 1.0
    finally:
        R._NOUNS.name, R._NOUNS._fn = previous


def test_named_spacy_model_missing_is_a_config_error():
    if importlib.util.find_spec("en_core_web_lg") is not None:
        pytest.skip("en_core_web_lg is installed here")
    pytest.importorskip("spacy")
    previous = R._NOUNS.name, R._NOUNS._fn
    try:
        with pytest.raises(ConfigError, match="title_nouns='fallback'"):
            R.set_noun_backend("en_core_web_lg")
    finally:
        R._NOUNS.name, R._NOUNS._fn = previous


def test_auto_backend_picks_an_installed_pipeline_or_the_fallback():
    previous = R._NOUNS.name, R._NOUNS._fn
    try:
        name = R.set_noun_backend("auto")
        installed = [m for m in R.SPACY_MODELS if importlib.util.find_spec(m) is not None]
        assert name == (f"spacy:{installed[0]}" if installed else "fallback")
    finally:
        R._NOUNS.name, R._NOUNS._fn = previous
