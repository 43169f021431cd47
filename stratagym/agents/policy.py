"""The trainable-policy protocol: what the trainer needs from any policy (LLM or small neural scorer).

The trainer (:mod:`stratagym.training.trainer`) and the rollout collector
(:mod:`stratagym.training.rollout`) never look inside a policy. They only

1. ask it to act for a batch of live episodes -- :meth:`Policy.generate` takes one
   :class:`GenerationRequest` per live env (current observation, its ``info`` and the episode's history
   of earlier ``(observation, action)`` turns) and returns one :class:`Generation` per request: the
   action text sent to the env plus an **opaque payload** the policy will need later to score that
   same sample again;
2. ask it to re-score stored samples *with gradients* -- :meth:`Policy.sequence_log_probs` maps a list
   of payloads to a padded ``(B, T)`` log-prob matrix, a ``(B, T)`` mask and optionally a ``(B, T)``
   entropy matrix. The policy losses (:mod:`stratagym.algorithms.losses`) work on exactly these shapes;
3. optimise ``parameters()``, switch ``train()`` / ``eval()``, save and reload itself
   (``save_pretrained`` / ``from_pretrained``, safetensors), and give a frozen copy of itself
   (:meth:`Policy.frozen_copy`) that scores payloads for the KL term against the reference policy.

Two very different policies fit this shape:

* an **LLM policy** (:class:`stratagym.agents.llm.LLMPolicy`): the payload holds the prompt token ids,
  the response token ids and the sampling log-probs; ``T`` is the number of response tokens
  (right-padded across the batch);
* a **scorer policy** (e.g. a softmax over the admissible actions for the synthetic envs): the payload
  holds the candidate features and the chosen index; ``T = 1`` and the "log-prob" is
  ``log softmax(scores)[chosen]``.

Memory and prompting belong to the policy: the rollout passes the *whole* history of the episode
(cheap references to strings) and the policy keeps what it wants (e.g. the last K turns). The rollout
owns the episodes; the policy owns the model.

Distributed training: the trainer may replace :attr:`Policy.model` with the wrapper returned by
``accelerate.Accelerator.prepare`` (DDP/FSDP). ``sequence_log_probs`` must therefore run its forward
pass *through* ``self.model`` (so gradient synchronisation hooks fire), while ``generate`` and
``save_pretrained`` should use :func:`unwrap_model` to reach the underlying module.

Randomness: ``generate`` samples with torch's global generator (or its own seeded one); the trainer
seeds torch/numpy/python and checkpoints their states, which makes CPU runs resumable bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple, Optional, Protocol, Sequence, runtime_checkable

import torch

from stratagym.envs.core import EpisodeKey

__all__ = [
    "Turn",
    "GenerationRequest",
    "Generation",
    "SequenceLogProbs",
    "Policy",
    "unwrap_model",
    "pad_right",
]


@dataclass(frozen=True)
class Turn:
    """One earlier turn of an episode: the observation the agent saw and the action it then took."""

    observation: str
    action: str


@dataclass
class GenerationRequest:
    """What a policy sees for one live episode at one turn.

    ``history`` holds every earlier turn of the episode, oldest first (``history[0].observation`` is
    the episode's first observation, which usually states the task); the policy keeps the part it
    wants. ``env_id`` (e.g. ``"stratagym/SearchQA-v0"``) lets an LLM policy pick its prompt template.
    ``episode`` identifies the episode (task, seed, copy in the group): a policy that keeps state per
    episode keys it by ``episode``, never by position in the batch.
    """

    observation: str
    info: dict[str, Any]
    history: Sequence[Turn] = ()
    env_id: str = ""
    episode: Optional[EpisodeKey] = None


@dataclass
class Generation:
    """A policy's answer to one :class:`GenerationRequest`.

    ``action`` is the text sent to the env (after the policy's action parser); ``text`` is the raw
    model output (equal to ``action`` for a scorer). ``format_ok`` says the parser found a well-formed
    action (the trainer's format reward uses it). ``payload`` is opaque to everyone but the policy: it
    is given back to :meth:`Policy.sequence_log_probs`. ``num_tokens`` counts generated tokens (1 for a
    scorer) for throughput metrics. ``extra`` carries what a backend reports beside it (``finish_reason``;
    ``prompt_cut``, ``{"turns", "tokens"}``, when the prompt was cut to fit the model: the collector records
    it on the step).
    """

    action: str
    payload: Any
    text: str = ""
    format_ok: bool = True
    num_tokens: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


class SequenceLogProbs(NamedTuple):
    """Padded per-token log-probs of a batch of stored samples under the current parameters.

    ``logprobs``: float ``(B, T)``; ``mask``: bool ``(B, T)`` (True on real tokens); ``entropy``:
    float ``(B, T)`` or None when not requested/available. ``sampling_logprobs``: float ``(B, T)``
    log-probs recorded when the samples were generated (same padding), or None.
    """

    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy: Optional[torch.Tensor] = None
    sampling_logprobs: Optional[torch.Tensor] = None


@runtime_checkable
class Policy(Protocol):
    """A trainable batched policy over text envs (see the module docstring).

    Implementations: :class:`stratagym.agents.llm.LLMPolicy` (transformers; with the vLLM and OpenAI
    backends it generates elsewhere) and the synthetic-env scorer policy.
    """

    #: The trainable module (the trainer may swap in accelerate's wrapper; see the module docstring).
    model: torch.nn.Module

    def generate(self, requests: Sequence[GenerationRequest], *, greedy: bool = False) -> list[Generation]:
        """One :class:`Generation` per request, in order; a single batched call for all live envs."""
        ...

    def sequence_log_probs(self, payloads: Sequence[Any], *, with_entropy: bool = False) -> SequenceLogProbs:
        """Re-score stored samples with gradients (call under ``torch.no_grad()`` for old/ref log-probs)."""
        ...

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """Trainable parameters (for LoRA: the adapter's only)."""
        ...

    def train(self) -> Any: ...

    def eval(self) -> Any: ...

    def save_pretrained(self, directory: str) -> None:
        """Write the weights (safetensors) and everything ``from_pretrained`` needs into ``directory``."""
        ...

    @classmethod
    def from_pretrained(cls, directory: str, **kwargs: Any) -> "Policy": ...

    def frozen_copy(self) -> "Policy":
        """A frozen copy of the current policy (no gradients, eval mode) used as the KL reference."""
        ...


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module under DDP/accelerate wrappers (``.module``), or ``model`` itself."""
    while hasattr(model, "module") and isinstance(getattr(model, "module"), torch.nn.Module):
        model = model.module  # type: ignore[assignment]
    return model


def pad_right(rows: Sequence[torch.Tensor], value: float | int = 0, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Stack 1-D tensors of different lengths into ``(B, max_len)``, padding on the right."""
    if not rows:
        return torch.zeros((0, 0), dtype=dtype or torch.float32)
    width = max(int(r.numel()) for r in rows)
    out = torch.full((len(rows), width), value, dtype=dtype or rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r
    return out
