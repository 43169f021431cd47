"""A fused, static-KV-cache forward for Llama/Qwen2-style decoders, used by the ``hf`` sampling loop.

Why: on small and medium models (and on CPU generally) a transformers forward per generated token is
dominated by Python overhead -- module calls, output dataclasses, mask construction, a ``DynamicCache``
that concatenates tensors every step -- not by arithmetic. For the 2-layer test model that is ~4 ms per
decode step, ~10x the cost of the maths. :class:`FusedDecoder` runs the *same* computation as
``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (RMSNorm in fp32, rotary embeddings, grouped-query SDPA,
SiLU-gated MLP, tied or untied head) as plain torch functions over the model's own parameters:

* the q/k/v and gate/up projections are concatenated once per ``generate`` call (one matmul each),
  stored transposed (``(in, out)``, the layout MKL streams fastest at a few rows per step), with the
  RMSNorm weights folded into the matrices that follow them in fp32 (``(x * r * w) @ W.T == (x * r) @
  (W * w).T``);
* keys and values live in a preallocated ``(B, kv_heads, capacity, head_dim)`` cache written in place,
  with an additive key mask updated in place instead of a rebuilt 4-D mask;
* identical prompts (the G copies of a group rollout) are prefilled once and their cache rows copied.

It is exact, not an approximation: the trainer re-scores samples with the transformers model and the
sampling log-probs agree within float rounding (tests compare logits with the transformers forward and
re-scored log-probs with sampled ones). Models it does not recognise (other architectures, peft/LoRA
wrappers, quantised or replaced layers, sliding-window or dynamic RoPE configs) fall back to the
transformers loop: :func:`fused_decoder_for` returns None and says why in :func:`unsupported_reason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

import torch
import torch.nn.functional as F

__all__ = ["FusedDecoder", "PrefixSource", "causal_lm", "fused_decoder_for", "unsupported_reason"]

_ARCHS = ("LlamaForCausalLM", "Qwen2ForCausalLM")
_STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def _rope_type(cfg: Any) -> str:
    rp = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if not isinstance(rp, dict):
        return "unknown"
    return str(rp.get("rope_type", rp.get("type", "default")) or "default")


#: (device type, dtype) pairs where the fused decoder has been checked against the transformers forward
#: (tests/agents/test_fused_decode.py): float32 to 1e-5, bfloat16 as close to the float32 forward as the
#: transformers bf16 forward is (bf16 rounds differently in each kernel order; on SmolLM2 both are 0.06
#: nats from fp32 on average, 0.5-0.6 at worst, over random tokens). Elsewhere (CUDA, fp16) it has never run,
#: so it stays off unless forced (``policy.fused_decode: force``), and the transformers forward decodes.
VERIFIED = frozenset({("cpu", torch.float32), ("cpu", torch.bfloat16)})


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers causal LM inside a peft model (its LoRA layers injected), or ``model`` itself."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) and hasattr(model, "peft_config") else model


def _lora_reason(lin: torch.nn.Module) -> Optional[str]:
    """None when ``lin`` is a peft LoRA linear whose output the merged weight ``W + scale * B @ A`` gives
    (plain LoRA, unmerged, no bias of its own, no DoRA or other variant), else why not."""
    base = getattr(lin, "base_layer", None)
    if type(base) is not torch.nn.Linear or not hasattr(lin, "lora_A") or not hasattr(lin, "get_delta_weight"):
        return "replaced linear layers (quantisation, adapters other than LoRA)"
    if getattr(lin, "merged", False) or getattr(lin, "fan_in_fan_out", False):
        return "merged or fan-in-fan-out LoRA layers"
    for name in lin.active_adapters:
        if name not in lin.lora_A:
            continue
        if (getattr(lin, "lora_variant", None) or {}).get(name) is not None or (getattr(lin, "use_dora", None) or {}).get(name):
            return "LoRA variants (DoRA, ...)"
        if (getattr(lin, "lora_bias", None) or {}).get(name):
            return "LoRA with its own bias"
    return None


def _weight_bias(lin: torch.nn.Module) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The effective weight and bias of a linear layer: a plain ``nn.Linear``'s own, or a LoRA layer's
    base weight plus the active adapters' ``scale * B @ A`` (peft's own ``get_delta_weight``, computed in
    fp32 and rounded once to the base dtype), so sampling runs one matmul per projection."""
    if type(lin) is torch.nn.Linear:
        return lin.weight, lin.bias
    base = lin.base_layer
    if getattr(lin, "disable_adapters", False):
        return base.weight, base.bias
    active = [a for a in lin.active_adapters if a in lin.lora_A]
    if not active:
        return base.weight, base.bias
    delta = sum(lin.get_delta_weight(a).float() for a in active)
    return (base.weight.float() + delta).to(base.weight.dtype), base.bias


