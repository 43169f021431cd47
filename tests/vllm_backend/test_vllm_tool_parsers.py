"""Differential test of the family tool-call formats (issue 31): vLLM's own parsers (``qwen3_xml``, ``qwen3_coder``,
``granite``, ``internlm``, ``kimi_k2``, ``deepseek_v3``, loaded through ``ToolParserManager`` as
``--tool-call-parser`` loads them) and stratagym's read the same well-formed turns to the same ``(name, arguments)``
calls, in order. No engine and no hub: each parser class gets a word-level tokenizer built here, one character per
token plus the formats' markers as special tokens (the DeepSeek and Kimi parsers look their markers up in the
vocabulary). Malformed turns are not compared: there stratagym names a reason where vLLM drops, passes on or raises
(``tests/tools/test_tool_parsers_families.py`` pins each case to vLLM's lines)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.vllm

import vllm  # noqa: E402,F401  (tests/vllm_backend/conftest.py collects these only where vLLM is installed)

from stratagym.envs.registry import tool_set_for  # noqa: E402
from stratagym.envs.tools import ToolCall, get_tool_parser  # noqa: E402
from tests.tools.test_tool_formats_on_env import FORMATS as ALL_FORMATS  # noqa: E402
from tests.tools.test_tool_parsers_families import (  # noqa: E402
    ARG, CALL, CEND, DS_CALLS, DS_END, END, QX, SEC, TY, ds,
)

#: the model-family formats this file checks against vLLM's parsers (the other formats' pins cite vLLM's lines)
FORMATS = {p: ALL_FORMATS[p] for p in ("qwen3_xml", "qwen3_coder", "granite", "internlm", "kimi_k2", "deepseek_v3")}

MARKERS = ["<|tool_call|>", "<|action_start|>", "<|plugin|>", "<|action_end|>", SEC, END, CALL, CEND, ARG,
           DS_CALLS, DS_END, "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<think>", "</think>",
           "<tool_call>", "</tool_call>"]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0}
    for ch in ["\n", *map(chr, range(32, 127))]:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    fast.add_special_tokens({"additional_special_tokens": MARKERS})
    return fast


def vllm_calls(tokenizer, parser: str, text: str) -> list[tuple[str, dict]]:
    """The calls vLLM's parser registered as ``parser`` extracts from ``text`` (a chat request carrying the
    SearchQA tools, as the env's requests do)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager, register_lazy_tool_parsers

    register_lazy_tool_parsers()
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "q"}],
                                    tools=tool_set_for("stratagym/SearchQA-v0").schemas())
    result = ToolParserManager.get_tool_parser(parser)(tokenizer).extract_tool_calls(text, request)
    return [(c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls]


def ours(parser: str, text: str) -> list[tuple[str, dict]]:
    calls = get_tool_parser(parser)(text)
    assert all(isinstance(c, ToolCall) for c in calls), calls
    return [(c.name, c.arguments) for c in calls]


WELL_FORMED = [
    *[(p, t) for p, pair in FORMATS.items() for t in (pair[0].format(q="who led the guild"), pair[1].format(a="Oslo"))],
    ("qwen3_coder", "I will look <tool_call>\n<function=search>\n<parameter=query>\nx y\n</parameter>\n</function>\n"
                    "</tool_call> then <tool_call><function=answer><parameter=text>b</parameter></function></tool_call>"),
    ("qwen3_xml", "<tool_call><function=search><parameter=query>a</parameter></function><function=answer>"
                  "<parameter=text>\n\nb\n\n</parameter></function></tool_call>"),
    ("qwen3_xml", "<tool_call><function=f><parameter=a>1<parameter=b>2</parameter>junk<parameter=b>3</parameter>"
                  "</function></tool_call>"),
    ("qwen3_xml", "<tool_call><function= search ><parameter = query>x</ parameter></function></tool_call>"),
    ("qwen3_xml", "<function=search><parameter=query>a <tool_call> b > c</parameter></function>"),
    ("qwen3_xml", "<tool_call><function=search><parameter=query>x</parameter>"),
    ("granite", '<|tool_call|>[{"name": "search", "arguments": {"query": "x"}}, {"name": "answer", "arguments": '
                '{"text": "y"}}] then <|tool_call|>[{"name": "answer"}]'),
    ("granite", 'Sure. <tool_call> [{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}] and after'),
    ("granite", '<|tool_call|>[{"name": "search", "parameters": {"query": "x"}}]'),
    ("internlm", 'ok<|action_start|><|plugin|>\n{"name": "f", "arguments": {"q": 1}, "parameters": {"q": 2}}'
                 "<|action_end|>"),
    ("internlm", 'call: <|action_start|><|plugin|>{"name": "search", "arguments": {"query": "x"}}'),
    ("kimi_k2", f"text {SEC}{CALL}functions.search:0{ARG}{QX}{CEND}{CALL}functions.answer:1{ARG}{TY}{CEND}{END} after"),
    ("kimi_k2", f"{SEC}\n{CALL}search:0\n{ARG}{QX}{CEND}\n{END}"),
    ("kimi_k2", f"{SEC}{CALL}functions.a.b:0:1{ARG}{{}}{CEND}{CALL}functions.answer:2{CEND}{END}"),
    ("kimi_k2", f"{SEC}{CALL}functions.search:0{ARG}{QX}{END}{CALL}functions.answer:1{ARG}{TY}{CEND}"),
    ("deepseek_v3", "hi" + DS_CALLS + ds("search", QX) + "\n" + ds("answer", TY) + DS_END),
    ("deepseek_v3", DS_CALLS + ds("search", QX) + ds("answer", "{}")),
    *[(p, "no call, only text") for p in FORMATS],
]


@pytest.mark.parametrize("parser, text", WELL_FORMED)
def test_stratagym_reads_the_calls_vllm_reads(tokenizer, parser, text):
    assert ours(parser, text) == vllm_calls(tokenizer, parser, text)


# ---- generated calls: random names, keys and values, written in each format as its template writes them -------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
_TEXT = st.text(st.sampled_from("abcXYZ019 .,:;!?'\"-/=()&%$#@~`|"), max_size=20)  # no markup characters, no newlines
_EDGE = st.sampled_from(["", " ", "  ", "\t"])
_VALUE = st.tuples(_EDGE, _TEXT, _EDGE).map("".join)  # spaces at the edges are part of a value
_CALLS = st.lists(st.tuples(_IDENT, st.dictionaries(_IDENT, _VALUE, max_size=3)), min_size=1, max_size=3)


def _render(parser: str, calls: list[tuple[str, dict]]) -> str:
    if parser == "qwen3_xml":  # Qwen3-Coder's chat template layout
        return "".join("<tool_call>\n<function=" + n + ">\n"
                       + "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in a.items())
                       + "</function>\n</tool_call>\n" for n, a in calls)
    if parser == "granite":
        return "<|tool_call|>" + json.dumps([{"name": n, "arguments": a} for n, a in calls])
    if parser == "internlm":  # one call a turn: vLLM's parser raises on a second marker
        n, a = calls[0]
        return "<|action_start|><|plugin|>\n" + json.dumps({"name": n, "parameters": a}) + "<|action_end|>"
    if parser == "kimi_k2":
        return SEC + "".join(f"{CALL}functions.{n}:{i}{ARG}{json.dumps(a)}{CEND}" for i, (n, a) in enumerate(calls)) + END
    return DS_CALLS + "\n".join(ds(n, json.dumps(a)) for n, a in calls) + DS_END


@settings(max_examples=60, deadline=None)
@given(parser=st.sampled_from(["qwen3_xml", "granite", "internlm", "kimi_k2", "deepseek_v3"]), calls=_CALLS,
       before=_VALUE)
def test_generated_calls_read_the_same_on_both_sides(tokenizer, parser, calls, before):
    text = before + _render(parser, calls)
    expected = calls[:1] if parser == "internlm" else calls
    assert ours(parser, text) == vllm_calls(tokenizer, parser, text) == [(n, a) for n, a in expected]
