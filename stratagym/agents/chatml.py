"""Qwen's ChatML conventions for the tokenizers stratagym trains itself: the chat template, the special
tokens, and the wrapping of a trained ``tokenizers.Tokenizer`` as a transformers tokenizer.

Both models stratagym builds from scratch use them: the tiny test model (:mod:`stratagym.agents.tiny_lm`)
and the small models sized for an env (:mod:`stratagym.agents.small_lm`, which trains the tokenizers of
both). They sit here, below both, so that neither imports the other for them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "chatml_tokenizer"]

#: Qwen2.5-style chat template (ChatML), enough for ``apply_chat_template(add_generation_prompt=True)``.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def chatml_tokenizer(tok: Any) -> Any:
    """A trained ``tokenizers.Tokenizer`` as a transformers fast tokenizer with Qwen's ChatML special
    tokens and chat template, padding on the left (for batched generation)."""
    from transformers import PreTrainedTokenizerFast  # cost at import time: transformers, only when building

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast
