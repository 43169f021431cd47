"""The HF inference engine's sampling loop: batched, KV-cached generation with the policy's own
transformers model (the ``hf`` backend, the default).

It is written out rather than calling ``model.generate`` because per-token overhead dominates small and
medium models on CPU: the loop does one forward per token (for Llama/Qwen2 models a fused static-cache
forward, :mod:`stratagym.agents.inference.fused_decode`), samples with temperature/top-k/top-p, records
the sampling log-probs for free, and checks stop strings on incrementally decoded text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch

from stratagym.agents.generation import RawGeneration, SamplingConfig, first_stop
from stratagym.agents.inference.kv_cache import returned_cache
from stratagym.agents.policy import unwrap_model

if TYPE_CHECKING:  # the module itself loads lazily, with the generator (see __init__)
    from stratagym.agents.inference.prefix_cache import PrefixCache

__all__ = ["HFGenerator"]


class HFGenerator:
    """Batched KV-cached sampling with a transformers causal LM (CPU or GPU).

    ``get_model()`` returns the (possibly accelerate-wrapped) model at call time so the generator always
    samples from the current weights; no copy, no sync needed. With ``fused=True`` (default) Llama/Qwen2
    models on CPU in float32 (``"force"``: any device and dtype, where it has not been checked)
    models decode through :class:`stratagym.agents.inference.fused_decode.FusedDecoder` (same maths, static KV
    cache, shared prompts prefilled once); other models, and ``fused=False``, call the transformers
    model once per token with a ``DynamicCache``. Both paths share the sampling and stopping code.

    Two more savings on the fused path, both changing no sample (up to float rounding): with
    ``prefix_cache`` a prompt that extends a row of the previous call (the next turn of a multi-turn
    rollout) runs only its new tokens (:mod:`stratagym.agents.inference.prefix_cache`), and with
    ``drop_finished_rows`` rows that hit EOS or a stop string leave the decoder once a quarter of its rows
    are done (a decode step costs about linearly in rows; uniforms are still drawn for every row, so the
    random stream is the same).
    """

    def __init__(self, tokenizer: Any, get_model: Callable[[], torch.nn.Module], *, fused: "bool | str" = True,
                 prefix_cache: bool = True, drop_finished_rows: bool = True,
                 compute_dtype: Optional[torch.dtype] = None):
        # lazy, as fused_decode below: the speed machinery loads only when a generator is made
        # (tests/agents/test_inference_package.py)
        from stratagym.agents.inference.prefix_cache import PrefixCache

        self.tokenizer = tokenizer
        self.fused = fused
        #: fp32 master weights that compute under autocast: the fused decoder samples from a copy of the
        #: weights in this dtype (the transformers loop runs under the policy's autocast)
        self.compute_dtype = compute_dtype
        #: the last fused call's keys/values, reused by the next call's prompts that extend its rows
        #: (:mod:`stratagym.agents.inference.prefix_cache`); None when turned off
        self.prefix_cache: Optional[PrefixCache] = PrefixCache() if prefix_cache else None
        #: the fused decoder stops decoding rows that finished (once a quarter of its rows are done)
        self.drop_finished_rows = drop_finished_rows
        self.get_model = get_model
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = tokenizer.eos_token_id
        self.eos_ids = {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None}
        self._piece: dict[int, str] = {}

    #: :meth:`generate` honours per-prompt ``seeds``
    per_request_seeds = True

    def _piece_of(self, tok: int) -> str:
        piece = self._piece.get(tok)
        if piece is None:
            piece = self.tokenizer.decode([tok], skip_special_tokens=False)
            self._piece[tok] = piece
        return piece

    @staticmethod
    def _sample(logits: torch.Tensor, cfg: SamplingConfig, greedy: bool, draw: Optional[tuple[int, torch.Tensor]] = None,
                seeded: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens and their log-probs under the temperature-scaled distribution (what the trainer
        re-scores), sampled after top-k/top-p filtering. ``draw = (n, rows)``: the logits are rows ``rows``
        of a batch of ``n``; uniforms are drawn for all ``n`` (the random stream does not depend on which
        rows still decode). ``seeded = (rows, uniforms)``: a mask over the batch of ``n`` and, for the rows it
        marks (seeded requests), this token's uniform from the row's own stream, used instead of the global
        stream's (which advances as without them): such a row samples the same whatever else the batch holds."""
        z = logits.float()
        if greedy:
            logp = torch.log_softmax(z, -1)
            tok = logp.argmax(-1)
            return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
        if cfg.temperature != 1.0:
            z = z / cfg.temperature
        logp = torch.log_softmax(z, -1)
        filt = z
        if cfg.top_k and cfg.top_k < z.shape[-1]:
            kth = torch.topk(filt, cfg.top_k, dim=-1).values[:, -1:]
            filt = filt.masked_fill(filt < kth, float("-inf"))
        if cfg.top_p < 1.0:
            sorted_z, idx = torch.sort(filt, descending=True, dim=-1)
            cum = torch.softmax(sorted_z, -1).cumsum(-1)
            drop = cum - torch.softmax(sorted_z, -1) > cfg.top_p  # keep the token that crosses top_p
            sorted_z = sorted_z.masked_fill(drop, float("-inf"))
            filt = torch.full_like(filt, float("-inf")).scatter(-1, idx, sorted_z)
        # inverse-CDF sampling: one uniform number per row (drawing V exponentials for Gumbel-max, or
        # torch.multinomial, costs several times more on CPU); same global torch generator.
        probs = logp.exp() if filt is z else torch.softmax(filt, -1)
        cdf = probs.cumsum(-1)
        n = cdf.shape[0] if draw is None else draw[0]
        u = torch.rand((n, 1), device=cdf.device, dtype=cdf.dtype)
        if seeded is not None:
            rows, own = seeded
            u = torch.where(rows[:, None].to(u.device), own[:, None].to(u.device, u.dtype), u)
        if draw is not None:
            u = u[draw[1]]
        u = u * cdf[:, -1:]
        tok = torch.searchsorted(cdf, u).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)

    def _prefill_hf(self, model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        """The transformers path: left-padded prefill, then one ``model(...)`` call per token with a
        ``DynamicCache``. Returns the first next-token logits and the step function."""
        B = len(prompt_ids)
        P = max(len(p) for p in prompt_ids)
        ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, P), dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            ids[i, P - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            attn[i, P - len(p) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
        cache_kw, cache = returned_cache(out)
        state = {"cache": cache, "attn": attn, "pos": pos[:, -1:] + 1}

        def step(tok: torch.Tensor) -> torch.Tensor:
            state["attn"] = torch.cat([state["attn"], torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
            o = model(input_ids=tok[:, None], attention_mask=state["attn"], position_ids=state["pos"],
                      **{cache_kw: state["cache"]}, use_cache=True)
            state["cache"] = returned_cache(o)[1]
            state["pos"] = state["pos"] + 1
            return o.logits[:, -1, :]

        return out.logits[:, -1, :], step

    def _prefill_fused(self, model: torch.nn.Module, decoder: Any, prompt_ids: Sequence[Sequence[int]],
                       capacity_new: int, cache: Optional[PrefixCache],
                       ) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor], list[int]]:
        """The fused path: each distinct prompt is prefilled once (a group's G copies share it), from the
        known prefix ``cache`` holds for it if any. Returns the first logits, the step function and
        each row's first cache slot."""
        uniq: dict[tuple[int, ...], int] = {}
        expand = [uniq.setdefault(tuple(int(t) for t in p), len(uniq)) for p in prompt_ids]
        rows = list(uniq)
        P = max(len(p) for p in rows)
        ids = torch.full((len(rows), P), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), P), dtype=torch.long)
        for i, p in enumerate(rows):
            ids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[i, P - len(p) :] = 1
        reuse = cache.lookup(model, rows) if cache is not None else None
        logits = decoder.prefill(ids, attn, torch.tensor(expand, dtype=torch.long), P + capacity_new, reuse=reuse)
        return logits, decoder.step, [P - len(rows[u]) for u in expand]

    @torch.no_grad()  # not inference_mode: a transformers forward may cache buffers the training forward reuses
    def generate(
        self, prompt_ids: Sequence[Sequence[int]], stop: Sequence[str], cfg: SamplingConfig, *, greedy: bool = False,
        seeds: Optional[Sequence[Optional[int]]] = None, reuse_prefix: bool = True,
    ) -> list[RawGeneration]:
        """Sample a completion of each prompt. ``seeds``: per prompt, a seed for its own random stream (the
        same seed and prompt give the same completion whichever other prompts share the call, up to float
        rounding of the batched forward), or None for the process's global stream. ``reuse_prefix=False``:
        this call neither reads nor updates the prefix cache, so every prompt is prefilled whole (the gateway's
        batch-invariant mode: a sample then depends on its prompt alone, not on what an earlier call cached)."""
        from stratagym.agents.inference.fused_decode import fused_decoder_for  # lazy: speed machinery (see __init__)

        if not prompt_ids:
            return []
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        cache = self.prefix_cache if reuse_prefix else None
        model = unwrap_model(self.get_model())
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        B = len(prompt_ids)
        if seeds is not None and len(seeds) != B:
            raise ValueError(f"{len(seeds)} seeds for {B} prompts")
        seeded_rows = own_uniforms = None
        if seeds is not None and not greedy and any(s is not None for s in seeds):
            # each seeded row's uniforms for the whole call, drawn up front from its own generator
            seeded_rows = torch.tensor([s is not None for s in seeds])
            own_uniforms = torch.stack([
                torch.rand(cfg.max_new_tokens, generator=torch.Generator().manual_seed(int(s) % 2**64), dtype=torch.float64)
                if s is not None else torch.zeros(cfg.max_new_tokens, dtype=torch.float64) for s in seeds])
        try:
            decoder = (fused_decoder_for(model, force=self.fused == "force", dtype=self.compute_dtype)
                       if self.fused else None)
            if decoder is not None:
                logits, step, starts = self._prefill_fused(model, decoder, prompt_ids, cfg.max_new_tokens, cache)
            else:
                logits, step = self._prefill_hf(model, prompt_ids, device)
            done = [False] * B
            n_done = 0
            reason = ["length"] * B
            texts = [""] * B
            toks: list[torch.Tensor] = []
            lps: list[torch.Tensor] = []
            lengths = [0] * B
            window = max((len(s) for s in stop), default=0) + 64
            # a stop string that completes with this token ends inside its piece, so the piece holds the
            # stop's last character: only such tokens need the (string) search
            last_chars = {s[-1] for s in stop if s}
            eos = self.eos_ids
            fed = 0  # tokens run through the decoder after the prompts (all sampled but the last)
            # the fused decoder drops finished rows once a quarter of its rows are done (decode time is
            # ~linear in rows); ``live[k]`` is the row of the call that decoder row k holds
            live = list(range(B))
            live_idx: Optional[torch.Tensor] = None
            sources: list[Any] = [None] * B  # prefix-cache sources of dropped rows
            for t in range(cfg.max_new_tokens):
                tok, lp = self._sample(logits, cfg, greedy, None if live_idx is None else (B, live_idx),
                                       None if seeded_rows is None else (seeded_rows, own_uniforms[:, t]))
                if live_idx is not None:  # back to rows of the call; dropped rows are done, their slots unused
                    tok = torch.zeros(B, dtype=tok.dtype, device=tok.device).index_copy_(0, live_idx, tok)
                    lp = torch.zeros(B, dtype=lp.dtype, device=lp.device).index_copy_(0, live_idx, lp)
                toks.append(tok)
                lps.append(lp)
                tok_cpu = tok.tolist()
                for i in live:
                    if done[i]:
                        continue
                    tk = tok_cpu[i]
                    lengths[i] += 1
                    if tk in eos:
                        done[i], reason[i] = True, "eos"
                        n_done += 1
                        continue
                    if stop:
                        piece = self._piece_of(tk)
                        texts[i] += piece
                        if not any(c in piece for c in last_chars):
                            continue
                        tail_start = max(0, len(texts[i]) - window)
                        end = first_stop(texts[i][tail_start:], stop)
                        if end >= 0:
                            done[i], reason[i] = True, "stop"
                            n_done += 1
                if n_done == B or t == cfg.max_new_tokens - 1:
                    break
                if decoder is not None and self.drop_finished_rows and 4 * sum(done[i] for i in live) >= len(live):
                    keep = [k for k, i in enumerate(live) if not done[i]]
                    if cache is not None:
                        for k, i in enumerate(live):
                            if done[i]:
                                sources[i] = (decoder.prefix_source(k, starts[i]), fed)
                    decoder.keep_rows(torch.tensor(keep, dtype=torch.long, device=device))
                    live = [live[k] for k in keep]
                    live_idx = torch.tensor(live, dtype=torch.long, device=tok.device)
                # rows never interact: finished rows still in the decoder keep decoding (ignored) samples
                logits = step(tok if live_idx is None else tok[live_idx])
                fed += 1
            tok_mat = torch.stack(toks, 1).cpu() if toks else torch.zeros((B, 0), dtype=torch.long)
            if decoder is not None and cache is not None:
                for k, i in enumerate(live):
                    sources[i] = (decoder.prefix_source(k, starts[i]), fed)
                rows = tok_mat.tolist()
                cache.record(model, [list(prompt_ids[i]) + rows[i][:n] for i, (_, n) in enumerate(sources)],
                             [src for src, _ in sources])
        finally:
            if was_training:
                model.train()
        lp_mat = torch.stack(lps, 1).float().cpu() if lps else torch.zeros((B, 0))
        results = []
        for i in range(B):
            rid = tok_mat[i, : lengths[i]].tolist()
            text = self.tokenizer.decode(rid, skip_special_tokens=True)
            if reason[i] == "stop":
                end = first_stop(text, stop)
                if end >= 0:
                    text = text[:end]
            results.append(RawGeneration(text, rid, lp_mat[i, : lengths[i]].tolist(), reason[i]))
        return results
