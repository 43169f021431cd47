"""The eval harness: play an agent on an env's tasks, resumably, and write a result record.

``evaluate`` plays ``n`` tasks of a split once per seed with the batched play loop
(:func:`stratagym.training.rollout.play`: the training collector at group size 1), then aggregates (:mod:`stratagym.eval.aggregate`) and
writes the versioned record (:mod:`stratagym.eval.records`).

Resuming. Each finished episode is appended to ``<out>.progress.jsonl`` as one JSON line and fsynced
before the next one starts, so a killed eval (even SIGKILL) loses at most the episodes in flight. The
first line is a header holding a hash of the eval's identity (agent content, env, kwargs, split, tasks,
seeds, and the compute dtype when it is not float32); a rerun with the same identity skips every (seed, task) already in the file and appends only the
rest, so no task is done twice and none is duplicated. A torn last line (killed mid-write) is cut off
before appending. The final record is written atomically; the progress file stays as an audit log.
Batch size is not part of the identity: a resumed eval may use another. Each episode line also carries
the episode's turns (observations, responses, actions, rewards: :mod:`stratagym.eval.transcripts`), which
``stratagym leaderboard site`` shows; the record keeps outcomes only.

Determinism: tasks are the first ``n`` of the split in the env's order; episode ``(seed, task)`` resets
with ``seed`` and ``options={"task_id": task}``; the agent is built with that seed. An uninterrupted
eval is reproducible; a resumed one re-seeds the agent for the remaining tasks, so stochastic agents
may differ from an uninterrupted run on those tasks (scripted oracles do not).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym

from stratagym import __version__
from stratagym.envs.registry import get_spec
from stratagym.errors import UserError
from stratagym.objects import load_object
from stratagym.precision import dtype_name
from stratagym.provenance import TrainingDataMissing, provenance_digest, read_provenance, training_sets_for
from stratagym.eval.agents import AgentSpec, AgentSpecError, build_agent, parse_agent_spec, scripted_env_kwargs
from stratagym.eval.aggregate import aggregate
from stratagym.envs.hints import env_kwarg_message, unknown_env_message
from stratagym.eval.episodes import EpisodeRecord
from stratagym.eval.transcripts import eval_identity_hash, transcript_of
from stratagym.training.rollout import InProcessPool, play
from stratagym.agents.policy import policy_hooks
from stratagym.agents.prompts import protocol_template
from stratagym.envs.fingerprint import protocol_of, resolved_task_kwargs
from stratagym.eval.records import (
    LEGACY_SCHEMA,
    SCHEMA,
    content_hash_text,
    env_version,
    finalize_record,
    write_json_atomic,
)

__all__ = ["EvalConfig", "EvalError", "evaluate", "build_record", "progress_path", "read_progress", "env_data_hash"]

PROGRESS_SUFFIX = ".progress.jsonl"


class EvalError(UserError, RuntimeError):
    """An eval that cannot run as asked (unknown env or split, a progress file of another eval...)."""


@dataclass
class EvalConfig:
    """Everything that defines one eval (see :func:`evaluate`)."""

    agent: str
    env_id: str
    split: str | None = None
    n: int | None = None
    seeds: Sequence[int] = (0,)
    batch_size: int = 8
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    label: str | None = None
    algorithm: str | None = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] | None = None


def progress_path(out: str | os.PathLike[str]) -> Path:
    out = Path(out)
    return out.with_name(out.name + PROGRESS_SUFFIX)


# --------------------------------------------------------------------------------------------------
# Progress file
# --------------------------------------------------------------------------------------------------


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Parsed complete lines and the byte length of the intact prefix (a torn tail is excluded)."""
    data = path.read_bytes()
    rows: list[dict[str, Any]] = []
    good = 0
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break  # torn last line: killed mid-write
        line = data[pos:nl]
        try:
            row = json.loads(line)
        except ValueError:  # JSONDecodeError, or bytes that are not UTF-8: not written by us
            break
        if not isinstance(row, dict):
            break
        rows.append(row)
        pos = nl + 1
        good = pos
    return rows, good


