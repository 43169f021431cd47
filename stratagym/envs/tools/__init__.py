"""The ``tools`` protocol: an env's actions as function-calling tools, beside its tag protocol.

Every env speaks its tag protocol by default (Search-R1's ``<search>`` / ``<answer>``, plain commands for
ALFWorld and WebShop); ``protocol="tools"`` makes it speak native function calling instead, the format
chat templates render (``apply_chat_template(messages, tools=[...])``) and instruct models are tuned on.
This package holds what every env family shares:

* :class:`ToolSet` (:mod:`.toolset`) -- an env family's tools, written once as typed Python functions with a Google-style
  docstring. Their JSON Schemas come from ``transformers.utils.get_json_schema`` (the generator TRL's
  ``environment_factory`` uses, so both read the same schemas); each function maps its arguments to the
  env's own action text, so the env logic is never copied.
* tool-call parsers, chosen by name like vLLM's ``--tool-call-parser`` (:func:`register_tool_parser`,
  :func:`get_tool_parser` in :mod:`.parsing`; the parsers in :mod:`.parsers` and :mod:`.parser_families`,
  registered when this package is imported); ``hermes`` reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (Hermes, Qwen2.5, Qwen3 templates).
* :func:`resolve_turn` (:mod:`.parsing`) -- one model turn to at most one executed call, or a named reason it is invalid.

The rules of a turn (stratagym's own; there is no original to match):

* text around the call is allowed (reasoning before it, anything after);
* text inside ``<think> ... </think>`` is reasoning: a call written there is not executed (as vLLM's tool
  parsers run on the content after the reasoning parser has taken the reasoning out); an unclosed
  ``<think>`` runs to the end of the turn;
* **several calls in one turn: the first is executed, the rest are not** (Search-R1 takes the first tag
  the same way: one env step is one action); ``info["ignored_tool_calls"]`` counts the rest;
* the call's ``arguments`` must be a JSON object that passes the tool's JSON Schema, checked with the
  ``jsonschema`` library (:mod:`.schema`): every required argument, no others, the
  declared types, enums and any other keyword (a JSON string holding such an object is accepted too, as
  the OpenAI API sends ``arguments``);
* a tool name is echoed in a reason only when it is a plain identifier, so template-breaking text never
  comes back into the prompt.

Anything else is an invalid turn (``action_valid=False``, ``info["invalid_reason"]``), never an exception.

The env side (which protocol an env speaks, its tool set and parser) is :mod:`.protocol`, which plugs into the
env contract (:func:`stratagym.envs.core.register_protocol_builder`); the contract imports nothing from here.
"""

from stratagym.envs.tools.calls import ToolCall, ToolTurn, call_from_object, format_call, shown_name, strip_reasoning, tools_system_prompt
from stratagym.envs.tools.schema import ArgumentChecker, json_kind
from stratagym.envs.tools.toolset import ToolSet
from stratagym.envs.tools.parsing import ToolParser, get_tool_parser, register_tool_parser, resolve_turn, tool_parsers

# the built-in parsers register themselves by name when imported
from stratagym.envs.tools.parsers import parse_hermes  # noqa: E402
from stratagym.envs.tools import parser_families as _parser_families  # noqa: F401,E402
from stratagym.envs.tools.protocol import PROTOCOLS, ToolProtocol  # noqa: E402  (registers with the env contract)

__all__ = [
    "PROTOCOLS",
    "ArgumentChecker",
    "ToolCall",
    "ToolParser",
    "ToolProtocol",
    "ToolSet",
    "ToolTurn",
    "call_from_object",
    "format_call",
    "get_tool_parser",
    "json_kind",
    "parse_hermes",
    "register_tool_parser",
    "resolve_turn",
    "shown_name",
    "strip_reasoning",
    "tool_parsers",
    "tools_system_prompt",
]
