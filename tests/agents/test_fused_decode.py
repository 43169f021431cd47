"""The fused static-KV decode path reproduces the transformers forward exactly (Qwen2 and Llama, biases,
grouped-query attention, left padding, shared prompts), samples the same tokens as the transformers loop,
decodes LoRA models with their adapters merged, and is skipped for models it does not cover (DoRA)."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from stratagym.agents.backends import HFGenerator, SamplingConfig
from stratagym.agents.inference.fused_decode import FusedDecoder, fused_decoder_for, unsupported_reason
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.policy import GenerationRequest
from stratagym.agents.tiny_lm import tiny_lm_path


def _tiny_llama(attention_bias: bool, mlp_bias: bool, kv_heads: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, attention_bias=attention_bias, mlp_bias=mlp_bias,
                      max_position_embeddings=128, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # biases start at zero: make them matter
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _qwen2() -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_lm_path()).eval()


def _random_left_padded(vocab: int, lengths: tuple[int, ...]) -> tuple[list[list[int]], torch.Tensor, torch.Tensor, torch.Generator]:
    """Random prompts of ``lengths`` (seed 0), their left-padded ids and attention mask, and the generator
    that drew them (for the tokens that follow)."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    P = max(map(len, prompts))
    ids = torch.zeros(len(prompts), P, dtype=torch.long)
    attn = torch.zeros(len(prompts), P, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p):], attn[i, P - len(p):] = torch.tensor(p), 1
    return prompts, ids, attn, g


@pytest.mark.parametrize("make", [
    _qwen2,
    lambda: _tiny_llama(False, False, 4),
    lambda: _tiny_llama(True, True, 2),
], ids=["qwen2-gqa-qkv-bias", "llama-mha", "llama-gqa-all-biases"])
def test_fused_logits_equal_transformers_forward(make):
    model = make()
    assert unsupported_reason(model) is None
    vocab = model.config.vocab_size
    prompts, ids, attn, g = _random_left_padded(vocab, (5, 11, 1))
    P = ids.shape[1]
    expand = torch.tensor([1, 0, 0, 2, 1])  # rows share prompts, in any order
    dec = FusedDecoder(model)
    logits = dec.prefill(ids, attn, expand, P + 8)
    seqs = [list(prompts[int(e)]) for e in expand]
    worst = 0.0
    with torch.no_grad():
        for _ in range(7):
            for b, s in enumerate(seqs):
                ref = model(input_ids=torch.tensor([s])).logits[0, -1]
                worst = max(worst, float((ref - logits[b]).abs().max()))
            tok = torch.randint(3, vocab, (len(seqs),), generator=g)
            for b in range(len(seqs)):
                seqs[b].append(int(tok[b]))
            logits = dec.step(tok)
    assert worst < 1e-5


def test_fused_and_transformers_loops_sample_the_same_tokens():
    model = _qwen2()
    tok = LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer
    prompts = [tok("put a clean apple in fridge")["input_ids"]] * 3 + [tok("search[blue water bottle]")["input_ids"]] * 3
    cfg = SamplingConfig(temperature=0.9, top_k=50, top_p=0.95, max_new_tokens=20)
    runs = {}
    for fused in (True, False):
        gen = HFGenerator(tok, lambda: model, fused=fused)
        torch.manual_seed(3)
        sampled = gen.generate(prompts, [], cfg)
        greedy = gen.generate(prompts, [], cfg, greedy=True)
        runs[fused] = (sampled, greedy)
    for a, b in zip(runs[True][0] + runs[True][1], runs[False][0] + runs[False][1]):
        assert a.response_ids == b.response_ids and a.finish_reason == b.finish_reason and a.text == b.text
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < 1e-5
    # G copies of a prompt are independent samples, not one sample repeated
    assert len({tuple(r.response_ids) for r in runs[True][0][:3]}) > 1