def read_progress(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The header and the episode rows of a progress file (``(None, [])`` if it does not exist)."""
    path = Path(path)
    if not path.exists():
        return None, []
    rows, _ = _read_lines(path)
    header = rows[0] if rows and rows[0].get("type") == "header" else None
    return header, [r for r in rows if r.get("type") == "episode"]


class _ProgressLog:
    """Append-only, fsynced JSONL log of finished episodes keyed by (seed, task_id)."""

    def __init__(self, path: Path, identity: dict[str, Any], *, resume: bool):
        self.path = path
        self.identity_hash = eval_identity_hash(identity)
        self.done: dict[tuple[int, str], dict[str, Any]] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        # A file without one complete line (empty, or a torn header) is what a kill between creating the
        # file and writing its header leaves: no episode can be in it, so it is no progress: start fresh.
        if path.exists() and resume and b"\n" in path.read_bytes():
            rows, good = _read_lines(path)
            if not rows or rows[0].get("type") != "header":
                raise EvalError(f"{path} is not a stratagym progress file; delete it or choose another --out")
            if rows[0].get("identity_hash") != self.identity_hash:
                raise EvalError(
                    f"{path} holds the progress of a different eval (other agent, env, split, tasks or seeds); "
                    "delete it, pass --no-resume to start over, or choose another --out"
                )
            for r in rows[1:]:
                if r.get("type") == "episode":
                    self.done.setdefault((int(r["key"][0]), str(r["key"][1])), r["episode"])
            with open(path, "r+b") as fh:  # cut a torn tail so appends start on a fresh line
                fh.truncate(good)
            self._fh = open(path, "a", encoding="utf-8")
            self.session = max((int(r.get("session", 0)) for r in rows), default=0) + 1
        else:
            self._fh = open(path, "w", encoding="utf-8")
            self.session = 1
            self._write({"type": "header", "identity_hash": self.identity_hash, "identity": identity})

    def _write(self, obj: dict[str, Any]) -> None:
        self._fh.write(json.dumps(obj, sort_keys=True, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def add(self, seed: int, episode: dict[str, Any], transcript: Mapping[str, Any] | None = None) -> None:
        """Log a finished episode; ``transcript`` (its turns, :mod:`stratagym.eval.transcripts`) rides on the
        same line beside the outcome, which is all a resumed eval reads back."""
        key = (int(seed), str(episode["task_id"]))
        if key in self.done:
            return
        self.done[key] = episode
        self._write({"type": "episode", "key": list(key), "session": self.session, "episode": episode,
                     **(dict(transcript) if transcript is not None else {})})

    def close(self) -> None:
        self._fh.close()


# --------------------------------------------------------------------------------------------------
# Env helpers
# --------------------------------------------------------------------------------------------------


def env_data_hash(env: gym.Env, env_id: str, task_ids: Sequence[str], kwargs: Mapping[str, Any]) -> str:
    """The env's own data hash (``env.unwrapped.data_hash``, attribute or method) when it offers one,
    else a hash of the env id, its kwargs and the task ids evaluated."""
    own = getattr(env.unwrapped, "data_hash", None)
    if callable(own):
        own = own()
    if isinstance(own, str) and own:
        return own
    return content_hash_text(json.dumps({"env": env_id, "kwargs": dict(kwargs), "tasks": list(task_ids)}, sort_keys=True, default=str))


def _make_envs(env_id: str, count: int, kwargs: Mapping[str, Any], spec: Any) -> list[gym.Env]:
    """``count`` envs of ``env_id`` (``spec``: its ``EnvSpec``, resolved once by the caller)."""
    if not spec.available:
        raise EvalError(f"env {env_id} is not available here: {spec.availability()}")
    envs = []
    try:
        for _ in range(count):
            envs.append(gym.make(env_id, **kwargs))
    except TypeError as exc:
        for e in envs:
            e.close()
        message = env_kwarg_message(exc, env_id)
        if message is None:  # a TypeError from inside the env is a bug: keep its traceback
            raise
        raise EvalError(message) from None
    except BaseException:
        for e in envs:
            e.close()
        raise
    return envs


# --------------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------------


def _reseed(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def _policy_dtype(policy: Any) -> str | None:
    """The canonical compute dtype of an in-memory policy (an LLM policy's), None for policies without one
    (the :class:`~stratagym.agents.policy.Policy` hook's default; a scripted agent has none either)."""
    value = policy_hooks(policy).compute_dtype
    if value is None:
        return None
    return dtype_name(value)


def _spec_for(agent: str, *, custom_factory: bool) -> AgentSpec:
    """Parse the agent spec; with a custom factory any label is allowed (kind ``policy``)."""
    try:
        return parse_agent_spec(agent)
    except AgentSpecError:
        if not custom_factory:
            raise
        return AgentSpec(agent, "policy", agent)


def evaluate(
    config: EvalConfig,
    *,
    out: str | os.PathLike[str] | None = None,
    resume: bool = True,
    progress: bool | Callable[[int, int], None] = True,
    agent_factory: Callable[[int], Any] | None = None,
    transcripts: bool = True,
) -> dict[str, Any]:
    """Evaluate ``config.agent`` on ``config.env_id`` and return the result record (a dict).

    With ``out``, the record is written there (atomically) and progress is kept in
    ``<out>.progress.jsonl`` so a killed eval resumes (``resume=True``). ``progress`` is True for a
    tqdm bar on stderr, False for none, or a callback ``(done, total)``. ``agent_factory(seed)``
    overrides how agents are built (the trainer passes its in-memory policy this way). ``transcripts``:
    keep each episode's turns in the progress file (for ``stratagym leaderboard site``); the record is the
    same either way.
    """
    spec = _spec_for(config.agent, custom_factory=agent_factory is not None)
    seeds = [int(s) for s in config.seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise EvalError(f"seeds must be a non-empty list of distinct integers, got {list(config.seeds)}")
    if config.batch_size < 1:
        raise EvalError(f"batch size must be >= 1, got {config.batch_size}")
    try:  # the env's EnvSpec, resolved once and passed down (env construction, prompt template, metrics)
        spec_env = get_spec(config.env_id)
    except KeyError:
        raise EvalError(unknown_env_message(config.env_id)) from None
    env_kwargs = dict(config.env_kwargs)
    if config.split is not None:
        env_kwargs["split"] = config.split
    if config.max_steps is not None:
        env_kwargs["max_steps"] = int(config.max_steps)
    env_kwargs.update(scripted_env_kwargs(spec, config.env_id))

    all_tasks_env = _make_envs(config.env_id, 1, env_kwargs, spec_env)[0]
    try:
        all_tasks = list(all_tasks_env.unwrapped.task_ids())
        # the env's own (normalised) split name when it has one: "valid_seen" -> "in_distribution"
        env_split = getattr(all_tasks_env.unwrapped, "split", None)
        split = str(env_split) if isinstance(env_split, str) and env_split else (config.split or "default")
        if not all_tasks:
            raise EvalError(f"{config.env_id} has no tasks in split {split!r}")
        n = len(all_tasks) if config.n is None else int(config.n)
        if n < 1:
            raise EvalError(f"n must be >= 1, got {n}")
        if n > len(all_tasks):
            raise EvalError(f"asked for {n} tasks but split {split!r} of {config.env_id} has only {len(all_tasks)}")
        tasks = all_tasks[:n]
        data_hash = env_data_hash(all_tasks_env, config.env_id, tasks, env_kwargs)
        # what the number is measured under, computed by the env family (its spec and protocol_data)
        # the prompt template by content: the agent's forced one, else the env's (tools under the tools protocol)
        template = protocol_template(config.env_id, override=spec.forced_template(config.agent_options),
                                     protocol=resolved_task_kwargs(spec_env, env_kwargs).get("protocol"), spec=spec_env)
        # a bf16 eval is another protocol than an fp32 one; an in-memory policy (agent_factory) says its own
        if agent_factory is not None and "dtype" not in config.agent_options:
            dtype = _policy_dtype(agent_factory(seeds[0]))
        else:
            dtype = spec.compute_dtype(config.agent_options)
        protocol = protocol_of(all_tasks_env, config.env_id, env_kwargs, tasks, split, prompt_template=template,
                               dtype=dtype)
        # where the env's tasks come from (e.g. ALFWorld: "bundled" or the real data folder), if it says
        source = getattr(all_tasks_env.unwrapped, "data_source", None)
        data_source = str(source) if isinstance(source, str) and source else None
    finally:
        all_tasks_env.close()

    # a checkpoint that names its training data is measured for overlap against exactly that data
    overlap_flags, provenance = training_overlap(spec, spec_env, config.env_id, env_kwargs, split)
    agent_hash = spec.content_hash()
    identity = {
        "agent": spec.raw,
        "agent_hash": agent_hash,
        "env_id": config.env_id,
        "env_kwargs": env_kwargs,
        "split": split,
        "tasks": tasks,
        "seeds": seeds,
        "data_hash": data_hash,
    }
    if dtype not in (None, "float32"):  # a bf16 eval is another eval: resuming must not mix the two
        identity["dtype"] = dtype
    log: _ProgressLog | None = None
    if out is not None:
        log = _ProgressLog(progress_path(out), identity, resume=resume)
    done: dict[tuple[int, str], dict[str, Any]] = dict(log.done) if log else {}
    total = len(tasks) * len(seeds)

    bar = None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=len(done), desc=f"eval {spec.label} on {config.env_id}", unit="ep", file=sys.stderr, dynamic_ncols=True)

    def report() -> None:
        if bar is not None:
            bar.update(1)
        elif callable(progress):
            progress(len(done), total)

    info_keys = tuple(spec_env.record_info_keys)
    envs = _make_envs(config.env_id, min(config.batch_size, total), env_kwargs, spec_env) if len(done) < total else []
    policy: Any = None
    greedy = bool(config.agent_options.get("greedy", True))
    try:
        for seed in seeds:
            pending = [t for t in tasks if (seed, t) not in done]
            if not pending:
                continue
            if agent_factory is not None:
                policy = agent_factory(seed)
            elif spec.is_scripted or policy is None:
                policy = build_agent(spec, config.env_id, envs[0], seed=seed, **config.agent_options)
            else:  # an LLM policy is loaded once; each seed re-seeds its sampler
                _reseed(seed)

            def on_episode(traj: Any, _seed: int = seed) -> None:
                ep = EpisodeRecord.from_trajectory(traj, info_keys).to_dict()
                ep["seed"] = _seed
                done[(_seed, ep["task_id"])] = ep
                if log is not None:
                    log.add(_seed, ep, transcript_of(traj) if transcripts else None)
                report()

            play(policy, [(t, seed) for t in pending], pool=InProcessPool.from_envs(envs),
                 batch_size=len(envs), greedy=greedy, on_episode=on_episode)
    finally:
        for env in envs:
            env.close()
        if bar is not None:
            bar.close()
        if log is not None:
            log.close()

    episodes = [done[(s, t)] for s in seeds for t in tasks]
    if overlap_flags is not None:
        # a property of the task, not of the episode: set on every episode here, resumed ones included, so a
        # resume never mixes flags; progress lines keep the env's own (eval.transcripts.same_outcome skips it)
        episodes = [{**e, "extra": {**e.get("extra", {}), "overlap": overlap_flags.get(e["task_id"], False)}}
                    for e in episodes]
    agent_info: dict[str, Any] = {"spec": spec.raw, "kind": spec.kind, "label": config.label or spec.label, "content_hash": agent_hash}
    if dtype is not None:
        agent_info["dtype"] = dtype
    if provenance is not None:
        agent_info["provenance"] = provenance
    if config.algorithm:
        agent_info["algorithm"] = config.algorithm
    record = build_record(
        agent=agent_info,
        env_id=config.env_id,
        data_hash=data_hash,
        data_source=data_source,
        env_kwargs=env_kwargs,
        split=split,
        seeds=seeds,
        episodes=episodes,
        config={"batch_size": config.batch_size, "max_steps": config.max_steps, "n": config.n, "agent_options": dict(config.agent_options)},
        training=config.training,
        protocol=protocol,
        spec=spec_env,
    )
    if out is not None:
        write_json_atomic(out, record)
    return record


def training_overlap(agent: AgentSpec, env_spec: Any, env_id: str, env_kwargs: Mapping[str, Any],
                     split: str) -> tuple[dict[str, bool] | None, dict[str, Any] | None]:
    """``(task_id -> overlaps, provenance summary)`` when the agent is a checkpoint whose provenance
    (:mod:`stratagym.provenance`) names training sets of this env and the env family computes overlap
    against them (``EnvSpec.training_overlap``); ``(None, None)`` otherwise, leaving the env's own flag
    (measured against the dataset's train split). Where the named training data is not on this machine
    the env's flag stays too, and the summary's ``overlap_against`` says why."""
    if env_spec.training_overlap is None or agent.kind not in ("checkpoint", "hf", "policy"):
        return None, None
    prov = read_provenance(agent.name) if Path(agent.name).is_dir() else None
    sets = training_sets_for(prov, env_id)
    if not sets:
        return None, None
    summary = {"sha256": provenance_digest(prov), "overlap_against": "training sets",
               "training_tasks": sum(len(s["task_ids"]) for s in sets),
               "stages": [s["stage"] for s in sets]}
    try:
        flags = load_object(env_spec.training_overlap)(env_kwargs, split, sets)
    except TrainingDataMissing as exc:
        return None, {**summary, "overlap_against": f"the env's train split: {exc}"}
    return flags, summary


def build_record(
    *,
    agent: Mapping[str, Any],
    env_id: str,
    data_hash: str,
    split: str,
    seeds: Sequence[int],
    episodes: Sequence[Mapping[str, Any]],
    env_kwargs: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
    data_source: str | None = None,
    protocol: Mapping[str, Any] | None = None,
    spec: Any = None,
) -> dict[str, Any]:
    """A finalised result record from per-episode outcomes (``EpisodeRecord.to_dict()`` rows with a
    ``seed``): aggregates them and stamps schema, time and ``record_id``. ``agent`` needs ``spec``,
    ``kind``, ``label``, ``content_hash`` (optionally ``algorithm``). ``protocol`` is the env family's
    fingerprint (:func:`stratagym.envs.fingerprint.protocol_of`); without one the record is written in
    the legacy schema ``stratagym.result/1`` (the board then recomputes what it can). ``spec``: ``env_id``'s
    ``EnvSpec`` when the caller holds it (the metric rules are read from it, not looked up again)."""
    episodes = list(episodes)
    agg = aggregate(episodes, env_id=env_id, split=split, spec=spec)
    record: dict[str, Any] = {
        "stratagym_version": __version__,
        "agent": dict(agent),
        "env": {"id": env_id, "version": env_version(env_id), "data_hash": data_hash, "kwargs": dict(env_kwargs or {}),
                **({"data_source": data_source} if data_source else {})},
        "split": split,
        "n_tasks": len({e["task_id"] for e in episodes}),
        "seeds": [int(s) for s in seeds],
        "n_episodes": len(episodes),
        **agg.to_dict(),
        "episodes": episodes,
        "config": dict(config or {}),
    }
    if training is not None:
        record["training"] = dict(training)
    if protocol is not None:
        record["schema"] = SCHEMA
        record["protocol"] = dict(protocol)
    else:
        record["schema"] = LEGACY_SCHEMA
    record = json.loads(json.dumps(record, default=str))  # plain JSON types only
    return finalize_record(record)


__all__ += ["AgentSpecError"]
