"""Scripted agents that work on any stratagym env."""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from stratagym.envs.core import EpisodeKey, EpisodeRngs


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


class ScriptedPolicy:
    """Puts a scripted :class:`~stratagym.agents.base.Agent` behind the :class:`Policy` ``generate``
    interface, so scripted agents play through the same rollout loop as LLM policies.

    Each request's :class:`EpisodeKey` is handed to ``agent.act``, so stateful agents key their state by
    episode. It cannot be trained: there is nothing to score.
    """

    model = None

    def __init__(self, agent: Any):
        self.agent = agent

    def generate(self, requests: Sequence[Any], *, greedy: bool = False) -> list[Any]:
        from stratagym.agents.policy import Generation

        if not requests:
            return []
        if any(r.episode is None for r in requests):
            # A key made up from the batch position would bring back the bug the key exists to prevent.
            raise ValueError("ScriptedPolicy needs GenerationRequest.episode on every request (the rollout collector sets it)")
        episodes = [r.episode for r in requests]
        actions = self.agent.act([r.observation for r in requests], [r.info for r in requests], episodes)
        if len(actions) != len(requests):
            raise RuntimeError(f"{type(self.agent).__name__}.act returned {len(actions)} actions for {len(requests)} episodes")
        return [Generation(action=str(a), payload=None, text=str(a)) for a in actions]

    def eval(self) -> "ScriptedPolicy":
        return self

    def train(self, mode: bool = True) -> "ScriptedPolicy":
        return self
