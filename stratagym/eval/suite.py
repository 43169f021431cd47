"""Benchmark suites: YAML files listing what ``stratagym eval --suite`` and ``stratagym bench`` run.

A suite (see ``suites/quick.yaml``)::

    name: quick
    description: one line
    seeds: [0, 1]                   # eval seeds of baselines; training seeds of bench runs
    batch_size: 8
    evals:                          # one entry per (env, split) evaluated
      - env: stratagym/SearchStrata-v0
        split: test                 # optional: the env's default split
        n: 64                       # optional: all tasks of the split
        max_steps: 8                # optional
        env_kwargs: {}              # optional, passed to gymnasium.make
    baselines: [scripted:oracle, scripted:random]   # agents evaluated on every eval env, no training
    train:                          # bench only; a mapping or a list of them (groups)
      - envs: [stratagym/SearchStrata-v0]           # each must have an entry in evals
        algorithms:                 # an estimator name, or a mapping
          - grpo
          - {label: Stratified GRPO, estimator: stratified, estimator_kwargs: {alpha: 0.6}}
        seeds: [0, 1]               # optional: default the suite's seeds
        config: {...}               # a trainer recipe without env/algorithm (policy, rollout, optim, train)
        env_kwargs: {stratagym/SearchStrata-v0: {...}}   # optional training env kwargs per env
    # an algorithm mapping may also carry env_kwargs (training env kwargs of that arm, e.g. context_k)

A trained (algorithm, env) becomes ONE leaderboard record: the policy of each training seed is evaluated
greedily on the eval entry's tasks (record ``seeds`` = training seeds), so the board shows the seed spread.

Loaded with ``yaml.safe_load`` and checked here, so a typo fails before hours of training: the fields and
the arms (``algorithms``: estimator names and options checked against the registry) by the schema suites
share with studies (:mod:`stratagym.eval.schema`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratagym.errors import UserError
from stratagym.eval.schema import CHECKS, Arm, arms_from, check_keys, check_values

__all__ = ["EvalEntry", "AlgorithmEntry", "Arm", "Baseline", "TrainSection", "Suite", "SuiteError", "load_suite"]


class SuiteError(UserError, ValueError):
    """A suite file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class EvalEntry:
    env: str
    split: str | None = None
    n: int | None = None
    max_steps: int | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)


#: One trained arm (the schema suites and studies share: :class:`stratagym.eval.schema.Arm`).
AlgorithmEntry = Arm


@dataclass(frozen=True)
class TrainSection:
    algorithms: tuple[AlgorithmEntry, ...] = ()
    envs: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    seeds: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Baseline:
    """An agent evaluated without training: ``agent`` is an agent spec (``scripted:oracle``, a checkpoint
    folder...); ``envs`` limits it to those eval envs (a checkpoint trained for one env), ``label`` is
    how it shows on the board; ``seeds`` replaces the suite's (one seed for a greedy model: its other
    seeds would replay the same episodes); ``agent_options`` are the agent's options (``dtype: auto``)."""

    agent: str
    envs: tuple[str, ...] | None = None
    label: str | None = None
    seeds: tuple[int, ...] | None = None
    agent_options: tuple[tuple[str, Any], ...] = ()

    def applies_to(self, env_id: str) -> bool:
        return self.envs is None or env_id in self.envs


@dataclass(frozen=True)
class Suite:
    name: str
    path: str
    description: str = ""
    seeds: tuple[int, ...] = (0,)
    batch_size: int = 8
    evals: tuple[EvalEntry, ...] = ()
    baselines: tuple[Baseline, ...] = ()
    train: tuple[TrainSection, ...] = ()

    def seeds_of(self, section: TrainSection) -> tuple[int, ...]:
        return section.seeds if section.seeds is not None else self.seeds

    def runs(self) -> list[tuple[TrainSection, AlgorithmEntry, str, int]]:
        """Every (section, algorithm, env, seed) bench trains, in order."""
        return [(sec, alg, env, seed) for sec in self.train for alg in sec.algorithms for env in sec.envs
                for seed in self.seeds_of(sec)]


_TOP = {"name", "description", "seeds", "batch_size", "evals", "baselines", "train"}
#: an eval entry's fields and their rules (the schema's CHECKS, shared with studies)
_EVAL = {"env": CHECKS["text"], "split": CHECKS["optional_text"], "n": CHECKS["optional_positive_int"],
         "max_steps": CHECKS["optional_positive_int"], "env_kwargs": CHECKS["mapping"]}
_TRAIN = {"algorithms", "envs", "config", "env_kwargs", "seeds"}
_BASELINE = {"agent", "envs", "label", "seeds", "agent_options"}


