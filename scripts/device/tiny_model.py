"""A 2-layer, 16-wide Llama with SmolLM2's tokenizer (3 MB of weights), for scripts/device/smoke.sh: it runs the whole
SFT -> export -> eval path of a LoRA recipe on the GPU in seconds, before the real model's second half arrives."""

import sys

import torch
from transformers import AutoConfig, AutoTokenizer, LlamaConfig, LlamaForCausalLM

SRC = "build/models/smollm2-135m-instruct-q4-1"
out = sys.argv[1]
base = AutoConfig.from_pretrained(SRC)
cfg = LlamaConfig(vocab_size=base.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=8192, tie_word_embeddings=True,
                  bos_token_id=base.bos_token_id, eos_token_id=base.eos_token_id)
torch.manual_seed(0)
LlamaForCausalLM(cfg).save_pretrained(out)
AutoTokenizer.from_pretrained(SRC).save_pretrained(out)
