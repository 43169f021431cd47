"""Expert demonstrations as an SFT dataset: scripted experts played through the RL rollout loop.

``stratagym demos collect --env ENV --agent scripted:NAME --split train --n N --out demos.jsonl`` and
:func:`collect_demos` play a scripted expert (the SearchQA oracle, the ALFWorld planner, the WebShop
oracle) through the same collector the trainer uses (:func:`stratagym.training.rollout.play`), and
record each turn's prompt exactly as :class:`~stratagym.agents.llm.LLMPolicy` builds it during RL: the
env family's template (:func:`stratagym.agents.prompts.template_for_env`) applied to the observation,
the info and the episode history cut to the last ``memory_k`` turns. So the text the model is cloned on
is the text it later sees.

One JSON record per episode::

    {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}],
     "turns": [{"prompt": [messages of turn t], "completion": "<think>..</think>\\n<search> q </search>"}, ...],
     "env_id", "task_id", "split", "seed", "won", "score", "return", "agent", "template", "memory_k",
     "env_kwargs"}

``messages`` is the episode as one conversation (the last turn's prompt with the last action
appended), which TRL's ``SFTTrainer`` and ``datasets`` read directly. ``turns`` keeps every turn's own
prompt and completion: ``stratagym sft`` trains on those, so the loss covers the expert's actions only
and each prompt is the one the policy will see (with ``memory_k`` smaller than the episode, the prompts
of later turns drop early turns, which one conversation cannot express).

Each completion is the expert's action written in the template's format: the SearchQA oracle writes
Search-R1 turns itself (its think text states which hop it is on); for the ``think_action`` family the
bare expert action is wrapped as ``<think>...</think>\\n<action> a </action>`` with a think text that only
restates what the expert did, never an invented fact.

Under the tools protocol (``env_kwargs`` with ``protocol: tools``) each completion is the tool call that
stands for the expert's action (``<tool_call>{"name": "search", "arguments": {"query": ...}}</tool_call>``),
the record carries the env's ``tools`` (JSON schemas), and ``messages`` is in TRL's conversational format
with structured ``tool_calls`` and ``tool`` messages, which ``SFTTrainer`` renders with
``apply_chat_template(messages, tools=tools)``; ``stratagym sft`` renders each turn with the same tools.

Demonstrations come from train splits only: :func:`collect_demos` refuses a split that is not a train
split and any task id that also belongs to one of the env's evaluation splits.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import Any, Optional, Sequence

from stratagym.agents.policy import Generation
from stratagym.agents.prompts import PromptTemplate, template_for_env
from stratagym.agents.scripted import ScriptedPolicy
from stratagym.agents.tool_messages import trl_messages
from stratagym.atomic import atomic_write
from stratagym.envs.registry import agent_env_kwargs, make_agent, tool_set_for
from stratagym.errors import ConfigError
from stratagym.jsonl import read_jsonl
from stratagym.training.rollout import InProcessPool, play

__all__ = [
    "DemosFormatError",
    "EVAL_SPLIT_NAMES",
    "collect_demos",
    "write_demos",
    "read_demos",
    "demos_digest",
    "check_train_split",
    "accepts_split",
    "demonstrator_setup",
]

#: Split names that hold evaluation tasks in stratagym's envs (and in common datasets).
EVAL_SPLIT_NAMES: tuple[str, ...] = ("test", "test_unseen", "valid", "validation", "dev", "eval", "in_distribution",
                                     "out_of_distribution")

_REQUIRED_KEYS = ("messages", "turns", "env_id", "task_id")


class DemosFormatError(ConfigError):
    """A demonstrations file that cannot be used; the message names the file and the line."""


class _DemoPolicy:
    """A scripted expert behind the ``Policy.generate`` interface that also records each turn's prompt.

    The collector hands it the same :class:`GenerationRequest` it would hand an LLM policy; the prompt
    messages are built from that request with the template's own ``build`` (as ``LLMPolicy.messages``
    does), and the expert's action becomes the completion in the template's format.
    """

    model = None

    def __init__(self, agent: Any, *, template_override: Optional[str], memory_k: int, reasons: bool = False):
        self.scripted = ScriptedPolicy(agent, reasons=reasons)
        self.template_override = template_override
        self.memory_k = int(memory_k)

    def template_for(self, request: Any) -> PromptTemplate:
        return template_for_env(request.env_id, request.info, self.template_override)

    def generate(self, requests: Sequence[Any], *, greedy: bool = False) -> list[Any]:
        expert = self.scripted.generate(requests, greedy=greedy)
        out = []
        for req, gen in zip(requests, expert):
            tmpl = self.template_for(req)
            messages = tmpl.build(req.observation, req.info, req.history, self.memory_k)
            reason = (gen.payload or {}).get("reason")
            completion = expert_completion(tmpl, gen.action, env_id=req.env_id, reason=reason)
            parsed = tmpl.parse(completion)
            payload = {"messages": messages, "completion": completion}
            out.append(Generation(action=parsed.action, payload=payload, text=completion, format_ok=parsed.format_ok))
        return out

    def eval(self) -> "_DemoPolicy":
        return self

    def train(self, mode: bool = True) -> "_DemoPolicy":
        return self


def expert_completion(template: PromptTemplate, action: str, *, env_id: str = "", reason: Optional[str] = None) -> str:
    """The expert's action as a model response in ``template``'s format.

    An action that already parses as well-formed for the template (the SearchQA oracle writes full
    Search-R1 turns) is kept as written. A bare action (ALFWorld planner, WebShop oracle) is written the
    way the template says (``PromptTemplate.format_action``: think/action tags whose think text is the
    expert's ``reason`` where it gave one, else only restates the expert's choice). Under the tools
    protocol the action becomes the tool call that stands for it (``format_env_action``: the env's tool
    set maps its own action text to a call).
    """
    action = action.strip()
    if template.format_env_action is not None and env_id and not template.parse(action).format_ok:
        return template.format_env_action(env_id, action)
    if template.parse(action).format_ok or template.format_action is None:
        return action
    return template.format_action(action, reason) if reason else template.format_action(action)


def accepts_split(env_id: str, env_kwargs: dict[str, Any]) -> bool:
    """Whether ``env_id``'s constructor takes a ``split`` (the synthetic envs have none)."""
    import gymnasium as gym

    try:
        entry = gym.spec(env_id).entry_point
        if isinstance(entry, str):
            import importlib

            mod, _, name = entry.partition(":")
            entry = getattr(importlib.import_module(mod), name)
        return "split" in inspect.signature(entry).parameters
    except Exception:
        return "split" in env_kwargs


