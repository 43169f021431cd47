"""Registering stratagym envs with gymnasium, built-in and third-party alike.

Every env is described by an :class:`EnvSpec`: its gymnasium id, a lazy ``"module:Class"`` entry
point (nothing heavy is imported until ``gymnasium.make``), a one-line description, the Python modules
it needs and the pip extra that provides them, and named scripted agents.

* Built-in families are the sub-packages of :mod:`stratagym.envs`; each lists its specs in an
  ``ENV_SPECS`` sequence in its ``__init__`` (which must stay import-light).
* Third-party packages declare an entry point in the group ``stratagym.envs`` whose object is an
  :class:`EnvSpec`, a sequence of them, or a zero-argument callable returning either::

      [project.entry-points."stratagym.envs"]
      my_envs = "my_package.envs:ENV_SPECS"

``import stratagym`` registers both kinds, after which ``gymnasium.make("stratagym/SearchQA-v0")`` and
``gymnasium.make_vec(...)`` work and ``stratagym envs list`` shows them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import pkgutil
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import gymnasium as gym

from stratagym.envs.metric_spec import MetricSpec
from stratagym.envs.random_agent import RandomAgent
from stratagym.errors import ConfigError
from stratagym.objects import load_object  # re-exported: ``from stratagym.envs.registry import load_object`` still works

__all__ = ["CONTRACT_METADATA_KEYS", "EnvSpec", "register_env", "register_all", "list_envs", "get_spec", "ENTRY_POINT_GROUP", "load_object", "tool_set_for"]

ENTRY_POINT_GROUP = "stratagym.envs"

#: The structural ``info`` keys every env fills meaningfully (see ``INFO_KEYS`` in ``envs.core``; the
#: tool counts are meaningful only for envs with tools).
CONTRACT_METADATA_KEYS: tuple[str, ...] = ("task_id", "step", "action_valid", "state_hash", "context_hashes", "won", "score")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnvSpec:
    """Everything stratagym needs to know about an env before importing it.

    ``requires`` lists importable module names the env needs; if one is missing the env is listed as
    unavailable with "needs extra: <extra>". ``requires_executables`` lists programs (names on PATH or
    absolute paths, e.g. ``/usr/bin/chromium``) that pip cannot provide. ``agents`` maps scripted agent names (e.g. ``"random"``,
    ``"oracle"``) to ``"module:Class"`` strings; each class is built as ``Class(env, seed=...)``.
    ``metadata_keys`` names the structural ``info`` keys the env fills meaningfully (the trainer checks
    an estimator's needs against it); left out, it is derived from the contract: the keys every env
    fills, plus ``tool_calls``/``search_count`` when ``tools`` is not empty and ``admissible_actions``
    when ``lists_actions``.

    The spec is the one place that holds what the rest of stratagym knows about the env, so nothing
    outside the env's package matches on its id:

    * ``prompt_template``: the name of the LLM prompt template (``stratagym.agents.prompts.TEMPLATES``:
      ``search_r1``, ``think_action``, ``plain``); left out, ``think_action`` when the env lists its
      admissible actions, else ``plain``;
    * ``primary_metric``: the metric the leaderboard ranks the env by (``success``, ``em``,
      ``webshop_score``...);
    * ``success_from_score``: success means a full score (WebShop) rather than ``info["won"]``;
    * ``record_info_keys``: the per-episode ``info`` keys an eval keeps in its records (QA's F1, ALFWorld's
      task type...), which the aggregator turns into extra metrics;
    * ``max_parallel``: the most envs one process should run at once (a browser env: 1);
    * ``cli``: the module of the env family's commands (a ``register(app, groups)`` function), which the
      ``stratagym`` command loads; a third-party env package adds its commands the same way;
    * ``training_overlap``: ``"module:function"`` computing ``{task_id: overlaps}`` for an eval split from
      ``(env_kwargs, split, training_sets)``, the training sets of the evaluated checkpoint's provenance
      (:mod:`stratagym.provenance`); the eval harness then replaces the env's own ``overlap`` flag (made
      against the dataset's train split) with it. None: the env has no overlap notion.

    What the protocol fingerprint of a result record is made of (:mod:`stratagym.envs.fingerprint`,
    ``docs/protocol.md``):

    * ``behaviour_version``: bumped by every change to what the env does (observations, parsing, turn
      limits, rewards); ``tests/envs/test_behaviour_pins.py`` fails when pinned scripted transcripts
      change and this did not. Records of different versions are never ranked together;
    * ``neutral_kwargs``: constructor kwargs that do not change the task (timeouts, expert hints in
      ``info``); every other kwarg is task-changing by default, so a new kwarg is compared unless the
      family says otherwise;
    * ``data_kwargs``: kwargs that name where data lives (paths); the env's ``protocol_data()`` hashes
      their content instead, so the same data on two machines is one protocol;
    * ``set_only_kwargs``: kwargs that join the fingerprint only when set (not None): probes added after
      records existed (SearchQA's ``retrieval_ablation``), so an eval that does not use them keeps the
      protocol of every earlier record;
    * ``reward``: the name of the env's reward function;
    * ``libraries``: distributions whose versions change behaviour (the env's ``protocol_data()`` may
      name the subset it actually uses under ``libraries``);
    * ``board_columns``: the few secondary metrics the Markdown board shows next to the primary one (the
      HTML board shows every metric).

    ``metrics`` declares the metrics the env produces (:class:`~stratagym.envs.metric_spec.MetricSpec`: the
    info key or record field each reads, rate or mean, scale, ranking direction, parts by a flag), in the
    order the board shows them; the aggregator and the board read them from here. A numeric
    ``record_info_keys`` value the spec does not declare still becomes a metric (a rate for booleans, a
    mean for numbers), shown after the declared ones.
    """

    id: str
    entry_point: str
    description: str
    requires: tuple[str, ...] = ()
    requires_executables: tuple[str, ...] = ()
    extra: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    metadata_keys: tuple[str, ...] | None = None
    agents: Mapping[str, str] = field(default_factory=dict)
    max_episode_steps: int | None = None
    source: str = "stratagym"
    tools: tuple[str, ...] = ()
    lists_actions: bool = False
    prompt_template: str | None = None
    primary_metric: str = "success"
    success_from_score: bool = False
    record_info_keys: tuple[str, ...] = ()
    max_parallel: int | None = None
    cli: str | None = None
    training_overlap: str | None = None
    behaviour_version: int = 1
    neutral_kwargs: tuple[str, ...] = ()
    data_kwargs: tuple[str, ...] = ()
    set_only_kwargs: tuple[str, ...] = ()
    reward: str = "env"
    libraries: tuple[str, ...] = ()
    board_columns: tuple[str, ...] = ()
    metrics: tuple[MetricSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", tuple(self.metrics))
        for m in self.metrics:
            if not isinstance(m, MetricSpec):
                raise TypeError(f"env {self.id!r}: metrics lists MetricSpec objects, got {type(m).__name__}")
            if m.info_key is not None and m.info_key not in self.record_info_keys:
                raise ValueError(f"env {self.id!r}: metric {m.name!r} reads info key {m.info_key!r}, which the "
                                 f"records do not keep; add it to record_info_keys")
        if self.metadata_keys is None:
            keys = list(CONTRACT_METADATA_KEYS)
            if self.tools:
                keys[3:3] = ["tool_calls", "search_count"]
            if self.lists_actions:
                keys.append("admissible_actions")
            object.__setattr__(self, "metadata_keys", tuple(keys))
        else:
            object.__setattr__(self, "metadata_keys", tuple(self.metadata_keys))

    def missing_modules(self) -> list[str]:
        missing = []
        for name in self.requires:
            try:
                if importlib.util.find_spec(name) is None:
                    missing.append(name)
            except (ImportError, ValueError):
                missing.append(name)
        return missing

    def missing_executables(self) -> list[str]:
        return [p for p in self.requires_executables if not (os.path.isfile(p) if os.path.isabs(p) else shutil.which(p))]

    @property
    def available(self) -> bool:
        return not self.missing_modules() and not self.missing_executables()

    def availability(self) -> str:
        missing = self.missing_modules()
        if missing:
            if self.extra:
                return f"needs extra: {self.extra} (pip install 'stratagym[{self.extra}]')"
            return "needs " + ", ".join(missing)
        programs = self.missing_executables()
        if programs:
            return "needs system programs: " + ", ".join(programs) + " (make setup installs them as root)"
        return "available"


_SPECS: dict[str, EnvSpec] = {}
_registered_all = False


def register_env(spec: EnvSpec, *, replace: bool = False) -> EnvSpec:
    """Register ``spec`` with gymnasium and stratagym's listing.

    Re-registering the same id with an identical spec is a no-op; a different spec under a taken id
    raises unless ``replace=True``.
    """
    if not isinstance(spec, EnvSpec):
        raise TypeError(f"register_env expects a stratagym EnvSpec, got {type(spec).__name__}")
    old = _SPECS.get(spec.id)
    if old is not None and not replace:
        if old == spec:
            return old
        raise ValueError(f"env id {spec.id!r} is already registered by {old.source}; choose another id or pass replace=True")
    if spec.id in gym.registry:
        del gym.registry[spec.id]
    gym.register(
        id=spec.id,
        entry_point=spec.entry_point,
        kwargs=dict(spec.kwargs),
        max_episode_steps=spec.max_episode_steps,
        disable_env_checker=False,
    )
    _SPECS[spec.id] = spec
    return spec


def _as_specs(obj: Any, origin: str) -> list[EnvSpec]:
    if callable(obj) and not isinstance(obj, EnvSpec):
        obj = obj()
    if obj is None:
        return []
    if isinstance(obj, EnvSpec):
        return [obj]
    if isinstance(obj, Iterable):
        specs = list(obj)
        bad = [s for s in specs if not isinstance(s, EnvSpec)]
        if bad:
            raise TypeError(f"{origin}: expected EnvSpec objects, got {type(bad[0]).__name__}")
        return specs
    raise TypeError(f"{origin}: expected an EnvSpec, a list of them, or a callable returning one")


def _builtin_specs() -> list[EnvSpec]:
    # the family packages beside this module (their parent package is not imported here: it imports us)
    specs: list[EnvSpec] = []
    for module in sorted(pkgutil.iter_modules([os.path.dirname(__file__)]), key=lambda m: m.name):
        if not module.ispkg or module.name == "tools":  # tools/: the tools protocol, not a family
            continue
        family = importlib.import_module(f"stratagym.envs.{module.name}")
        specs.extend(_as_specs(getattr(family, "ENV_SPECS", ()), f"stratagym.envs.{module.name}.ENV_SPECS"))
    return specs


def _entry_point_specs() -> list[EnvSpec]:
    specs: list[EnvSpec] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = _as_specs(ep.load(), f"entry point {ep.name!r} ({ep.value})")
        except Exception as exc:  # a broken plug-in must not break `import stratagym`
            log.warning("stratagym: could not load env entry point %r (%s): %s", ep.name, ep.value, exc)
            continue
        dist = getattr(ep, "dist", None)
        source = dist.name if dist is not None else ep.value
        specs.extend(s if s.source != "stratagym" else _with_source(s, source) for s in loaded)
    return specs


def _with_source(spec: EnvSpec, source: str) -> EnvSpec:
    from dataclasses import replace

    return replace(spec, source=source)


def register_all(*, force: bool = False) -> list[EnvSpec]:
    """Register built-in and entry-point envs (idempotent; ``force`` re-reads entry points)."""
    global _registered_all
    if _registered_all and not force:
        return list(_SPECS.values())
    for spec in _builtin_specs():
        register_env(spec)
    for spec in _entry_point_specs():
        try:
            register_env(spec)
        except ValueError as exc:
            log.warning("stratagym: %s", exc)
    _registered_all = True
    return list(_SPECS.values())


def list_envs(*, available_only: bool = False) -> list[EnvSpec]:
    """All registered stratagym env specs, sorted by id."""
    register_all()
    specs = sorted(_SPECS.values(), key=lambda s: s.id)
    return [s for s in specs if s.available] if available_only else specs


def get_spec(env_id: str) -> EnvSpec:
    register_all()
    try:
        return _SPECS[env_id]
    except KeyError:
        known = ", ".join(sorted(_SPECS)) or "none"
        raise KeyError(f"unknown stratagym env {env_id!r}; registered: {known}") from None


def tool_set_for(env_id: str) -> Any:
    """The :class:`~stratagym.envs.tools.ToolSet` an env's class declares (``TextEnv.tool_set``), found
    through its registered spec; a ConfigError for an env without the tools protocol."""
    path = getattr(load_object(get_spec(env_id).entry_point), "tool_set", None)
    if path is None:
        raise ConfigError(f"{env_id} has no tools protocol; use protocol: tags")
    return load_object(path)


def agent_class(env_id: str, name: str) -> Callable[..., Any]:
    """The class of scripted agent ``name`` declared by ``env_id``'s spec (``random`` works for every env)."""
    spec = get_spec(env_id)
    path = spec.agents.get(name)
    if path is None and name == "random":
        return RandomAgent
    if path is None:
        raise KeyError(f"env {env_id!r} has no scripted agent {name!r}; it has {sorted(set(spec.agents) | {'random'})}")
    return load_object(path)


def agent_env_kwargs(env_id: str, name: str) -> dict[str, Any]:
    """Extra ``gymnasium.make`` kwargs a scripted agent needs from its envs.

    One agent instance acts for a whole batch of envs, so it cannot read any single env's internals;
    an agent that needs privileged state (e.g. the ALFWorld planner's next action) declares a class
    attribute ``env_kwargs`` asking the env to put it in ``info``.
    """
    return dict(getattr(agent_class(env_id, name), "env_kwargs", {}))


def make_agent(env_id: str, name: str, env: gym.Env, *, seed: int = 0, **kwargs: Any) -> Any:
    """Build scripted agent ``name`` for ``env_id`` as ``Class(env.unwrapped, seed=seed, **kwargs)``."""
    return agent_class(env_id, name)(env.unwrapped, seed=seed, **kwargs)


def scripted_agent_names(env_id: str) -> Sequence[str]:
    spec = get_spec(env_id)
    return sorted(set(spec.agents) | {"random"})
