"""The ``tools`` protocol: an env's actions as function-calling tools, beside its tag protocol.

Every env speaks its tag protocol by default (Search-R1's ``<search>`` / ``<answer>``, plain commands for
ALFWorld and WebShop); ``protocol="tools"`` makes it speak native function calling instead, the format
chat templates render (``apply_chat_template(messages, tools=[...])``) and instruct models are tuned on.
This module holds what every env family shares:

* :class:`ToolSet` -- an env family's tools, written once as typed Python functions with a Google-style
  docstring. Their JSON Schemas come from ``transformers.utils.get_json_schema`` (the generator TRL's
  ``environment_factory`` uses, so both read the same schemas); each function maps its arguments to the
  env's own action text, so the env logic is never copied.
* tool-call parsers, chosen by name like vLLM's ``--tool-call-parser`` (:func:`register_tool_parser`,
  :func:`get_tool_parser`); ``hermes`` reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (Hermes, Qwen2.5, Qwen3 templates).
* :func:`resolve_turn` -- one model turn to at most one executed call, or a named reason it is invalid.

The rules of a turn (stratagym's own; there is no original to match):

* text around the call is allowed (reasoning before it, anything after);
* text inside ``<think> ... </think>`` is reasoning: a call written there is not executed (as vLLM's tool
  parsers run on the content after the reasoning parser has taken the reasoning out); an unclosed
  ``<think>`` runs to the end of the turn;
* **several calls in one turn: the first is executed, the rest are not** (Search-R1 takes the first tag
  the same way: one env step is one action); ``info["ignored_tool_calls"]`` counts the rest;
* the call's ``arguments`` must be a JSON object that passes the tool's JSON Schema, checked with the
  ``jsonschema`` library (:mod:`stratagym.envs.tool_schema`): every required argument, no others, the
  declared types, enums and any other keyword (a JSON string holding such an object is accepted too, as
  the OpenAI API sends ``arguments``);
* a tool name is echoed in a reason only when it is a plain identifier, so template-breaking text never
  comes back into the prompt.

Anything else is an invalid turn (``action_valid=False``, ``info["invalid_reason"]``), never an exception.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from stratagym.errors import ConfigError

__all__ = [
    "PROTOCOLS",
    "ToolCall",
    "ToolSet",
    "ToolTurn",
    "call_from_object",
    "format_call",
    "get_tool_parser",
    "register_tool_parser",
    "resolve_turn",
    "shown_name",
    "tool_parsers",
    "tools_system_prompt",
    "strip_reasoning",
    "tool_set_for",
]

PROTOCOLS = ("tags", "tools")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


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
    if isinstance(name, str) and _IDENTIFIER.fullmatch(name):
        return repr(name)
    return "(a name that is not an identifier)"


class ToolSet:
    """An env family's tools: typed functions that turn a call's arguments into the env's action text.

    Why functions: the signature and docstring are the one place a tool is written; the JSON Schema is
    generated from them (``get_json_schema``), and calling the function is how a call becomes an action.
    """

    def __init__(self, *functions: Callable[..., str], from_action: Callable[[str], "ToolCall | None"] | None = None):
        if not functions:
            raise ConfigError("a ToolSet needs at least one tool function")
        self.functions: dict[str, Callable[..., str]] = {}
        for fn in functions:
            name = getattr(fn, "__name__", "")
            if not _IDENTIFIER.fullmatch(name) or name in self.functions:
                raise ConfigError(f"tool names must be distinct identifiers, got {name!r}")
            self.functions[name] = fn
        self._from_action = from_action
        self._schemas: list[dict[str, Any]] | None = None
        self._checkers: dict[str, Any] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.functions)

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI/``apply_chat_template`` function schemas (computed once per process)."""
        if self._schemas is None:
            try:
                from transformers.utils import get_json_schema
            except ImportError as exc:
                raise ConfigError("the tools protocol generates its schemas with transformers: "
                                  "pip install 'stratagym[train]'") from exc
            out = []
            for fn in self.functions.values():
                schema = get_json_schema(fn)
                schema["function"].pop("return", None)
                out.append(schema)
            self._schemas = out
        return self._schemas

    def signature(self) -> str:
        """``search(query), answer(text)``: the tools as a reason names them."""
        return ", ".join(f"{s['function']['name']}({', '.join(s['function']['parameters'].get('properties', {}))})"
                         for s in self.schemas())

    def check(self, call: ToolCall) -> str | None:
        """Why ``call`` does not fit this tool set, or None: an unknown tool, or arguments that fail the
        tool's JSON Schema (:class:`stratagym.envs.tool_schema.ArgumentChecker`: types, required, enums,
        no extra arguments, and every other keyword the schema carries)."""
        if call.name not in self.functions:
            return f"unknown tool {shown_name(call.name)}; the tools are {', '.join(self.names)}"
        if self._checkers is None:
            from stratagym.envs.tool_schema import ArgumentChecker

            self._checkers = {s["function"]["name"]: ArgumentChecker(s["function"]["name"], s["function"]["parameters"])
                              for s in self.schemas()}
        return self._checkers[call.name].problem(call.arguments)

    def action(self, call: ToolCall) -> str:
        """The env's action text for a checked call."""
        return self.functions[call.name](**call.arguments)

    def from_action(self, action: str) -> ToolCall | None:
        """The call that stands for the env's own action text (an expert's action, for demonstrations):
        the family's mapping when it gives one, else the one tool's one argument; None when none fits."""
        if self._from_action is not None:
            return self._from_action(action)
        if len(self.functions) == 1:
            name, fn = next(iter(self.functions.items()))
            params = list(inspect.signature(fn).parameters)
            if len(params) == 1:
                return ToolCall(name, {params[0]: action})
        return None


