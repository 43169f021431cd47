"""What every generation backend shares: the sampling parameters and the shape of one completion.

:mod:`stratagym.agents.backends` (vLLM, OpenAI-compatible servers) and the HF engine
(:mod:`stratagym.agents.inference.hf_generator`) both speak these types, so the policy can swap backends
without knowing which one sampled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from stratagym.errors import ConfigError

__all__ = ["SamplingConfig", "RawGeneration", "first_stop"]


@dataclass
class SamplingConfig:
    """Sampling parameters shared by every backend (``greedy`` at call time overrides temperature)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128

    def validate(self) -> None:
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0 (got {self.temperature}); use greedy evaluation for argmax decoding")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class RawGeneration:
    """One completion: token ids (None for HTTP backends), per-token sampling log-probs, text, why it ended."""

    text: str
    response_ids: Optional[list[int]] = None
    logprobs: Optional[list[float]] = None
    finish_reason: str = "length"  # "stop" (stop string), "eos", "length"
    #: why a served model's ``tool_calls`` field could not be read (not a list...), else None
    tool_calls_error: Optional[str] = None


def first_stop(text: str, stops: Sequence[str]) -> int:
    """End index of the earliest stop string in ``text``, or -1."""
    best = -1
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best < 0 or i + len(s) < best):
            best = i + len(s)
    return best
