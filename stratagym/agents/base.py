"""The scripted-agent interface: batched, with the identity of every episode in the batch."""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from stratagym.envs.episode import EpisodeKey

__all__ = ["Agent", "EpisodeKey"]


@runtime_checkable
class Agent(Protocol):
    """A batched scripted policy over text envs (oracles, planners, random baselines).

    ``act`` receives, for each live episode, its current observation, its ``info`` and its
    :class:`~stratagym.envs.core.EpisodeKey`, and returns one action string per episode. The batch
    holds only the live episodes, so position i is *not* the same episode from one call to the next:
    an agent that keeps state per episode keys it by ``episodes[i]``. An episode starts when its
    ``info["step"] == 0``. Scripted agents are constructed as ``Agent(env, seed=...)`` with one env of
    the batch so they can look tasks up by ``info["task_id"]``. The rollout loop
    (:class:`stratagym.training.rollout.RolloutCollector`) plays them through
    :class:`stratagym.agents.scripted.ScriptedPolicy`.
    """

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]: ...
