"""Tool-call parsers by name (like vLLM's ``--tool-call-parser``) and :func:`resolve_turn`: one model turn
to at most one executed call, or a named reason the turn is invalid (the rules: :mod:`stratagym.envs.tools`).

The parsers themselves live in :mod:`stratagym.envs.tools.parsers` and
:mod:`stratagym.envs.tools.parser_families`; importing :mod:`stratagym.envs.tools` registers them.
"""

from __future__ import annotations

from typing import Callable

from stratagym.envs.tools.calls import ToolCall, ToolTurn, strip_reasoning
from stratagym.envs.tools.toolset import ToolSet
from stratagym.errors import ConfigError

__all__ = ["ToolParser", "get_tool_parser", "register_tool_parser", "resolve_turn", "tool_parsers"]

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


def get_tool_parser(name: str) -> ToolParser:
    """The parser registered as ``name``; a :class:`ConfigError` listing the names otherwise."""
    try:
        return _PARSERS[name]
    except KeyError:
        raise ConfigError(f"unknown tool_parser {name!r}; choose one of {sorted(_PARSERS)}") from None


def tool_parsers() -> list[str]:
    """The registered parser names, sorted."""
    return sorted(_PARSERS)


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
