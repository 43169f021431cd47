"""A tool call and its text forms: :class:`ToolCall`, a turn's outcome (:class:`ToolTurn`), decoding a
``{"name": ..., "arguments": ...}`` object, taking reasoning out of a turn, and writing a call or a tool list
as text. The bottom of :mod:`stratagym.envs.tools`: it imports nothing of stratagym.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = [
    "IDENTIFIER",
    "ToolCall",
    "ToolTurn",
    "call_from_object",
    "decode_call",
    "format_call",
    "shown_name",
    "strip_reasoning",
    "tools_system_prompt",
]

#: A plain tool name: what a reason may echo and what a tool function may be called.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolTurn:
    """What a turn comes to: the call to execute (None when the turn is invalid), the reason it is
    invalid, and how many further calls the turn held (not executed: the first-call rule)."""

    call: ToolCall | None
    problem: str | None = None
    ignored: int = 0


def shown_name(name: Any) -> str:
    """A tool name as a reason may show it: quoted when a plain identifier, else described (so text that
    could break a chat template never comes back into the prompt)."""
    if isinstance(name, str) and IDENTIFIER.fullmatch(name):
        return repr(name)
    return "(a name that is not an identifier)"


def decode_call(raw: str) -> "ToolCall | str":
    """A call written as JSON text (the body of a ``<tool_call>``), or why it is not one."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return "the tool call is not valid JSON"
    return call_from_object(obj)


def call_from_object(obj: Any, *, arguments_keys: Sequence[str] = ("arguments",)) -> "ToolCall | str":
    """A decoded ``{"name": ..., "arguments": ...}`` object as a :class:`ToolCall`, or why it is not one.

    Shared by the parsers so every format gives the same reasons. ``arguments_keys``: the keys that may
    hold the arguments, first found wins (Llama 3's JSON form also writes ``parameters``)."""
    if not isinstance(obj, dict):
        return "a tool call must be a JSON object with \"name\" and \"arguments\""
    key = next((k for k in arguments_keys if k in obj), arguments_keys[0])
    name, args = obj.get("name"), obj.get(key, {})
    if not isinstance(name, str):
        return "the tool call has no \"name\" string"
    if isinstance(args, str):  # the OpenAI API sends arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return f"the arguments of the call to {shown_name(name)} are not valid JSON"
    if not isinstance(args, dict):
        return f"the arguments of the call to {shown_name(name)} must be a JSON object"
    return ToolCall(name, args)


_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)


def strip_reasoning(text: str) -> str:
    """``text`` without its ``<think>`` blocks (an unclosed one runs to the end)."""
    return _THINK.sub(" ", text)


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call written the way ``hermes`` reads it (and Qwen2.5's template renders an assistant's
    ``tool_calls``): for demonstrations and for a served model's structured ``tool_calls``."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False) + "\n</tool_call>"


def tools_system_prompt(schemas: Sequence[Mapping[str, Any]]) -> str:
    """The documented fallback for a chat template without a tool section: the schemas and the call
    format as a system message (stratagym's own wording)."""
    lines = ["You can call the following functions. Their JSON schemas:"]
    lines += [json.dumps(s, ensure_ascii=False) for s in schemas]
    lines.append('To call one, write <tool_call>{"name": "<function name>", "arguments": {<arguments as JSON>}}'
                 "</tool_call>. One call per turn; the result comes back in the next message.")
    return "\n".join(lines)