class _Lin:
    """A linear layer's effective weight and bias (see :func:`_weight_bias`), as :func:`_cat_bias` reads them."""

    def __init__(self, lin: torch.nn.Module, cast: Any = lambda t: t):
        self.weight, self.bias = map(cast, _weight_bias(lin))
        self.out_features = self.weight.shape[0]


def unsupported_reason(model: torch.nn.Module, *, force: bool = False, lora: bool = True,
                       dtype: Optional[torch.dtype] = None) -> Optional[str]:
    """None when :class:`FusedDecoder` reproduces ``model``'s forward exactly, else why not. ``force``
    also allows devices and dtypes outside :data:`VERIFIED`; ``dtype``: the dtype it would decode in
    (default: the weights'). A peft LoRA model is decoded with its
    adapters merged into the weights (the same products up to float rounding); ``lora=False`` refuses
    LoRA layers (for code that reads the weights of ``nn.Linear`` layers itself)."""
    model = causal_lm(model)
    name = type(model).__name__
    if name not in _ARCHS:
        return f"architecture {name} (fused decoding covers {', '.join(_ARCHS)})"
    cfg = model.config
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act {getattr(cfg, 'hidden_act', None)!r}"
    if _rope_type(cfg) not in _STATIC_ROPE:
        return f"rope type {_rope_type(cfg)!r}"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return "sliding-window layers"
    if getattr(cfg, "pretraining_tp", 1) not in (None, 1):
        return "pretraining_tp > 1"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "unexpected module layout"
    linears = [model.lm_head]
    for layer in inner.layers:
        a, m = layer.self_attn, layer.mlp
        linears += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
        if any(hasattr(a, n) for n in ("q_norm", "k_norm")):
            return "q/k norms"
    for lin in linears:
        if type(lin) is not torch.nn.Linear:
            why = _lora_reason(lin) if lora else "replaced linear layers (LoRA, quantisation)"
            if why is not None:
                return why
    if type(inner.embed_tokens) is not torch.nn.Embedding:
        return "replaced embedding"
    weight = model.lm_head.weight
    dtype = dtype or weight.dtype
    if not force and (weight.device.type, dtype) not in VERIFIED:
        return (f"{weight.device.type} / {dtype}: fused decoding has only been checked on CPU in float32 "
                "and bfloat16 (policy.fused_decode: force uses it anyway)")
    return None


def fused_decoder_for(model: torch.nn.Module, *, force: bool = False,
                      dtype: Optional[torch.dtype] = None) -> Optional["FusedDecoder"]:
    """A :class:`FusedDecoder` over ``model``'s current weights, or None if it is not supported.
    ``dtype``: decode in this dtype from a copy of the weights rounded to it (fp32 master weights that
    train under autocast sample in the autocast dtype); it must be a verified one unless ``force``."""
    supported = unsupported_reason(model, force=force, dtype=dtype) is None
    return FusedDecoder(model, dtype=dtype) if supported else None


