"""Value models (critics) for PPO with GAE: one value per turn, ``V(s_t)``, read from a stored sample.

PPO with a critic (the baseline of the GiGPO and HGPO papers) needs ``V(s_t)``: the expected return
from the state the policy acted in at turn ``t``. The trainer never looks inside a critic; it asks

* ``values(payloads) -> (N,)`` float tensor, with gradients, one value per stored sample (the same
  opaque payloads the policy re-scores: they hold the state the action was taken in), computed
  *through* ``critic.model`` so an accelerate-prepared (DDP) wrapper's hooks fire;
* ``parameters()``, ``train()`` / ``eval()``, ``save_pretrained(dir)`` (safetensors) and
  ``load_pretrained(dir)``, which loads weights *in place* so the optimizer keeps its parameters on
  resume.

The critic is a separate model, not a head on the policy: the policy's weights, checkpoints and
evaluation stay exactly as without PPO, and the critic has its own optimizer and learning rate (as
verl's ``critic`` worker). Values are turn-level (one per turn, the state before the response), which
is what the step-level ``gae`` estimator reads; verl's token-level GAE would need one value per
response token (``gae_tokens`` computes it, but no critic here produces token values yet).

Two critics, picked by :func:`build_critic` from the policy:

* :class:`ScorerCritic` for :class:`~stratagym.agents.scorer.ScorerPolicy`: a one-hidden-layer MLP over
  the scorer's hashed context features (the current observation and the last ``memory`` turns),
  ``V(x) = w . tanh(E(x) + b) + c``, with ``w = c = 0`` at start (every value starts at 0).
* :class:`LLMCritic` for :class:`~stratagym.agents.llm.LLMPolicy`: a copy of the policy's transformer
  body (``AutoModel``, no LM head) with a linear value head on the hidden state of the last prompt
  token (the head starts at 0), as verl's critic (a causal LM with a value head) reads values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
from torch import nn

from stratagym.agents.llm import LLMPolicy
from stratagym.agents.policy import unwrap_model
from stratagym.agents.scorer import ScorerPolicy
from stratagym.atomic import atomic_write_with, share_weights, write_json_atomic
from stratagym.errors import ConfigError
from stratagym.hub_kernels import load_kwargs

__all__ = ["ScorerValueNet", "ScorerCritic", "LLMValueModel", "LLMCritic", "build_critic"]

WEIGHTS_NAME = "critic.safetensors"
CONFIG_NAME = "critic_config.json"


class _CriticBase:
    """What both critics share: modes, parameters, in-place weight loading."""

    model: nn.Module

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.model.parameters()

    def train(self) -> "_CriticBase":
        self.model.train()
        return self

    def eval(self) -> "_CriticBase":
        self.model.eval()
        return self


# --------------------------------------------------------------------------- scorer critic


class ScorerValueNet(nn.Module):
    """``V(x) = w . tanh(E(x) + b) + c`` over hashed feature ids (``E`` an ``EmbeddingBag`` sum)."""

    def __init__(self, buckets: int, hidden: int, init_std: float):
        super().__init__()
        self.emb = nn.EmbeddingBag(int(buckets), int(hidden), mode="sum")
        self.bias = nn.Parameter(torch.zeros(int(hidden)))
        self.out = nn.Parameter(torch.zeros(int(hidden)))
        self.out_bias = nn.Parameter(torch.zeros(()))
        nn.init.normal_(self.emb.weight, std=float(init_std))

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.emb(ids, offsets) + self.bias) @ self.out + self.out_bias  # (B,)


class ScorerCritic(_CriticBase):
    """The critic of a :class:`~stratagym.agents.scorer.ScorerPolicy`: reads ``payload.context`` (the
    scorer's feature ids of the current observation and its history window), so it sees exactly the
    state the policy saw. Initial weights depend on ``seed`` only (not on the global RNG), so building
    a critic never shifts the run's random stream."""

    def __init__(self, *, buckets: int = 1 << 13, hidden: int = 64, init_std: float = 0.1, seed: int = 0):
        self.options = {"buckets": int(buckets), "hidden": int(hidden), "init_std": float(init_std)}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            self.model: nn.Module = ScorerValueNet(buckets, hidden, init_std)

    def values(self, payloads: Sequence[Any]) -> torch.Tensor:
        if not payloads:
            return torch.zeros(0)
        arrays = [np.asarray(p.context, dtype=np.int64) for p in payloads]
        lengths = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        ids = torch.from_numpy(np.concatenate(arrays))
        return self.model(ids, torch.from_numpy(offsets)).float()

    def save_pretrained(self, directory: str | os.PathLike[str]) -> None:
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in unwrap_model(self.model).state_dict().items()}
        atomic_write_with(out / WEIGHTS_NAME, lambda p: save_file(state, str(p)))
        write_json_atomic(out / CONFIG_NAME, {"type": "scorer", **self.options})

    def load_pretrained(self, directory: str | os.PathLike[str]) -> None:
        from safetensors.torch import load_file

        path = Path(directory) / WEIGHTS_NAME
        if not path.exists():
            raise FileNotFoundError(f"{directory} has no {WEIGHTS_NAME}: not a saved ScorerCritic")
        unwrap_model(self.model).load_state_dict(load_file(str(path)))


# --------------------------------------------------------------------------- LLM critic