def _task_ids_of(env_id: str, env_kwargs: dict[str, Any]) -> set[str]:
    import gymnasium as gym

    env = gym.make(env_id, **env_kwargs)
    try:
        return {str(t) for t in env.unwrapped.task_ids()}
    finally:
        env.close()


def check_train_split(env_id: str, split: str, env_kwargs: dict[str, Any], task_ids: Sequence[str]) -> None:
    """Refuse demonstrations from anything but a train split, or that share a task with an eval split.

    Two checks, because a name is not a guarantee: ``split`` must be a train split (``train`` or a
    name starting with it), and none of ``task_ids`` may appear in one of the env's evaluation splits
    (:data:`EVAL_SPLIT_NAMES`, those the env accepts) built with the same other arguments -- a custom
    dataset file can put one question in both.
    """
    if not str(split).lower().startswith("train"):
        raise ConfigError(
            f"demonstrations must come from a train split, got split {split!r}: the {split!r} tasks are used "
            "to evaluate agents, and cloning an expert on them would leak the answers into the checkpoint. "
            "Use --split train."
        )
    chosen = set(map(str, task_ids))
    for name in EVAL_SPLIT_NAMES:
        kwargs = {**env_kwargs, "split": name}
        try:
            ids = _task_ids_of(env_id, kwargs)
        except Exception:  # the env has no such split
            continue
        shared = sorted(chosen & ids)
        if shared:
            raise ConfigError(
                f"split {split!r} of {env_id} shares {len(shared)} task(s) with its {name!r} split "
                f"(e.g. {shared[:3]}); demonstrations must not contain evaluation tasks. Remove them from "
                "the training data or collect from a clean train split."
            )


