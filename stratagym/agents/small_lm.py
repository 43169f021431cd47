"""A small causal LM sized for an env, built from scratch: a BPE tokenizer trained on the env's own text
and a Llama- or Qwen2-architecture model, both saved with ``save_pretrained``.

No pretrained model can be downloaded on the development machines, so the LLM path learns from a model the
project builds itself (expert demonstrations -> SFT -> RL, see ``docs/llm-learning.md``). Two choices make
a model of about a million parameters learn SearchQA on two CPU cores in minutes (measured in
``/work/shared/notes/llm-on-cpu.md``):

* the tokenizer is a byte-level BPE trained on the env's text (its corpus and the rendered
  demonstrations), so invented names become 1-3 tokens instead of a dozen bytes, and
* the prompt-template tags (``<search>``, ``</answer>``, ``<action>`` ...) are single tokens, so a
  well-formed turn is a handful of decisions and generation stops on one token.

The tags are *added* tokens that are not "special": the generation backends decode with
``skip_special_tokens=True`` and the tags must survive that (the env parses them). Which tags a template
needs is read off the template itself (:func:`template_tags`), never listed by hand, and
:func:`check_tokenizer_for_template` refuses a tokenizer that splits one of them, naming the fix.

Both files load through the ordinary ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` path,
so :class:`~stratagym.agents.llm.LLMPolicy`, the fused decode path, the trainer and ``stratagym eval``
use them unchanged.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from stratagym.agents.chatml import CHAT_TEMPLATE, SPECIAL_TOKENS, chatml_tokenizer
from stratagym.agents.prompts import PromptTemplate
from stratagym.atomic import publish_dir
from stratagym.errors import ConfigError

__all__ = [
    "SmallLMConfig",
    "template_tags",
    "train_tokenizer",
    "build_model",
    "check_tokenizer_for_template",
    "save_model_atomic",
    "CHAT_TEMPLATE",
]

_TAG = re.compile(r"</?[A-Za-z_][A-Za-z0-9_]*>")
_ARCHS = ("llama", "qwen2")


@dataclass(frozen=True)
class SmallLMConfig:
    """Size of the model and tokenizer (the ``model:`` section of an SFT recipe).

    The defaults are the size that learned SearchQA on a shared 2-core CPU (hidden 128, 2 layers, a
    2048-token vocabulary: 0.64M parameters; docs/llm-learning.md). A 4096-token vocabulary made every
    invented name one rare token and the model never learned to copy them (test EM 0.004 after 5
    epochs); at 2048 names are 1-3 common pieces. Hidden 256 with 4 layers (4.2M) ran at 1.2 s/step,
    too slow for a 15-minute budget. GPU users raise these freely.
    """

    arch: str = "llama"
    vocab_size: int = 2048
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    intermediate_size: int = 320
    max_position_embeddings: int = 2048
    seed: int = 0

    def validate(self) -> "SmallLMConfig":
        if self.arch not in _ARCHS:
            raise ConfigError(f"model.arch must be one of {_ARCHS}, got {self.arch!r}")
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "intermediate_size", "max_position_embeddings"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"model.hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads ({self.num_attention_heads})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError("model.num_attention_heads must be a multiple of num_key_value_heads")
        if self.vocab_size < 300:
            raise ConfigError(f"model.vocab_size must be >= 300 (256 bytes + special tokens + tags), got {self.vocab_size}")
        return self

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "SmallLMConfig":
        data = dict(data or {})
        known = set(asdict(cls()))
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown model option(s) {unknown}; valid: {sorted(known)}")
        return cls(**data).validate()


def template_tags(template: PromptTemplate) -> tuple[str, ...]:
    """The ``<tag>`` / ``</tag>`` markers a template's prompt asks the model to write, in first-seen order.

    Read off the template's own first-turn prompt for a bare question, which spells out the protocol
    (Search-R1's instruction names think/search/information/answer; the think/action prompt names
    think/action), plus its stop strings. Nothing is listed by hand, so a new template brings its tags.
    """
    messages = template.build("Question: ?", {}, (), 0)
    text = "\n".join(m["content"] for m in messages) + "\n" + "\n".join(template.stop)
    seen: dict[str, None] = {}
    for tag in _TAG.findall(text):
        seen.setdefault(tag, None)
        # a closing tag implies its opening one and vice versa
        other = tag.replace("</", "<") if tag.startswith("</") else tag.replace("<", "</", 1)
        seen.setdefault(other, None)
    return tuple(seen)


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 2048, tags: Sequence[str] = ()) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts``, with ChatML tokens and ``tags``.

    ``tags`` become added (non-special) tokens, so each is one id and survives
    ``decode(skip_special_tokens=True)``. The chat template is the Qwen-style one the tiny test model
    uses, so ``apply_chat_template`` (with ``continue_final_message`` for Search-R1's growing turn)
    works as in :class:`~stratagym.agents.llm.LLMPolicy`.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # added after training (ids after the learned vocabulary); the pre-tokenisation then splits them out
    # of any text before the merges run, so each is one id wherever it appears
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in tags])
    return chatml_tokenizer(tok)


def check_tokenizer_for_template(tokenizer: Any, template: PromptTemplate, *, where: str = "the tokenizer") -> None:
    """Refuse a tokenizer that does not hold every tag of ``template`` as one token.

    A tokenizer that splits ``</search>`` into pieces still works in principle, but a small model then
    has to learn each tag letter by letter and the clone/RL text no longer matches what the checkpoint
    was trained on; it is almost always a model built for another env family. The message names the fix.
    """
    missing = []
    for tag in template_tags(template):
        ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            missing.append(tag)
    if missing:
        raise ConfigError(
            f"{where} does not have the {template.name!r} template's tags {missing} as single tokens. "
            "Build a model for this env with `stratagym sft --config <recipe>` (it trains a tokenizer with "
            "every tag of the template), or add them yourself: tokenizer.add_tokens(" + repr(missing) + ") "
            "and model.resize_token_embeddings(len(tokenizer)), then save both with save_pretrained."
        )


def build_model(tokenizer: Any, config: SmallLMConfig = SmallLMConfig()) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (tied embeddings) for ``tokenizer``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config.validate()
    cfg_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if config.arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    model_config = cfg_cls(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(config.seed)
    model = model_cls(model_config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_model_atomic(out_dir: str | os.PathLike[str], write: Any) -> Path:
    """Run ``write(tmp_folder)`` and move the folder to ``out_dir`` only once it completed.

    A failure while writing (a full disk, a kill) leaves the previous ``out_dir`` as it was: the old
    folder is renamed aside, the new one renamed in, and only then is the old one removed
    (:func:`stratagym.atomic.publish_dir`).
    """
    return publish_dir(out_dir, write)
