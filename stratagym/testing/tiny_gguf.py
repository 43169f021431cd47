"""Tiny GGUF files for tests of ``stratagym models import`` (written with the ``gguf`` package's
``GGUFWriter``, in milliseconds).

The real SmolLM2 GGUF takes about 25 s to import; these files exercise the same transformers GGUF
loader path in about a second: :func:`write_tiny_llama_gguf` writes a 2-layer Llama with a byte-level
BPE tokenizer (256 byte tokens plus ChatML specials and a chat template) whose large tensors are
quantized to Q4_1 like SmolLM2's, and :func:`write_unknown_arch_gguf` a well-formed GGUF of an
architecture transformers does not read.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["TINY_CHAT_TEMPLATE", "write_tiny_llama_gguf", "write_unknown_arch_gguf"]

TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (what a byte-level BPE vocabulary holds)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_tiny_llama_gguf(path: str | os.PathLike[str], *, hidden: int = 64, layers: int = 2, heads: int = 4,
                          kv_heads: int = 2, ffn: int = 128, seed: int = 0, quantize: bool = True) -> Path:
    """A random 2-layer Llama GGUF with a byte-level tokenizer; large tensors Q4_1 when ``quantize``."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    merges = ["h e", "Ġ t", "Ġ a", "i n"]
    tokens = _SPECIALS + _byte_tokens() + [m.replace(" ", "") for m in merges]
    vocab = len(tokens)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama-test")
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1 if quantize else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL] * len(_SPECIALS) + [gguf.TokenType.NORMAL] * (vocab - len(_SPECIALS)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_chat_template(TINY_CHAT_TEMPLATE)

    def tensor(name: str, shape: tuple[int, ...], *, quantizable: bool = True) -> None:
        data = (rng.standard_normal(shape) * 0.05).astype(np.float32) if len(shape) > 1 else np.ones(shape, np.float32)
        if quantize and quantizable and len(shape) > 1 and shape[-1] % 32 == 0:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q4_1)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_1)
        else:
            w.add_tensor(name, data)

    head_dim = hidden // heads
    tensor("token_embd.weight", (vocab, hidden), quantizable=False)
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,))
        tensor(f"blk.{i}.attn_q.weight", (heads * head_dim, hidden))
        tensor(f"blk.{i}.attn_k.weight", (kv_heads * head_dim, hidden))
        tensor(f"blk.{i}.attn_v.weight", (kv_heads * head_dim, hidden))
        tensor(f"blk.{i}.attn_output.weight", (hidden, heads * head_dim))
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,))
        tensor(f"blk.{i}.ffn_gate.weight", (ffn, hidden))
        tensor(f"blk.{i}.ffn_up.weight", (ffn, hidden))
        tensor(f"blk.{i}.ffn_down.weight", (hidden, ffn))
    tensor("output_norm.weight", (hidden,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_unknown_arch_gguf(path: str | os.PathLike[str], architecture: str = "wombat") -> Path:
    """A well-formed GGUF (header, metadata, one tensor) of an architecture transformers cannot read."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name(f"a {architecture} model")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
