"""Scripted ALFWorld agents: the PDDL planner expert, alfworld's hand-coded expert and the searching expert.

One agent instance acts for a whole batch of envs, so it cannot hold any env's engine; instead
each agent class declares ``env_kwargs`` asking its envs (via ``gymnasium.make(..., **env_kwargs)``,
see :func:`stratagym.envs.registry.agent_env_kwargs`) to compute that expert's next command and put
it in ``info["expert_action"]``. The expert state lives with the engine, in whatever process runs
the env (vector-env workers included).
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym

from stratagym.envs.episode import EpisodeKey
from stratagym.errors import ConfigError

__all__ = ["PlannerExpertAgent", "HandCodedExpertAgent", "SearchingExpertAgent"]


class _ExpertAgent:
    expert = ""
    env_kwargs: dict[str, Any] = {}

    def __init__(self, env: gym.Env | None = None, *, seed: int = 0):
        self.env = env.unwrapped if env is not None else None
        self.seed = seed

    def act(self, observations: Sequence[str], infos: Sequence[dict[str, Any]], episodes: Sequence[EpisodeKey]) -> list[str]:
        actions = []
        for info in infos:
            action = info.get("expert_action")
            if action is None:
                raise ConfigError(
                    f"{type(self).__name__} needs info['expert_action']: make its envs with "
                    f"gymnasium.make('stratagym/ALFWorld-v0', expert={self.expert!r}) "
                    "(stratagym.envs.registry.agent_env_kwargs gives these kwargs)"
                )
            actions.append(str(action))
        return actions


class PlannerExpertAgent(_ExpertAgent):
    """Follows fast-downward's optimal plan (ALFWorld's "planner" expert): wins every solvable game."""

    expert = "planner"
    env_kwargs = {"expert": "planner"}


class HandCodedExpertAgent(_ExpertAgent):
    """alfworld's hand-coded heuristic expert (``HandCodedTWAgent``): searches receptacles, no plan.

    Not guaranteed to win (it gives up, or loops on some pick-two layouts); its suggestions are
    reproducible per (game, reset seed).
    """

    expert = "handcoded"
    env_kwargs = {"expert": "handcoded"}


class SearchingExpertAgent(_ExpertAgent):
    """The planner held to what the agent has seen (:mod:`stratagym.envs.alfworld.searcher`): it explores
    receptacles, likeliest first by the train games' location prior, until it has seen the objects the task
    needs, then plans on them. The demonstrator for cloning: unlike the planner, every command it gives
    follows from the transcript."""

    expert = "searcher"
    env_kwargs = {"expert": "searcher"}

    def act_with_reasons(self, observations: Sequence[str], infos: Sequence[dict[str, Any]],
                         episodes: Sequence[EpisodeKey]) -> list[tuple[str, str]]:
        """``(reason, action)`` per episode: :meth:`act`'s command and the expert's reason for it
        (``info["expert_reason"]``: what the task needs, what is still to be found, the steps left), the
        think text of demonstrations collected with ``demos.reasons``."""
        actions = self.act(observations, infos, episodes)
        return [(str(info.get("expert_reason") or ""), action) for info, action in zip(infos, actions)]
