"""Agents: LLM policies (prompting, memory, action parsing, generation backends) and scripted agents.

Everything that acts plays through one rollout loop (:mod:`stratagym.training.rollout`) as a
:class:`stratagym.agents.policy.Policy`: ``generate(requests)`` over all live episodes at once (so LLM
policies batch generation), each request carrying the episode's key and history. Trainable policies
also re-score their samples (``sequence_log_probs``). Scripted agents keep the simpler batched
:class:`stratagym.agents.base.Agent` interface (``act(observations, infos, episodes)``) and play
through :class:`~stratagym.agents.scripted.ScriptedPolicy`.

The LLM classes import torch/transformers, so they are loaded on first access.
"""

from typing import Any

from stratagym.agents.base import Agent
from stratagym.agents.scripted import RandomAgent, ScriptedPolicy

__all__ = [
    "Agent",
    "RandomAgent",
    "Policy",
    "ScriptedPolicy",
    "Generation",
    "GenerationRequest",
    "SequenceLogProbs",
    "Turn",
    "LLMConfig",
    "LLMPolicy",
]

_LAZY = {
    "Policy": "stratagym.agents.policy",
    "Generation": "stratagym.agents.policy",
    "GenerationRequest": "stratagym.agents.policy",
    "SequenceLogProbs": "stratagym.agents.policy",
    "Turn": "stratagym.agents.policy",
    "LLMConfig": "stratagym.agents.llm",
    "LLMPolicy": "stratagym.agents.llm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'stratagym.agents' has no attribute {name!r}")
