"""Who an episode is (:class:`EpisodeKey`) and per-episode random generators (:class:`EpisodeRngs`).

Agents key their per-episode state by these, never by a position in the batch. Below
:mod:`stratagym.envs.core` (which re-exports both), so agents and the registry's random agent use them
without importing the env base class.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from stratagym.envs.hashing import stable_hash

__all__ = ["EpisodeKey", "EpisodeRngs"]


class EpisodeKey(NamedTuple):
    """Who an episode is: its task, its reset seed and which copy of a group it is.

    The rollout loop hands one key per live episode to every agent call, so an agent that keeps state
    per episode (an oracle's plan, a random agent's generator) keys it by episode, never by position in
    the batch: positions shift when a batch-mate finishes. The key is made of what defines the episode,
    not of incidental choices (batch size, worker count, resume point), so an agent whose randomness
    comes from :meth:`rng_seed` acts the same however the episodes are batched.
    """

    task_id: str
    seed: int | None
    copy: int = 0

    def rng_seed(self, agent_seed: int = 0) -> int:
        """A 63-bit seed for this episode's own random generator, stable across processes."""
        return stable_hash(f"{int(agent_seed)}|{self.task_id}|{self.seed}|{self.copy}")


class EpisodeRngs:
    """One numpy generator per episode, for agents that act at random.

    A single generator shared by a batch would hand out draws in batch order, so an episode's actions
    would depend on which episodes happen to share its batch. Here each episode gets a generator seeded
    from ``(agent seed, episode key)`` when it starts (``info["step"] == 0``, or first seen).
    """

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._rngs: dict[EpisodeKey, np.random.Generator] = {}

    def get(self, episode: EpisodeKey, info: dict[str, Any]) -> np.random.Generator:
        if episode not in self._rngs or int(info.get("step", 0)) == 0:
            self._rngs[episode] = np.random.default_rng(episode.rng_seed(self.seed))
        return self._rngs[episode]