@dataclass
class _Layer:
    ln1: Optional[torch.Tensor]
    ln2: Optional[torch.Tensor]
    w_qkv: torch.Tensor
    b_qkv: Optional[torch.Tensor]
    w_o: torch.Tensor
    b_o: Optional[torch.Tensor]
    w_gu: torch.Tensor
    b_gu: Optional[torch.Tensor]
    w_down: torch.Tensor
    b_down: Optional[torch.Tensor]


@dataclass
class PrefixSource:
    """Keys and values of the first ``length`` tokens of a sequence: ``kv[layer][row, :, start:start+length]``
    (keys then values of every kv head, as :class:`FusedDecoder` lays out its cache)."""

    kv: list[torch.Tensor]
    row: int
    start: int
    length: int

    def prefix(self, length: int) -> "PrefixSource":
        """The same source cut to its first ``length`` tokens."""
        return PrefixSource(self.kv, self.row, self.start, min(int(length), self.length))


def _cat_bias(*lins: torch.nn.Linear) -> Optional[torch.Tensor]:
    if all(lin.bias is None for lin in lins):
        return None
    return torch.cat([lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.out_features) for lin in lins])


class FusedDecoder:
    """Prefill + one-token steps over a static KV cache (see the module docstring).

    Built per ``generate`` call (weights change after every optimizer step; concatenating them costs
    one copy of the attention and MLP input projections). Usage::

        dec = FusedDecoder(model)
        logits = dec.prefill(ids, attn, expand, capacity)   # (B, V) next-token logits
        logits = dec.step(tokens)                            # (B, V), repeat
    """

    @torch.no_grad()
    def __init__(self, model: torch.nn.Module, dtype: Optional[torch.dtype] = None):
        model = causal_lm(model)
        cfg = model.config
        inner = model.model
        self.nh = int(cfg.num_attention_heads)
        self.nkv = int(getattr(cfg, "num_key_value_heads", None) or self.nh)
        self.hd = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh)
        self.scaling = self.hd**-0.5
        self.eps = float(cfg.rms_norm_eps)
        cast = (lambda t: t) if dtype is None else (lambda t: None if t is None else t.to(dtype))
        self.embed = cast(inner.embed_tokens.weight)
        self.norm = cast(inner.norm.weight)
        self.head_w, self.head_b = map(cast, _weight_bias(model.lm_head))
        self.inv_freq = inner.rotary_emb.inv_freq
        self.rope_scale = float(getattr(inner.rotary_emb, "attention_scaling", 1.0))
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        # fp32: RMSNorm weights are folded into the matrices that follow them (the same products up to
        # float rounding); other dtypes round the normed activations first, as transformers does
        self.fold = self.dtype == torch.float32
        self.layers: list[_Layer] = []
        for layer in inner.layers:
            at, ml = layer.self_attn, layer.mlp
            a = SimpleNamespace(**{n: _Lin(getattr(at, n), cast) for n in ("q_proj", "k_proj", "v_proj", "o_proj")})
            m = SimpleNamespace(**{n: _Lin(getattr(ml, n), cast) for n in ("gate_proj", "up_proj", "down_proj")})
            ln1, ln2 = cast(layer.input_layernorm.weight), cast(layer.post_attention_layernorm.weight)
            w_qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            w_gu = torch.cat([m.gate_proj.weight, m.up_proj.weight])
            if self.fold:  # (x * r * ln) @ W.T == (x * r) @ (W * ln).T: one op less per norm
                w_qkv, w_gu, ln1, ln2 = w_qkv * ln1, w_gu * ln2, None, None
            # weights stored transposed, (in, out) contiguous: at a few rows per step the product reads
            # every weight once, and MKL streams this layout faster than the (out, in) one
            self.layers.append(_Layer(
                ln1=ln1, ln2=ln2, w_qkv=w_qkv.t().contiguous(), b_qkv=_cat_bias(a.q_proj, a.k_proj, a.v_proj),
                w_o=a.o_proj.weight.t().contiguous(), b_o=a.o_proj.bias, w_gu=w_gu.t().contiguous(),
                b_gu=_cat_bias(m.gate_proj, m.up_proj), w_down=m.down_proj.weight.t().contiguous(),
                b_down=m.down_proj.bias,
            ))
        self.head_t = (self.head_w * self.norm if self.fold else self.head_w).t().contiguous()
        self._kv: list[torch.Tensor] = []
        self._key_bias = torch.zeros(0, 0)
        self._pos = torch.zeros(0, dtype=torch.long)
        self._n = self._n0 = 0
        self._step_cos: Optional[torch.Tensor] = None
        self._step_sin: Optional[torch.Tensor] = None

    # ---- pieces of the transformers forward ----------------------------------------------------------
    @staticmethod
    def _linear(x: torch.Tensor, w_t: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
        """``F.linear`` with the weight given transposed, (in, out)."""
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.mm(x2, w_t) if b is None else torch.addmm(b, x2, w_t)
        return y.view(*x.shape[:-1], w_t.shape[1])

    def _rms(self, x: torch.Tensor, w: Optional[torch.Tensor]) -> torch.Tensor:
        if w is None:  # fp32, weight folded into the next matrix
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * h.to(self.dtype)

    def _rope_tables(self, length: int) -> None:
        """cos/sin per position, laid out for all q, k and v heads at once: v heads get cos 1, sin 0
        (left unchanged exactly), and the sign of ``rotate_half`` is folded into sin so that
        ``rotate_half(x) * sin == roll(x, hd/2) * signed_sin`` (one op instead of four)."""
        pos = torch.arange(length, device=self.device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq.to(device=self.device, dtype=torch.float32)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(self.dtype)
        sin = (emb.sin() * self.rope_scale).to(self.dtype)
        half = self.hd // 2
        sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        nqk, nkv = self.nh + self.nkv, self.nkv
        # (length, heads, hd)
        self._cos = torch.cat((cos[:, None].expand(-1, nqk, -1), torch.ones_like(cos)[:, None].expand(-1, nkv, -1)), 1)
        self._sin = torch.cat((sin[:, None].expand(-1, nqk, -1), torch.zeros_like(sin)[:, None].expand(-1, nkv, -1)), 1)

    def _forward(self, x: torch.Tensor, pos: torch.Tensor, start: int, mask: torch.Tensor, rows: Optional[torch.Tensor]) -> torch.Tensor:
        """``x``: (N, S, H) embeddings at cache slots ``start..start+S``; ``pos``: (N, S) rotary positions;
        ``mask``: bool or additive float (N, 1, S, start+S). With ``rows`` (B,), the new keys/values of row ``rows[b]`` go to
        cache row b (prefill of shared prompts). Returns the last position's final hidden state (N, H)."""
        N, S, _ = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        if S == 1 and self._step_cos is not None:  # decode: this step's rows of the per-row tables
            t = start - self._n0
            cos, sin = self._step_cos[:, t], self._step_sin[:, t]  # (N, heads, 1, hd)
        else:
            cos = self._cos[pos].transpose(1, 2)  # (N, heads, S, hd)
            sin = self._sin[pos].transpose(1, 2)
        half = hd // 2
        end = start + S
        for li, L in enumerate(self.layers):
            h = self._rms(x, L.ln1)
            qkv = self._linear(h, L.w_qkv, L.b_qkv).view(N, S, nh + 2 * nkv, hd).transpose(1, 2)
            qkv = qkv * cos + qkv.roll(half, -1) * sin  # rotary on q and k; v unchanged
            q, kv = qkv[:, :nh], qkv[:, nh:]
            cache = self._kv[li]
            if rows is None:
                cache[:, :, start:end] = kv
                keys, values = cache[:, :nkv, :end], cache[:, nkv:, :end]
            else:
                cache[:, :, start:end] = kv[rows]
                keys, values = kv[:, :nkv], kv[:, nkv:]  # the unique prompts attend to their own keys
            if S == 1 and rows is None and mask.dtype != torch.bool and self.dtype != torch.float32:
                o = self._attend_one(q, keys, values, mask)
            else:
                o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling,
                                                   enable_gqa=nh != nkv)
            x = x + self._linear(o.transpose(1, 2).reshape(N, S, nh * hd), L.w_o, L.b_o)
            h = self._rms(x, L.ln2)
            g, u = self._linear(h, L.w_gu, L.b_gu).chunk(2, dim=-1)
            x = x + self._linear(F.silu(g) * u, L.w_down, L.b_down)
        return self._rms(x[:, -1], None if self.fold else self.norm)

    def _attend_one(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Attention of one new token per row: ``q`` (N, nh, 1, hd) over ``keys``/``values`` (N, nkv, T, hd)
        with the additive ``bias`` (N, 1, 1, T). The query heads that share a kv head are one matrix
        (transformers' ``repeat_kv`` order: kv head i serves query heads i*g .. i*g+g-1), so two small
        batched matmuls do it; the softmax runs in fp32. Used in bf16/fp16: there CPU SDPA's flash kernel
        spends ~8 ms a layer on SmolLM2 at 32 rows and 264 keys (65 % of a decode step; the step goes from
        369 to 221 ms, one core). In fp32 its kernel is faster than these matmuls plus the copy of the
        strided key slice (288 vs 402 ms a step), so fp32 keeps SDPA."""
        N, nh, _, hd = q.shape
        nkv = keys.shape[1]
        qg = q.reshape(N, nkv, nh // nkv, hd)
        scores = torch.matmul(qg, keys.transpose(-1, -2)).float() * self.scaling + bias.float()
        probs = torch.softmax(scores, dim=-1).to(values.dtype)
        return torch.matmul(probs, values).reshape(N, nh, 1, hd)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return self._linear(h, self.head_t, self.head_b)

    # ---- public -------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, expand: torch.Tensor, capacity: int,
                reuse: Optional[list[Optional["PrefixSource"]]] = None) -> torch.Tensor:
        """Run the (left-padded) distinct prompts ``ids``/``attn`` (U, P) and lay out a cache for B rows,
        row b holding prompt ``expand[b]``, with room for ``capacity`` slots. Returns (B, V) logits.

        ``reuse[u]``: keys and values another decoder already computed for the first tokens of prompt u
        (:class:`PrefixSource`, from :meth:`prefix_source` of a decoder over the same weights); only the
        rest of each prompt is run (see :meth:`_prefill_reusing`)."""
        U, P = ids.shape
        dev = self.device
        ids, attn, expand = ids.to(dev), attn.to(dev).bool(), expand.to(dev)
        self._rope_tables(capacity + 1)
        self._step_cos = self._step_sin = None  # the prefill itself uses the position tables
        pos = (attn.long().cumsum(-1) - 1).clamp(min=0)
        if reuse is not None and any(r is not None for r in reuse):
            h = self._prefill_reusing(ids, attn, pos, reuse)
            self._kv = [self._expand_cache(work, expand, capacity) for work in self._kv]
        else:
            B = int(expand.numel())
            # keys then values of each layer in one tensor: one in-place write per layer and step
            self._kv = [torch.zeros((B, 2 * self.nkv, capacity, self.hd), dtype=self.dtype, device=dev) for _ in self.layers]
            causal = torch.ones((P, P), dtype=torch.bool, device=dev).tril()
            # a padded query sees only itself: a fully masked row would give NaN and leak into the cache
            mask = (causal[None] & attn[:, None, :]) | torch.eye(P, dtype=torch.bool, device=dev)[None]
            h = self._forward(F.embedding(ids, self.embed), pos, 0, mask[:, None], expand)
        self._after_prefill(attn, pos, expand, capacity)
        return self._logits(h)[expand]

    def _expand_cache(self, work: torch.Tensor, expand: torch.Tensor, capacity: int) -> torch.Tensor:
        """The B-row cache of ``capacity`` slots whose first slots hold ``work``'s row ``expand[b]``."""
        cache = work.new_zeros((int(expand.numel()), work.shape[1], capacity, work.shape[3]))
        cache[:, :, : work.shape[2]] = work[expand]
        return cache

    def _prefill_reusing(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor,
                         reuse: list[Optional["PrefixSource"]]) -> torch.Tensor:
        """Prefill of prompts whose first tokens' keys/values are known. Prompt u (p_u real tokens, left
        padded to P) reuses ``reuse[u].length`` of them (copied into its slots); the last S slots of every
        prompt, S = the longest remainder, run as queries (a prompt with a shorter remainder recomputes a
        few known slots: the same values up to float rounding), attending causally to all its real slots.
        Keys and values depend only on the tokens up to them (causal attention, positions counted from
        the first real token), so this is the same computation as running the whole prompt."""
        U, P = ids.shape
        dev = self.device
        lens = attn.sum(-1).tolist()
        known = [0 if r is None else r.length for r in reuse]
        S = max(n - k for n, k in zip(lens, known))
        self._kv = [torch.zeros((U, 2 * self.nkv, P, self.hd), dtype=self.dtype, device=dev) for _ in self.layers]
        for u, r in enumerate(reuse):
            if r is None or r.length == 0:
                continue
            dst = P - lens[u]
            for work, src in zip(self._kv, r.kv):
                work[u, :, dst : dst + r.length] = src[r.row, :, r.start : r.start + r.length]
        q0 = P - S
        slots = torch.arange(P, device=dev)
        causal = slots[None, :] <= slots[q0:, None]  # (S, P)
        mask = (causal[None] & attn[:, None, :]) | (slots[None, :] == slots[q0:, None])[None]
        return self._forward(F.embedding(ids[:, q0:], self.embed), pos[:, q0:], q0, mask[:, None], None)

    def _after_prefill(self, attn: torch.Tensor, pos: torch.Tensor, expand: torch.Tensor, capacity: int) -> None:
        B, P = int(expand.numel()), attn.shape[1]
        dev = self.device
        # additive key mask (0 / -inf) kept up to date in place: SDPA would convert a boolean one per layer
        self._key_bias = torch.full((B, capacity), float("-inf"), dtype=self.dtype, device=dev)
        self._key_bias[:, :P].masked_fill_(attn[expand], 0.0)
        self._pos = pos[expand, -1] + 1
        self._n = self._n0 = P
        # rotary rows of every future decode step, gathered once: (B, steps, heads, 1, hd)
        steps = self._pos[:, None] + torch.arange(capacity - P, device=dev)[None, :]
        self._step_cos = self._cos[steps][:, :, :, None]
        self._step_sin = self._sin[steps][:, :, :, None]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Go on decoding only cache rows ``rows`` (in that order): finished rows of a batch stop costing
        decode time. Copies the kept rows' cache; the previous cache tensors stay valid for any
        :class:`PrefixSource` taken from them before."""
        self._kv = [c.index_select(0, rows) for c in self._kv]
        self._key_bias = self._key_bias.index_select(0, rows)
        self._pos = self._pos.index_select(0, rows)
        if self._step_cos is not None:
            self._step_cos = self._step_cos.index_select(0, rows)
            self._step_sin = self._step_sin.index_select(0, rows)

    def prefix_source(self, row: int, start: int) -> "PrefixSource":
        """The keys/values this decoder holds for cache row ``row`` from slot ``start`` (its first real
        token) up to the last token it has run, for a later :meth:`prefill` over the same weights."""
        return PrefixSource(self._kv, row, start, self._n - start)

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row (B,) and return the next-token logits (B, V)."""
        if self._n >= self._key_bias.shape[1]:
            raise RuntimeError("fused decoder cache is full")
        B = tokens.shape[0]
        slot = self._n
        self._key_bias[:, slot] = 0.0
        self._n += 1
        x = F.embedding(tokens.view(B, 1), self.embed)
        h = self._forward(x, self._pos.view(B, 1), slot, self._key_bias[:, None, None, : self._n], None)
        self._pos = self._pos + 1
        return self._logits(h)
