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

Optional hooks. Beyond the above, :class:`Policy` declares what a policy *may* do, each with a default
that does nothing: its ``tokenizer`` and ``compute_dtype``, the vLLM engine's ``weight_sync_seconds``,
``use_master_weights`` before training, ``prompt_reuse_stats`` of a prefix cache,
``release_generation_cache`` when a rollout ends, ``after_optimizer_step``, and ``close``. A policy class
that subclasses :class:`Policy` inherits the defaults and overrides what it needs (:class:`LLMPolicy
<stratagym.agents.llm.LLMPolicy>` does). One that only follows the protocol's shape need not define
them: the trainer reaches the hooks through :func:`policy_hooks`, which supplies the defaults such a
policy lacks, so policies written before the hooks were declared keep working unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple, Optional, Protocol, Sequence, runtime_checkable

import torch

from stratagym.envs.episode import EpisodeKey

__all__ = [
    "Turn",
    "GenerationRequest",
    "Generation",
    "SequenceLogProbs",
    "Policy",
    "OPTIONAL_HOOKS",
    "policy_hooks",
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

    # ---- optional hooks (OPTIONAL_HOOKS): defaults that do nothing; override what the policy needs ----

    #: The tokenizer of a policy that has one (an LLM's): the sampler/trainer parity check decodes the
    #: tokens it reports with it. None: token ids are reported as ids.
    tokenizer: Any = None

    @property
    def compute_dtype(self) -> Optional[torch.dtype]:
        """The dtype the model computes in (an LLM policy's), which a result record names and the parity
        check's bounds depend on; None: no single one (the record names none, the check takes float32)."""
        return None

    @property
    def weight_sync_seconds(self) -> Optional[float]:
        """Seconds spent so far loading new weights into a generation engine other than the trained
        model (vLLM); the trainer logs each step's increase as ``time/weight_sync``. None: generation
        runs on the trained model itself, nothing to sync."""
        return None

    def use_master_weights(self, mixed_precision: str = "no") -> bool:
        """Called once before training with ``train.mixed_precision``: keep what trains in fp32 (the
        optimizer's master copy) and compute in the policy's dtype. Returns whether anything changed."""
        return False

    def prompt_reuse_stats(self) -> Optional[tuple[int, int]]:
        """(prompt tokens reused from earlier generation calls, prompt tokens asked for), counted since the
        policy's generator was built; the trainer logs each step's ratio as ``time/prompt_reuse``. None:
        nothing is reused (no prefix cache)."""
        return None

    def release_generation_cache(self) -> None:
        """Free what generation keeps between calls (keys/values kept for prefix reuse). Called when a
        rollout ends: the update that follows changes the weights and needs the memory."""

    def after_optimizer_step(self) -> None:
        """Called after each optimizer step, after a resume loads weights, and after a rollout worker
        loads a new version: whatever was computed from the old weights (an engine's copy, kept
        keys/values) is stale."""

    def close(self) -> None:
        """Release what the policy holds outside its Python objects (a vLLM engine's memory, an HTTP
        client); called when the trainer closes. The policy may build them again on its next use."""


#: The optional members of :class:`Policy`: each has a default there, which :func:`policy_hooks` supplies
#: to a policy that does not define it.
OPTIONAL_HOOKS = ("tokenizer", "compute_dtype", "weight_sync_seconds", "use_master_weights", "prompt_reuse_stats",
                  "release_generation_cache", "after_optimizer_step", "close")


def policy_hooks(policy: Any) -> Any:
    """The object to reach ``policy``'s optional hooks (:data:`OPTIONAL_HOOKS`) through: ``policy`` itself
    when it has them all (it subclasses :class:`Policy`, or defines each), else a view that answers each
    hook with the policy's own or, where it has none, :class:`Policy`'s default.

    Why a view rather than requiring the hooks: a policy that only follows the protocol's shape (one
    written before the hooks were declared, or one that needs none of them) keeps working unchanged,
    while the trainer, which takes the view once, calls every hook directly. Hooks are looked up on
    each use, so a property (``weight_sync_seconds``) is read when asked."""
    if all(hasattr(policy, name) for name in OPTIONAL_HOOKS):
        return policy
    return _DefaultHooks(policy)


class _DefaultHooks:
    """The optional hooks of a policy that lacks some: its own where it has one, else :class:`Policy`'s
    default, bound to the policy (see :func:`policy_hooks`). Only the hooks are reachable through it."""

    def __init__(self, policy: Any):
        self.policy = policy

    def __getattr__(self, name: str) -> Any:
        if name not in OPTIONAL_HOOKS:
            raise AttributeError(f"{name!r} is not an optional policy hook; use the policy itself")
        try:
            return getattr(self.policy, name)
        except AttributeError:
            default = Policy.__dict__[name]
            return default.__get__(self.policy, type(self.policy)) if hasattr(default, "__get__") else default


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
