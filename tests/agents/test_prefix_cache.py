"""Prefix reuse across generate calls (``policy.prefix_cache``): a prompt that extends a row of the previous
call runs only its new tokens, with the same logits (to float rounding) as a whole prefill, the same
samples as without the cache, and never with keys/values of other weights."""

from __future__ import annotations

import pytest
import torch

from stratagym.agents.backends import HFGenerator, SamplingConfig
from stratagym.agents.inference.fused_decode import FusedDecoder
from stratagym.agents.llm import LLMConfig, LLMPolicy
from stratagym.agents.inference.prefix_cache import PrefixCache, weights_fingerprint
from stratagym.agents.tiny_lm import tiny_lm_path

from tests.agents.test_fused_decode import _qwen2, _tiny_llama


def _left_pad(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(map(len, prompts))
    ids = torch.zeros(len(prompts), P, dtype=torch.long)
    attn = torch.zeros(len(prompts), P, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p):], attn[i, P - len(p):] = torch.tensor(p), 1
    return ids, attn


@pytest.mark.parametrize("make", [_qwen2, lambda: _tiny_llama(True, True, 2)], ids=["qwen2-gqa", "llama-gqa-biases"])
def test_prefill_reusing_a_previous_cache_equals_a_whole_prefill(make):
    model = make()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    rand = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    # call 1: two prompts of different lengths (left padding), 6 decoded tokens each
    first = [rand(9), rand(4)]
    ids, attn = _left_pad(first)
    dec1 = FusedDecoder(model)
    dec1.prefill(ids, attn, torch.tensor([0, 1]), ids.shape[1] + 8)
    fed = torch.randint(3, vocab, (6, 2), generator=g)
    for t in range(6):
        dec1.step(fed[t])
    P1 = ids.shape[1]
    rows = [first[b] + fed[:, b].tolist() for b in range(2)]
    src = [dec1.prefix_source(b, P1 - len(first[b])) for b in range(2)]
    assert [s.length for s in src] == [15, 10]
    # call 2: row 0 continued (+ 5 new tokens), row 1 cut after 7 of its tokens then new ones, and a prompt
    # with nothing known; the continued prompt twice (rows sharing a prompt)
    prompts = [rows[0] + rand(5), rows[1][:7] + rand(3), rand(6)]
    reuse = [src[0], src[1].prefix(7), None]
    expand = torch.tensor([0, 1, 0, 2])
    ids2, attn2 = _left_pad(prompts)
    cap = ids2.shape[1] + 6
    fresh, reused = FusedDecoder(model), FusedDecoder(model)
    worst = 0.0
    a = fresh.prefill(ids2, attn2, expand, cap)
    b = reused.prefill(ids2, attn2, expand, cap, reuse=reuse)
    worst = float((a - b).abs().max())
    seqs = [list(prompts[int(e)]) for e in expand]
    with torch.no_grad():  # and both agree with the transformers forward, step after step
        for _ in range(4):
            for r, s in enumerate(seqs):
                ref = model(input_ids=torch.tensor([s])).logits[0, -1]
                worst = max(worst, float((ref - b[r]).abs().max()))
            tok = torch.randint(3, vocab, (len(seqs),), generator=g)
            for r in range(len(seqs)):
                seqs[r].append(int(tok[r]))
            a, b = fresh.step(tok), reused.step(tok)
            worst = max(worst, float((a - b).abs().max()))
    assert worst < 1e-5


