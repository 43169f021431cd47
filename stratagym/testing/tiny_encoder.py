"""Build a tiny BERT-style encoder and its WordPiece tokenizer fully offline (for the dense retriever).

The dense retrieval path (``AutoTokenizer`` / ``AutoModel.from_pretrained``, E5 prefixes, mean pooling,
faiss) must run in tests without a model hub. This trains a WordPiece tokenizer on local text (by
default the bundled SearchQA corpus), builds a randomly initialised ``BertModel`` and saves both with
``save_pretrained`` (safetensors) into a folder keyed by the configuration, so it is built once (~1 s).
A random encoder retrieves by lexical overlap at best: tests use it for the plumbing and for exact
comparisons between faiss index kinds, and the real MiniLM model for retrieval quality.

    >>> from stratagym.testing.tiny_encoder import tiny_encoder_path
    >>> path = tiny_encoder_path()         # build/tiny-models/bert-h64-l2-v3000-<hash>
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from stratagym.atomic import publish_folder
from stratagym.envs.search_qa.data import load_corpus
from stratagym.paths import cache_dir as project_cache

__all__ = ["TinyEncoderConfig", "build_tiny_encoder", "tiny_encoder_path"]


@dataclass(frozen=True)
class TinyEncoderConfig:
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 128
    vocab_size: int = 3000
    version: int = 2  # bump when the build recipe changes (invalidates cached copies)
    max_position: int = 512
    seed: int = 0

    def key(self) -> str:
        h = hashlib.blake2b(json.dumps(asdict(self), sort_keys=True).encode(), digest_size=4).hexdigest()
        return f"bert-h{self.hidden_size}-l{self.num_layers}-v{self.vocab_size}-{h}"


def _default_texts() -> list[str]:
    return load_corpus("bundled").contents


def build_tiny_encoder(out_dir: str | os.PathLike, config: TinyEncoderConfig = TinyEncoderConfig(),
                       texts: Iterable[str] | None = None) -> Path:
    """Train the tokenizer on ``texts``, build a random BERT, save both to ``out_dir`` (atomically)."""
    import torch
    from tokenizers import BertWordPieceTokenizer, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    texts = list(texts) if texts is not None else _default_texts()
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        wp = BertWordPieceTokenizer(lowercase=True)
        wp.train_from_iterator(texts, vocab_size=config.vocab_size, min_frequency=1, show_progress=False,
                               special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        wp.post_processor = processors.BertProcessing(("[SEP]", wp.token_to_id("[SEP]")), ("[CLS]", wp.token_to_id("[CLS]")))
        # (BertTokenizerFast(vocab_file=...) silently drops the vocabulary in transformers 5: wrap the object.)
        tok = PreTrainedTokenizerFast(tokenizer_object=wp._tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                      cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                      model_max_length=config.max_position)
        tok.save_pretrained(str(staging))
        torch.manual_seed(config.seed)
        model = BertModel(BertConfig(
            vocab_size=len(tok), hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads, intermediate_size=config.intermediate_size,
            max_position_embeddings=config.max_position, pad_token_id=tok.pad_token_id,
        ))
        model.save_pretrained(str(staging), safe_serialization=True)
        publish_folder(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def tiny_encoder_path(config: TinyEncoderConfig = TinyEncoderConfig(), cache_dir: str | os.PathLike | None = None) -> Path:
    """The cached tiny encoder for ``config`` (trained on the bundled corpus), built on first use."""
    if cache_dir is None:
        cache_dir = project_cache("tiny-models")
    path = Path(cache_dir) / config.key()
    if not (path / "config.json").exists():
        build_tiny_encoder(path, config)
    return path
