"""The committed SFT checkpoint (data/checkpoints/sft-searchqa) is what its documented command rebuilds:
``stratagym sft --config recipes/cpu/sft-searchqa.yaml``.

Rebuilding the weights takes minutes, so the pieces are checked separately: the recipe recorded in the
checkpoint is the recipe file's; the demonstrations collected now hash to the recorded sha256; the tokenizer
trained now on them is the committed one token for token; the model loads through the policy with the
template's tags as single tokens. That training itself is deterministic is tested in test_sft.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from stratagym.training.sft import META_FILE, load_sft_recipe

RECIPE = Path("recipes/cpu/sft-searchqa.yaml")
CKPT = Path("data/checkpoints/sft-searchqa")

pytestmark = pytest.mark.skipif(not (CKPT / META_FILE).exists(), reason="no committed SFT checkpoint")


def _meta() -> dict:
    return json.loads((CKPT / META_FILE).read_text())


def test_recorded_recipe_is_the_recipe_file():
    """The recorded recipe, read with today's defaults for options added since (demos.episodes_per_task and
    demos.keep_lost, whose defaults reproduce the old behaviour), is the recipe file."""
    from stratagym.training.config import build_dataclass
    from stratagym.training.sft import SFTRecipe, validate_recipe

    recorded = validate_recipe(build_dataclass(SFTRecipe, dict(_meta()["recipe"]), root="the recorded recipe")).to_dict()
    current = load_sft_recipe(RECIPE).to_dict()
    for key in ("export", "output_dir"):  # where it was written, not what was trained
        recorded.pop(key), current.pop(key)
    assert recorded == current


def test_demos_and_tokenizer_rebuild_identically(tmp_path):
    from stratagym.agents.prompts import template_for_env
    from stratagym.agents.small_lm import template_tags, train_tokenizer
    from stratagym.training.demos import collect_demos, write_demos
    from stratagym.training.sft import _tokenizer_texts

    recipe = load_sft_recipe(RECIPE)
    records = collect_demos(recipe.env.id, recipe.demos.agent, split=recipe.demos.split, n=recipe.demos.n,
                            env_kwargs={k: v for k, v in recipe.env.kwargs.items() if k != "split"},
                            memory_k=int(recipe.policy["memory_k"]), seed=recipe.demos.seed)
    path = write_demos(records, tmp_path / "demos.jsonl")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == _meta()["demos"]["sha256"]
    template = template_for_env(recipe.env.id, None, recipe.policy.get("template"))
    tok = train_tokenizer(_tokenizer_texts(records, recipe.tokenizer.extra_text),
                          vocab_size=recipe.tokenizer.vocab_size, tags=template_tags(template))
    from transformers import AutoTokenizer

    committed = AutoTokenizer.from_pretrained(CKPT)
    assert tok.get_vocab() == committed.get_vocab()
    sample = records[0]["messages"][-1]["content"]
    assert tok(sample)["input_ids"] == committed(sample)["input_ids"]


def test_loads_as_a_policy_with_the_template_tags():
    from stratagym.agents.llm import LLMPolicy
    from stratagym.agents.prompts import SEARCH_R1
    from stratagym.agents.small_lm import check_tokenizer_for_template

    policy = LLMPolicy.from_pretrained(CKPT)
    check_tokenizer_for_template(policy.tokenizer, SEARCH_R1)
    assert policy.config.memory_k == 4
    assert sum(p.numel() for p in policy.model.parameters()) < 2_000_000
    assert (CKPT / "model.safetensors").stat().st_size < 8_000_000
