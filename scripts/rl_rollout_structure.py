#!/usr/bin/env python3
"""The step-group structure of an RL recipe's first rollout, with the policy it starts from.

Builds the recipe's trainer (its policy, tasks, group size, sampling temperature and seed) and collects the
first step's rollout only, no update. Prints :func:`stratagym.studies.testbeds.context_check` on it: how
often a step shares its state (GiGPO's anchor groups) or its last k+1 observations (HGPO's level k) with
another step of its group, and the share of steps GiGPO and HGPO K=2 give a nonzero advantage. The testbed
check measured this with scripted agents; this measures it with the model an RL run would start from,
before any GPU run does (issue 48 item 3 asks how often GiGPO's anchor states occur on WebShop).

Writes, per seed, ``OUT/sN.md`` (the table, the rollout's metrics, the times) and
``OUT/sN.episodes.jsonl.gz`` (each episode's actions, validity, state hash and first context hashes: what
the groups were counted from).

Usage (one thread a seed; the WebShop recipe's 16 episodes took 3-3.5 min in bf16 on this CPU)::

    OMP_NUM_THREADS=1 python scripts/rl_rollout_structure.py recipes/cpu/gigpo-smollm2-lora-webshop.yaml \\
        --seed 0 --out docs/llm-learning/webshop/rollout-structure
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import torch

from stratagym.studies.testbeds import context_check, format_table
from stratagym.training.config import load_recipe
from stratagym.training.trainer import Trainer


def render(summary: dict) -> str:
    """The Markdown kept beside the episodes: the step-group table, then the rollout's metrics and times (the
    docs' JSON files are eval records, checked as such, so this summary is not one)."""
    lines = [format_table(f"{summary['recipe']}, seed {summary['seed']}: first rollout, no update",
                          {f"seed {summary['seed']}": summary["context_check"]}), "",
             f"Policy: `{json.dumps(summary['policy'], default=str)}`; compute dtype {summary.get('dtype', 'not recorded')}", "",
             f"Trainer built in {summary['build_s']} s; rollout {summary['rollout_s']} s (one thread).", "",
             "| rollout metric | value |", "|---|---|"]
    lines += [f"| {k} | {v:.4g} |" for k, v in summary["rollout"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:  # the trainer's output folder: nothing of it is kept
        recipe = load_recipe(args.recipe, {"train.seed": args.seed, "train.output_dir": scratch,
                                           "train.tensorboard": False, "train.progress": False})
        started = time.time()
        trainer = Trainer(recipe)
        built = time.time()
        try:
            dtype = str(next(trainer.policy.model.parameters()).dtype)  # what "auto" resolved to on this CPU
            batch = trainer.rollout()
        finally:
            trainer.close()
        done = time.time()
    table = context_check(batch, levels=(0, 1, 2))
    summary = {"recipe": args.recipe, "seed": args.seed, "policy": recipe.policy, "dtype": dtype, "build_s": round(built - started, 1),
               "rollout_s": round(done - built, 1), "rollout": batch.metrics(), "context_check": table}
    (args.out / f"s{args.seed}.md").write_text(render(summary))
    with gzip.open(args.out / f"s{args.seed}.episodes.jsonl.gz", "wt") as f:
        for t in batch.trajectories:
            steps = [{"action": s.action, "valid": s.action_valid, "state_hash": s.state_hash, "context": s.context[:3]}
                     for s in t.steps]
            f.write(json.dumps({"task_id": t.task_id, "group": t.group, "seed": t.seed, "won": t.won,
                                "score": t.score, "steps": steps}) + "\n")
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
