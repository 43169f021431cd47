"""Every tool-call format on the env (issue 31): a search and an answer play SearchQA with the structure the
same calls in hermes give, several calls execute the first, bad calls are invalid turns with a reason, and any
text is a step, never an exception. The formats' own pins are in ``test_tool_parsers.py`` (llama3_json,
mistral, pythonic) and ``test_tool_parsers_families.py`` (qwen3, granite, internlm, kimi_k2, deepseek_v3)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.tools import ToolCall, get_tool_parser
from tests.tools.test_tool_parsers_families import (ARG, CALL, CEND, DS_CALL, DS_CALLS, DS_CEND, DS_END, DS_SEP, END,
                                                    SEC, ds)

QA = "stratagym/SearchQA-v0"

#: parser -> (a search, an answer), with {q} and {a} to fill
FORMATS = {
    "llama3_json": ('<|python_tag|>{{"name": "search", "parameters": {{"query": "{q}"}}}}',
                    '{{"name": "answer", "arguments": {{"text": "{a}"}}}}'),
    "mistral": ('[TOOL_CALLS]search[ARGS]{{"query": "{q}"}}', '[TOOL_CALLS] [{{"name": "answer", "arguments": {{"text": "{a}"}}}}]'),
    "pythonic": ("[search(query='{q}')]", "[answer(text='{a}')]"),
    "qwen3_xml": ("<tool_call>\n<function=search>\n<parameter=query>\n{q}\n</parameter>\n</function>\n</tool_call>",
                  "<tool_call>\n<function=answer>\n<parameter=text>\n{a}\n</parameter>\n</function>\n</tool_call>"),
    "qwen3_coder": ("<function=search><parameter=query>{q}</parameter></function>",
                    "<function=answer><parameter=text>{a}</parameter></function>"),
    "granite": ('<|tool_call|>[{{"name": "search", "arguments": {{"query": "{q}"}}}}]',
                '<tool_call>[{{"name": "answer", "arguments": {{"text": "{a}"}}}}]'),
    "internlm": ('<|action_start|><|plugin|>\n{{"name": "search", "parameters": {{"query": "{q}"}}}}<|action_end|>',
                 '<|action_start|><|plugin|>\n{{"name": "answer", "parameters": {{"text": "{a}"}}}}<|action_end|>'),
    "kimi_k2": (f'{SEC}{CALL}functions.search:0{ARG}{{{{"query": "{{q}}"}}}}{CEND}{END}',
                f'{SEC}{CALL}functions.answer:0{ARG}{{{{"text": "{{a}}"}}}}{CEND}{END}'),
    "deepseek_v3": (DS_CALLS + ds("search", '{{"query": "{q}"}}') + DS_END, DS_CALLS + ds("answer", '{{"text": "{a}"}}')),
}
HERMES = ('<tool_call>{{"name": "search", "arguments": {{"query": "{q}"}}}}</tool_call>',
          '<tool_call>{{"name": "answer", "arguments": {{"text": "{a}"}}}}</tool_call>')
STRUCTURE = ("search_count", "tool_calls", "state_hash", "context_hashes", "won", "tool_call")


def _play(parser: str, texts: tuple[str, str]) -> list[dict]:
    env = gym.make(QA, split="test", protocol="tools", tool_parser=parser)
    _, info = env.reset(seed=0, options={"task_index": 0})
    ex = env.unwrapped.example(info["task_id"])
    _, _, term1, _, i1 = env.step(texts[0].format(q=ex.question.replace("'", " ").replace('"', " ")))
    _, r, term2, _, i2 = env.step(texts[1].format(a=ex.golden_answers[0]))
    env.close()
    assert not term1 and term2 and r == 1.0 and i1["tool_call"] == "search" and i2["won"]
    return [{k: i.get(k) for k in STRUCTURE} for i in (i1, i2)]


@pytest.mark.parametrize("parser", sorted(FORMATS))
def test_each_format_plays_searchqa_with_the_hermes_structure(parser):
    assert _play(parser, FORMATS[parser]) == _play("hermes", HERMES)


@pytest.mark.parametrize("parser, text, reason", [
    ("llama3_json", '{"name": "browse", "arguments": {}}', "unknown tool 'browse'; the tools are search, answer"),
    ("mistral", "[TOOL_CALLS]search[ARGS]{}", "search needs the argument 'query'"),
    ("pythonic", "[search(query=7)]", "the argument 'query' of search must be a JSON string, got integer"),
    ("llama3_json", '<think>{"name": "search", "arguments": {"query": "x"}}</think> no call', "the tool call is inside <think>"),
    ("pythonic", "<think>I will search</think>\n[search(query='x')] now", "the tool call list is not a Python list of calls"),
    ("mistral", "just text", "the turn has no tool call"),
    ("qwen3_xml", "<function=browse><parameter=url>x</parameter></function>", "unknown tool 'browse'"),
    ("qwen3_coder", "<function=search></function>", "search needs the argument 'query'"),
    ("granite", '<|tool_call|>[{"name": "search", "arguments": {"query": 7}}]',
     "the argument 'query' of search must be a JSON string, got integer"),
    ("internlm", '<think><|action_start|><|plugin|>{"name": "search", "parameters": {"query": "x"}}</think> no call',
     "the tool call is inside <think>"),
    ("kimi_k2", f'{SEC}{CALL}functions.search:0{ARG}{{"query": "x", "k": 1}}{CEND}{END}', "search takes no argument 'k'"),
    ("deepseek_v3", "plain text", "the turn has no tool call"),
])
def test_bad_calls_in_each_format_are_invalid_turns(parser, text, reason):
    env = gym.make(QA, split="test", protocol="tools", tool_parser=parser)
    env.reset(seed=0, options={"task_index": 0})
    obs, r, term, _, info = env.step(text)
    env.close()
    assert not info["action_valid"] and info["invalid_reason"].startswith(reason) and not term and r == 0.0


#: several calls in one turn: the two calls one after the other, except in pythonic, whose calls share one list
SEVERAL = {"pythonic": "[search(query='{q}'), answer(text='{a}')]"}


@pytest.mark.parametrize("parser", sorted(FORMATS))
def test_several_calls_execute_the_first(parser):
    env = gym.make(QA, split="test", protocol="tools", tool_parser=parser)
    env.reset(seed=0, options={"task_index": 0})
    search, answer = FORMATS[parser]
    turn = SEVERAL.get(parser, search + "\n" + answer).format(q="guild", a="x")
    _, _, term, _, info = env.step(turn)
    env.close()
    assert info["tool_call"] == "search" and info["ignored_tool_calls"] == 1 and not term


_PIECES = sorted(set(list("[](){}<>\"':,;=.-+ \n\\fx") + ["[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "search", "answer", "query",
                                                 "name", "arguments", "null", "lambda", "**", "<think>", "</think>"]) | set(list("[]{}<>=\"':,\n\\x ") + [
    "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", "search", "query",
    "<|tool_call|>", "name", "arguments", "parameters", "<|action_start|><|plugin|>", "<|action_end|>", SEC, END, CALL,
    ARG, CEND, "functions.search:0", DS_CALLS, DS_CALL, DS_SEP, DS_CEND, "\n```json\n", "\n```", "<think>", "</think>"]))


@pytest.fixture(scope="module")
def envs():
    made = {p: gym.make(QA, split="test", protocol="tools", tool_parser=p) for p in FORMATS}
    yield made
    for env in made.values():
        env.close()


@settings(max_examples=270, deadline=None)  # the two suites' 120 + 150 before they were one
@given(parser=st.sampled_from(sorted(FORMATS)),
       text=st.one_of(st.lists(st.sampled_from(_PIECES), max_size=50).map("".join), st.text(max_size=200)))
def test_any_text_in_any_format_is_a_step_never_an_exception(envs, parser, text):
    calls = get_tool_parser(parser)(text)
    assert all(isinstance(c, (ToolCall, str)) for c in calls)
    env = envs[parser]
    env.reset(seed=0, options={"task_index": 0})
    obs, _, _, _, info = env.step(text)
    assert isinstance(obs, str) and (info["action_valid"] or info["invalid_reason"])
