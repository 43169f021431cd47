"""Shared plumbing of the synthetic envs: deterministic task tables, action parsing, oracle info."""

from __future__ import annotations

import abc

import re
from typing import Any, Sequence

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


def check_positive(name: str, value: int, minimum: int = 1) -> int:
    if int(value) != value or int(value) < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class SyntheticEnv(TextEnv):
    """Base of the synthetic envs: a fixed task table, cheap admissible actions, optional oracle info.

    ``oracle_info=True`` adds ``info["oracle_action"]`` (an optimal action now) so the batched
    :class:`~stratagym.envs.synthetic.agents.OracleAgent` can act for many envs at once.
    """

    max_observation_chars = 2048
    max_action_chars = 512
    #: the tools protocol (``protocol="tools"``): one tool, ``act(action)`` with a listed action
    tool_set = "stratagym.envs.synthetic.tools:TOOLS"

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
