"""A fused training/scoring forward for Llama/Qwen2-style decoders (with autograd), used by re-scoring.

Why: the trainer runs three scoring passes per update (the reference forward, the loss forward and its
backward) over ~1000 tokens. At small model sizes the transformers forward spends a third of that time
outside the matrix products: per-projection linears, RMSNorm and rotary in several small ops each, a
boolean attention mask that SDPA converts per layer. :class:`FusedScorer` computes the *same* function as ``LlamaForCausalLM`` /
``Qwen2ForCausalLM`` (RMSNorm in fp32, rotary embeddings, grouped-query attention, SiLU-gated MLP, tied
or untied head) as plain torch ops over the model's own parameters:

* q/k/v are one matmul, with weights concatenated by ``torch.cat`` on every call (so autograd routes the
  gradients back into the real ``q_proj``/``k_proj``/``v_proj`` parameters), split with ``split`` (whose
  backward is one ``cat``; slicing would zero-fill a full-size gradient per slice and add them up);
* gate and up stay two matmuls: at these sizes two half-width products cost what one full-width product
  does, and they give contiguous halves, on which SiLU, the product and their backward run ~20 % faster
  than on the strided halves of one product (and no weight ``cat`` is needed);
* rotary is applied to the q and k heads in one pass, with cos/sin tables broadcast over the heads;
* SDPA gets an additive float mask built once per pass and shared by all layers (transformers hands it
  a boolean mask, which it converts in every layer) and grouped-query heads as they are
  (``enable_gqa``, no repeated keys);
* the final norm and the LM head run only at the positions whose log-probs are asked for.

It is exact maths, not an approximation: log-probs and gradients equal the transformers forward's up to
float rounding (``tests/agents/test_fused_score.py`` pins both to 1e-5 on hand-made Llama and Qwen2
models, with padding and shared prompts). Models the fused decoder does not cover (other architectures,
LoRA/peft wrappers, quantised layers, sliding windows, dynamic RoPE), models with attention dropout in
training mode, forward hooks, an active autocast, models off the CPU (measured on CPU only; on GPUs a
float mask also keeps SDPA off its flash kernel) and batches whose mask would pass
:attr:`FusedScorer.max_mask_bytes` fall back to the transformers forward:
:func:`fused_scorer_for` returns None and :func:`scoring_unsupported_reason` says why.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from stratagym.agents.inference.fused_decode import _cat_bias, unsupported_reason

__all__ = ["FusedScorer", "fused_scorer_for", "scoring_unsupported_reason"]


def _has_hooks(module: torch.nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks or getattr(module, "_hf_hook", None) is not None)


def scoring_unsupported_reason(model: torch.nn.Module) -> Optional[str]:
    """None when :class:`FusedScorer` reproduces ``model``'s training forward exactly, else why not."""
    why = unsupported_reason(model, force=True, lora=False)  # the architecture checks; devices are checked below
    if why is not None:
        return why
    if model.training and float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0.0:
        return "attention dropout in training mode"
    if model.training and any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()):
        return "gradient checkpointing"
    if any(_has_hooks(m) for m in model.modules()):
        return "forward hooks on the model"
    dev = model.lm_head.weight.device.type
    if dev != "cpu":  # it materialises the attention scores, where GPU kernels (flash) do not
        return f"device {dev} (the fused scoring forward is for CPU)"
    if torch.is_autocast_enabled(dev):
        return "autocast is active"
    return None


def fused_scorer_for(model: torch.nn.Module) -> Optional["FusedScorer"]:
    """A :class:`FusedScorer` over ``model``, or None if its forward is not covered."""
    return None if scoring_unsupported_reason(model) is not None else FusedScorer(model)