def demonstrator_setup(env_id: str, agent: str, env_kwargs: Optional[dict[str, Any]], split: str, *,
                       no_agent: str, no_split: str) -> tuple[str, dict[str, Any]]:
    """The scripted agent's name (``scripted:NAME`` or ``NAME``) and the env kwargs it demonstrates with:
    ``split`` set where the env has splits, and the agent's own env kwargs added (the searcher's expert).
    ``no_agent`` / ``no_split``: the caller's messages for an empty name / a split on an env without splits."""
    name = agent.split(":", 1)[1] if agent.startswith("scripted:") else agent
    if not name:
        raise ConfigError(no_agent)
    kwargs = dict(env_kwargs or {})
    if accepts_split(env_id, kwargs):
        kwargs["split"] = split
    elif split != "train":
        raise ConfigError(no_split)
    try:
        kwargs.update(agent_env_kwargs(env_id, name))
    except KeyError as exc:
        raise ConfigError(str(exc).strip('"')) from None
    return name, kwargs


def collect_demos(
    env_id: str,
    agent: str = "scripted:oracle",
    *,
    split: str = "train",
    n: Optional[int] = None,
    env_kwargs: Optional[dict[str, Any]] = None,
    template: Optional[str] = None,
    memory_k: int = 2,
    seed: int = 0,
    episodes_per_task: int = 1,
    batch_size: int = 64,
    only_won: bool = True,
    progress: bool = False,
    reasons: bool = False,
) -> list[dict[str, Any]]:
    """Play ``agent`` on the first ``n`` tasks (all when None) of ``split`` and return one record per episode.

    Each task is played ``episodes_per_task`` times, with reset seeds ``seed, seed + 1, ...``: envs with
    few tasks whose episodes differ by seed (ValueCorridor: which lever lights which lamp) need several.
    ``template`` / ``memory_k`` must be the policy's (``policy.template`` / ``policy.memory_k``); the
    records carry them so ``stratagym sft`` can refuse a mismatch. ``only_won`` drops the expert's lost
    episodes (cloning a failure teaches it); a demonstrator that is meant to lose some of the time (the
    ValueCorridor ``blind_doors`` agent) needs ``only_won=False``, or the kept episodes would teach
    exactly what it leaves out. ``reasons`` writes the expert's stated reason for each action as the think
    text (for agents with ``act_with_reasons``, such as WebShop's instruction expert) instead of a think
    text that only restates the action: a model trained on it sees why, e.g. which of the instruction's
    words an option click matches.
    """
    name, kwargs = demonstrator_setup(env_id, agent, env_kwargs, split,
                                      no_agent="--agent needs a scripted agent name, e.g. scripted:oracle",
                                      no_split=f"{env_id} has no splits; leave --split at train")
    import gymnasium as gym

    env = gym.make(env_id, **kwargs)
    try:
        all_ids = [str(t) for t in env.unwrapped.task_ids()]
        if n is not None and n < 1:
            raise ConfigError(f"--n must be >= 1, got {n}")
        if episodes_per_task < 1:
            raise ConfigError(f"episodes per task must be >= 1, got {episodes_per_task}")
        ids = all_ids[:n] if n is not None else all_ids
        if not ids:
            raise ConfigError(f"{env_id} split {split!r} has no tasks")
        if "split" in kwargs:
            check_train_split(env_id, split, {k: v for k, v in kwargs.items() if k != "split"}, ids)
        try:
            expert = make_agent(env_id, name, env, seed=seed)
        except KeyError as exc:
            raise ConfigError(str(exc).strip('"')) from None
        if reasons and not hasattr(expert, "act_with_reasons"):
            raise ConfigError(f"demos.reasons: the scripted agent {name!r} of {env_id} states no reasons (it has no "
                              "act_with_reasons); set reasons: false or pick an agent that does (WebShop's expert)")
        policy = _DemoPolicy(expert, template_override=template, memory_k=memory_k, reasons=reasons)
        episodes = [(t, seed + j) for t in ids for j in range(episodes_per_task)]
        done = [0]

        def _tick(_traj: Any) -> None:
            done[0] += 1

        bar = _progress(progress, len(episodes))
        trajs = play(policy, episodes, env_id=env_id, pool=InProcessPool(env_id, kwargs), batch_size=batch_size,
                     greedy=True, on_episode=(lambda t: bar(1)) if bar else _tick)
    finally:
        env.close()
    records = []
    for traj in trajs:
        if traj.failed or not traj.steps:
            continue
        if only_won and not traj.won:
            continue
        turns = [{"prompt": s.payload["messages"], "completion": s.payload["completion"]} for s in traj.steps]
        tools = tool_schemas_of(env_id, kwargs)
        tmpl_name = template_for_env(env_id, {"protocol": "tools"}, None).name if tools else (
            template or template_for_env(env_id, None, None).name)
        records.append({
            "messages": trl_messages(episode_messages(turns)) if tools else episode_messages(turns),
            **({"tools": tools} if tools else {}),
            "turns": turns,
            "env_id": env_id,
            "task_id": traj.task_id,
            "split": split,
            "seed": traj.seed,
            "won": bool(traj.won),
            "score": float(traj.score),
            "return": float(traj.env_return),
            "agent": f"scripted:{name}",
            "template": tmpl_name,
            "memory_k": int(memory_k),
            **({"reasons": True} if reasons else {}),
            "env_kwargs": {k: v for k, v in kwargs.items() if _jsonable(v)},
        })
    return records


