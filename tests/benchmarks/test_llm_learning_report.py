"""``benchmarks/llm_learning.py report`` reports a comparison with the splits it was run on, without the
flags repeated (run with ``--eval-splits test,test_unseen`` and reported without it, it raised KeyError)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_report_takes_the_splits_the_sft_folder_was_evaluated_on(tmp_path):
    mod = load_script(ROOT / "benchmarks" / "llm_learning.py", "llm_learning_bench")
    args = argparse.Namespace(eval_splits=None, recipe=ROOT / "recipes/cpu/grpo-tiny-searchqa.yaml")
    assert mod._report_splits(args, tmp_path) == ["test"]  # nothing evaluated yet: the recipe's eval split
    (tmp_path / "sft").mkdir()
    for name in ("eval_test_unseen.json", "eval_test.json", "eval_test.json.progress.jsonl"):
        (tmp_path / "sft" / name).write_text("{}")
    assert mod._report_splits(args, tmp_path) == ["test", "test_unseen"]
    args.eval_splits = ["test_unseen"]  # given: as given
    assert mod._report_splits(args, tmp_path) == ["test_unseen"]
