"""Registries: advantage estimators, estimator modifiers and policy losses, by name.

Shaped like verl's ``register_adv_est`` / ``register_policy_loss`` (``verl/trainer/ppo/core_algos.py``):
one decorated definition per estimator, per modifier and per loss, and a lookup by name.  The
options of each entry are the keyword-only parameters of its function, with their defaults, so an
entry's option list cannot drift from its code; a bad name or option raises :class:`RegistryError`
(a :class:`~stratagym.errors.ConfigError`) that names the valid ones.

Estimators.  ``@register_estimator(name, level=..., requires=...)`` on the estimator's own pure
function, ``fn(<batch inputs>, *, <options>) -> Tensor``: the one definition of the estimator, still
callable on plain tensors.  The decorator binds the function from its signature:

- the parameters before ``*`` are batch inputs, each named after the :class:`AdvantageBatch` field it
  reads (``rewards``, ``group``, ``stratum``, ``anchor``, ``context``, ``lengths``, ``values``, ...);
  required ones are the entry's ``fields``, checked before a call; ones defaulting to ``None`` get the
  field's value or ``None``.  Two names are derived when the batch does not carry them:
  ``step_returns`` (discounted per-step returns from ``traj``/``step``; the entry gains the option
  ``gamma``, default :data:`DEFAULT_GAMMA`) and ``episode_rewards`` (trajectory totals from ``traj``),
  see :func:`batch_returns`, :func:`batch_episode`.  ``gather`` is the data-parallel hook
  (:attr:`AdvantageBatch.gather`): an estimator that names it reads batch-wide statistics
  (``batch_wide``).
- the parameters after ``*`` are the options, with their defaults.

``defaults={...}`` registers a variant of a function under another name with other defaults (Dr.GRPO is
GRPO with ``scale="none"``); ``switches={"option": "input"}`` adds a boolean option (default False) that
decides whether an optional derived input is read (HGPO's ``base_group``).  ``level``:
``"trajectory"`` (one row per trajectory) or ``"step"`` (one row per step); ``requires``: the env
``info`` metadata keys it needs (e.g. ``{"search_count"}``), so a trainer can check an env before
training.  A function may instead take the whole ``batch`` as its one input (then ``fields=`` names
what it reads).  ``register_estimator(name, factory)`` with an :class:`Estimator` subclass (or any
factory) also works, for estimators that keep state.

Modifiers.  ``"<name>+<modifier>"`` wraps an estimator: ``@register_modifier("hadw")`` on an
:class:`EstimatorModifier` subclass.  A modifier's options go in ``<modifier>={...}`` or as
``<modifier>_<option>=...`` keywords; the rest configure the base estimator.  HA-DW is the one
built-in modifier (``"stratified+hadw"``, ``"gigpo+hadw"``).

    est = get_estimator("stratified+hadw", alpha=0.6, hadw_lam=1.3)
    adv = est(AdvantageBatch(rewards=r, group=g, stratum=search_count))
    state = est.state_dict()   # HA-DW anchor state, for checkpoints

Policy losses.  ``@register_policy_loss(name)`` on ``fn(x: PGInputs, *, option=default, ...) ->
(loss, stats)``; :func:`get_policy_loss` returns a :class:`PolicyLoss` with validated options.  The
definitions live in :mod:`stratagym.algorithms.losses`.

This module imports none of the definitions: each family module registers its own entries when it is
imported, and importing :mod:`stratagym.algorithms` (which any import of this module does first)
imports them all.  The algorithms contract in ``pyproject.toml`` keeps the registry below them.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from torch import Tensor

from stratagym.algorithms.returns import episode_returns, step_returns
from stratagym.errors import ConfigError

__all__ = [
    "DEFAULT_GAMMA",
    "AdvantageBatch",
    "Estimator",
    "EstimatorModifier",
    "FunctionEstimator",
    "PolicyLoss",
    "RegistryError",
    "UnknownNameError",
    "UnknownOptionError",
    "batch_episode",
    "batch_returns",
    "get_estimator",
    "get_policy_loss",
    "list_estimators",
    "list_modifiers",
    "list_policy_losses",
    "register_estimator",
    "register_modifier",
    "register_policy_loss",
]


# --------------------------------------------------------------------------- errors


class RegistryError(ConfigError):
    """A bad registry name or option: user configuration, so a :class:`ConfigError` (exit code 2)."""

    __str__ = BaseException.__str__  # KeyError (mixed in below) would quote the message


class UnknownNameError(RegistryError, KeyError):
    """Unknown estimator, modifier or loss name (a ``KeyError`` too, as a lookup miss)."""


class UnknownOptionError(RegistryError, TypeError):
    """Unknown option for a registered entry (a ``TypeError`` too, as a bad keyword argument)."""


def _options_of(fn: Callable[..., Any], skip: int) -> dict[str, Any]:
    """Keyword options of ``fn`` and their defaults: every parameter after the first ``skip``.

    Every option must have a default, so that ``get_estimator(name)`` with no options works.
    """
    params = list(inspect.signature(fn).parameters.values())[skip:]
    out: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: registered functions take named options, not *args/**kwargs")
        if p.default is p.empty:
            raise TypeError(f"{fn.__name__}: option {p.name!r} needs a default")
        out[p.name] = p.default
    return out


def _check_key(name: str, registry: dict, what: str, overwrite: bool) -> str:
    key = name.lower()
    if not key or "+" in key:
        raise ValueError(f"invalid {what} name {name!r} (non-empty, no '+')")
    if key in registry and not overwrite:
        raise ValueError(f"{what} {name!r} is already registered (pass overwrite=True)")
    return key


# --------------------------------------------------------------------------- batch


@dataclass
class AdvantageBatch:
    """Flat tensors for one batch.  One row per trajectory (trajectory-level estimators) or per
    step (step-level ones).

    rewards:         per-row reward (trajectory reward, or the step's own reward)
    group:           task group id (rollouts of the same task share it)
    stratum:         stratum key (Stratified GRPO; env ``search_count``)
    traj, step:      trajectory id and step index (step-level)
    anchor:          anchor-state hash (GiGPO; env ``state_hash``)
    context:         int64 (N, K+1) context hashes, -1 where absent (HGPO; env ``context_hashes``)
    episode_rewards: per-step-row trajectory return (default: sum of the trajectory's rewards)
    returns:         per-step discounted returns (default: computed with ``gamma``)
    lengths:         per-row number of response tokens (OPO's length-weighted baseline; the
                     token-weighted whitening of REINFORCE++)
    baseline:        per-row baseline reward (ReMax: the reward of the greedy rollout of the
                     row's task)
    values:          per-row critic value of the state the step was taken in (PPO's GAE)
    gather:          data-parallel hook, not data: ``None`` when this batch is the whole batch; in an
                     N-process run (each holding its own rows) ``gather(t)`` stacks every process's
                     1-D float64 ``t`` into ``(N, len(t))``, so batch-wide statistics (the whitening of
                     ``gae`` and REINFORCE++) are the global batch's (estimators with ``batch_wide``)
    """

    rewards: Tensor
    group: Tensor
    stratum: Optional[Tensor] = None
    traj: Optional[Tensor] = None
    step: Optional[Tensor] = None
    anchor: Optional[Tensor] = None
    context: Optional[Tensor] = None
    episode_rewards: Optional[Tensor] = None
    returns: Optional[Tensor] = None
    lengths: Optional[Tensor] = None
    baseline: Optional[Tensor] = None
    values: Optional[Tensor] = None
    gather: Optional[Callable[[Tensor], Tensor]] = None

    def __len__(self) -> int:
        return int(self.rewards.shape[0])


def batch_returns(batch: AdvantageBatch, gamma: float) -> Tensor:
    """Per-step discounted returns: ``batch.returns`` if given, else computed from traj/step."""
    if batch.returns is not None:
        return batch.returns
    return step_returns(batch.rewards, batch.traj, batch.step, gamma=gamma)


def batch_episode(batch: AdvantageBatch) -> Tensor:
    """Per-step-row trajectory total: ``batch.episode_rewards`` if given, else summed per traj."""
    if batch.episode_rewards is not None:
        return batch.episode_rewards
    return episode_returns(batch.rewards, batch.traj)


# --------------------------------------------------------------------------- estimators


class Estimator(abc.ABC):
    """Base class: subclasses set ``name``, ``level``, ``requires``, ``fields``, ``defaults`` and
    implement ``compute(batch, **config)``.  Most estimators need no subclass: a function under
    ``@register_estimator`` becomes a :class:`FunctionEstimator`."""

    name: str = ""
    level: str = "trajectory"
    requires: frozenset = frozenset()
    fields: tuple = ("rewards", "group")
    defaults: dict = {}
    derived: tuple = ()
    batch_wide: bool = False  # reads statistics of the whole batch through ``batch.gather`` (a collective)

    def __init__(self, **config: Any) -> None:
        self._check_options(config)
        self.config = {**self.defaults, **config}

    def _check_options(self, options: dict[str, Any]) -> None:
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise UnknownOptionError(
                f"{self.name}: unknown option(s) {sorted(unknown)}; valid: {sorted(self.defaults)}"
            )

    def check(self, batch: AdvantageBatch) -> None:
        """Raise ``ValueError`` naming what the batch lacks (fields, or what derives returns)."""
        missing = [f for f in self.fields if getattr(batch, f, None) is None]
        if missing:
            raise ValueError(
                f"estimator {self.name!r} needs batch field(s) {missing} "
                f"(env metadata: {sorted(self.requires) or 'none'})"
            )
        if "returns" in self.derived and batch.returns is None and (batch.traj is None or batch.step is None):
            raise ValueError(f"estimator {self.name!r} needs batch.traj and batch.step "
                             "(or precomputed batch.returns)")
        if "episode" in self.derived and batch.episode_rewards is None and batch.traj is None:
            raise ValueError(f"estimator {self.name!r} needs batch.traj "
                             "(or precomputed batch.episode_rewards)")

    def __call__(self, batch: AdvantageBatch, **overrides: Any) -> Tensor:
        self._check_options(overrides)
        self.check(batch)
        return self.compute(batch, **{**self.config, **overrides})

    @abc.abstractmethod
    def compute(self, batch: AdvantageBatch, **config: Any) -> Tensor:
        """Advantages for ``batch`` with the merged configuration (defaults, construction, call)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    # ---- hooks the trainer calls on every estimator (no-ops here; a stateful modifier overrides them) ----
    def share_statistics(self, reduce_mean: Callable[[Tensor], Optional[float]]) -> None:
        """Data-parallel runs: ``reduce_mean(values)`` returns the mean of ``values`` over every process
        (a collective). An estimator whose state follows the batch (HA-DW's anchor) keeps it and uses it,
        so each process moves that state as one process would on the global batch."""

    def join_empty(self) -> None:
        """A process with no rows this step still joins the collectives :meth:`share_statistics` set up
        (the other processes would wait for it), and moves its state with theirs."""

    def metrics(self) -> dict[str, float]:
        """The estimator's own diagnostics of the last batch, logged as they are (e.g. ``adv/hadw_anchor``)."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, level={self.level!r}, config={self.config})"


DEFAULT_GAMMA = 0.95  # the discount of derived step returns: the default of the ``gamma`` option they add

# inputs an estimator function may name that are not read as they are: derived when the batch lacks them
_DERIVED = {"step_returns": "returns", "episode_rewards": "episode"}
_FIELDS = frozenset(f.name for f in dataclasses.fields(AdvantageBatch))


@dataclass(frozen=True)
class Binding:
    """How a registered function reads a batch, read once from its signature at registration.

    ``inputs``: the parameters before ``*`` in order, each ``(name, required)``; ``options``: the
    function's keyword options and their defaults; ``switches``: option -> the optional input it turns on.
    """

    inputs: tuple[tuple[str, bool], ...]
    options: tuple[str, ...]
    switches: Mapping[str, str]

    @classmethod
    def of(cls, fn: Callable[..., Any], switches: Mapping[str, str]) -> "Binding":
        inputs, options = [], []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{fn.__name__}: registered functions take named inputs and options, "
                                "not *args/**kwargs")
            if p.kind == p.KEYWORD_ONLY:
                if p.default is p.empty:
                    raise TypeError(f"{fn.__name__}: option {p.name!r} needs a default")
                options.append(p.name)
                continue
            if p.name != "batch" and p.name not in _FIELDS and p.name not in _DERIVED:
                raise TypeError(f"{fn.__name__}: input {p.name!r} is not an AdvantageBatch field "
                                f"(nor {sorted(_DERIVED)}); options go after '*'")
            if p.default is not p.empty and p.default is not None:
                raise TypeError(f"{fn.__name__}: optional input {p.name!r} must default to None")
            inputs.append((p.name, p.default is p.empty))
        optional = {n for n, req in inputs if not req}
        for opt, inp in switches.items():
            if inp not in optional:
                raise TypeError(f"{fn.__name__}: switch {opt!r} must turn on an optional input, not {inp!r}")
        for n, req in inputs:
            if not req and n in _DERIVED and n not in switches.values():
                raise TypeError(f"{fn.__name__}: optional derived input {n!r} needs a switch option")
        if any(n == "batch" for n, _ in inputs) and len(inputs) > 1:
            raise TypeError(f"{fn.__name__}: a function that takes the whole 'batch' takes no other input")
        return cls(tuple(inputs), tuple(options), dict(switches))

    def defaults(self, fn: Callable[..., Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The entry's options: the function's, ``gamma`` when it reads derived returns, the switches."""
        params = inspect.signature(fn).parameters
        out = {n: params[n].default for n in self.options}
        if any(n == "step_returns" for n, _ in self.inputs):
            if "gamma" in out:
                raise TypeError(f"{fn.__name__}: 'gamma' is the option of the derived step_returns")
            out["gamma"] = DEFAULT_GAMMA
        for opt in self.switches:
            out[opt] = False
        unknown = set(overrides) - set(out)
        if unknown:
            raise TypeError(f"{fn.__name__}: defaults for unknown option(s) {sorted(unknown)}")
        return {**out, **overrides}

    def fields(self) -> tuple[str, ...]:
        """The batch fields a call needs as they are: ``rewards`` and the required plain inputs."""
        plain = [n for n, req in self.inputs if req and n not in _DERIVED and n not in ("batch", "gather")]
        return ("rewards", *[n for n in plain if n != "rewards"])

    def derived(self) -> tuple[str, ...]:
        return tuple(_DERIVED[n] for n, req in self.inputs if req and n in _DERIVED)

    def call(self, fn: Callable[..., Tensor], batch: "AdvantageBatch", config: Mapping[str, Any]) -> Tensor:
        args = []
        for name, required in self.inputs:
            if name == "batch":
                args.append(batch)
            elif name == "step_returns":
                args.append(batch_returns(batch, config["gamma"]))
            elif name == "episode_rewards":
                on = required or any(config[o] for o, i in self.switches.items() if i == name)
                args.append(batch_episode(batch) if on else None)
            else:
                args.append(getattr(batch, name))
        return fn(*args, **{k: config[k] for k in self.options})


class FunctionEstimator(Estimator):
    """A stateless estimator defined by one function (see :func:`register_estimator`): ``binding``
    reads its inputs from the batch; ``defaults`` are its options."""

    def __init__(self, fn: Callable[..., Tensor], *, name: str, level: str, requires: frozenset,
                 fields: tuple, derived: tuple, defaults: dict[str, Any], binding: Binding,
                 batch_wide: bool = False, **config: Any) -> None:
        self.fn = fn
        self.binding = binding
        self.batch_wide = batch_wide
        self.name, self.level, self.requires = name, level, requires
        self.fields, self.derived, self.defaults = fields, derived, defaults
        super().__init__(**config)

    def compute(self, batch: AdvantageBatch, **config: Any) -> Tensor:
        return self.binding.call(self.fn, batch, config)


_REGISTRY: dict[str, Callable[..., Estimator]] = {}


def register_estimator(
    name: str,
    factory: Optional[Callable[..., Estimator]] = None,
    *,
    level: str = "trajectory",
    requires: Iterable[str] = (),
    defaults: Optional[Mapping[str, Any]] = None,
    switches: Optional[Mapping[str, str]] = None,
    fields: Iterable[str] = (),
    overwrite: bool = False,
) -> Any:
    """Register an estimator under ``name`` (lower-case, no ``+``).

    As a decorator on the estimator's pure function (verl's ``register_adv_est`` shape): the signature
    says what it reads and which options it has (see the module docstring), so there is no second list
    to keep in step; ``defaults`` overrides option defaults (a variant under another name),
    ``switches`` adds boolean options that turn on an optional derived input, ``fields`` adds batch
    fields to require (for a function that takes the whole ``batch``).  As a call
    ``register_estimator(name, factory)``: ``factory(**config) -> Estimator``, usually an
    :class:`Estimator` subclass (for estimators with state).  Either way the decorated object is
    returned unchanged, so decorators stack and the function stays callable on its own.
    """
    if level not in ("trajectory", "step"):
        raise ValueError(f"level must be 'trajectory' or 'step', got {level!r}")

    def add(obj: Any) -> Any:
        key = _check_key(name, _REGISTRY, "estimator", overwrite)
        if not callable(obj):
            raise TypeError("factory must be callable")
        if factory is not None or (isinstance(obj, type) and issubclass(obj, Estimator)):
            _REGISTRY[key] = obj  # a class or a plain factory
            return obj
        binding = Binding.of(obj, switches or {})
        extra = tuple(f for f in fields if f not in binding.fields())
        bad = set(extra) - _FIELDS
        if bad:
            raise ValueError(f"fields must be AdvantageBatch fields, got {sorted(bad)}")
        spec = dict(name=key, level=level, requires=frozenset(requires), fields=binding.fields() + extra,
                    derived=binding.derived(), defaults=binding.defaults(obj, defaults or {}),
                    binding=binding, batch_wide=any(n == "gather" for n, _ in binding.inputs))

        def make(**config: Any) -> Estimator:
            return FunctionEstimator(obj, **spec, **config)

        make.__doc__ = obj.__doc__
        _REGISTRY[key] = make
        return obj

    if factory is not None:
        add(factory)
        return None
    return add


def list_estimators() -> list[str]:
    return sorted(_REGISTRY)


# --------------------------------------------------------------------------- modifiers


class EstimatorModifier(Estimator):
    """An estimator wrapped by a modifier (``"<inner>+<suffix>"``).

    Subclasses set ``suffix`` and ``defaults`` (the modifier's own options), and implement
    ``modify(batch, advantages) -> advantages``.  The wrapper presents the inner estimator's
    level, metadata, fields and options, so it is used exactly like the inner estimator; its
    ``state_dict`` nests the inner one under ``"inner"``.
    """

    suffix: str = ""
    needs: tuple = ()  # batch fields the modifier reads itself, required on top of the inner estimator's

    def __init__(self, inner: Estimator, **options: Any) -> None:
        unknown = set(options) - set(type(self).defaults)
        if unknown:
            raise UnknownOptionError(
                f"+{self.suffix}: unknown option(s) {sorted(unknown)}; valid: {sorted(type(self).defaults)}"
            )
        self.options = {**type(self).defaults, **options}
        self.inner = inner
        self.name = f"{inner.name}+{self.suffix}"
        self.level = inner.level
        self.requires = inner.requires
        self.fields = inner.fields + tuple(f for f in self.needs if f not in inner.fields)
        self.derived = inner.derived
        self.batch_wide = inner.batch_wide
        self.defaults = inner.defaults  # per-call options are the inner estimator's
        super().__init__(**inner.config)

    def check(self, batch: AdvantageBatch) -> None:
        self.inner.check(batch)
        missing = [f for f in self.needs if getattr(batch, f, None) is None]
        if missing:
            raise ValueError(f"estimator {self.name!r} needs batch field(s) {missing}")

    def compute(self, batch: AdvantageBatch, **config: Any) -> Tensor:
        return self.modify(batch, self.inner.compute(batch, **config))

    @abc.abstractmethod
    def modify(self, batch: AdvantageBatch, advantages: Tensor) -> Tensor:
        """The modified advantages."""

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state.get("inner", {}))

    def share_statistics(self, reduce_mean: Callable[[Tensor], Optional[float]]) -> None:
        self.inner.share_statistics(reduce_mean)

    def join_empty(self) -> None:
        self.inner.join_empty()

    def metrics(self) -> dict[str, float]:
        return self.inner.metrics()


_MODIFIERS: dict[str, type[EstimatorModifier]] = {}


def register_modifier(name: str, *, overwrite: bool = False) -> Callable[[type], type]:
    """Decorator: register an :class:`EstimatorModifier` subclass as ``"+<name>"``."""

    def add(cls: type) -> type:
        key = _check_key(name, _MODIFIERS, "modifier", overwrite)
        if not (isinstance(cls, type) and issubclass(cls, EstimatorModifier)):
            raise TypeError("a modifier must be an EstimatorModifier subclass")
        cls.suffix = key
        _MODIFIERS[key] = cls
        return cls

    return add


def list_modifiers() -> list[str]:
    return sorted(_MODIFIERS)


def get_estimator(name: str, **config: Any) -> Estimator:
    """Build an estimator by name; ``"<name>+<modifier>[+<modifier>...]"`` wraps it, left to right.

    A modifier's options go in ``<modifier>={...}`` or as ``<modifier>_<option>=...`` keywords
    (``hadw_lam``, ``hadw_anchor``, ...); the rest configure the base estimator.
    """
    parts = [p.strip().lower() for p in str(name).split("+")]
    base, mods = parts[0], parts[1:]
    if base not in _REGISTRY:
        raise UnknownNameError(f"unknown estimator {base!r}; registered: {list_estimators()}")
    bad = [m for m in mods if m not in _MODIFIERS]
    if bad:
        raise UnknownNameError(f"unknown estimator modifier(s) {['+' + m for m in bad]} in {name!r}; "
                               f"registered modifiers: {['+' + m for m in list_modifiers()]}")
    if len(set(mods)) != len(mods):
        raise UnknownNameError(f"estimator modifier repeated in {name!r}")
    mod_cfg: dict[str, dict[str, Any]] = {}
    for m in _MODIFIERS:
        cfg = dict(config.pop(m, None) or {})
        for k in [k for k in config if k.startswith(m + "_")]:
            cfg[k[len(m) + 1:]] = config.pop(k)
        if cfg and m not in mods:
            raise UnknownOptionError(f"options {sorted(cfg)} of modifier '+{m}' given, but {name!r} "
                                     f"has no '+{m}'")
        mod_cfg[m] = cfg
    est = _REGISTRY[base](**config)
    for m in mods:
        est = _MODIFIERS[m](est, **mod_cfg[m])
    return est


# --------------------------------------------------------------------------- policy losses


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss with its options: ``loss(x: PGInputs) -> (loss, stats)``.

    Two facts about a loss that code around it needs, declared at registration instead of matched by name:
    ``per_sequence`` -- the loss averages over its sequences whatever the token aggregation (GMPO's
    geometric mean), so a trainer that splits a mini-batch into micro-batches weights each by its share
    of sequences, not of tokens; ``ratio`` -- ``"token"`` or ``"sequence"``: the importance ratio the loss
    uses, which the KL correction (``kl_is_correction``) multiplies the per-token KL by (GSPO: sequence).
    """

    name: str
    fn: Callable[..., Any]
    defaults: dict[str, Any]
    options: dict[str, Any]
    per_sequence: bool = False
    ratio: str = "token"

    def __call__(self, x: Any, **overrides: Any) -> Any:
        _check_loss_options(self.name, self.defaults, overrides)
        return self.fn(x, **{**self.options, **overrides})


_LOSSES: dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, Any]]] = {}  # fn, options, metadata
_LOSS_ALIASES: dict[str, str] = {}


def _check_loss_options(name: str, defaults: dict[str, Any], options: dict[str, Any]) -> None:
    unknown = set(options) - set(defaults)
    if unknown:
        raise UnknownOptionError(f"policy loss {name!r}: unknown option(s) {sorted(unknown)}; "
                                 f"valid: {sorted(defaults)}")


def register_policy_loss(
    name: str, *, aliases: Iterable[str] = (), overwrite: bool = False, per_sequence: bool = False,
    ratio: str = "token",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator (verl's ``register_policy_loss`` shape) on ``fn(x, *, option=default, ...)``.

    ``x`` is a :class:`stratagym.algorithms.losses.PGInputs` (log-probs, advantages, mask, and the
    aggregation to use); the function returns ``(loss, stats)``.  Its keyword options are the
    loss's options.  ``aliases`` are extra names for the same entry (verl's and TRL's names).
    ``per_sequence`` and ``ratio``: see :class:`PolicyLoss`.
    """
    if ratio not in ("token", "sequence"):
        raise ValueError(f"policy loss {name!r}: ratio must be 'token' or 'sequence', got {ratio!r}")

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        key = _check_key(name, _LOSSES, "policy loss", overwrite)
        _LOSSES[key] = (fn, _options_of(fn, 1), {"per_sequence": bool(per_sequence), "ratio": ratio})
        for a in aliases:
            _LOSS_ALIASES[a.lower()] = key
        return fn

    return add


def list_policy_losses() -> list[str]:
    return sorted(_LOSSES)


def get_policy_loss(name: str, **options: Any) -> PolicyLoss:
    """A registered policy loss by name (or alias) with its options checked and defaults filled (the
    built-ins register when :mod:`stratagym.algorithms.losses` is imported, which the package does)."""
    key = str(name).lower()
    key = _LOSS_ALIASES.get(key, key)
    if key not in _LOSSES:
        raise UnknownNameError(f"unknown policy loss {name!r}; registered: {list_policy_losses()}")
    fn, defaults, meta = _LOSSES[key]
    _check_loss_options(key, defaults, options)
    return PolicyLoss(key, fn, defaults, {**defaults, **options}, **meta)
