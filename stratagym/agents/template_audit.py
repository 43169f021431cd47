"""Does a chat template extend what was sampled, token for token? (``stratagym check-template``)

An agent program talks to a policy through a chat API: it sends the conversation, the server renders it
with the model's chat template, the model samples a reply, and the program sends the conversation again
with that reply in it. Training on those calls scores the token ids the sampler produced after the
prompt's ids. That is only right if each request's rendering **extends the previous request's prompt
plus the sampled reply, token for token** (append-only): otherwise the trainer's context for a later turn
is not the one the sampler saw. Templates break this in known ways: Qwen3's drops the ``<think>`` block of
every assistant turn before the last user message, templates without a tool section drop ``tool_calls``,
others re-format tool results or whitespace, and a tokenizer may merge tokens across the join.

For every assistant turn that a later request follows, :func:`check_turn` compares

* the **sampled** ids: the turn's prompt (the conversation so far, rendered with the generation prompt)
  tokenized, plus the reply as the model emits it, up to and including its stop token; and
* the **next request**: the conversation up to the next assistant turn, rendered the same way,

and reports whether the second starts with the first, else the first differing token and both sides
decoded from there. The reply "as the model emits it" is what the template itself renders for the turn
when it is the last message (its training format), cut after the stop string; where that rendering lacks
the turn's tool calls (a template with no tool section), it is the tool calls in the Hermes
``<tool_call>`` format stratagym's policies use, then the content.

:func:`audit_template` runs the check over synthetic conversations (:data:`CONVERSATIONS`: plain multi-turn,
tool calling, thinking, thinking with tools) for any tokenizer and template; ``stratagym check-template``
prints it. TRL's own check (``trl.chat_template_utils.is_chat_template_prefix_preserving``) asks the same
question of one tool round at the text-to-ids level; this audit asks it of every turn kind and says where
the two sides part.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from stratagym.agents.tool_messages import hermes_calls
from stratagym.errors import ConfigError

__all__ = ["CONVERSATIONS", "TOOLS", "TurnCheck", "TemplateAudit", "audit_template", "check_turn",
           "first_divergence", "load_chat_template", "sampled_reply"]

#: How many tokens of each side a report decodes from the first difference.
WINDOW = 16

#: The tool schemas the tool-calling conversations use (OpenAI function format).
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "search", "description": "Search the corpus; returns passages.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]


def _call(i: int, query: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "search", "arguments": {"query": query}}}


def _tool(i: int, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "name": "search", "content": text}


_SYSTEM = {"role": "system", "content": "You answer questions about the world of Kaeku."}
#: Synthetic conversations, one per turn kind an agent program produces. Each assistant turn that a later
#: message follows is checked.
CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "plain": [
        _SYSTEM,
        {"role": "user", "content": "Who founded the Guild of Daetron?"},
        {"role": "assistant", "content": "The Guild of Daetron was founded by Reiquy."},
        {"role": "user", "content": "And where is it?"},
        {"role": "assistant", "content": "It stands beside the Pokynd River."},
        {"role": "user", "content": "Thanks. One more: when?"},
        {"role": "assistant", "content": "In 1074."},
    ],
    "tools": [
        _SYSTEM,
        {"role": "user", "content": "Who founded the Guild of Daetron?"},
        {"role": "assistant", "content": "", "tool_calls": [_call(0, "Guild of Daetron founder")]},
        _tool(0, "Doc 1 (Guild of Daetron): founded by Reiquy in 1074."),
        {"role": "assistant", "content": "", "tool_calls": [_call(1, "Reiquy")]},
        _tool(1, "Doc 2 (Reiquy): a sextant maker of Kaekuthar."),
        {"role": "assistant", "content": "Reiquy, a sextant maker."},
        {"role": "user", "content": "Where is the guild?"},
        {"role": "assistant", "content": "", "tool_calls": [_call(2, "Guild of Daetron location")]},
        _tool(2, "Doc 3: the guild hall stands by the Pokynd River."),
        {"role": "assistant", "content": "By the Pokynd River."},
    ],
    "thinking": [
        {"role": "user", "content": "Who founded the Guild of Daetron?"},
        {"role": "assistant", "content": "<think>\nThe passage names the founder.\n</think>\n\nReiquy."},
        {"role": "user", "content": "When?"},
        {"role": "assistant", "content": "<think>\nThe same passage gives the year.\n</think>\n\n1074."},
        {"role": "user", "content": "Where?"},
        {"role": "assistant", "content": "<think>\nI do not know; guess.\n</think>\n\nBy a river."},
    ],
    "thinking_tools": [
        {"role": "user", "content": "Who founded the Guild of Daetron?"},
        {"role": "assistant", "content": "<think>\nI should search.\n</think>\n\n", "tool_calls": [_call(0, "Guild of Daetron")]},
        _tool(0, "Doc 1 (Guild of Daetron): founded by Reiquy in 1074."),
        {"role": "assistant", "content": "<think>\nDoc 1 says Reiquy.\n</think>\n\nReiquy."},
        {"role": "user", "content": "When?"},
        {"role": "assistant", "content": "<think>\nDoc 1 gives 1074.\n</think>\n\n1074."},
    ],
}


@dataclass(frozen=True)
class TurnCheck:
    """One assistant turn against the next request. ``first_diff`` is the index of the first token where
    the next request departs from the sampled ids (None when append-only); ``sampled`` and ``rendered``
    decode up to :data:`WINDOW` tokens of each side from there."""

    conversation: str
    turn: int
    append_only: bool
    sampled_tokens: int
    first_diff: int | None = None
    sampled: str = ""
    rendered: str = ""


@dataclass
class TemplateAudit:
    """Every checked turn of one template; ``share()`` is the append-only share (of one conversation kind
    or of all)."""

    template: str
    tokenizer: str
    checks: list[TurnCheck] = field(default_factory=list)

    def share(self, conversation: str | None = None) -> float:
        rows = [c for c in self.checks if conversation is None or c.conversation == conversation]
        return sum(c.append_only for c in rows) / len(rows) if rows else float("nan")

    def by_conversation(self) -> dict[str, list[TurnCheck]]:
        out: dict[str, list[TurnCheck]] = {}
        for c in self.checks:
            out.setdefault(c.conversation, []).append(c)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"template": self.template, "tokenizer": self.tokenizer, "append_only_share": self.share(),
                "by_conversation": {k: self.share(k) for k in self.by_conversation()},
                "checks": [asdict(c) for c in self.checks]}


def first_divergence(sampled: Sequence[int], rendered: Sequence[int]) -> int | None:
    """Index of the first position where ``rendered`` does not continue ``sampled`` (None if it starts
    with all of it; ``len(rendered)`` if it is a shorter prefix)."""
    for i, tok in enumerate(sampled):
        if i >= len(rendered) or rendered[i] != tok:
            return i
    return None


def _render(tokenizer: Any, messages: Sequence[Mapping[str, Any]], template: str | None, *, generation: bool,
            tools: Sequence[Mapping[str, Any]] | None) -> str:
    return tokenizer.apply_chat_template(list(messages), tools=list(tools) if tools else None, tokenize=False,
                                         add_generation_prompt=generation, chat_template=template)


def sampled_reply(tokenizer: Any, messages: Sequence[Mapping[str, Any]], index: int, template: str | None, *,
                  stop: str, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The text the model emits for assistant message ``index`` (see the module docstring), ending with
    ``stop``."""
    message = messages[index]
    prompt = _render(tokenizer, messages[:index], template, generation=True, tools=tools)
    full = _render(tokenizer, messages[: index + 1], template, generation=False, tools=tools)
    calls = message.get("tool_calls") or []
    reply = full[len(prompt):] if full.startswith(prompt) else None
    if reply is not None and stop in reply:
        reply = reply[: reply.index(stop) + len(stop)]
    names_rendered = reply is not None and all(c["function"]["name"] in reply for c in calls)
    if reply is None or not names_rendered or stop not in reply:
        content = str(message.get("content") or "")
        reply = content + hermes_calls(calls) + stop
    return reply


