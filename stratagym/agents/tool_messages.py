"""Chat messages of the tools protocol for the places that need another shape than the ``tools`` template's.

The ``tools`` template (:mod:`stratagym.agents.prompts`) writes each earlier turn as the assistant's raw
response (the ``<tool_call>`` text it sampled) and a ``tool`` message with the env's answer. Three readers
want something else:

* a chat template without a tool section (SmolLM2's, for one): :func:`fallback_messages` puts the
  schemas in a system message (:func:`stratagym.envs.tools.tools_system_prompt`) and the env's
  answers in user messages wrapped in ``<tool_response>``, the documented fallback;
* an OpenAI-compatible server: :func:`openai_messages` gives assistant messages structured
  ``tool_calls`` (with ids) and ``tool`` messages the matching ``tool_call_id``, as the API requires;
* TRL's conversational dataset format (demonstrations for ``SFTTrainer``): :func:`trl_messages`, the
  same structure with the arguments as objects, as ``apply_chat_template`` takes them.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from stratagym.envs.tools import ToolCall, format_call, parse_hermes, strip_reasoning, tools_system_prompt

__all__ = ["chat_template_has_tools", "fallback_messages", "hermes_calls", "openai_messages", "trl_messages"]


def chat_template_has_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template reads a ``tools`` variable (renders the schemas itself)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and "tools" in template


def hermes_calls(calls: Sequence[Any]) -> str:
    """Structured tool calls (``{"function": {"name", "arguments"}}``, the arguments an object or its JSON
    text) as the ``<tool_call>`` blocks a policy emits, one per line: what a template without a tool
    section shows for an assistant's calls. A call whose arguments are not a JSON object is left out."""
    parts = []
    for call in calls:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                continue
        if isinstance(args, dict) and isinstance(fn.get("name"), str):
            parts.append(format_call(fn["name"], args))
    return "\n".join(parts)


def fallback_messages(messages: Sequence[dict[str, Any]], schemas: Sequence[Any]) -> list[dict[str, Any]]:
    """``messages`` for a template without tool support: a system message with the schemas first (merged
    into an existing system message), each ``tool`` message as a user message in ``<tool_response>``."""
    out: list[dict[str, Any]] = []
    system = tools_system_prompt(schemas)
    rest = list(messages)
    if rest and rest[0].get("role") == "system":
        system = str(rest.pop(0).get("content", "")) + "\n\n" + system
    out.append({"role": "system", "content": system})
    for m in rest:
        if m.get("role") == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m.get('content', '')}\n</tool_response>"})
        else:
            out.append(dict(m))
    return out


def _first_call(text: str) -> tuple[ToolCall | None, str]:
    """The first well-formed call of a response (the one the env executed) and the text before it."""
    calls = parse_hermes(strip_reasoning(text))
    if not calls or not isinstance(calls[0], ToolCall):
        return None, text
    return calls[0], text.split("<tool_call>", 1)[0].strip()


def _structured(messages: Sequence[dict[str, Any]], *, string_arguments: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: tuple[str, str] | None = None  # (call id, tool name) of the last assistant call
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            call, before = _first_call(str(m.get("content", "")))
            if call is None:
                out.append(dict(m))
                pending = None
                continue
            call_id = f"call_{i}"
            args: Any = json.dumps(call.arguments, ensure_ascii=False) if string_arguments else dict(call.arguments)
            fn = {"name": call.name, "arguments": args}
            msg: dict[str, Any] = {"role": "assistant", "content": before,
                                   "tool_calls": [{"id": call_id, "type": "function", "function": fn}]}
            out.append(msg)
            pending = (call_id, call.name)
        elif role == "tool":
            if pending is None:  # the env's answer to a turn without a call: plain user text
                out.append({"role": "user", "content": m.get("content", "")})
            else:
                out.append({"role": "tool", "tool_call_id": pending[0], "name": pending[1], "content": m.get("content", "")})
            pending = None
        else:
            out.append(dict(m))
    return out


def openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as the OpenAI chat API takes a tool conversation (arguments as JSON strings)."""
    return _structured(messages, string_arguments=True)


def trl_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` in TRL's conversational format with ``tool_calls`` (arguments as objects)."""
    return _structured(messages, string_arguments=False)
