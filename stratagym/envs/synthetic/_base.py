"""Shared plumbing of the synthetic envs: deterministic task tables, action parsing, oracle info."""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from stratagym.envs.core import ConfigError, StepResult, TextEnv

_BRACKET = re.compile(r"^\s*([a-z_]+)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


def parse_bracket(action: str) -> tuple[str, str] | None:
    """``"search[foo bar]"`` -> ``("search", "foo bar")``; None when the text is not of that form."""
    m = _BRACKET.match(action)
    if m is None:
        return None
    return m.group(1).lower(), " ".join(m.group(2).split())


def canonical(action: str) -> str:
    """Lower-case, whitespace-collapsed form used to match an action against the admissible list."""
    return " ".join(action.lower().split())


def task_rng(data_seed: int, index: int) -> np.random.Generator:
    """The generator that builds task ``index``: independent of every other task and of reset seeds."""
    return np.random.default_rng([int(data_seed), int(index), 0x5EED])


@dataclass(frozen=True)
class IntOption:
    """An integer constructor option in ``[minimum, maximum]`` (no maximum: unbounded above); an integral
    float such as ``3.0`` counts, a bool, a string or ``2.5`` does not."""

    minimum: int = 1
    maximum: int | None = None

    def check(self, name: str, value: Any) -> int:
        ok = (not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
              and float(value).is_integer())
        if ok:
            number = int(value)
            ok = number >= self.minimum and (self.maximum is None or number <= self.maximum)
        if not ok:
            bounds = f">= {self.minimum}" if self.maximum is None else f"in [{self.minimum}, {self.maximum}]"
            raise ConfigError(f"{name} must be an integer {bounds}, got {value!r}")
        return number


@dataclass(frozen=True)
class RealOption:
    """A real constructor option in ``[low, high]``."""

    low: float
    high: float

    def check(self, name: str, value: Any) -> float:
        ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
        if not (ok and self.low <= float(value) <= self.high):  # NaN fails the comparison
            raise ConfigError(f"{name} must be a number in [{self.low:g}, {self.high:g}], got {value!r}")
        return float(value)


#: A rule between options: the problem with the checked ``values`` (a message naming the fix), or None.
Constraint = Callable[[Mapping[str, Any]], "str | None"]


class SyntheticEnv(TextEnv):
    """Base of the synthetic envs: a fixed task table, cheap admissible actions, optional oracle info.

    ``oracle_info=True`` adds ``info["oracle_action"]`` (an optimal action now) so the batched
    :class:`~stratagym.envs.synthetic.agents.OracleAgent` can act for many envs at once.
    """

    max_observation_chars = 2048
    max_action_chars = 512
    #: the tools protocol (``protocol="tools"``): one tool, ``act(action)`` with a listed action
    tool_set = "stratagym.envs.synthetic.tools:TOOLS"

    #: The env's numeric constructor options and their bounds, and the rules between them: checked by
    #: :meth:`check_options`, the one validation path of every synthetic env, before it builds anything.
    options: ClassVar[Mapping[str, IntOption | RealOption]] = {}
    constraints: ClassVar[tuple[Constraint, ...]] = ()

    @classmethod
    def check_options(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """The declared :attr:`options` of ``given`` (the constructor's ``locals()``) checked and
        normalised (ints as ``int``, reals as ``float``), then the :attr:`constraints`; a bad value is a
        :class:`~stratagym.envs.core.ConfigError` naming the option and its bounds."""
        values = {name: rule.check(name, given[name]) for name, rule in cls.options.items()}
        for constraint in cls.constraints:
            problem = constraint(values)
            if problem:
                raise ConfigError(problem)
        return values

    def __init__(self, *, oracle_info: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.oracle_info = bool(oracle_info)
        self._ids: tuple[str, ...] = ()

    def _set_tasks(self, ids: Sequence[str]) -> None:
        self._ids = tuple(ids)

    def task_ids(self) -> Sequence[str]:
        return self._ids

    def oracle_action(self) -> str | None:  # pragma: no cover - overridden
        return None

    def _extra(self, **extra: Any) -> dict[str, Any]:
        if self.oracle_info:
            extra["oracle_action"] = self.oracle_action()
        return extra

    def invalid_action_result(self, problem: str) -> StepResult:
        return self._invalid(f"Invalid action: {problem}.")

    @abc.abstractmethod
    def _invalid(self, message: str) -> StepResult:
        """The env's own invalid step (its observation and info) for ``message``."""