def tool_schemas_of(env_id: str, env_kwargs: dict[str, Any]) -> Optional[list[dict[str, Any]]]:
    """The env's tool schemas when ``env_kwargs`` choose the tools protocol, else None (tag protocols)."""
    if env_kwargs.get("protocol", "tags") != "tools":
        return None
    return tool_set_for(env_id).schemas()


def _progress(enabled: bool, total: int) -> Any:
    if not enabled:
        return None
    from rich.progress import Progress

    prog = Progress(transient=True)
    prog.start()
    task = prog.add_task("demonstrations", total=total)

    def advance(k: int) -> None:
        prog.advance(task, k)
        if prog.tasks[0].completed >= total:
            prog.stop()

    return advance


def episode_messages(turns: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The episode as one chat: the last turn's prompt with the last completion appended (continuing a
    final assistant message, as Search-R1's growing turn does, or as a new assistant message)."""
    last = turns[-1]
    msgs = [dict(m) for m in last["prompt"]]
    if msgs and msgs[-1]["role"] == "assistant":
        msgs[-1]["content"] = msgs[-1]["content"] + last["completion"]
    else:
        msgs.append({"role": "assistant", "content": last["completion"]})
    return msgs


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def write_demos(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``records`` as JSON lines, atomically (a reader never sees half a file)."""
    path = Path(path)
    atomic_write(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records))
    return path


def read_demos(path: str | Path) -> list[dict[str, Any]]:
    """Read and check a demonstrations file; a bad line raises :class:`DemosFormatError` naming it.

    Checked per line: valid JSON (a truncated last line fails here), an object with ``messages``,
    ``turns``, ``env_id`` and ``task_id``, every turn a ``{"prompt": [messages], "completion": str}``
    with ``role``/``content`` strings.
    """
    path = Path(path)
    if not path.exists():
        raise DemosFormatError(f"demonstrations file {str(path)!r} does not exist; write one with `stratagym demos collect`")
    records: list[dict[str, Any]] = []
    for i, rec, _ in read_jsonl(path, error=DemosFormatError):  # UTF-8, JSON, an object: line-numbered errors
        where = f"{path}: line {i}"
        missing = [k for k in _REQUIRED_KEYS if k not in rec]
        if missing:
            raise DemosFormatError(f"{where}: missing key(s) {missing}; a record needs {list(_REQUIRED_KEYS)}")
        turns = rec["turns"]
        if not isinstance(turns, list) or not turns:
            raise DemosFormatError(f"{where}: 'turns' must be a non-empty list")
        for j, turn in enumerate(turns):
            if not isinstance(turn, dict) or not isinstance(turn.get("completion"), str) or not isinstance(turn.get("prompt"), list):
                raise DemosFormatError(f"{where}: turn {j} must be {{'prompt': [messages], 'completion': text}}")
            for m in turn["prompt"]:
                if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                    raise DemosFormatError(f"{where}: turn {j} has a prompt message without string 'role' and 'content'")
        records.append(rec)
    if not records:
        raise DemosFormatError(f"{path} holds no demonstrations")
    return records


def demos_digest(path: str | Path) -> str:
    """sha256 of the file's bytes (recorded in SFT checkpoints, so a rebuild can be compared)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
