"""Reuse of the keys and values of one ``generate`` call in the next one (prefix caching, like vLLM's).

Why: in a multi-turn rollout each turn's prompt is the previous turn's prompt, its response and the new
observation. The fused decoder prefilled the whole prompt every turn, so prefill grew with the history
and dominated generation: on the bundled SearchQA with the 3.5M-param SFT model, 11.7 s of 18.9 s of one
rollout's generation (33 calls, prompts up to 355 tokens) went to prefills, most of it on tokens whose
keys and values the previous call had computed.

:class:`PrefixCache` keeps the last call's decoder cache (every row: its prompt and the tokens it fed
back, with their keys and values) and, for each new prompt, finds the kept row sharing the longest
token prefix with it. Only the rest of the prompt is then run (:meth:`FusedDecoder.prefill` with
``reuse``). It is exact up to float rounding: a token's keys and values depend only on the tokens up
to it (causal attention; positions count from the first real token, whatever the padding), and the
cache is used only while the model's weights are the ones it was computed with: the trainer clears it
after every optimizer step (:meth:`LLMPolicy.after_optimizer_step`), and every lookup first compares a
fingerprint of the weights (:func:`weights_fingerprint`) with the one taken when the cache was kept. Matching is on token ids, so a prompt whose tokenisation differs at the
response/observation boundary simply reuses less.

Memory: the kept cache is the last call's own decoder cache (no copy; with the caches rows were dropped
from when they finished), held until the next call; a call whose caches take more than
:attr:`PrefixCache.max_bytes` is not kept.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from stratagym.agents.inference.fused_decode import PrefixSource

__all__ = ["PrefixCache", "weights_fingerprint"]


@torch.no_grad()
def weights_fingerprint(model: torch.nn.Module) -> tuple:
    """Identifies the current weights of ``model``. Every parameter's identity, storage and in-place
    version counter catch replaced, moved and most in-place-modified weights; but fused optimizers
    (``AdamW(fused=True)``) and writes through ``.data`` do not bump the version counter, so each
    parameter's sum and L2 norm are part of it too (~1 ms per 3M parameters on one CPU core)."""
    # reduced in fp32 (no copy): a bf16 sum would round away a small update
    return tuple((id(p), p.data_ptr(), p._version, p.dtype, p.device, float(p.sum(dtype=torch.float32)),
                  float(torch.linalg.vector_norm(p, dtype=torch.float32)))
                 for p in model.parameters())


class PrefixCache:
    """The keys and values of the last fused ``generate`` call, looked up by longest common token prefix.

    ``min_reuse``: a prompt reuses a kept prefix only if it is at least this many tokens (shorter ones
    are not worth the copy). ``max_share``: :meth:`lookup` gives up (returns None) when the longest
    remainder to run is more than this share of the longest prompt, since every prompt's remainder runs
    padded to the longest one."""

    max_bytes = 2 << 30

    def __init__(self, min_reuse: int = 8, max_share: float = 0.9):
        self.min_reuse = int(min_reuse)
        self.max_share = float(max_share)
        self._fingerprint: Optional[tuple] = None
        self._seqs = np.zeros((0, 0), dtype=np.int64)  # (R, Lmax) token ids, -1 past each row's length
        self._sources: list[PrefixSource] = []
        self._call_fingerprint: Optional[tuple] = None
        #: tokens reused and prompt tokens asked for, over this object's life (for logs and tests)
        self.reused_tokens = 0
        self.prompt_tokens = 0

    def clear(self) -> None:
        self._fingerprint, self._call_fingerprint, self._sources = None, None, []
        self._seqs = np.zeros((0, 0), dtype=np.int64)

    def lookup(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]]) -> Optional[list[Optional[PrefixSource]]]:
        """For each prompt, a source of the keys/values of its longest known prefix (at most all but its
        last token: the prefill must run at least one token to give the next-token logits), or None;
        None overall when nothing useful is kept."""
        lengths = [len(p) for p in prompts]
        self.prompt_tokens += sum(lengths)
        # the weights cannot change during the call: record() reuses this fingerprint
        self._call_fingerprint = weights_fingerprint(model)
        if not self._sources or self._fingerprint != self._call_fingerprint:
            return None
        R, Lmax = self._seqs.shape
        out: list[Optional[PrefixSource]] = []
        remainders = []
        for p in prompts:
            n = min(len(p) - 1, Lmax)
            best, row = 0, -1
            if n >= self.min_reuse:
                q = np.asarray(p[:n], dtype=np.int64)
                eq = self._seqs[:, :n] == q[None, :]
                # length of the common prefix with every kept row: the first mismatch, or n
                lcp = np.where(eq.all(1), n, np.argmin(eq, axis=1))
                row = int(np.argmax(lcp))
                best = int(lcp[row])
            if best >= self.min_reuse:
                out.append(self._sources[row].prefix(best))
                remainders.append(len(p) - best)
            else:
                out.append(None)
                remainders.append(len(p))
        if all(o is None for o in out) or max(remainders) > self.max_share * max(lengths):
            return None
        self.reused_tokens += sum(o.length for o in out if o is not None)
        return out

    def record(self, model: torch.nn.Module, seqs: Sequence[Sequence[int]], sources: Sequence[PrefixSource]) -> None:
        """Keep ``sources[i]``, the keys/values of the tokens ``seqs[i]`` (a row's prompt and the tokens it
        fed back), for the next call's :meth:`lookup`."""
        tensors = {id(t): t for src in sources for t in src.kv}
        if sum(t.numel() * t.element_size() for t in tensors.values()) > self.max_bytes:
            self.clear()
            return
        for src, seq in zip(sources, seqs):
            if src.length != len(seq):  # the decoder ran a different number of tokens than we were told
                raise RuntimeError(f"prefix cache: a row holds {src.length} tokens, expected {len(seq)}")
        Lmax = max(len(s) for s in seqs)
        mat = np.full((len(seqs), Lmax), -1, dtype=np.int64)
        for i, seq in enumerate(seqs):
            mat[i, : len(seq)] = seq
        self._seqs = mat
        self._sources = list(sources)
        fp, self._call_fingerprint = self._call_fingerprint, None
        self._fingerprint = fp if fp is not None else weights_fingerprint(model)