def _turns(gen: HFGenerator, tok, greedy: bool, seed: int = 5) -> list:
    """Three turns of two groups of 3 rows: each turn's prompt is the last prompt, the response and an
    observation (what a multi-turn rollout sends)."""
    torch.manual_seed(seed)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=12)
    prompts = [tok("put a clean apple in fridge")["input_ids"]] * 3 + [tok("search[blue water bottle]")["input_ids"]] * 3
    out = []
    for turn in range(3):
        res = gen.generate(prompts, [], cfg, greedy=greedy)
        out.append(res)
        obs = tok(f" observation {turn}: you see a fridge and a cabinet.")["input_ids"]
        prompts = [list(p) + r.response_ids + obs for p, r in zip(prompts, res)]
    return out


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_generator_with_prefix_cache_samples_what_it_samples_without(greedy):
    model = _qwen2()
    tok = LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer
    with_cache = HFGenerator(tok, lambda: model, prefix_cache=True)
    without = HFGenerator(tok, lambda: model, prefix_cache=False)
    a, b = _turns(with_cache, tok, greedy), _turns(without, tok, greedy)
    for ta, tb in zip(a, b):
        for x, y in zip(ta, tb):
            assert x.response_ids == y.response_ids and x.text == y.text and x.finish_reason == y.finish_reason
            assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs)), default=0.0) < 1e-5
    cache = with_cache.prefix_cache
    # turns 2 and 3 reuse all of the previous prompt and response: most of their tokens
    assert cache.reused_tokens > 0.5 * cache.prompt_tokens
    assert without.prefix_cache is None


def test_a_call_told_not_to_reuse_prefixes_prefills_whole_and_leaves_the_cache_as_it_was():
    """``generate(..., reuse_prefix=False)`` (the gateway's batch-invariant mode): the next turn is prefilled
    whole, samples what a generator without a cache samples, and the cache still holds the earlier call's
    rows for the calls after it."""
    model = _qwen2()
    tok = LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer
    gen = HFGenerator(tok, lambda: model, prefix_cache=True)
    fresh = HFGenerator(tok, lambda: model, prefix_cache=False)
    cfg = SamplingConfig(max_new_tokens=10)
    prompt = tok("put a clean apple in fridge")["input_ids"]
    first = gen.generate([prompt], [], cfg, greedy=True)[0]
    nxt = [list(prompt) + first.response_ids + tok(" and then?")["input_ids"]]
    reused = gen.prefix_cache.reused_tokens
    got = gen.generate(nxt, [], cfg, greedy=True, reuse_prefix=False)[0]
    assert gen.prefix_cache.reused_tokens == reused  # nothing read from the cache
    assert got.response_ids == fresh.generate(nxt, [], cfg, greedy=True)[0].response_ids
    assert gen.prefix_cache.lookup(model, nxt) is not None  # nor written: it still holds the first call


def test_keys_and_values_of_other_weights_are_never_reused():
    model = _qwen2()
    tok = LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer
    gen = HFGenerator(tok, lambda: model, prefix_cache=True)
    cfg = SamplingConfig(max_new_tokens=10)
    prompt = tok("put a clean apple in fridge")["input_ids"]
    first = gen.generate([prompt], [], cfg, greedy=True)[0]
    nxt = [list(prompt) + first.response_ids + tok(" and then?")["input_ids"]]
    assert gen.prefix_cache.lookup(model, nxt) is not None
    # a fused AdamW step changes the weights in place without bumping their version counters
    fp = weights_fingerprint(model)
    versions = [p._version for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True).step()
    assert [p._version for p in model.parameters()] == versions
    assert weights_fingerprint(model) != fp
    assert gen.prefix_cache.lookup(model, nxt) is None
    # the next call is what a fresh generator computes on the new weights
    fresh = HFGenerator(tok, lambda: model, prefix_cache=False)
    got, want = gen.generate(nxt, [], cfg, greedy=True)[0], fresh.generate(nxt, [], cfg, greedy=True)[0]
    assert got.response_ids == want.response_ids
    # so does a write through .data (no version bump either)
    with torch.no_grad():
        gen.generate([prompt], [], cfg, greedy=True)
    w = model.lm_head.weight
    w.data = w.data.flip(0).clone()
    assert gen.prefix_cache.lookup(model, nxt) is None


def test_policy_clears_the_cache_after_an_optimizer_step_and_a_rollout():
    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), max_new_tokens=6, template="plain"))
    prompt = pol.tokenizer("hello there")["input_ids"]
    pol.backend.generate([prompt], [], pol.config.sampling(), greedy=True)
    assert pol.backend.prefix_cache._sources
    pol.after_optimizer_step()
    assert not pol.backend.prefix_cache._sources
    pol.backend.generate([prompt], [], pol.config.sampling(), greedy=True)
    pol.release_generation_cache()  # what the trainer calls when a rollout ends
    assert not pol.backend.prefix_cache._sources
    off = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), prefix_cache=False))
    assert off.backend.prefix_cache is None