class FusedScorer:
    """Logits of a Llama/Qwen2 model at chosen positions, in the two layouts re-scoring uses.

    Cheap to build (it only reads the model's structure); weights are read from the parameters on every
    call, so one instance may outlive optimizer steps. Usage::

        sc = FusedScorer(model)
        logits = sc.whole_rows(ids, keep)                                 # right-padded rows
        logits = sc.shared_prompts(pre_ids, pre_attn, expand, suf_ids, pos) # prompts run once
    """

    #: the additive attention mask of one pass (rows x queries x keys floats) may take this many bytes;
    #: larger batches (long sequences) use the transformers forward
    max_mask_bytes = 1 << 28

    def __init__(self, model: torch.nn.Module):
        cfg = model.config
        self.model = model
        self.inner = model.model
        self.nh = int(cfg.num_attention_heads)
        self.nkv = int(getattr(cfg, "num_key_value_heads", None) or self.nh)
        self.hd = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh)
        self.scaling = self.hd**-0.5
        self.eps = float(cfg.rms_norm_eps)
        self.rope_scale = float(getattr(self.inner.rotary_emb, "attention_scaling", 1.0))

    def fits(self, rows: int, queries: int, keys: int) -> bool:
        """Whether the mask of ``rows`` x ``queries`` x ``keys`` stays within :attr:`max_mask_bytes`."""
        item = self.inner.embed_tokens.weight.element_size()
        return rows * queries * keys * item <= self.max_mask_bytes

    # ---- pieces ----------------------------------------------------------------------------------------
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), w, self.eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * h.to(x.dtype)

    def _rope(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin tables (N, 1, S, hd) at positions ``pos`` (N, S), broadcast over the q and k heads (not
        materialised per head: at 1000 tokens that was two 1.5 MB copies per pass); sin has
        ``rotate_half``'s sign folded in (``rotate_half(x) * sin == roll(x, hd/2) * signed_sin``)."""
        inv = self.inner.rotary_emb.inv_freq.to(device=pos.device, dtype=torch.float32)
        freqs = pos.to(torch.float32)[..., None] * inv  # (N, S, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(dtype)
        sin = (emb.sin() * self.rope_scale).to(dtype)
        half = self.hd // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        return cos[:, None], sin[:, None]

    def _weights(self) -> list[tuple]:
        """Per layer: the two norm weights, the concatenated q/k/v weight and bias, then the o, gate, up and
        down projections (modules: weight and bias are read from them)."""
        out = []
        for layer in self.inner.layers:
            a, m = layer.self_attn, layer.mlp
            out.append((
                layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), _cat_bias(a.q_proj, a.k_proj, a.v_proj),
                a.o_proj, m.gate_proj, m.up_proj, m.down_proj,
            ))
        return out

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """q (N, nh, S, hd), k/v (N, nkv, n, hd), bias (N, 1, S, n) additive (0 or -inf, no row fully
        masked), or None for plain causal attention (S == n). Returns (N, S, nh * hd)."""
        N, nh, S, hd = q.shape
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bias is None, scale=self.scaling,
                                           enable_gqa=nh != k.shape[1])
        return o.transpose(1, 2).reshape(N, S, nh * hd)

    def _layers(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: Optional[torch.Tensor],
                weights: list[tuple], prefix: Optional[list[tuple[torch.Tensor, torch.Tensor]]] = None,
                keep_kv: bool = False, last_needed: bool = True):
        """Run every decoder layer over ``x`` (N, S, H). ``prefix``: per layer, keys and values (N, nkv, p, hd)
        placed before this pass's own. ``keep_kv``: also return each layer's (keys, values)."""
        N, S, _ = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        half = hd // 2
        kvs = []
        n_layers = len(weights)
        for li, (ln1, ln2, w_qkv, b_qkv, o_proj, gate, up, down) in enumerate(weights):
            h = self._rms(x, ln1)
            qkv = F.linear(h, w_qkv, b_qkv).view(N, S, nh + 2 * nkv, hd).transpose(1, 2)
            qk, v = qkv.split([nh + nkv, nkv], 1)
            qk = qk * cos + qk.roll(half, -1) * sin  # rotary on q and k in one pass
            q, k = qk.split([nh, nkv], 1)
            if keep_kv:
                kvs.append((k, v))
                if li == n_layers - 1 and not last_needed:
                    break  # the prompt pass only needs the last layer's keys and values
            if prefix is not None:
                k = torch.cat((prefix[li][0], k), 2)
                v = torch.cat((prefix[li][1], v), 2)
            x = x + F.linear(self._attend(q, k, v, bias), o_proj.weight, o_proj.bias)
            h = self._rms(x, ln2)
            g = F.silu(F.linear(h, gate.weight, gate.bias))
            x = x + F.linear(g * F.linear(h, up.weight, up.bias), down.weight, down.bias)
        return x, kvs

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        h = self._rms(h, self.inner.norm.weight)
        return F.linear(h, self.model.lm_head.weight, self.model.lm_head.bias)

    @staticmethod
    def _bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))

    # ---- the two layouts of LLMPolicy re-scoring -------------------------------------------------------
    def whole_rows(self, ids: torch.Tensor, keep: torch.Tensor, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``ids`` (R, L) right-padded rows, causal attention only, positions 0..L-1 (what the transformers
        model computes without an attention mask). Returns the logits at positions ``keep`` (B, T) of row
        ``rows[b]`` (default: of row b, B == R): several outputs may read one row (the earlier turns of a
        multi-turn trajectory inside its last turn's row)."""
        B, L = ids.shape
        L_run = min(int(keep.max()) + 1, L)  # later positions feed no kept output (causal)
        ids = ids[:, :L_run]
        dev = ids.device
        emb = self.inner.embed_tokens.weight
        x = F.embedding(ids, emb)
        pos = torch.arange(L_run, device=dev)[None]
        cos, sin = self._rope(pos, x.dtype)
        x, _ = self._layers(x, cos, sin, None, self._weights())  # causal only: SDPA's causal path, no mask
        H = x.shape[-1]
        if rows is not None:
            h = x[rows[:, None], keep]  # (B, T, H)
        else:
            h = x.gather(1, keep[:, :, None].expand(B, keep.shape[1], H))
        return self._head(h)

    def shared_prompts(self, pre_ids: torch.Tensor, pre_attn: torch.Tensor, expand: torch.Tensor,
                       suf_ids: torch.Tensor, suf_pos: torch.Tensor) -> torch.Tensor:
        """Distinct prompts (without their last token) ``pre_ids``/``pre_attn`` (U, P), left-padded, run
        once; row b continues prompt ``expand[b]`` with ``suf_ids`` (B, S) at positions ``suf_pos`` (B, S),
        attending to its prompt's real tokens and causally to its own. Returns the logits at all S
        positions (B, S, V). Gradients of every row flow back into the one prompt pass."""
        weights = self._weights()
        emb = self.inner.embed_tokens.weight
        dev = suf_ids.device
        U, P = pre_ids.shape
        B, S = suf_ids.shape
        prefix = None
        if P > 0:
            attn = pre_attn.bool()
            x = F.embedding(pre_ids, emb)
            pos = (pre_attn.long().cumsum(-1) - 1).clamp(min=0)
            cos, sin = self._rope(pos, x.dtype)
            causal = torch.ones((P, P), dtype=torch.bool, device=dev).tril()
            # a padded query sees only itself: a fully masked row would give NaN (in its keys' gradients too)
            allowed = (causal[None] & attn[:, None, :]) | torch.eye(P, dtype=torch.bool, device=dev)[None]
            _, kvs = self._layers(x, cos, sin, self._bias(allowed, x.dtype)[:, None], weights, keep_kv=True,
                                  last_needed=False)
            prefix = [(k[expand], v[expand]) for k, v in kvs]
            pre_allowed = attn[expand][:, None, :].expand(B, S, P)
        x = F.embedding(suf_ids, emb)
        cos, sin = self._rope(suf_pos, x.dtype)
        allowed = torch.ones((S, S), dtype=torch.bool, device=dev).tril()[None].expand(B, S, S)
        if prefix is not None:
            allowed = torch.cat((pre_allowed, allowed), -1)
        x, _ = self._layers(x, cos, sin, self._bias(allowed, x.dtype)[:, None], weights, prefix=prefix)
        return self._head(x)
