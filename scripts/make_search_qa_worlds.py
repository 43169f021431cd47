#!/usr/bin/env python3
"""Training data from several invented worlds, for SFT models that must read the passage (issue 28, item 5).

A model cloned on one world learns that world's facts (the committed ``sft-searchqa`` scores EM 0.264 on
``test`` and 0.002 on ``test_unseen``). Here the bundled world's ``train`` questions are joined by the
``train`` questions of several more worlds from ``make_search_qa_data.py``'s generator (other seeds), each
with its own passages, into one SearchQA dataset folder: ``train.jsonl`` and ``corpus.jsonl``. A name seen
in one world's questions answers nothing in another's, so copying from the retrieved passage is the skill
that pays.

The ``test_unseen`` world is never used: every new world reserves the name tokens of the bundled world,
of the ``test_unseen`` world and of the worlds drawn before it (``NameMaker(rng, reserved)``), and the
script checks that no new world shares a name token with the ``test_unseen`` world. Passage ids carry the
prefix ``w<seed>-`` and question ids ``sqa-w<seed>-train-NNNNN``, so none collides with the bundled ones.
Deterministic (same bytes for the same arguments). Usage::

    python scripts/make_search_qa_worlds.py                       # -> runs/search_qa_worlds/multi13 (bundled + 12 worlds)
    python scripts/make_search_qa_worlds.py --seeds 101,102,103,104,105 --out runs/search_qa_worlds/multi   # bundled + 5
    stratagym envs audit runs/search_qa_worlds/multi13/audit       # train vs test_unseen overlap (written with it)
    gym.make("stratagym/SearchQA-v0", dataset="runs/search_qa_worlds/multi13",
             corpus="runs/search_qa_worlds/multi13/corpus.jsonl")

``audit/`` holds ``train.jsonl`` (a copy) and the bundled ``test_unseen.jsonl``, so ``stratagym envs audit``
compares the training questions with the unseen split.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SEEDS = tuple(range(101, 113))  # 12 worlds; with the bundled one, 13


def _generator():
    spec = importlib.util.spec_from_file_location("make_search_qa_data", REPO / "scripts" / "make_search_qa_data.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_search_qa_data"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def unseen_names(gen, base_seed: int = 20251, unseen_seed: int | None = None) -> set[str]:
    """The name tokens of the ``test_unseen`` world (drawn exactly as ``generate_unseen`` draws them)."""
    base = gen.world_names(base_seed)
    rng = random.Random(gen.UNSEEN_SEED if unseen_seed is None else unseen_seed)
    names = gen.NameMaker(rng, base)
    gen.build_world(rng, 1.0, names)
    return names.used - base


def make_worlds(out: Path, seeds: list[int], n_train: int = 2500, include_bundled: bool = True,
                shuffle_seed: int = 0) -> dict:
    gen = _generator()
    base = gen.world_names(20251)
    unseen = unseen_names(gen)
    reserved = set(base) | unseen
    questions: list[dict] = []
    docs: list[dict] = []
    if include_bundled:
        bundled = REPO / "data" / "search_qa"
        questions += _read_jsonl(bundled / "train.jsonl")
        docs += _read_jsonl(bundled / "corpus.jsonl")
    sizes = {"bundled_train": len(questions), "worlds": {}}
    for seed in seeds:
        rng = random.Random(seed)
        names = gen.NameMaker(rng, reserved)
        world = gen.build_world(rng, 1.0, names)
        shared = gen.name_tokens(world) & unseen
        if shared:  # cannot happen (reserved names are never drawn); a guard against a future edit
            raise RuntimeError(f"world {seed} reuses test_unseen names: {sorted(shared)[:5]}")
        reserved |= names.used
        wdocs = gen.write_passages(world, rng, id_prefix=f"w{seed}-")
        train, _ = gen.split_questions(gen.make_questions(world), rng, 0, n_train)
        for i, item in enumerate(train):
            item["id"] = f"sqa-w{seed}-train-{i:05d}"
            item["data_source"] = f"stratagym_world_{seed}"
        keys = ("id", "question", "golden_answers", "data_source", "metadata")
        questions += [{k: q[k] for k in keys} for q in train]
        docs += wdocs
        sizes["worlds"][seed] = {"train": len(train), "passages": len(wdocs)}
    random.Random(shuffle_seed).shuffle(questions)  # the first n questions mix every world
    gen._write_jsonl(out / "train.jsonl", questions)
    gen._write_jsonl(out / "corpus.jsonl", docs)
    audit = out / "audit"
    audit.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "train.jsonl", audit / "train.jsonl")
    shutil.copyfile(REPO / "data" / "search_qa" / "unseen" / "test_unseen.jsonl", audit / "test_unseen.jsonl")
    sizes.update(train=len(questions), passages=len(docs))
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "search_qa_worlds" / "multi13")
    ap.add_argument("--seeds", default=",".join(str(s) for s in DEFAULT_SEEDS), help="seeds of the extra worlds (comma-separated)")
    ap.add_argument("--train", type=int, default=2500, help="train questions per extra world")
    ap.add_argument("--no-bundled", action="store_true", help="leave the bundled world's train questions out")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    print(json.dumps(make_worlds(args.out, seeds, args.train, not args.no_bundled)))


if __name__ == "__main__":
    main()