@pytest.mark.parametrize("fused", [True, False])
def test_a_seeded_prompt_samples_the_same_whatever_shares_its_batch(fused):
    """Per-prompt seeds (the gateway's seeded requests): a prompt with seed s gives the same completion alone,
    beside other prompts, in another position, with other rows finishing early (the fused decoder drops
    them) and whatever the global stream's state; unseeded rows of the batch draw from the global stream
    exactly as if no row were seeded."""
    model = _qwen2()
    tok = LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer
    a, b, c = (tok(t)["input_ids"] for t in ("put a clean apple in fridge", "search[blue water bottle]", "go to"))
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=24)
    gen = HFGenerator(tok, lambda: model, fused=fused, prefix_cache=False)

    def run(prompts, seeds, state, stop=()):
        torch.manual_seed(state)
        return [(r.response_ids, r.finish_reason) for r in gen.generate(prompts, list(stop), cfg, seeds=seeds)]

    alone = run([a], [11], 0)[0]
    assert run([b, a, c], [None, 11, 5], 1)[1] == alone
    stops = (" ", "e")  # the other rows stop early: the fused decoder drops them mid-call
    assert run([c, c, c, a], [5, 6, None, 11], 2, stops)[3] == run([a], [11], 3, stops)[0]
    # a different seed, or another prompt with the same seed, samples something else
    assert run([a], [12], 0)[0] != alone and run([a, a], [11, 12], 0)[0] == alone
    # the unseeded rows draw what they draw in a batch with no seeds at all
    assert run([b, a, c], [None, 11, None], 4)[0::2] == run([b, a, c], None, 4)[0::2]
    # greedy ignores seeds; a seed list of the wrong length is refused
    assert gen.generate([a], [], cfg, greedy=True, seeds=[3]) == gen.generate([a], [], cfg, greedy=True)
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        gen.generate([a], [], cfg, seeds=[1, 2])


def test_fused_sampling_is_seeded_and_rescores_exactly():
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=32, template="plain"))
    reqs = [GenerationRequest("hello there", {"step": 0}, (), "x")] * 4 + [GenerationRequest("a longer prompt about fridges", {"step": 0}, (), "x")] * 4
    outs = []
    for _ in range(2):
        torch.manual_seed(7)
        outs.append(pol.generate(reqs))
    assert [g.payload["response_ids"].tolist() for g in outs[0]] == [g.payload["response_ids"].tolist() for g in outs[1]]
    with torch.no_grad():
        res = pol.sequence_log_probs([g.payload for g in outs[0]])
    assert float(((res.logprobs - res.sampling_logprobs).abs() * res.mask).max()) < 1e-4


def _lora_policy(**lora: object) -> LLMPolicy:
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=8,
                                                           lora={"r": 4, "alpha": 8, **lora}))
    torch.manual_seed(1)
    with torch.no_grad():  # B starts at zero: make the adapters matter
        for name, p in pol.model.named_parameters():
            if "lora_" in name:
                p.add_(0.2 * torch.randn_like(p))
    return pol


def _assert_sampled_log_probs_rescore(pol: LLMPolicy) -> None:
    """The log-probs the sampler reported equal the trainer's scoring of the same ids (fp32)."""
    torch.manual_seed(0)
    gens = pol.generate([GenerationRequest("hello", {"step": 0}, (), "x")] * 2)
    with torch.no_grad():
        res = pol.sequence_log_probs([g.payload for g in gens])
    assert float(((res.logprobs - res.sampling_logprobs).abs() * res.mask).max()) < 1e-4


