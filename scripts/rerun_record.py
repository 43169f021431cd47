#!/usr/bin/env python3
"""Run a committed board record's evaluation again, exactly, to back-fill what it lacks (issue 50).

The record names everything its eval was made of: the agent (by content hash: here matched to a committed
checkpoint under ``data/checkpoints/``, since the path it was evaluated from may be gone), the env and its
kwargs, the split, ``n``, the seeds, the batch size and the agent options (dtype included). This rebuilds
that :class:`~stratagym.eval.harness.EvalConfig`, evaluates into ``--out`` (resumable, with transcripts),
and with ``--retriever-ablation`` (SearchQA) also runs the three ablated evals and writes the
``search_dependence`` block. Then::

    stratagym leaderboard attach leaderboard/records/R.json --progress OUT/R.json.progress.jsonl --rerun OUT/R.json

attaches the transcripts (and the block) to the committed record, if and only if every episode's outcome
agrees with the record. A rerun that differs is another evaluation and is refused there, not here.

    python scripts/rerun_record.py leaderboard/records/R.json --out runs/reruns [--retriever-ablation] [--batch-size B]

Run it from the repository root: a record's agent path is relative to it.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stratagym.eval.aggregate import primary_metric  # noqa: E402
from stratagym.eval.harness import EvalConfig, evaluate  # noqa: E402
from stratagym.eval.records import content_hash_path, write_json_atomic  # noqa: E402
from stratagym.eval.search_dependence import run_ablations, search_dependence_block  # noqa: E402


def checkpoint_for(content_hash: str) -> Path:
    for folder in sorted(glob.glob(str(REPO / "data" / "checkpoints" / "*"))):
        if content_hash_path(folder) == content_hash:
            return Path(folder)
    raise SystemExit(f"no committed checkpoint under data/checkpoints has content hash {content_hash}")


def config_of(record: dict, batch_size: int | None) -> EvalConfig:
    agent = record["agent"]
    spec = agent["spec"]
    if agent["kind"] != "scripted" and not (Path(spec).exists() and content_hash_path(spec) == agent["content_hash"]):
        # the path it was evaluated from is gone: the committed checkpoint with its content (the progress
        # file's identity then names another path, so only --rerun's outcome check can attach it)
        spec = str(checkpoint_for(agent["content_hash"]).relative_to(REPO))
    cfg = record.get("config") or {}
    options = dict(cfg.get("agent_options") or {})
    if agent.get("dtype") and "dtype" not in options:
        options["dtype"] = agent["dtype"]  # the recorded compute dtype, whatever the checkpoint's default
    kwargs = dict(record["env"].get("kwargs") or {})
    split = None if record["split"] == "default" else record["split"]  # "default": an env without splits
    return EvalConfig(agent=spec, env_id=record["env"]["id"], split=split, n=cfg.get("n") or record["n_tasks"],
                      seeds=list(record["seeds"]), batch_size=batch_size or int(cfg.get("batch_size") or 8),
                      env_kwargs=kwargs, max_steps=cfg.get("max_steps"), label=agent.get("label"),
                      algorithm=agent.get("algorithm"), agent_options=options, training=record.get("training"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "reruns")
    ap.add_argument("--retriever-ablation", action="store_true")
    ap.add_argument("--batch-size", type=int, default=None, help="another batch size (not part of an eval's identity)")
    args = ap.parse_args()
    record = json.loads(args.record.read_text())
    config = config_of(record, args.batch_size)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / args.record.name
    again = evaluate(config, out=out, resume=True, progress=False)
    if args.retriever_ablation:
        ablated = run_ablations(config, out, evaluate, resume=True, progress=False)
        again["search_dependence"] = search_dependence_block(again, ablated, metric=primary_metric(config.env_id))
        write_json_atomic(out, again)
    metric = primary_metric(config.env_id)
    print(f"{args.record.name}: {metric} {record['metrics'][metric]['value']:.3f} recorded, "
          f"{again['metrics'][metric]['value']:.3f} again -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
