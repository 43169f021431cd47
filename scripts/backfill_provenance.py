#!/usr/bin/env python3
"""Write ``training_data.json`` (stratagym.provenance) into the committed checkpoints trained before it existed.

* **SFT checkpoints** whose recipe collected its own demonstrations: the recipe in ``sft_meta.json`` collects
  them again (collection is deterministic), and the provenance is written only if the new file hashes to
  the sha256 the checkpoint recorded, so the task ids are exactly the ones trained on. A mismatch is
  reported and nothing is written.
* **RL checkpoints**: runs before provenance did not record the tasks they drew (and the draws cannot be
  replayed: the same generator also shuffled each step's mini-batches). Their training set is the whole
  pool the recipe drew from (``env.tasks`` of its split), a superset, so overlap is counted on at least
  every question trained on; the entry says so in its ``note``.

The content hash of a checkpoint leaves ``training_data.json`` out, so committed records keep their
``agent.content_hash``. Needs the 13-world data (``python scripts/make_search_qa_worlds.py``). Usage::

    python scripts/backfill_provenance.py            # every checkpoint below; --check only compares
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stratagym.provenance import read_provenance, write_provenance  # noqa: E402
from stratagym.training.config import load_recipe  # noqa: E402
from stratagym.training.demos import demos_digest, write_demos  # noqa: E402
from stratagym.training.recipe import training_set_of  # noqa: E402
from stratagym.training.sft import collect_recipe_demos, load_sft_recipe, sft_provenance  # noqa: E402

CKPTS = REPO / "data" / "checkpoints"
#: SFT checkpoints: their sft_meta.json holds the recipe
SFT = ["sft-smollm2-lora-searchqa", "sft-smollm2-lora-searchqa-bf16", "sft-smollm2-lora-webshop",
       "sft-smollm2-lora-valuecorridor", "sft-searchqa"]
#: RL checkpoints -> (the recipe that built them, its start): docs/precision.md and docs/llm-learning.md name them
RL = {
    "grpo-kl-smollm2-lora-searchqa-bf16-s0": "recipes/cpu/grpo-smollm2-lora-kl-searchqa.yaml",
    "hop3-grpo-smollm2-lora-searchqa-bf16-s0": "recipes/cpu/hop3-grpo-smollm2-lora-searchqa.yaml",
    "hops-stratified-fp32-smollm2-lora-searchqa-s0": "recipes/cpu/hops-stratified-fp32-smollm2-lora-searchqa.yaml",
}


def sft_sets(name: str) -> list[dict] | str:
    import json

    meta = json.loads((CKPTS / name / "sft_meta.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "recipe.yaml"
        path.write_text(yaml.safe_dump(meta["recipe"]))
        recipe = load_sft_recipe(path)
        if recipe.demos.path:
            return f"trained on a given demonstrations file ({recipe.demos.path}), not collected: cannot rebuild it"
        records = collect_recipe_demos(recipe)
        demos = write_demos(records, Path(tmp) / "demos.jsonl")
        digest = demos_digest(demos)
    if digest != meta["demos"]["sha256"]:
        return f"re-collected demonstrations hash to {digest[:12]}, the checkpoint trained on {meta['demos']['sha256'][:12]}"
    return sft_provenance(recipe, records, digest)


def rl_sets(name: str) -> list[dict]:
    config = load_recipe(REPO / RL[name])
    env = gym.make(config.env.id, **dict(config.env.kwargs))
    try:
        pool = list(env.unwrapped.task_ids())[config.env.task_slice()]
    finally:
        env.close()
    start = read_provenance(REPO / config.policy["model"])
    if start is None:
        raise SystemExit(f"{name} starts from {config.policy['model']}, which has no provenance yet: back-fill it first")
    note = ("the run predates provenance and did not record the tasks it drew: the whole pool it drew from "
            f"(env.tasks {config.env.tasks!r} of its split), a superset of the trained tasks")
    return list(start["training_sets"]) + [
        training_set_of("rl", config.env.id, dict(config.env.kwargs), config.env.kwargs.get("split"), pool, note=note)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed provenance, write nothing")
    args = parser.parse_args()
    bad = 0
    for name in SFT + list(RL):
        sets = sft_sets(name) if name in SFT else rl_sets(name)
        if isinstance(sets, str):
            print(f"{name}: not written: {sets}")
            bad += 1
            continue
        summary = ", ".join(f"{s['stage']} {len(s['task_ids'])} tasks" for s in sets)
        if args.check:
            same = (read_provenance(CKPTS / name) or {}).get("training_sets") == sets
            print(f"{name}: {'matches' if same else 'DIFFERS'} ({summary})")
            bad += not same
        else:
            write_provenance(CKPTS / name, sets)
            print(f"{name}: {summary}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
