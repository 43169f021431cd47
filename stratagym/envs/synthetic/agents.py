"""Scripted agents for the synthetic envs (built as ``Class(env, seed=0)``, batched ``act``)."""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from stratagym.envs.episode import EpisodeKey, EpisodeRngs


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


class BlindDoorsAgent(OracleAgent):
    """CueCorridor/ValueCorridor demonstrator that knows the moves but not the rule: a lever drawn at random
    in each lever room, ``walk forward`` where that is the only move, and either door with probability 1/2
    at each fork, whatever the lamp.

    Cloning it teaches a language model the corridor's action format and which actions each room
    admits, and nothing about which door a lamp calls for (door and lamp are independent in its
    episodes), so an SFT policy from it starts at the uniform policy's success, ``0.5 ** segments``,
    and RL must learn the history-dependent choice itself: the start the HGPO vs GiGPO study needs.
    The lever is random too, not the oracle's fixed ``lever A``: copies of a group share the reset seed,
    hence which lever lights which lamp, so a clone that always pulled one lever would bring every copy
    to the fork under the same lamp, and the fork groups would never mix histories (HGPO's groups would
    equal GiGPO's). Each episode draws from its own generator, so the choices do not depend on batching.
    """

    _COIN = {"levers": ("pull lever A", "pull lever B"), "fork": ("go left", "go right")}

    def __init__(self, env: gym.Env | None = None, *, seed: int = 0):
        self.rngs = EpisodeRngs(seed)

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        oracle = super().act(observations, infos, episodes)
        out = []
        for action, info, episode in zip(oracle, infos, episodes):
            rng = self.rngs.get(episode, info)
            choices = self._COIN.get(str(info.get("phase")))
            out.append(choices[int(rng.integers(2))] if choices else action)
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
