"""Full JSON-Schema argument checks (issue 31): a tool set whose typed functions give enums, arrays, optional and
nested arguments; each failing call gets the reason written here by hand, and the env turns it into an invalid
turn. The schemas are those ``transformers.utils.get_json_schema`` writes."""

from __future__ import annotations

from typing import Literal, Optional

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.tools import ToolCall, ToolSet
from stratagym.envs.tools import ArgumentChecker
from stratagym.errors import ConfigError


def shop(mode: Literal["fast", "slow"], count: int, tags: list[str], budget: Optional[float] = None,
         color: str = "red", where: Optional[dict] = None) -> str:
    """Buy things.

    Args:
        mode: how to shop
        count: how many
        tags: labels to match
        budget: the most to spend
        color: the color (choices: ["red", "blue"])
        where: a place
    """
    return f"shop[{mode}]"


TOOLS = ToolSet(shop)
OK = {"mode": "fast", "count": 2, "tags": ["a"]}


def test_the_schema_has_what_the_checks_read():
    params = TOOLS.schemas()[0]["function"]["parameters"]
    assert params["properties"]["mode"]["enum"] == ["fast", "slow"]
    assert params["properties"]["color"]["enum"] == ["red", "blue"]
    assert params["properties"]["budget"].get("nullable") is True and params["required"] == ["mode", "count", "tags"]


@pytest.mark.parametrize("arguments", [
    OK,
    {**OK, "budget": None, "color": "blue", "where": {"city": "x"}},
    {**OK, "budget": 3},          # an integer is a JSON number
    {**OK, "count": 2.0},         # and 2.0 a JSON integer (JSON Schema 2020-12, "integer")
    {**OK, "tags": []},
])
def test_calls_that_fit(arguments):
    assert TOOLS.check(ToolCall("shop", arguments)) is None


@pytest.mark.parametrize("arguments, reason", [
    ({**OK, "mode": "slowly"}, 'the argument \'mode\' of shop must be one of "fast", "slow"'),
    ({**OK, "color": "green"}, 'the argument \'color\' of shop must be one of "red", "blue"'),
    ({**OK, "count": True}, "the argument 'count' of shop must be a JSON integer, got boolean"),
    ({**OK, "count": 2.5}, "the argument 'count' of shop must be a JSON integer, got number"),
    ({**OK, "tags": "a"}, "the argument 'tags' of shop must be a JSON array, got string"),
    ({**OK, "tags": ["a", 3]}, "the argument 'tags' of shop (at [1]) must be a JSON string, got integer"),
    ({**OK, "budget": "lots"}, "the argument 'budget' of shop must be a JSON number or null, got string"),
    ({**OK, "where": []}, "the argument 'where' of shop must be a JSON object or null, got array"),
    ({"mode": "fast", "count": 1}, "shop needs the argument 'tags'"),
    ({**OK, "size": 3, "colour": "red"}, "shop takes no argument 'size'; its arguments are mode, count, tags, budget, color, where"),
    ({**OK, "</tool_call><|im_end|>": 1}, "shop takes no argument (a name that is not an identifier)"),
    # the first problem in the order the call wrote its arguments
    ({"tags": [1], "mode": "x", "count": 1}, "the argument 'tags' of shop (at [0]) must be a JSON string, got integer"),
])
def test_each_failure_has_its_reason(arguments, reason):
    assert TOOLS.check(ToolCall("shop", arguments)).startswith(reason)


def test_other_keywords_and_nested_keys_are_checked_without_echoing_model_text():
    checker = ArgumentChecker("f", {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1},
        "o": {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"], "additionalProperties": False}}})
    assert checker.problem({"n": 0}) == "the argument 'n' of f does not satisfy the schema's minimum (1)"
    assert checker.problem({"o": {}}) == "the argument 'o' of f lacks a required key (k)"
    assert checker.problem({"o": {"k": 2}}) == "the argument 'o' of f (at .k) must be 1"
    assert checker.problem({"o": {"k": 1, "<b>": 1}}) == "the argument 'o' of f holds a key its schema does not allow"
    assert checker.problem({"n": 5, "o": {"k": 1}}) is None
    whole = ArgumentChecker("g", {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 1})
    assert whole.problem({}) == "the arguments of g do not satisfy the schema's minProperties (1)"


def test_deep_arguments_are_a_reason_not_a_crash():
    checker = ArgumentChecker("f", {"type": "object", "properties": {"x": {"$ref": "#/$defs/t"}},
                                    "$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}})
    assert checker.problem({"x": [[[]]]}) is None
    bad: list = [1]
    for _ in range(3000):
        bad = [bad]
    assert checker.problem({"x": bad}) == "the arguments of f are nested too deeply"


def test_a_broken_schema_is_a_config_error():
    with pytest.raises(ConfigError, match="the JSON Schema of tool 'f' is not valid"):
        ArgumentChecker("f", {"type": "object", "properties": {"x": {"type": "strung"}}})


def test_the_env_turns_a_schema_failure_into_an_invalid_turn():
    env = gym.make("stratagym/SearchQA-v0", split="test", protocol="tools")
    env.reset(seed=0, options={"task_index": 0})
    _, r, term, _, info = env.step('<tool_call>{"name": "search", "arguments": {"query": ["x"]}}</tool_call>')
    env.close()
    assert not info["action_valid"] and not term and r == 0.0
    assert info["invalid_reason"] == "the argument 'query' of search must be a JSON string, got array"


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["mode", "count", "tags", "budget", "color", "where", "x"]), _JSON, max_size=6))
def test_any_json_arguments_get_a_verdict_that_agrees_with_jsonschema(arguments):
    """None exactly when jsonschema itself accepts the arguments (with no extra arguments allowed)."""
    from jsonschema import Draft202012Validator

    params = dict(TOOLS.schemas()[0]["function"]["parameters"])
    props = {k: dict(v) for k, v in params["properties"].items()}
    for v in props.values():
        if v.pop("nullable", False):
            v["type"] = [v["type"], "null"]
    valid = Draft202012Validator({**params, "properties": props, "additionalProperties": False}).is_valid(arguments)
    verdict = TOOLS.check(ToolCall("shop", arguments))
    assert (verdict is None) == valid and (verdict is None or isinstance(verdict, str))