class LLMValueModel(nn.Module):
    """A transformer body plus a linear value head read at the last prompt token of each row."""

    def __init__(self, body: nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        self.head = nn.Linear(int(hidden_size), 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        # right-padded rows without an attention mask: causal attention makes every real position exact
        hidden = self.body(input_ids=input_ids, use_cache=False).last_hidden_state  # (B, L, H)
        h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (B, H)
        return self.head(h.to(self.head.weight.dtype)).squeeze(-1)


class LLMCritic(_CriticBase):
    """The critic of an :class:`~stratagym.agents.llm.LLMPolicy`: the policy model's transformer body
    (loaded again from ``model``, so it is trained separately) with a value head. ``V(s_t)`` is read
    from ``payload["prompt_ids"]`` (the prompt the policy answered at turn ``t``)."""

    def __init__(self, model: nn.Module, pad_token_id: int, source: str,
                 compute_dtype: Optional[torch.dtype] = None):
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.source = source
        #: the critic trains all its weights, so they stay fp32 (the optimizer's master copy); with a
        #: bf16/fp16 policy its forward runs under ``torch.autocast`` in that dtype
        self.compute_dtype = None if compute_dtype in (None, torch.float32) else compute_dtype

    @classmethod
    def from_model(cls, path: str, *, pad_token_id: int, dtype: Optional[torch.dtype] = None,
                   device: Optional[torch.device] = None, seed: int = 0) -> "LLMCritic":
        """``dtype``: the compute dtype (the policy's); the weights load in fp32 whatever it is."""
        from transformers import AutoModel

        try:
            body = AutoModel.from_pretrained(path, dtype=torch.float32, **load_kwargs())
        except OSError as exc:
            raise ConfigError(f"critic: could not load the model {path!r}: {exc}") from exc
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model = LLMValueModel(body, body.config.hidden_size)
        if device is not None:
            model.to(device)
        return cls(model, pad_token_id, str(path), compute_dtype=dtype)

    @property
    def device(self) -> torch.device:
        return next(unwrap_model(self.model).parameters()).device

    def values(self, payloads: Sequence[Any]) -> torch.Tensor:
        if not payloads:
            return torch.zeros(0)
        prompts = [torch.as_tensor(p["prompt_ids"]).long().flatten() for p in payloads]
        if min(int(p.numel()) for p in prompts) < 1:
            raise ValueError("every payload needs at least one prompt token")
        width = max(int(p.numel()) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, : p.numel()] = p
        last = torch.tensor([int(p.numel()) - 1 for p in prompts], dtype=torch.long)
        dev = self.device
        if self.compute_dtype is None:
            return self.model(ids.to(dev), last.to(dev)).float()
        with torch.autocast(dev.type, dtype=self.compute_dtype):
            return self.model(ids.to(dev), last.to(dev)).float()

    def save_pretrained(self, directory: str | os.PathLike[str]) -> None:
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        module = unwrap_model(self.model)
        module.body.save_pretrained(out / "body", safe_serialization=True)
        share_weights(out / "body")  # save_pretrained writes it 0600
        head = {k: v.detach().contiguous().cpu() for k, v in module.head.state_dict().items()}
        atomic_write_with(out / WEIGHTS_NAME, lambda p: save_file(head, str(p)))
        write_json_atomic(out / CONFIG_NAME, {"type": "llm", "source": self.source, "pad_token_id": self.pad_token_id})

    def load_pretrained(self, directory: str | os.PathLike[str]) -> None:
        from safetensors.torch import load_file
        from transformers import AutoModel

        module = unwrap_model(self.model)
        body = AutoModel.from_pretrained(Path(directory) / "body", dtype=next(module.body.parameters()).dtype,
                                         **load_kwargs())
        module.body.load_state_dict(body.state_dict())
        module.head.load_state_dict(load_file(str(Path(directory) / WEIGHTS_NAME)))


# --------------------------------------------------------------------------- factory


def build_critic(policy: Any, options: Optional[dict[str, Any]] = None, *, seed: int = 0) -> Any:
    """The critic that fits ``policy`` (see the module docstring); ``options`` are the critic model's.

    A policy of another class may provide ``make_critic(options, seed=...)``; otherwise a policy
    without a critic here is refused with a :class:`ConfigError` naming the ones that have one.
    """
    opts = dict(options or {})
    maker = getattr(policy, "make_critic", None)
    if callable(maker):
        return maker(opts, seed=seed)
    if isinstance(policy, ScorerPolicy):
        known = {"hidden", "init_std"}
        bad = sorted(set(opts) - known)
        if bad:
            raise ConfigError(f"critic.options {bad} are not options of the scorer critic; valid: {sorted(known)}")
        return ScorerCritic(buckets=policy.config.buckets, hidden=int(opts.get("hidden", policy.config.hidden)),
                            init_std=float(opts.get("init_std", policy.config.init_std)), seed=seed)
    if isinstance(policy, LLMPolicy):
        known = {"model"}
        bad = sorted(set(opts) - known)
        if bad:
            raise ConfigError(f"critic.options {bad} are not options of the LLM critic; valid: {sorted(known)}")
        if policy.model is None:
            raise ConfigError("critic: an API-backed LLM policy has no local weights to build a critic from")
        if policy.is_lora and not opts.get("model"):
            raise ConfigError("critic: with a LoRA policy name the critic's base model in critic.options.model")
        path = str(opts.get("model") or policy.config.model)
        return LLMCritic.from_model(path, pad_token_id=int(policy.tokenizer.pad_token_id),
                                    dtype=policy.compute_dtype,
                                    device=policy.device, seed=seed)
    raise ConfigError(
        f"PPO with a critic needs a value model for {type(policy).__name__}; critics exist for ScorerPolicy and "
        "LLMPolicy (or give the policy class a make_critic(options, seed=...) method)"
    )