def test_lookup_takes_the_longest_shared_prefix_within_its_limits():
    model = _qwen2()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(2)
    rand = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    base = rand(20)
    kept = [base[:12] + rand(8), base + rand(4), rand(20)]
    ids, attn = _left_pad(kept)
    dec = FusedDecoder(model)
    dec.prefill(ids, attn, torch.arange(3), ids.shape[1] + 2)
    cache = PrefixCache(min_reuse=8, max_share=0.75)
    cache.lookup(model, kept)  # takes the call's fingerprint, as the generator does
    cache.record(model, kept, [dec.prefix_source(b, ids.shape[1] - len(k)) for b, k in enumerate(kept)])
    got = cache.lookup(model, [base + rand(5), base[:12] + rand(13), kept[1]])
    assert [s.row for s in got] == [1, 0, 1]
    # the longest common prefix; a prompt equal to a kept row still runs its last token
    assert [s.length for s in got] == [20, 12, len(kept[1]) - 1]
    # too short a shared prefix is not reused; a batch whose longest remainder is most of it gets None
    assert cache.lookup(model, [base[:5] + rand(3), base + rand(3)])[0] is None
    assert cache.lookup(model, [base[:8] + rand(40)]) is None
    assert PrefixCache().lookup(model, [base]) is None  # nothing kept


def test_dropping_finished_rows_changes_no_sample():
    """Rows that hit a stop string leave the decoder early (the rest decode on a smaller batch), and the
    tokens, log-probs and texts are those of decoding every row to the end; the prefix cache still holds
    the dropped rows, so the next turn reuses them."""
    model = _qwen2()
    tok = LLMPolicy.from_pretrained(tiny_lm_path()).tokenizer
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=24)
    prompts = [tok(f"task {i}: put a clean apple in fridge")["input_ids"] for i in range(8)]
    runs = {}
    for drop in (True, False):
        gen = HFGenerator(tok, lambda: model, drop_finished_rows=drop)
        kept = []
        original = gen.prefix_cache.record
        gen.prefix_cache.record = lambda m, seqs, srcs: (kept.append(len({id(s.kv[0]) for s in srcs})), original(m, seqs, srcs))
        torch.manual_seed(11)
        first = gen.generate(prompts, ["v"], cfg)
        nxt = [list(p) + r.response_ids + tok(" ok")["input_ids"] for p, r in zip(prompts, first)]
        second = gen.generate(nxt, ["v"], cfg)
        runs[drop] = (first + second, kept, gen.prefix_cache.reused_tokens)
    (a, kept_a, reused_a), (b, kept_b, reused_b) = runs[True], runs[False]
    lengths = sorted(len(r.response_ids) for r in a[:8])
    assert lengths[0] < 5 and lengths[-1] == 24 and sum(r.finish_reason == "stop" for r in a[:8]) >= 4  # finished early
    assert kept_a[0] > 1 and kept_b == [1, 1]  # rows were dropped from more than one cache
    for x, y in zip(a, b):
        assert x.response_ids == y.response_ids and x.text == y.text and x.finish_reason == y.finish_reason
        assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs)), default=0.0) < 1e-5
    # the dropped rows were kept for the next turn all the same: without their last token (sampled, never
    # run: the row left the decoder before it), which a row decoded to the end had run
    assert 0 < reused_b - 8 <= reused_a <= reused_b


def test_fingerprint_sees_a_small_update_of_bf16_weights():
    """A bf16 reduction would round a small update away; the fingerprint reduces in fp32."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 512).to(torch.bfloat16).requires_grad_(False)
    before, bf16_sum = weights_fingerprint(lin), float(lin.weight.sum())
    lin.weight[0, 0] += 0.004
    assert float(lin.weight.sum()) == bf16_sum  # what a bf16 sum would have seen: nothing
    after = weights_fingerprint(lin)
    assert [t[5:] for t in after] != [t[5:] for t in before]  # the fp32 sum and norm moved
