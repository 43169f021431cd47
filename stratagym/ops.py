"""Token-level tensor ops shared by the losses (algorithms) and the policies (agents).

They sit at the base of the layers so that an agent scoring its own sequences and a loss consuming
those scores use one implementation, and neither package imports the other.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["entropy_from_logits", "token_logprobs"]


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of ``softmax(logits)`` over the last dim: ``logsumexp(z) - sum(p * z)``."""
    lse = torch.logsumexp(logits, dim=-1)
    p = torch.softmax(logits, dim=-1)
    return lse - (p * logits).sum(-1)


def token_logprobs(
    logits: Tensor,
    labels: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_size: Optional[int] = None,
):
    """Log-prob of each label token: ``log_softmax(z)[label]`` with ``z = logits / temperature``.

    ``logits``: ``(..., V)``; ``labels``: ``(...)`` int64.  ``chunk_size`` processes the leading
    rows in chunks to bound peak memory on long sequences / large vocabularies.  Returns the
    log-probs, or ``(logprobs, entropy)`` with ``with_entropy=True``.  The fused ``log_softmax``
    kernel is used rather than ``z[label] - logsumexp(z)``: the same values, with a forward +
    backward about 3x cheaper on CPU; the entropy reuses the same normalised log-probs.
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal logits shape without the "
                         f"vocab dim {tuple(logits.shape[:-1])}")
    z = logits.reshape(-1, logits.shape[-1])
    y = labels.reshape(-1)
    step = z.shape[0] if not chunk_size else int(chunk_size)
    lps, ents = [], []
    for i in range(0, max(z.shape[0], 1), max(step, 1)):  # loop over chunks, not tokens
        zc = z[i : i + step]
        if temperature != 1.0:
            zc = zc / temperature
        logp = torch.log_softmax(zc, dim=-1)
        lps.append(logp.gather(-1, y[i : i + step].unsqueeze(-1)).squeeze(-1))
        if with_entropy:
            ents.append(-(logp.exp() * logp).sum(-1))
    lp = torch.cat(lps).reshape(labels.shape)
    if with_entropy:
        return lp, torch.cat(ents).reshape(labels.shape)
    return lp
