"""Registries: advantage estimators, estimator modifiers and policy losses, by name.

Shaped like verl's ``register_adv_est`` / ``register_policy_loss`` (``verl/trainer/ppo/core_algos.py``):
one decorated definition per estimator, per modifier and per loss, and a lookup by name.  The
options of each entry are the keyword-only parameters of its function, with their defaults, so an
entry's option list cannot drift from its code; a bad name or option raises :class:`RegistryError`
(a :class:`~stratagym.errors.ConfigError`) that names the valid ones.

Estimators.  ``@register_estimator(name, level=..., requires=..., fields=..., derived=...)`` on
``fn(batch, *, option=default, ...) -> Tensor``.  ``level``: ``"trajectory"`` (one row per
trajectory) or ``"step"`` (one row per step); ``requires``: the env ``info`` metadata keys it needs
(e.g. ``{"search_count"}``), so a trainer can check an env before training; ``fields``: the
:class:`AdvantageBatch` fields it reads; ``derived``: ``"returns"`` and/or ``"episode"`` when it
reads per-step discounted returns or trajectory totals, which a batch either carries precomputed
or derives from ``traj`` and ``step`` (see :func:`batch_returns`, :func:`batch_episode`).
``register_estimator(name, factory)`` with an :class:`Estimator` subclass (or any factory) also
works, for estimators that keep state.

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
"""

from __future__ import annotations

import abc
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from torch import Tensor

from stratagym.errors import ConfigError

__all__ = [
    "AdvantageBatch",
    "Estimator",
    "EstimatorModifier",
    "FunctionEstimator",
    "HADWEstimator",
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
    from stratagym.algorithms.advantages import step_returns

    if batch.returns is not None:
        return batch.returns
    return step_returns(batch.rewards, batch.traj, batch.step, gamma=gamma)


def batch_episode(batch: AdvantageBatch) -> Tensor:
    """Per-step-row trajectory total: ``batch.episode_rewards`` if given, else summed per traj."""
    from stratagym.algorithms.advantages import episode_returns

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


class FunctionEstimator(Estimator):
    """A stateless estimator defined by one function ``fn(batch, **options)`` (see
    :func:`register_estimator`); ``defaults`` are the function's keyword options."""

    def __init__(self, fn: Callable[..., Tensor], *, name: str, level: str, requires: frozenset,
                 fields: tuple, derived: tuple, defaults: dict[str, Any], batch_wide: bool = False,
                 **config: Any) -> None:
        self.fn = fn
        self.batch_wide = batch_wide
        self.name, self.level, self.requires = name, level, requires
        self.fields, self.derived, self.defaults = fields, derived, defaults
        super().__init__(**config)

    def compute(self, batch: AdvantageBatch, **config: Any) -> Tensor:
        return self.fn(batch, **config)


_REGISTRY: dict[str, Callable[..., Estimator]] = {}


def register_estimator(
    name: str,
    factory: Optional[Callable[..., Estimator]] = None,
    *,
    level: str = "trajectory",
    requires: Iterable[str] = (),
    fields: Iterable[str] = ("rewards", "group"),
    derived: Iterable[str] = (),
    overwrite: bool = False,
    batch_wide: bool = False,
) -> Any:
    """Register an estimator under ``name`` (lower-case, no ``+``).

    As a decorator on a function ``fn(batch, *, option=default, ...) -> Tensor`` (verl's
    ``register_adv_est`` shape): the function's keyword options are the estimator's options, and
    ``level`` / ``requires`` / ``fields`` / ``derived`` describe it (see the module docstring);
    ``batch_wide``: it reads statistics of the whole batch through ``batch.gather`` (a data-parallel
    trainer then calls it on every process, one with no row too, so all join the collective).  As a
    call ``register_estimator(name, factory)``: ``factory(**config) -> Estimator``, usually an
    :class:`Estimator` subclass (for estimators with state).  Either way the decorated object is
    returned unchanged, so the function stays callable on its own.
    """
    if level not in ("trajectory", "step"):
        raise ValueError(f"level must be 'trajectory' or 'step', got {level!r}")
    bad = set(derived) - {"returns", "episode"}
    if bad:
        raise ValueError(f"derived may hold 'returns' and 'episode', got {sorted(bad)}")

    def add(obj: Any) -> Any:
        key = _check_key(name, _REGISTRY, "estimator", overwrite)
        if not callable(obj):
            raise TypeError("factory must be callable")
        if isinstance(obj, type) and issubclass(obj, Estimator):
            _REGISTRY[key] = obj
            return obj
        if factory is not None:  # a plain factory given by call
            _REGISTRY[key] = obj
            return obj
        defaults = _options_of(obj, 1)
        spec = dict(name=key, level=level, requires=frozenset(requires), fields=tuple(fields),
                    derived=tuple(derived), defaults=defaults, batch_wide=bool(batch_wide))

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
        self.fields = inner.fields
        self.derived = inner.derived
        self.batch_wide = inner.batch_wide
        self.defaults = inner.defaults  # per-call options are the inner estimator's
        super().__init__(**inner.config)

    def check(self, batch: AdvantageBatch) -> None:
        self.inner.check(batch)

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
    """A registered policy loss by name (or alias) with its options checked and defaults filled."""
    from stratagym.algorithms import losses as _losses  # noqa: F401  (registers the built-ins)

    key = str(name).lower()
    key = _LOSS_ALIASES.get(key, key)
    if key not in _LOSSES:
        raise UnknownNameError(f"unknown policy loss {name!r}; registered: {list_policy_losses()}")
    fn, defaults, meta = _LOSSES[key]
    _check_loss_options(key, defaults, options)
    return PolicyLoss(key, fn, defaults, {**defaults, **options}, **meta)


def __getattr__(name: str) -> Any:
    """``HADWEstimator`` is defined beside HA-DW in ``advantages`` (which imports this module)."""
    if name == "HADWEstimator":
        from stratagym.algorithms.advantages import HADWEstimator

        return HADWEstimator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the built-in estimators and the HA-DW modifier register themselves when advantages is imported
from stratagym.algorithms import advantages as _advantages  # noqa: E402,F401
