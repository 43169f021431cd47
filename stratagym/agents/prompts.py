"""Prompt templates and action parsers for LLM agents, one per env family.

A template turns (current observation, info, history of earlier turns) into chat messages, names the
stop strings generation halts at, and parses the model's response into the action text sent to the
env. Families:

* ``search_r1`` (SearchQA): the Search-R1 protocol -- reason in ``<think>``, search with
  ``<search> query </search>`` (results come back in ``<information>``), answer in
  ``<answer> ... </answer>``. Generation stops at ``</search>`` or ``</answer>``; the response itself is
  the action (the env parses the tags, as Search-R1 does).
* ``think_action`` (ALFWorld, WebShop, any env listing ``admissible_actions``): the verl-agent prompt --
  the task, the last K (observation, action) turns, the current observation and the admissible
  actions; the model thinks in ``<think>`` and acts in ``<action> ... </action>``; generation stops at
  ``</action>``; the action is the text inside the last ``<action>`` tag.
* ``plain``: any other env: the observation and history; the whole response is the action.
* ``tools``: any env played under the tools protocol (``info["protocol"] == "tools"``, whatever the
  spec names): the task as the user message, each earlier turn as the assistant's response and a
  ``tool`` message with the env's answer; the policy passes ``info["tool_schemas"]`` to the chat
  template; generation stops at ``</tool_call>``; the response is the action (the env parses the call).

Templates are plain data + small functions, so a new env family adds one without touching the policy.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from stratagym.agents.policy import Turn
from stratagym.envs.registry import get_spec, tool_set_for
from stratagym.envs.tools import ToolCall, format_call, parse_hermes, strip_reasoning
from stratagym.errors import ConfigError

__all__ = [
    "PromptTemplate",
    "ParsedAction",
    "SEARCH_R1",
    "THINK_ACTION",
    "PLAIN",
    "TEMPLATES",
    "template_for_env",
    "parse_search_r1",
    "parse_think_action",
    "parse_tools",
    "TOOLS",
    "template_content_hash",
    "template_fingerprint",
    "protocol_template",
]


@dataclass(frozen=True)
class ParsedAction:
    """The action sent to the env and whether the response was well-formed (for the format reward)."""

    action: str
    format_ok: bool


_TAG_CACHE: dict[str, re.Pattern[str]] = {}


def _tag(name: str) -> re.Pattern[str]:
    if name not in _TAG_CACHE:
        _TAG_CACHE[name] = re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL)
    return _TAG_CACHE[name]


def parse_search_r1(response: str) -> ParsedAction:
    """Search-R1: the response (up to the stop string) is the action; well-formed when it closes a
    ``<search>`` or ``<answer>`` tag."""
    ok = bool(_tag("search").search(response) or _tag("answer").search(response))
    return ParsedAction(response.strip(), ok)


def parse_think_action(response: str) -> ParsedAction:
    """verl-agent style: the action is the text inside the last ``<action>...</action>``.

    Without a closed action tag the stripped response goes to the env unchanged (the env then reports
    ``action_valid=False`` with its own message) and ``format_ok`` is False.
    """
    found = _tag("action").findall(response)
    if found:
        action = found[-1].strip()
        return ParsedAction(action, bool(action))
    return ParsedAction(response.strip()[:512], False)


def parse_plain(response: str) -> ParsedAction:
    text = response.strip()
    return ParsedAction(text, bool(text))


@dataclass(frozen=True)
class PromptTemplate:
    """How one env family is prompted and parsed.

    ``build(observation, info, history, memory_k)`` returns chat messages (``[{"role", "content"}]``);
    ``stop`` lists strings that end generation (kept in the response); ``parse`` maps a response to a
    :class:`ParsedAction`; ``format_action`` writes a bare expert action (a planner's command) as a
    response in this format, for demonstrations (None: the action is the response); its optional second
    argument is the expert's stated reason, written as the think text where the format has one.
    """

    name: str
    build: Callable[[str, dict[str, Any], Sequence[Turn], int], list[dict[str, str]]]
    parse: Callable[[str], ParsedAction]
    stop: tuple[str, ...] = ()
    system: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    format_action: Optional[Callable[..., str]] = None
    #: like ``format_action`` where the format depends on the env (its tools): ``(env_id, action) -> response``
    format_env_action: Optional[Callable[[str, str], str]] = None


# ---- Search-R1 --------------------------------------------------------------------------------------

SEARCH_R1_INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time "
    "you get new information. After reasoning, if you find you lack some knowledge, you can call a search "
    "engine by <search> query </search> and it will return the top searched results between <information> "
    "and </information>. You can search as many times as your want. If you find no further external "
    "knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: "
)


def _build_search_r1(observation: str, info: dict[str, Any], history: Sequence[Turn], memory_k: int) -> list[dict[str, str]]:
    # The first observation states the question; later observations are retrieved documents (or the
    # env's corrective message). Search-R1 grows one sequence: question, then response / <information>
    # pairs. We keep the question and the last ``memory_k`` turns.
    question = history[0].observation if history else observation
    # SearchQA's first observation already is Search-R1's prompt; a bare question gets the instruction.
    user = question.strip() + "\n" if "<search>" in question else SEARCH_R1_INSTRUCTION + question.strip() + "\n"
    if not history:
        return [{"role": "user", "content": user}]
    turns = list(history)[-memory_k:] if memory_k > 0 else []
    kept_from = len(history) - len(turns)
    parts: list[str] = []
    for i, turn in enumerate(turns):
        parts.append(turn.action.strip())
        # observation that followed this action: the next turn's observation, or the current one
        nxt = history[kept_from + i + 1].observation if kept_from + i + 1 < len(history) else observation
        parts.append(_as_information(nxt))
    return [{"role": "user", "content": user}, {"role": "assistant", "content": "\n".join(parts) + "\n"}]


def _as_information(obs: str) -> str:
    obs = obs.strip()
    if obs.startswith("<information>"):
        return obs
    return f"<information>{obs}</information>"


# ---- think / action (ALFWorld, WebShop) ------------------------------------------------------------------


def _build_think_action(observation: str, info: dict[str, Any], history: Sequence[Turn], memory_k: int) -> list[dict[str, str]]:
    task = history[0].observation if history else observation
    lines: list[str] = []
    if history:
        lines.append(f"Your task and first observation: {task.strip()}")
        turns = list(history)[-memory_k:] if memory_k > 0 else []
        if turns:
            start = len(history) - len(turns)
            lines.append(f"Prior to this step, you have already taken {len(history)} step(s). "
                         f"Below are the most recent {len(turns)} observations and the corresponding actions you took:")
            for i, turn in enumerate(turns):
                lines.append(f"[Observation {start + i + 1}: '{turn.observation.strip()}', Action {start + i + 1}: '{turn.action.strip()}']")
        lines.append(f"You are now at step {len(history) + 1} and your current observation is: {observation.strip()}")
    else:
        lines.append(f"Your current observation is: {observation.strip()}")
    # verl-agent's ALFWorld manager leaves "help" out of the prompt's list (``if s != 'help'``), though
    # the env lists it as stock ALFWorld does
    admissible = [a for a in info.get("admissible_actions") or [] if a != "help"]
    if admissible:
        lines.append("Your admissible actions of the current situation are: [" + ", ".join(f"'{a}'" for a in admissible) + "].")
    lines.append(
        "Now it's your turn to take an action. You should first reason step-by-step about the current "
        "situation. This reasoning process MUST be enclosed within <think> </think> tags. Once you've "
        "finished your reasoning, you should choose an admissible action for current step and present it "
        "within <action> </action> tags."
    )
    return [{"role": "user", "content": "\n".join(lines)}]


# ---- plain -------------------------------------------------------------------------------------------------


def _build_plain(observation: str, info: dict[str, Any], history: Sequence[Turn], memory_k: int) -> list[dict[str, str]]:
    msgs: list[dict[str, str]] = []
    turns = list(history)[-memory_k:] if memory_k > 0 else []
    for turn in turns:
        msgs.append({"role": "user", "content": turn.observation})
        msgs.append({"role": "assistant", "content": turn.action})
    content = observation
    admissible = info.get("admissible_actions")
    if admissible:
        content += "\nAdmissible actions: " + ", ".join(admissible)
    msgs.append({"role": "user", "content": content})
    return msgs


SEARCH_R1 = PromptTemplate("search_r1", _build_search_r1, parse_search_r1, stop=("</search>", "</answer>"))
def _format_think_action(action: str, reason: str | None = None) -> str:
    """A bare expert action in think/action tags. The think text is the expert's ``reason`` where it gives
    one (``collect_demos(reasons=True)``), else it only restates the expert's choice."""
    think = reason.strip() if reason and reason.strip() else f"The expert plan's next step is to {action}."
    return f"<think>{think}</think>\n<action> {action} </action>"


THINK_ACTION = PromptTemplate("think_action", _build_think_action, parse_think_action, stop=("</action>",),
                              format_action=_format_think_action)
PLAIN = PromptTemplate("plain", _build_plain, parse_plain, stop=())

# ---- tools (the tools protocol of any env) -------------------------------------------------------------


def _build_tools(observation: str, info: dict[str, Any], history: Sequence[Turn], memory_k: int) -> list[dict[str, str]]:
    task = history[0].observation if history else observation
    msgs = [{"role": "user", "content": task}]
    if not history:
        return msgs
    turns = list(history)[-memory_k:] if memory_k > 0 else []
    kept_from = len(history) - len(turns)
    for i, turn in enumerate(turns):
        nxt = history[kept_from + i + 1].observation if kept_from + i + 1 < len(history) else observation
        msgs.append({"role": "assistant", "content": turn.action})
        msgs.append({"role": "tool", "content": nxt})
    if not turns:  # memory_k = 0: the task and the current observation only
        msgs.append({"role": "user", "content": observation})
    return msgs


def parse_tools(response: str) -> ParsedAction:
    """The tools protocol: the response (up to the stop string) is the action, which the env parses;
    well-formed when its first call outside ``<think>`` reads as a call (``hermes`` format)."""
    calls = parse_hermes(strip_reasoning(response))
    return ParsedAction(response.strip(), bool(calls) and isinstance(calls[0], ToolCall))


def _format_tool_action(env_id: str, action: str) -> str:
    """An expert's action (the env's own action text) as the tool call that stands for it."""
    call = tool_set_for(env_id).from_action(action)
    return action if call is None else format_call(call.name, call.arguments)


TOOLS = PromptTemplate("tools", _build_tools, parse_tools, stop=("</tool_call>",), format_env_action=_format_tool_action)

TEMPLATES: dict[str, PromptTemplate] = {t.name: t for t in (SEARCH_R1, THINK_ACTION, PLAIN, TOOLS)}

def template_for_env(env_id: str, info: dict[str, Any] | None = None, override: str | None = None) -> PromptTemplate:
    """The template for ``env_id``: an explicit ``override`` name, else the one its ``EnvSpec`` names
    (``prompt_template``), else ``think_action`` when the env lists admissible actions, else ``plain``;
    ``tools`` whenever the env plays the tools protocol (``info["protocol"]``)."""
    if info is not None and info.get("protocol") == "tools":
        return TOOLS  # the env speaks the tools protocol: no tag template would be understood
    name = override
    if not name:
        try:
            name = get_spec(env_id).prompt_template
        except KeyError:  # an env registered with gymnasium directly: no spec, pick by its info
            name = None
    if name:
        if name not in TEMPLATES:
            raise ConfigError(f"unknown prompt template {name!r}; choose one of {sorted(TEMPLATES)}")
        return TEMPLATES[name]
    if info is not None and info.get("admissible_actions"):
        return THINK_ACTION
    return PLAIN


# ---- the template's content, for the protocol fingerprint -------------------------------------------------

#: Fixed inputs a template is rendered on to fingerprint its content: observations with and without a
#: Search-R1 tag, with and without admissible actions, with no history and two earlier turns, at three
#: memory depths; and responses of every shape the templates parse.
_PROBE_OBSERVATIONS = ("<<observation>>", "<<observation>> <search> q </search>")
_PROBE_INFOS: tuple[dict[str, Any], ...] = ({}, {"admissible_actions": ["<<action a>>", "help", "<<action b>>"]})
_PROBE_HISTORIES: tuple[tuple[Turn, ...], ...] = (
    (), (Turn("<<first observation>>", "<<first action>>"), Turn("<<second observation>>", "<<second action>>")))
_PROBE_RESPONSES = ("", "  <<plain response>>  ", "<think>t</think>\n<search> q </search>", "<think>t</think>\n<answer> a </answer>",
                    "<think>t</think>\n<action> a </action>", "<action> a </action> <action> b </action>",
                    '<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>')


def template_content_hash(template: PromptTemplate) -> str:
    """``sha256:...`` of what ``template`` does: every message it renders on fixed probe inputs (so every
    word of its instructions and its layout), its stop strings and system text, how it parses probe
    responses and how it writes an expert action.

    Why content and not the name: two templates registered under one name (a fork's ``custom``, an edited
    instruction) prompt differently and are different protocols; a refactor of a template's code that
    renders and parses the same keeps its hash. The name is not hashed (it is shown beside the hash)."""
    messages = [template.build(obs, dict(info), history, k) for obs in _PROBE_OBSERVATIONS for info in _PROBE_INFOS
                for history in _PROBE_HISTORIES for k in (0, 1, 3)]
    parsed = [[p.action, p.format_ok] for p in (template.parse(r) for r in _PROBE_RESPONSES)]
    body = {
        "messages": messages,
        "stop": list(template.stop),
        "system": template.system,
        "extra": template.extra,
        "parsed": parsed,
        "format_action": None if template.format_action is None else template.format_action("<<expert action>>"),
    }
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def template_fingerprint(template: PromptTemplate) -> str:
    """``"<name> sha256:<hex>"``: the template's name, for people, and its content hash, for comparing."""
    return f"{template.name} {template_content_hash(template)}"


def protocol_template(env_id: str, *, protocol: Any = None, override: str | None = None,
                      spec: Any = None) -> str | None:
    """The ``prompt_template`` field of an eval's protocol fingerprint: :func:`template_fingerprint` of the
    template an LLM agent prompts ``env_id`` with (the ``tools`` template under the tools ``protocol``, else
    ``override``, else the one the env's spec names); None when the spec names none (the template is then
    chosen per observation at run time), the bare name when the spec names one this stratagym lacks.
    ``spec``: ``env_id``'s ``EnvSpec`` when the caller already resolved it; else it is looked up."""
    if protocol == "tools":
        return template_fingerprint(TOOLS)
    if override:
        if override not in TEMPLATES:
            raise ConfigError(f"unknown prompt template {override!r}; choose one of {sorted(TEMPLATES)}")
        return template_fingerprint(TEMPLATES[override])
    if spec is None:
        try:
            spec = get_spec(env_id)
        except KeyError:
            return None
    name = spec.prompt_template
    if not name:
        return None
    return template_fingerprint(TEMPLATES[name]) if name in TEMPLATES else name
