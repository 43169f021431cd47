"""Build a tiny Qwen2-style causal LM and its BPE tokenizer fully offline.

No model hub is reachable on development machines or CI, yet the trainer, the agents and the eval CLI
must be tested through the real ``from_pretrained`` code paths. This module trains a byte-level BPE
tokenizer on local text, wraps it with a Qwen-style chat template, builds a randomly initialised
``Qwen2ForCausalLM`` and saves both with ``save_pretrained`` (safetensors). The result is cached in a
folder keyed by the configuration, so tests and demos build it once (a few seconds).

    >>> from stratagym.agents.tiny_lm import tiny_lm_path
    >>> path = tiny_lm_path()              # build/tiny-models/qwen2-h64-l2-v2048-<hash>
    >>> AutoModelForCausalLM.from_pretrained(path)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from stratagym.agents.chatml import CHAT_TEMPLATE  # re-exported (in __all__); part of the model's cache key
from stratagym.atomic import publish_dir
from stratagym.paths import cache_dir

__all__ = ["TinyLMConfig", "build_tiny_lm", "tiny_lm_path", "default_cache_dir", "CHAT_TEMPLATE"]

# Local training text: the tags and vocabulary of stratagym's envs, so tokenisation of prompts is sane.
_CORPUS = """
You are a helpful assistant. Answer the question. You must conduct reasoning inside <think> and </think>
first every time you get new information. After reasoning, if you find you lack some knowledge, you can
call a search engine by <search> query </search> and it will return the top searched results between
<information> and </information>. If you find no further external knowledge needed, you can directly
provide the answer inside <answer> and </answer>, without detailed illustrations. For example,
<answer> Beijing </answer>. Question: who founded the city of Varnholt? Doc 1(Title: Varnholt) Varnholt
is a port city. You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a
countertop 1, a drawer 2, a fridge 1, a microwave 1, a sinkbasin 1, a stoveburner 3 and a toaster 1.
Your task is to: put a clean apple in fridge. go to countertop 1. take apple 1 from countertop 1. open
fridge 1. move apple 1 to fridge 1. heat mug 2 with microwave 1. cool tomato 1 with fridge 1. clean
knife 1 with sinkbasin 1. use desklamp 1. examine book 2. inventory. look. Nothing happens.
WebShop [SEP] Instruction: [SEP] i need a long lasting blue water bottle, and price lower than 30.00
dollars [SEP] Search. search[blue water bottle] click[Back to Search] click[Next >] click[< Prev]
click[Buy Now] click[Description] click[Features] click[Reviews] click[b07x1y2z3] Price: $12.99
Rating: N.A. size small medium large color red green blue black white. <action> </action>
0 1 2 3 4 5 6 7 8 9 . , ; : ! ? ' " ( ) [ ] { } < > / \\ - _ = + * & % $ # @
"""


@dataclass(frozen=True)
class TinyLMConfig:
    """Size of the tiny model; the defaults give ~0.3M parameters and generate in milliseconds on CPU."""

    vocab_size: int = 2048
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 4096
    seed: int = 0

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True) + CHAT_TEMPLATE + _CORPUS
        digest = hashlib.blake2b(blob.encode(), digest_size=6).hexdigest()
        return f"qwen2-h{self.hidden_size}-l{self.num_hidden_layers}-v{self.vocab_size}-{digest}"


def default_cache_dir() -> Path:
    """``tiny-models`` under the project cache (:func:`stratagym.paths.cache_dir`)."""
    return cache_dir("tiny-models")


def _train_tokenizer(vocab_size: int):
    from stratagym.agents.small_lm import train_tokenizer  # cost at import time: torch; a built model needs none

    lines = [line for line in _CORPUS.splitlines() if line.strip()]
    return train_tokenizer(lines * 4, vocab_size=vocab_size)


def build_tiny_lm(out_dir: str | os.PathLike[str], config: TinyLMConfig = TinyLMConfig()) -> Path:
    """Build the tokenizer and model and save both into ``out_dir`` (written atomically)."""
    from stratagym.agents.small_lm import SmallLMConfig, build_model  # cost at import time: torch (see above)

    out = Path(out_dir)
    tokenizer = _train_tokenizer(config.vocab_size)
    model = build_model(tokenizer, SmallLMConfig(arch="qwen2", **asdict(config)))

    def write(folder: Path) -> None:
        tokenizer.save_pretrained(folder)
        model.save_pretrained(folder, safe_serialization=True)

    # a folder without config.json is debris of something else and is replaced; one with it is a copy
    # another process finished first (identical: the build is deterministic) and is kept
    publish_dir(out, write, keep_if=lambda folder: (folder / "config.json").exists())
    return out


def tiny_lm_path(config: TinyLMConfig = TinyLMConfig(), cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of the cached tiny model for ``config``, building it on first use."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = root / config.key()
    if not (path / "config.json").exists():
        build_tiny_lm(path, config)
    return path


if __name__ == "__main__":
    print(tiny_lm_path())