def _ints(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SuiteError(f"{where} must be an integer or a non-empty list of integers, got {value!r}")
    return tuple(value)


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SuiteError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _baselines(value: Any, where: str, eval_envs: set[str]) -> tuple[Baseline, ...]:
    """``baselines``: agent specs, or mappings ``{agent, envs, label}``."""
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        raise SuiteError(f"{where} must be a list of agent specs or {{agent, envs, label}} mappings, got {value!r}")
    out = []
    for i, b in enumerate(value):
        at = f"{where}[{i}]"
        if isinstance(b, str) and b:
            out.append(Baseline(b))
            continue
        if not isinstance(b, dict) or not isinstance(b.get("agent"), str) or not b["agent"]:
            raise SuiteError(f"{at} must be an agent spec or a mapping with 'agent' (and envs, label), got {b!r}")
        _unknown(b, _BASELINE, at)
        envs = None if b.get("envs") is None else _strs(b["envs"], f"{at}.envs")
        missing = sorted(set(envs or ()) - eval_envs)
        if missing:
            raise SuiteError(f"{at}.envs names envs that no eval entry lists: {missing}")
        label = b.get("label")
        if label is not None and not isinstance(label, str):
            raise SuiteError(f"{at}.label must be a string")
        seeds = None if b.get("seeds") is None else _ints(b["seeds"], f"{at}.seeds")
        options = b.get("agent_options") or {}
        if not isinstance(options, dict):
            raise SuiteError(f"{at}.agent_options must be a mapping (e.g. {{dtype: auto}}), got {options!r}")
        out.append(Baseline(b["agent"], envs, label, seeds, tuple(sorted(options.items()))))
    return tuple(out)


def _unknown(d: dict, allowed: set[str] | dict[str, Any], where: str) -> None:
    check_keys(d, allowed, where, error=SuiteError)


def load_suite(path: str | os.PathLike[str]) -> Suite:
    """Read and check a suite file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise SuiteError(f"no suite file at {p}; the bundled ones are suites/quick.yaml and suites/full.yaml")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{p} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{p}: a suite is a mapping with at least 'evals'")
    _unknown(data, _TOP, str(p))
    evals = []
    if not isinstance(data.get("evals") or [], list):
        raise SuiteError(f"{p}: 'evals' must be a list of env ids or mappings with 'env'")
    for i, e in enumerate(data.get("evals") or []):
        where = f"{p}: evals[{i}]"
        if isinstance(e, str):
            e = {"env": e}
        if not isinstance(e, dict) or not isinstance(e.get("env"), str):
            raise SuiteError(f"{where} must be an env id or a mapping with 'env'")
        _unknown(e, _EVAL, where)
        check_values({**e, "env_kwargs": e.get("env_kwargs") or {}}, _EVAL, where, error=SuiteError)
        evals.append(EvalEntry(env=e["env"], split=e.get("split"), n=e.get("n"), max_steps=e.get("max_steps"),
                               env_kwargs=e.get("env_kwargs") or {}))
    if not evals:
        raise SuiteError(f"{p}: 'evals' lists no env")
    eval_envs = {e.env for e in evals}
    train_raw = data.get("train") or []
    if isinstance(train_raw, dict):
        train_raw = [train_raw]
    if not isinstance(train_raw, list):
        raise SuiteError(f"{p}: 'train' must be a mapping or a list of mappings")
    sections = [_train_section(t, f"{p}: train[{i}]", eval_envs) for i, t in enumerate(train_raw)]
    batch = data.get("batch_size", 8)
    if not isinstance(batch, int) or batch < 1:
        raise SuiteError(f"{p}: batch_size must be a positive integer")
    return Suite(
        name=str(data.get("name") or p.stem),
        path=str(p),
        description=str(data.get("description") or ""),
        seeds=_ints(data.get("seeds", [0]), f"{p}: seeds"),
        batch_size=batch,
        evals=tuple(evals),
        baselines=_baselines(data.get("baselines", []), f"{p}: baselines", eval_envs),
        train=tuple(sections),
    )


def _train_section(t: Any, where: str, eval_envs: set[str]) -> TrainSection:
    if not isinstance(t, dict):
        raise SuiteError(f"{where} must be a mapping")
    _unknown(t, _TRAIN, where)
    entries = arms_from(t.get("algorithms"), f"{where}.algorithms", recipe=True, error=SuiteError)
    envs = _strs(t.get("envs", []), f"{where}.envs") or tuple(sorted(eval_envs))
    missing = [e for e in envs if e not in eval_envs]
    if missing:
        raise SuiteError(f"{where}.envs {missing} have no entry in 'evals' (each trained env is evaluated)")
    config, env_kwargs = t.get("config") or {}, t.get("env_kwargs") or {}
    if not isinstance(config, dict) or not isinstance(env_kwargs, dict):
        raise SuiteError(f"{where}: config and env_kwargs must be mappings")
    env_opts = config.get("env", {})
    if not isinstance(env_opts, dict) or set(env_opts) - {"tasks"}:
        raise SuiteError(f"{where}.config.env may only set 'tasks' (a slice of the training split): list envs in "
                         f"{where}.envs and kwargs in env_kwargs")
    return TrainSection(
        algorithms=entries, envs=envs, config=config, env_kwargs=env_kwargs,
        seeds=_ints(t["seeds"], f"{where}.seeds") if "seeds" in t else None,
    )