# ---- parsers ----------------------------------------------------------------------------------------------

#: A parser maps a turn's text (reasoning already taken out) to its calls in order: a :class:`ToolCall`,
#: or a string saying why that call could not be read.
ToolParser = Callable[[str], list["ToolCall | str"]]
_PARSERS: dict[str, ToolParser] = {}


def register_tool_parser(name: str) -> Callable[[ToolParser], ToolParser]:
    """Register a tool-call parser under ``name`` (the env kwarg ``tool_parser`` picks it)."""

    def deco(fn: ToolParser) -> ToolParser:
        _PARSERS[name] = fn
        return fn

    return deco


def _load_builtin_parsers() -> None:
    """Register the parsers of :mod:`stratagym.envs.tool_parsers` and
    :mod:`stratagym.envs.tool_parsers_families` (imported here, not at the top: those modules register
    through this one)."""
    import stratagym.envs.tool_parsers  # noqa: F401
    import stratagym.envs.tool_parsers_families  # noqa: F401


def get_tool_parser(name: str) -> ToolParser:
    """The parser registered as ``name``; a :class:`ConfigError` listing the names otherwise."""
    _load_builtin_parsers()
    try:
        return _PARSERS[name]
    except KeyError:
        raise ConfigError(f"unknown tool_parser {name!r}; choose one of {sorted(_PARSERS)}") from None


def tool_parsers() -> list[str]:
    """The registered parser names, sorted."""
    _load_builtin_parsers()
    return sorted(_PARSERS)


def _decode_call(raw: str) -> "ToolCall | str":
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


_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@register_tool_parser("hermes")
def parse_hermes(text: str) -> list["ToolCall | str"]:
    """Hermes / Qwen2.5 / Qwen3: each call a JSON object between ``<tool_call>`` and ``</tool_call>``; a
    last ``<tool_call>`` left open (generation stopped at the closing tag, which some servers strip) is
    read to the end of the turn, as vLLM's ``hermes`` parser also accepts."""
    calls: list[ToolCall | str] = [_decode_call(m) for m in _HERMES.findall(text)]
    tail = text.rfind("<tool_call>")
    if tail >= 0 and text.find("</tool_call>", tail) < 0:
        calls.append(_decode_call(text[tail + len("<tool_call>"):]))
    return calls


# ---- a turn ----------------------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)


def strip_reasoning(text: str) -> str:
    """``text`` without its ``<think>`` blocks (an unclosed one runs to the end)."""
    return _THINK.sub(" ", text)


def tool_set_for(env_id: str) -> ToolSet:
    """The tool set an env's class declares (``TextEnv.tool_set``), found through its registered spec."""
    from stratagym.envs.registry import get_spec, load_object

    path = getattr(load_object(get_spec(env_id).entry_point), "tool_set", None)
    if path is None:
        raise ConfigError(f"{env_id} has no tools protocol; use protocol: tags")
    return load_object(path)


def resolve_turn(text: str, tools: ToolSet, parser: ToolParser) -> ToolTurn:
    """The call a turn executes under the rules in the module docstring, or why the turn is invalid."""
    outside = strip_reasoning(text)
    calls = parser(outside)
    if not calls:
        if parser(text):
            return ToolTurn(None, "the tool call is inside <think>; reasoning is not executed, call after </think>")
        return ToolTurn(None, "the turn has no tool call")
    first, ignored = calls[0], len(calls) - 1
    if isinstance(first, str):
        return ToolTurn(None, first, ignored)
    problem = tools.check(first)
    return ToolTurn(None if problem else first, problem, ignored)


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
