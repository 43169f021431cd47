"""Scripted agents for the synthetic envs (built as ``Class(env, seed=0)``, batched ``act``)."""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from stratagym.envs.core import EpisodeKey, EpisodeRngs


class OracleAgent:
    """Plays the optimal policy: the action the env puts in ``info["oracle_action"]``.

    One instance acts for a batch of envs, so it cannot read any single env's state; it asks the envs
    (through ``env_kwargs``) to report the optimal action in ``info``.
    """

    env_kwargs = {"oracle_info": True}

    def __init__(self, env: gym.Env | None = None, *, seed: int = 0):
        pass

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        out = []
        for info in infos:
            action = info.get("oracle_action")
            if action is None:
                raise ValueError("OracleAgent needs envs made with oracle_info=True (gym.make(id, oracle_info=True))")
            out.append(str(action))
        return out


class NoSearchAgent:
    """SearchStrata baseline: answers at once, uniformly among the candidates (stratum 0, success 1/n).

    Each episode draws from its own generator (seeded by the agent seed and the episode key), so the
    answers do not depend on how episodes are batched.
    """

    def __init__(self, env: gym.Env | None = None, *, seed: int = 0):
        self.rngs = EpisodeRngs(seed)

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        out = []
        for info, episode in zip(infos, episodes):
            rng = self.rngs.get(episode, info)
            answers = [a for a in info.get("admissible_actions", []) if a.startswith("answer[")]
            out.append(answers[int(rng.integers(len(answers)))] if answers else "answer[unknown]")
        return out
