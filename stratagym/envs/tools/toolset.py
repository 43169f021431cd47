""":class:`ToolSet`: an env family's tools, written once as typed Python functions."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from stratagym.envs.tools.calls import IDENTIFIER, ToolCall, shown_name
from stratagym.envs.tools.schema import ArgumentChecker
from stratagym.errors import ConfigError

__all__ = ["ToolSet"]


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
            if not IDENTIFIER.fullmatch(name) or name in self.functions:
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
        tool's JSON Schema (:class:`stratagym.envs.tools.schema.ArgumentChecker`: types, required, enums,
        no extra arguments, and every other keyword the schema carries)."""
        if call.name not in self.functions:
            return f"unknown tool {shown_name(call.name)}; the tools are {', '.join(self.names)}"
        if self._checkers is None:
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
