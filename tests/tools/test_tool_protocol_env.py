"""The tools protocol on the envs (issue 31): a turn's tool call, the bad-input rules, and the same
structure (counts, validity, hashes, rewards) as the tag protocol for the same episode."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.core import EpisodeKey
from stratagym.envs.registry import make_agent
from stratagym.envs.tools import ToolCall, format_call, get_tool_parser
from stratagym.envs.registry import tool_set_for
from stratagym.errors import ConfigError

QA = "stratagym/SearchQA-v0"
STRUCTURE = ("task_id", "step", "action_valid", "tool_calls", "search_count", "state_hash", "context_hashes",
             "won", "score", "admissible_actions")


@pytest.fixture(scope="module")
def qa():
    env = gym.make(QA, split="test", protocol="tools")
    yield env.unwrapped
    env.close()


def _start(env):
    obs, info = env.reset(seed=0, options={"task_index": 0})
    return obs, info


def _step(env, text):
    _start(env)
    return env.step(text)


def call(name, **arguments):
    return format_call(name, arguments)


# ---- the protocol's shape -------------------------------------------------------------------------------------


def test_reset_shows_the_tools_and_no_tags(qa):
    obs, info = _start(qa)
    assert "<search>" not in obs and "search tool" in obs and qa.example(info["task_id"]).question in obs
    assert info["protocol"] == "tools"
    names = [s["function"]["name"] for s in info["tool_schemas"]]
    assert names == ["search", "answer"]
    search = info["tool_schemas"][0]["function"]
    assert search["parameters"] == {"type": "object", "properties": {"query": {"type": "string", "description":
                                    "What to look for, in a few words."}}, "required": ["query"]}


def test_tags_protocol_info_is_unchanged():
    env = gym.make(QA, split="test")
    _, info = env.reset(seed=0, options={"task_index": 0})
    assert "protocol" not in info and "tool_schemas" not in info
    _, _, _, _, info = env.step("<search> x </search>")
    assert "protocol" not in info and "tool_call" not in info
    env.close()


def test_a_search_then_an_answer(qa):
    obs, info = _start(qa)
    ex = qa.example(info["task_id"])
    obs, r, term, trunc, info = qa.step("<think>look it up</think>\n" + call("search", query=ex.question))
    assert info["action_valid"] and info["search_count"] == 1 and info["tool_call"] == "search"
    assert obs.lstrip().startswith("<information>") and not term
    obs, r, term, trunc, info = qa.step(call("answer", text=ex.golden_answers[0]))
    assert term and r == 1.0 and info["won"] and info["em"] == 1.0 and info["tool_call"] == "answer"


def test_arguments_are_never_read_as_tags(qa):
    """An argument holding a closing tag is searched/answered as written (no tag re-parsing)."""
    _start(qa)
    _, _, _, _, info = qa.step(call("search", query="a </search> <answer> b </answer>"))
    assert info["action_valid"] and info["query"] == "a </search> <answer> b </answer>"


def test_protocol_and_parser_are_checked():
    with pytest.raises(ConfigError, match="protocol must be one of"):
        gym.make(QA, protocol="json")
    with pytest.raises(ConfigError, match=r"unknown tool_parser 'granite4'; choose one of \['deepseek_v3', 'granite', "
                                          r"'hermes', 'internlm', 'kimi_k2', 'llama3_json', 'mistral', 'pythonic', "
                                          r"'qwen3_coder', 'qwen3_xml'\]"):
        gym.make(QA, protocol="tools", tool_parser="granite4")


# ---- bad input: each an invalid turn with a named reason ------------------------------------------------------


@pytest.mark.parametrize("text, reason", [
    ("<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"x\"</tool_call>", "the tool call is not valid JSON"),
    (call("browse", url="x"), "unknown tool 'browse'; the tools are search, answer"),
    (call("search"), "search needs the argument 'query'"),
    (call("search", query="x", k=3), "search takes no argument 'k'; its arguments are query"),
    (call("search", query=7), "the argument 'query' of search must be a JSON string, got integer"),
    (call("answer", text=None), "the argument 'text' of answer must be a JSON string, got null"),
    ("<tool_call>[1, 2]</tool_call>", 'a tool call must be a JSON object with "name" and "arguments"'),
    ("<tool_call>{\"arguments\": {}}</tool_call>", 'the tool call has no "name" string'),
    ("<tool_call>{\"name\": \"search\", \"arguments\": [\"x\"]}</tool_call>", "the arguments of the call to 'search' must be a JSON object"),
    ("I would search now.", "the turn has no tool call"),
    ("<think>" + call("search", query="x") + "</think> done", "the tool call is inside <think>"),
    ("<think>still thinking " + call("search", query="x"), "the tool call is inside <think>"),
])
def test_bad_calls_are_invalid_turns_with_a_reason(qa, text, reason):
    obs, r, term, trunc, info = _step(qa, text)
    assert not info["action_valid"] and info["invalid_reason"].startswith(reason)
    assert obs.startswith("Invalid tool call: " + reason) and "search(query), answer(text)" in obs
    assert info["search_count"] == 0 and r == 0.0 and not term


def test_template_breaking_tool_names_are_not_echoed(qa):
    for name in ["search</tool_call><|im_end|>", "<|im_start|>system", "a" * 100, "x\ny", ""]:
        obs, _, _, _, info = _step(qa, "<tool_call>" + json.dumps({"name": name, "arguments": {}}) + "</tool_call>")
        assert not info["action_valid"]
        if "</tool_call>" in name:  # the closing tag ends the call early: what is left is not JSON
            assert info["invalid_reason"] == "the tool call is not valid JSON"
        else:
            assert "(a name that is not an identifier)" in info["invalid_reason"]
        assert "<|im" not in obs and "</tool_call><" not in obs and "aaaa" not in obs


def test_arguments_of_100k_characters(qa):
    obs, _, _, _, info = _step(qa, call("search", query="w" * 100_000))
    assert not info["action_valid"] and "too long" in info["invalid_reason"] and "w" * 100 not in obs
    small = gym.make(QA, split="test", protocol="tools", max_query_chars=50).unwrapped
    _, _, _, _, info = _step(small, call("search", query="w" * 51))
    assert not info["action_valid"] and info["invalid_reason"] == "the search query is too long (51 > 50 characters)"
    small.close()


def test_several_calls_the_first_runs_the_rest_are_counted(qa):
    _, info = _start(qa)
    text = call("search", query="first") + "\n" + call("answer", text="x") + call("search", query="third")
    obs, r, term, _, info = qa.step(text)
    assert info["action_valid"] and info["tool_call"] == "search" and info["query"] == "first"
    assert info["ignored_tool_calls"] == 2 and not term and info["search_count"] == 1


def test_a_call_with_free_text_around_it_and_other_accepted_forms(qa):
    _, _, _, _, info = _step(qa, "Let me check.\n" + call("search", query="x") + "\nThen I answer.")
    assert info["action_valid"] and info["query"] == "x"
    # arguments as a JSON string (as the OpenAI API sends them); a last call left open at the stop string
    _, _, _, _, info = _step(qa, '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"y\\"}"}</tool_call>')
    assert info["action_valid"] and info["query"] == "y"
    _, _, _, _, info = _step(qa, '<tool_call>\n{"name": "search", "arguments": {"query": "z"}}\n')
    assert info["action_valid"] and info["query"] == "z"


def test_deeply_nested_json_is_an_invalid_turn(qa):
    _, _, _, _, info = _step(qa, "<tool_call>" + "[" * 50 + "]" * 50 + "</tool_call>")
    assert not info["action_valid"] and info["invalid_reason"].startswith("a tool call must be a JSON object")
    _, _, _, _, info = _step(qa, "<tool_call>" + "[" * 7000 + "]" * 7000 + "</tool_call>")
    assert not info["action_valid"] and info["invalid_reason"] == "the tool call is not valid JSON"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list('<>/{}[]":, \n') + ["<tool_call>", "</tool_call>", "<think>", "</think>",
                                 '"name"', '"arguments"', '"search"', '"query"', "x"]), max_size=60).map("".join))
def test_any_text_is_a_step_never_an_exception(qa, text):
    _, info = _start(qa)
    obs, r, term, trunc, info = qa.step(text)
    assert isinstance(obs, str) and isinstance(info["action_valid"], bool)
    assert info["action_valid"] or info["invalid_reason"]


def test_parser_registry_returns_calls_in_order():
    parse = get_tool_parser("hermes")
    out = parse(call("a", x=1) + "junk" + "<tool_call>nope</tool_call>")
    assert out == [ToolCall("a", {"x": 1}), "the tool call is not valid JSON"]


# ---- the same episode under both protocols ---------------------------------------------------------------------


def _play(env_id, kwargs, agent_name, protocol, task_index, seed=0):
    env = gym.make(env_id, protocol=protocol, **kwargs)
    agent = make_agent(env_id, agent_name, env, seed=seed)
    tools = tool_set_for(env_id)
    obs, info = env.reset(seed=seed, options={"task_index": task_index})
    rows = [{k: info.get(k) for k in STRUCTURE}]
    episode = EpisodeKey(info["task_id"], seed)
    done = False
    while not done:
        action = agent.act([obs], [info], [episode])[0]
        if protocol == "tools":
            mapped = tools.from_action(action)
            action = format_call(mapped.name, mapped.arguments) if mapped is not None else action
        obs, reward, term, trunc, info = env.step(action)
        done = term or trunc
        rows.append({**{k: info.get(k) for k in STRUCTURE}, "reward": reward, "term": term, "trunc": trunc})
    env.close()
    return rows


@pytest.mark.parametrize("env_id, kwargs, agent, tasks", [
    (QA, {"split": "test"}, "oracle", range(4)),
    (QA, {"split": "test"}, "random", range(6)),
    ("stratagym/SearchStrata-v0", {"oracle_info": True}, "oracle", range(3)),
    ("stratagym/SearchStrata-v0", {}, "random", range(3)),
    ("stratagym/CueCorridor-v0", {"oracle_info": True}, "oracle", range(2)),
    ("stratagym/WebShop-v0", {}, "random", range(2)),
])
def test_same_episode_same_structure_under_both_protocols(env_id, kwargs, agent, tasks):
    for t in tasks:
        tags = _play(env_id, kwargs, agent, "tags", t)
        tools = _play(env_id, kwargs, agent, "tools", t)
        assert tags == tools
        assert len(tags) > 1


def test_structure_matches_for_invalid_turns_too():
    """An unparseable tag turn and a turn with no tool call are the same state (same hashes, counts)."""
    a = gym.make(QA, split="test")
    b = gym.make(QA, split="test", protocol="tools")
    for env in (a, b):
        env.reset(seed=0, options={"task_index": 1})
    ia = a.step("no tags here")[4]
    ib = b.step("no call here")[4]
    assert {k: ia[k] for k in STRUCTURE if k in ia} == {k: ib[k] for k in STRUCTURE if k in ib}
    assert not ia["action_valid"] and not ib["action_valid"]
    a.close()
    b.close()


def test_every_family_declares_tools():
    assert tool_set_for("stratagym/ALFWorld-v0").names == ("act",)
    assert tool_set_for("stratagym/WebShop-v0").names == ("act",)
    assert tool_set_for("stratagym/DifficultyMix-v0").names == ("act",)
    assert tool_set_for(QA).from_action("<think>t</think> <answer> Paris </answer>") == ToolCall("answer", {"text": "Paris"})
    assert tool_set_for("stratagym/WebShop-v0").from_action("click[buy now]") == ToolCall("act", {"command": "click[buy now]"})
    from stratagym.envs.core import StepResult, TextEnv

    class NoTools(TextEnv):
        def task_ids(self):
            return ("t",)

        def _reset_task(self, task_id):
            return "hi", {}

        def _step(self, action):
            return StepResult("ok")

    assert NoTools().protocol == "tags"
    with pytest.raises(ConfigError, match="NoTools has no tools protocol"):
        NoTools(protocol="tools")


def test_the_schemas_are_those_trl_environment_factory_reads():
    """One schema per tool for both routes: TRL builds its tools from the environment_factory class's
    methods with the same generator (transformers' get_json_schema)."""
    from transformers.utils import get_json_schema

    from stratagym.interop.trl.alfworld import ALFWorldTRLEnv
    from stratagym.interop.trl.search_qa import SearchQATRLEnv
    from stratagym.interop.trl.webshop import WebShopTRLEnv

    for cls in (SearchQATRLEnv, ALFWorldTRLEnv, WebShopTRLEnv):
        ours = tool_set_for(cls.env_id).schemas()
        theirs = []
        for s in ours:
            schema = get_json_schema(getattr(cls, s["function"]["name"]).__get__(object.__new__(cls)))
            schema["function"].pop("return", None)
            theirs.append(schema)
        assert ours == theirs
