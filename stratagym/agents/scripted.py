"""Scripted agents that work on any stratagym env."""

from __future__ import annotations

from typing import Any, Sequence

from stratagym.envs.random_agent import RandomAgent  # noqa: F401  (re-exported: agents' public name)


class ScriptedPolicy:
    """Puts a scripted :class:`~stratagym.agents.base.Agent` behind the :class:`Policy` ``generate``
    interface, so scripted agents play through the same rollout loop as LLM policies.

    Each request's :class:`EpisodeKey` is handed to ``agent.act``, so stateful agents key their state by
    episode. It cannot be trained: there is nothing to score.
    """

    model = None

    def __init__(self, agent: Any, *, reasons: bool = False):
        self.agent = agent
        #: ask ``agent.act_with_reasons`` instead of ``act``; each generation's payload is ``{"reason": ...}``
        self.reasons = bool(reasons)

    def generate(self, requests: Sequence[Any], *, greedy: bool = False) -> list[Any]:
        from stratagym.agents.policy import Generation  # lazy: torch; `stratagym --help` imports this module

        if not requests:
            return []
        if any(r.episode is None for r in requests):
            # A key made up from the batch position would bring back the bug the key exists to prevent.
            raise ValueError("ScriptedPolicy needs GenerationRequest.episode on every request (the rollout collector sets it)")
        episodes = [r.episode for r in requests]
        observations, infos = [r.observation for r in requests], [r.info for r in requests]
        if self.reasons:
            reasoned = self.agent.act_with_reasons(observations, infos, episodes)
            actions, payloads = [a for _, a in reasoned], [{"reason": str(why)} for why, _ in reasoned]
        else:
            actions = self.agent.act(observations, infos, episodes)
            payloads = [None] * len(actions)
        if len(actions) != len(requests):
            method = "act_with_reasons" if self.reasons else "act"
            raise RuntimeError(f"{type(self.agent).__name__}.{method} returned {len(actions)} actions for {len(requests)} episodes")
        return [Generation(action=str(a), payload=p, text=str(a)) for a, p in zip(actions, payloads)]

    def eval(self) -> "ScriptedPolicy":
        return self

    def train(self, mode: bool = True) -> "ScriptedPolicy":
        return self
