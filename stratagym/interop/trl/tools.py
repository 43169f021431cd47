"""stratagym envs as TRL ``environment_factory`` classes (``GRPOTrainer(environment_factory=...)``, TRL >= 1.x).

TRL builds one instance per rollout, calls ``reset(**row)`` with the dataset row, exposes every public
method as a function-calling tool (its schema from the type hints and the docstring's ``Args:``), and
asks ``get_reward()`` once the rollout ends. TRL's docs warn that the G members of a GRPO group start from
different states unless ``reset`` derives the start from a shared key: here ``reset`` takes the row's
``task_id`` (and ``seed``) and passes them to the env's own ``reset(seed=, options={"task_id": ...})``, so
every member of a group starts from the same observation.

The classes are thin: each family's subclass (``trl/search_qa.py``, ``trl/alfworld.py``,
``trl/webshop.py``) only turns a tool call into the env's action text; the env does the rest (no copy of
its logic). ``last_info`` keeps stratagym's info schema (hashes, counts) for whoever wants the structure.
"""

from __future__ import annotations

from typing import Any

import stratagym  # noqa: F401  (registers the envs)

__all__ = ["TRLToolEnv"]

EPISODE_OVER = "The episode is over; no more actions are taken."


class TRLToolEnv:
    """Base of the TRL environment classes: one gymnasium env, reset from the dataset row, reward summed.

    Subclasses set :attr:`env_id` and define public tool methods that call :meth:`_act` with action text.
    Methods whose names start with ``_`` are not tools; ``reset`` and ``get_reward`` are TRL's hooks.
    """

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}

    def __init__(self, **env_kwargs: Any):
        import gymnasium as gym

        self._env = gym.make(self.env_id, **{**self.env_kwargs, **env_kwargs})
        self._reward = 0.0
        self._done = True
        self.last_info: dict[str, Any] = {}

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start the row's task (``task_id``, ``seed``); return the first observation, which TRL appends to
        the prompt. Other row fields (the prompt itself, answers for reward functions) are ignored here."""
        options = {"task_id": str(task_id)} if task_id is not None else None
        observation, info = self._env.reset(seed=None if seed is None else int(seed), options=options)
        self._reward, self._done, self.last_info = 0.0, False, info
        return observation

    def get_reward(self) -> float:
        """The env's own reward, summed over the rollout (EM for QA, won for ALFWorld, score for WebShop)."""
        return float(self._reward)

    def _act(self, action: str) -> str:
        if self._done:
            return EPISODE_OVER
        observation, reward, terminated, truncated, info = self._env.step(action)
        self._reward += float(reward)
        self._done = bool(terminated or truncated)
        self.last_info = info
        return observation

    def _close(self) -> None:
        self._env.close()