def check_turn(tokenizer: Any, messages: Sequence[Mapping[str, Any]], index: int, next_index: int,
               template: str | None, *, stop: str, conversation: str = "", turn: int = 0,
               tools: Sequence[Mapping[str, Any]] | None = None) -> TurnCheck:
    """Assistant message ``index`` against the request made before assistant message ``next_index``."""
    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt = _render(tokenizer, messages[:index], template, generation=True, tools=tools)
    sampled = ids(prompt) + ids(sampled_reply(tokenizer, messages, index, template, stop=stop, tools=tools))
    following = ids(_render(tokenizer, messages[:next_index], template, generation=True, tools=tools))
    at = first_divergence(sampled, following)
    if at is None:
        return TurnCheck(conversation, turn, True, len(sampled))
    return TurnCheck(conversation, turn, False, len(sampled), at, tokenizer.decode(sampled[at: at + WINDOW]),
                     tokenizer.decode(following[at: at + WINDOW]))


def audit_template(tokenizer: Any, template: str | None = None, *, name: str = "",
                   conversations: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                   stop: str | None = None) -> TemplateAudit:
    """Check every assistant turn that a later request follows, in each conversation (default
    :data:`CONVERSATIONS`), rendered with ``template`` (default: the tokenizer's own). ``stop``: the
    string the model ends a turn with (default: the tokenizer's eos token)."""
    stop = stop or tokenizer.eos_token
    if not stop:
        raise ConfigError("the tokenizer has no eos token to end a sampled turn with; pass --stop TEXT")
    if template is None and not getattr(tokenizer, "chat_template", None):
        raise ConfigError("the tokenizer has no chat template; pass --template (a .jinja file, or trl:NAME for a "
                          "template TRL ships, e.g. trl:qwen3)")
    audit = TemplateAudit(template=name or "the tokenizer's own", tokenizer=str(getattr(tokenizer, "name_or_path", "")))
    for kind, messages in (conversations or CONVERSATIONS).items():
        tools = TOOLS if any(m.get("tool_calls") or m.get("role") == "tool" for m in messages) else None
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        for n, (a, b) in enumerate(zip(turns, turns[1:]), start=1):
            audit.checks.append(check_turn(tokenizer, messages, a, b, template, stop=stop, conversation=kind,
                                           turn=n, tools=tools))
    return audit


def load_chat_template(spec: str) -> tuple[str, str]:
    """``(name, jinja text)`` of ``spec``: a ``.jinja`` file, or ``trl:NAME`` for a template TRL ships
    (``trl/chat_templates/NAME.jinja``: qwen2_5, qwen3, llama3_2...)."""
    if spec.startswith("trl:"):
        from importlib import resources

        name = spec[4:]
        folder = resources.files("trl") / "chat_templates"
        path = folder / f"{name}.jinja"
        if not path.is_file():
            known = sorted(p.name[: -len(".jinja")] for p in folder.iterdir() if p.name.endswith(".jinja"))
            raise ConfigError(f"TRL ships no chat template {name!r}; known: {', '.join(known)}")
        return spec, path.read_text(encoding="utf-8")
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"--template {spec!r} is neither a .jinja file nor trl:NAME (a template TRL ships)")
    return path.name, path.read_text(encoding="utf-8")