def test_lora_models_decode_fused_with_the_adapters_merged():
    """A LoRA policy samples through the fused decoder with ``W + scale * B @ A`` per projection: the
    logits equal the peft model's own forward, with the adapters on and off, and the sampled tokens'
    log-probs equal the trainer's scoring of them."""
    from stratagym.agents.policy import unwrap_model

    pol = _lora_policy(target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = unwrap_model(pol.model).eval()
    assert unsupported_reason(model) is None
    ids = torch.tensor([[5, 17, 33, 8, 41, 12]])
    for adapters in (True, False):
        with (contextlib.nullcontext() if adapters else model.disable_adapter()), torch.no_grad():
            dec = fused_decoder_for(model)
            logits = dec.prefill(ids, torch.ones_like(ids), torch.tensor([0]), 12)
            ref = model(input_ids=ids).logits[0, -1]
            assert float((logits[0] - ref).abs().max()) < 1e-5
    with torch.no_grad():
        merged_off = model(input_ids=ids).logits[0, -1]
        with model.disable_adapter():
            assert float((model(input_ids=ids).logits[0, -1] - merged_off).abs().max()) > 1e-3  # adapters matter
    _assert_sampled_log_probs_rescore(pol)


def test_lora_variants_fall_back_to_transformers():
    from stratagym.agents.policy import unwrap_model

    pol = _lora_policy(use_dora=True)
    assert "variants" in unsupported_reason(unwrap_model(pol.model))
    assert fused_decoder_for(unwrap_model(pol.model)) is None
    _assert_sampled_log_probs_rescore(pol)


def test_off_where_it_has_never_been_checked_unless_forced():
    """CPU float32 and bfloat16 are where the fused decoder is checked against the transformers forward; in
    fp16 (and on CUDA) it stays off unless ``policy.fused_decode: force`` (issue 29 item 4)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from stratagym.agents.inference.fused_decode import fused_decoder_for, unsupported_reason

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    assert unsupported_reason(model) is None
    assert unsupported_reason(model.to(torch.bfloat16)) is None
    model = model.to(torch.float16)
    assert "only been checked on CPU in float32" in unsupported_reason(model)
    assert fused_decoder_for(model) is None
    assert unsupported_reason(model, force=True) is None and fused_decoder_for(model, force=True) is not None


def _decode_log_probs(model: torch.nn.Module, fused: bool, steps: int = 12) -> torch.Tensor:
    """Next-token log-probs over ``steps`` decode steps of three left-padded rows of random ids, by the
    fused decoder or by the transformers forward over each whole row."""
    vocab = model.config.vocab_size
    prompts, ids, attn, _ = _random_left_padded(vocab, (23, 40, 6))
    P = ids.shape[1]
    seqs = [list(p) for p in prompts]
    out = []
    with torch.no_grad():
        dec = FusedDecoder(model) if fused else None
        logits = dec.prefill(ids, attn, torch.arange(len(prompts)), P + steps) if dec else None
        for t in range(steps):
            if dec is None:
                logits = torch.stack([model(input_ids=torch.tensor([s])).logits[0, -1] for s in seqs])
            out.append(torch.log_softmax(logits.float(), -1))
            tok = torch.tensor([(7 * t + 3 * i) % (vocab - 3) + 3 for i in range(len(seqs))])
            for i in range(len(seqs)):
                seqs[i].append(int(tok[i]))
            if dec is not None:
                logits = dec.step(tok)
    return torch.stack(out)


@pytest.mark.parametrize("make", [_qwen2, lambda: _tiny_llama(True, True, 2)], ids=["qwen2", "llama-biases"])
def test_fused_bf16_is_as_close_to_float32_as_the_transformers_bf16_forward(make):
    """bf16 rounds differently in every kernel order, so the fused decoder cannot equal the transformers
    bf16 forward bit for bit. Its tolerance is the dtype's own: its log-probs are no farther from the
    float32 forward than the transformers bf16 forward's are (measured on SmolLM2 too: 0.057 vs 0.059
    nats on average)."""
    model = make()
    exact = _decode_log_probs(model, fused=False)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    assert unsupported_reason(bf16) is None
    hf_err = (_decode_log_probs(bf16, fused=False) - exact).abs()
    fused_err = (_decode_log_probs(bf16, fused=True) - exact).abs()
    assert float(hf_err.mean()) > 0  # bf16 really rounds
    assert float(fused_err.mean()) <= 1.25 * float(hf_err.mean()) + 1e-4
    assert float(fused_err.max()) <= 2.0 * float(hf_err.max()) + 1e-3
