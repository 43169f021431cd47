"""The scripted agent every env has: uniform over the admissible actions (or the env's own random action).

It lives in the env layer because every env declares it implicitly (``stratagym envs check``, the registry's
``random`` agent), and the env layer may not import the agents layer above it.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from stratagym.envs.episode import EpisodeKey, EpisodeRngs

__all__ = ["RandomAgent"]


class RandomAgent:
    """Picks uniformly among the admissible actions; where an env lists none it asks the env for a
    random action (``env.random_action(rng, info)``, or ``env.random_action(rng)``) or, failing that,
    samples the action space."""

    def __init__(self, env: gym.Env | None = None, *, seed: int = 0):
        self.env = env.unwrapped if env is not None else None
        self.rngs = EpisodeRngs(seed)
        sampler = getattr(self.env, "random_action", None)
        self._random_takes_info = sampler is not None and len(inspect.signature(sampler).parameters) >= 2

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        return [self._one(info, self.rngs.get(episode, info)) for episode, info in zip(episodes, infos)]

    def _one(self, info: dict[str, Any], rng: np.random.Generator) -> str:
        admissible = info.get("admissible_actions")
        if admissible:
            return str(admissible[int(rng.integers(len(admissible)))])
        if self.env is not None and hasattr(self.env, "random_action"):
            # One agent acts for a batch of envs: pass the episode's info so the env can use its task.
            if self._random_takes_info:
                return str(self.env.random_action(rng, info))
            return str(self.env.random_action(rng))
        if self.env is not None:
            self.env.action_space.seed(int(rng.integers(2**31)))
            return str(self.env.action_space.sample())
        return ""
