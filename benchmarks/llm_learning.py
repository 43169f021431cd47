"""Does RL improve an LLM policy here? GRPO vs Stratified GRPO (and +HA-DW) from one SFT checkpoint.

Every run starts from the same SFT checkpoint (``stratagym sft --config recipes/cpu/sft-searchqa.yaml``),
trains with the same recipe (``recipes/cpu/grpo-tiny-searchqa.yaml``: same budget, lr, group size,
reward shaping) and changes only the advantage estimator and the seed. Before and after, the policy is
evaluated greedily on the same first ``--eval-n`` test questions through the eval harness (the records
are the ones ``stratagym leaderboard submit`` takes). Reported:

* test EM before (the SFT checkpoint) and after RL, with Wilson 95% intervals;
* paired differences after - before over the same questions (bootstrap 95% interval), per seed, and
  their mean/sd across seeds;
* the fraction of groups whose G rewards all tie (zero advantage for GRPO) over the first and the last
  steps of each run, and the learning curves (train return per step).

    OMP_NUM_THREADS=1 python benchmarks/llm_learning.py run --seeds 0,1,2 --jobs 2 --eval-n 500
    OMP_NUM_THREADS=1 python benchmarks/llm_learning.py run --steps 30 --set optim.lr=5.0e-4 --out runs/llm_learning_lr5e-4
    python benchmarks/llm_learning.py report            # markdown tables from runs/llm_learning/

ALFWorld (GiGPO vs HGPO from the hand-coded expert's clone; scores paired over ``split/task_id`` of
several eval splits, plus per-split valid-command shares and per-task-type success):

    OMP_NUM_THREADS=1 python benchmarks/llm_learning.py run --methods gigpo,hgpo --seeds 0,1 --steps 20 \
        --eval-n 30 --eval-splits train,valid_seen,valid_unseen --sft data/checkpoints/sft-alfworld \
        --recipe recipes/cpu/gigpo-sft-alfworld.yaml --demos handcoded --tag ALFWorld --out runs/llm_learning_alfworld

Runs go to ``runs/llm_learning/<method>-s<seed>/`` (checkpoint, metrics.jsonl, result.json, eval record),
one subprocess each, at most ``--jobs`` at a time (one thread each: the machine has two shared cores).
A finished run (its result.json exists) is not run again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
# Python puts this script's folder first on sys.path, where benchmarks/alfworld.py would shadow the
# alfworld package the ALFWorld env imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
RECIPE = ROOT / "recipes/cpu/grpo-tiny-searchqa.yaml"
SFT = ROOT / "data/checkpoints/sft-searchqa"
OUT = ROOT / "runs/llm_learning"
METHODS = {
    "grpo": ("grpo", {}),
    "stratified": ("stratified", {"alpha": 0.6}),
    "stratified+hadw": ("stratified+hadw", {"alpha": 0.6}),
    # step-level estimators for multi-turn envs (ALFWorld): verl-agent's GiGPO settings, HGPO with K from the env
    "gigpo": ("gigpo", {"gamma": 0.95, "omega": 1.0, "mode": "mean_norm"}),
    "hgpo": ("hgpo", {"gamma": 0.95, "alpha": 1.0}),
}
SEARCHQA_METHODS = ["grpo", "stratified", "stratified+hadw"]


def _recipe_env(recipe_path: Path) -> tuple[str, dict[str, Any]]:
    import yaml

    data = yaml.safe_load(recipe_path.read_text())
    env = data["env"]
    return env["id"], dict(env.get("eval_kwargs") or env.get("kwargs") or {})


def _splits(args: argparse.Namespace) -> list[str]:
    """The eval splits: ``--eval-splits`` or the recipe's eval split."""
    if args.eval_splits:
        return args.eval_splits
    return [str(_recipe_env(args.recipe)[1].get("split", "test"))]


def _report_splits(args: argparse.Namespace, out: Path) -> list[str]:
    """The splits to report: ``--eval-splits``, else every split the SFT checkpoint was evaluated on in
    ``out`` (a comparison run with several splits keys its scores ``split/task_id``; reporting it with the
    recipe's one split would pair nothing), else the recipe's eval split."""
    if args.eval_splits:
        return args.eval_splits
    found = sorted(p.name[len("eval_"):-len(".json")] for p in (out / "sft").glob("eval_*.json"))
    return found or _splits(args)


def _record_path(run_dir: Path, split: str) -> Path:
    return run_dir / f"eval_{split}.json"


def evaluate(agent: str, out: Path, *, n: int, label: str, algorithm: str | None, recipe: Path,
             split: str | None = None) -> dict[str, Any]:
    """Greedy eval of ``agent`` on the first ``n`` tasks of ``split`` (default: the recipe's eval split)
    with the recipe's eval env kwargs; returns the record."""
    from stratagym.eval.harness import EvalConfig, evaluate as run_eval

    env_id, kwargs = _recipe_env(recipe)
    default = kwargs.pop("split", "test")
    cfg = EvalConfig(agent=agent, env_id=env_id, split=split or default, n=n, seeds=(0,), batch_size=64,
                     env_kwargs=kwargs, label=label, algorithm=algorithm)
    return run_eval(cfg, out=out, resume=True, progress=False)


def _evaluate_splits(agent: str, run_dir: Path, args: argparse.Namespace, *, label: str, algorithm: str) -> dict[str, float]:
    """Evaluate on every eval split; the scores of all of them, keyed ``task_id`` (one split) or
    ``split/task_id`` (several), which is what the paired differences run over."""
    records = [evaluate(agent, _record_path(run_dir, split), n=args.eval_n, label=label, algorithm=algorithm,
                        recipe=args.recipe, split=split) for split in _splits(args)]
    return _merged(records, args)


def _records(run_dir: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [json.loads(_record_path(run_dir, s).read_text()) for s in _splits(args)]


def _tag(args: argparse.Namespace) -> str:
    """The label suffix that tells comparisons of different SFT checkpoints apart on the leaderboard."""
    return f", {args.tag}" if args.tag else ""


def _hops(recipe: Path) -> dict[str, int]:
    """Hops per question of the recipe's eval split (the dataset's metadata, read through the env);
    empty for envs without hop counts (ALFWorld)."""
    import gymnasium as gym

    import stratagym  # noqa: F401

    env_id, kwargs = _recipe_env(recipe)
    env = gym.make(env_id, **kwargs).unwrapped
    try:
        examples = getattr(env, "examples", None) or []
        return {str(ex.id): int(ex.hops) for ex in examples if getattr(ex, "hops", None) is not None}
    finally:
        env.close()


def _by_hops(record: dict[str, Any], hops: dict[str, int]) -> str:
    """EM and the share of episodes whose search count equals the question's hops, per hop count."""
    cells = []
    for h in sorted(set(hops.values())):
        eps = [e for e in record["episodes"] if hops.get(str(e["task_id"])) == h]
        if eps:
            em = sum(float(e["score"]) for e in eps) / len(eps)
            right = sum(int(e["search_count"]) == h for e in eps) / len(eps)
            cells.append(f"{em:.3f} / {right:.2f}")
    return " | ".join(cells)


def _scores(record: dict[str, Any]) -> dict[str, float]:
    return {str(e["task_id"]): float(e["score"]) for e in record["episodes"]}


def _merged(records: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, float]:
    """The scores of one run's eval records, keyed as :func:`_evaluate_splits` keys them."""
    splits = _splits(args)
    out: dict[str, float] = {}
    for split, record in zip(splits, records):
        prefix = f"{split}/" if len(splits) > 1 else ""
        out.update({prefix + k: v for k, v in _scores(record).items()})
    return out


def _by_split(runs: list[tuple[str, list[dict[str, Any]]]], args: argparse.Namespace) -> list[str]:
    """Score and share of valid actions per eval split, for every run: what RL changes when it does
    not yet change the score (an ALFWorld policy that loops on inadmissible commands)."""
    splits = _splits(args)
    if len(splits) < 2:
        return []
    lines = ["", "Per eval split: score / share of valid actions (greedy)", "",
             "| run | " + " | ".join(f"{s} ({len(runs[0][1][i]['episodes'])})" for i, s in enumerate(splits)) + " |",
             "| --- |" + " --- |" * len(splits)]
    for name, records in runs:
        cells = []
        for rec in records:
            eps = rec["episodes"]
            cells.append(f"{sum(float(e['score']) for e in eps) / len(eps):.3f} / "
                         f"{sum(float(e.get('valid_ratio') or 0.0) for e in eps) / len(eps):.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _task_type(task_id: str) -> str:
    """ALFWorld's task type, the part of the game path before the first '-' (``pick_and_place_simple``...)."""
    return task_id.split("/")[0].split("-")[0]


def _by_type(runs: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    """Score and mean steps per task type (ALFWorld game folders), for every run over all its eval splits.
    Empty when the task ids carry no type (one type for every task)."""
    rows: dict[str, dict[str, list[tuple[float, int]]]] = {}
    for name, records in runs:
        per: dict[str, list[tuple[float, int]]] = {}
        for rec in records:
            for e in rec["episodes"]:
                per.setdefault(_task_type(str(e["task_id"])), []).append((float(e["score"]), int(e.get("turns") or 0)))
        rows[name] = per
    types = sorted({t for per in rows.values() for t in per})
    if len(types) < 2:
        return []
    lines = ["", "Per task type: success rate / mean episode length (steps)", "",
             "| run | " + " | ".join(f"{t} ({len(rows[runs[0][0]].get(t, []))})" for t in types) + " |",
             "| --- |" + " --- |" * len(types)]
    for name, per in rows.items():
        cells = []
        for t in types:
            xs = per.get(t, [])
            cells.append(f"{sum(x for x, _ in xs) / len(xs):.2f} / {sum(n for _, n in xs) / len(xs):.1f}" if xs else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _env_name(recipe: Path) -> str:
    """``searchqa`` for ``stratagym/SearchQA-v0``: the run names' env part."""
    return _recipe_env(recipe)[0].split("/")[-1].split("-")[0].lower()


def worker(args: argparse.Namespace) -> None:
    """One RL run: train from the SFT checkpoint, record tied-group fractions, evaluate the result."""
    import torch
    import yaml

    torch.set_num_threads(1)
    from stratagym.training.config import load_recipe
    from stratagym.training.trainer import Trainer

    estimator, kwargs = METHODS[args.method]
    run_dir = Path(args.out) / f"{args.method}-s{args.seed}"
    overrides = {
        "name": f"{args.method}-sft-{_env_name(args.recipe)}-s{args.seed}",
        "policy.model": str(args.sft),
        "algorithm.estimator": estimator,
        "algorithm.estimator_kwargs": kwargs,
        "train.seed": args.seed,
        "train.total_steps": args.steps,
        "train.output_dir": str(run_dir / "train"),
        "train.save_every": args.steps,
        "train.eval_every": 0,
        "train.progress": False,
        "train.tensorboard": False,
    }
    for item in args.set or []:  # extra recipe overrides shared by every run of a comparison
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    recipe = load_recipe(args.recipe, overrides)
    tied: list[dict[str, float]] = []

    class Recording(Trainer):
        def rollout(self):  # noqa: ANN201 - the trainer's RolloutBatch
            batch = super().rollout()
            groups: dict[int, list[float]] = {}
            for t in batch.ok:
                groups.setdefault(t.group, []).append(float(t.env_return))
            n_tied = sum(1 for r in groups.values() if max(r) == min(r))
            tied.append({"groups": len(groups), "tied": n_tied, "all0": sum(1 for r in groups.values() if max(r) == 0),
                         "all1": sum(1 for r in groups.values() if min(r) == 1)})
            return batch

    t0 = time.perf_counter()
    trainer = Recording(recipe)
    try:
        rows = trainer.train()
        ckpt = trainer.save()
    finally:
        trainer.close()
    train_s = time.perf_counter() - t0
    policy_dir = Path(ckpt) / "policy" if ckpt else None
    if policy_dir is None or not policy_dir.exists():
        from stratagym.training.checkpoint import latest_checkpoint

        policy_dir = latest_checkpoint(run_dir / "train") / "policy"
    t1 = time.perf_counter()
    scores = _evaluate_splits(str(policy_dir), run_dir, args, algorithm=args.method,
                              label=f"{args.method} from SFT (s{args.seed}, {args.steps} steps{_tag(args)})")
    eval_s = time.perf_counter() - t1
    curve = [{"step": r["step"], "return": r.get("rollout/return"), "format_ok": r.get("rollout/format_ok"),
              "search_count": r.get("rollout/search_count"), "adv_nonzero": r.get("adv/nonzero"),
              "loss": r.get("loss/loss"), "time": r.get("time/step"), **tied[i]} for i, r in enumerate(rows)]
    result = {"method": args.method, "seed": args.seed, "steps": args.steps, "train_s": train_s, "eval_s": eval_s,
              "checkpoint": str(policy_dir), "curve": curve, "scores": scores,
              "eval_records": [str(_record_path(run_dir, s)) for s in _splits(args)]}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))


def sampled(args: argparse.Namespace) -> None:
    """Test EM when the policy samples at its training temperature (T=1), before and after RL, over
    ``--samples`` seeds: RL's first effect is on the sampled policy, which greedy decoding hides."""
    import torch

    torch.set_num_threads(1)
    from stratagym.agents.llm import LLMPolicy
    from stratagym.training.rollout import play

    out = Path(args.out)
    env_id, kwargs = _recipe_env(args.recipe)
    import gymnasium as gym

    import stratagym  # noqa: F401

    env = gym.make(env_id, **kwargs)
    ids = [str(t) for t in env.unwrapped.task_ids()][: args.eval_n]
    env.close()
    targets = {"sft": str(args.sft)}
    for f in sorted(out.glob("*/result.json")):
        targets[f.parent.name] = json.loads(f.read_text())["checkpoint"]
    dest = out / "sampled.json"
    done = json.loads(dest.read_text()) if dest.exists() else {}
    for name, path in targets.items():
        if name in done:
            continue
        policy = LLMPolicy.from_pretrained(path)
        scores: dict[str, float] = {}
        for k in range(args.samples):
            torch.manual_seed(1000 + k)
            trajs = play(policy, [(t, k) for t in ids], env_id=env_id, env_kwargs=kwargs, batch_size=100, greedy=False)
            for tr in trajs:
                scores[tr.task_id] = scores.get(tr.task_id, 0.0) + float(tr.score) / args.samples
        done[name] = scores
        dest.write_text(json.dumps(done))
        print(name, sum(scores.values()) / len(scores), flush=True)


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not all(_record_path(out / "sft", s).exists() for s in _splits(args)):
        t0 = time.perf_counter()
        _evaluate_splits(str(args.sft), out / "sft", args, label=f"SFT ({args.demos} demos, no RL{_tag(args)})", algorithm="sft")
        print(f"SFT eval: {time.perf_counter() - t0:.0f}s", flush=True)
    jobs = [(m, s) for s in args.seeds for m in args.methods
            if not (out / f"{m}-s{s}" / "result.json").exists()]
    running: list[tuple[subprocess.Popen, str, float]] = []
    while jobs or running:
        while jobs and len(running) < args.jobs:
            m, s = jobs.pop(0)
            (out / f"{m}-s{s}").mkdir(parents=True, exist_ok=True)
            log = open(out / f"{m}-s{s}" / "log.txt", "w")
            cmd = [sys.executable, __file__, "worker", "--method", m, "--seed", str(s), "--steps", str(args.steps),
                   "--eval-n", str(args.eval_n), "--sft", str(args.sft), "--recipe", str(args.recipe), "--out", str(out),
                   "--tag", args.tag, "--demos", args.demos]
            cmd += ["--eval-splits", ",".join(args.eval_splits)] if args.eval_splits else []
            cmd += [x for item in (args.set or []) for x in ("--set", item)]
            running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}),
                            f"{m}-s{s}", time.perf_counter()))
            print(f"started {m} seed {s}", flush=True)
        time.sleep(2)
        for item in list(running):
            proc, name, t0 = item
            if proc.poll() is not None:
                running.remove(item)
                print(f"finished {name} (exit {proc.returncode}) in {time.perf_counter() - t0:.0f}s", flush=True)
    report(args)


def _fmt(est: Any) -> str:
    return f"{est.value:.3f} [{est.ci_low:.3f}, {est.ci_high:.3f}]"


def report(args: argparse.Namespace) -> None:
    from stratagym.eval.stats import across_seeds, mean, proportion

    out = Path(args.out)
    args.eval_splits = _report_splits(args, out)
    before_recs = _records(out / "sft", args)
    before = _merged(before_recs, args)
    ids = sorted(before)
    b = proportion([before[i] for i in ids])
    lines = [f"SFT checkpoint, score on {len(ids)} {'/'.join(_splits(args))} tasks: {_fmt(b)}", "",
             "| method | seed | steps | train s | score after [95% CI] | paired diff after-before [95% CI] | wrong->right / right->wrong | tied groups drawn, first 3 -> last 3 steps | tied groups trained on, first 3 -> last 3 | train return first 3 -> last 3 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    drawn_all: list[float] = []
    summary: dict[str, list[float]] = {}
    finished: list[tuple[str, list[dict[str, Any]]]] = []  # (run name, its eval records) for the per-hop/type tables
    for m in args.methods:
        for s in args.seeds:
            f = out / f"{m}-s{s}" / "result.json"
            if not f.exists():
                continue
            r = json.loads(f.read_text())
            finished.append((f"{m} s{s}", _records(out / f"{m}-s{s}", args)))
            after = r["scores"]
            a = proportion([after[i] for i in ids])
            d = mean([after[i] - before[i] for i in ids])
            summary.setdefault(m, []).append(d.value)
            c = r["curve"]

            def frac(rows: list[dict[str, Any]]) -> float:
                return sum(x["tied"] for x in rows) / max(1, sum(x["groups"] for x in rows))

            def ret(rows: list[dict[str, Any]]) -> float:
                return sum(x["return"] or 0.0 for x in rows) / max(1, len(rows))

            # With DAPO dynamic sampling (rollout.filter_groups) the trained groups never tie; the share of
            # DRAWN groups that tied is the trainer's rollout/filtered_frac. Without it, drawn = trained.
            drawn = [frac([x]) for x in c]
            mfile = out / f"{m}-s{s}" / "train" / "metrics.jsonl"
            if mfile.exists():
                mrows = [json.loads(line) for line in mfile.read_text().splitlines() if line.strip()]
                if mrows and "rollout/filtered_frac" in mrows[0]:
                    drawn = [float(x["rollout/filtered_frac"]) for x in mrows]
            drawn_all += drawn
            lines.append(f"| {m} | {s} | {r['steps']} | {r['train_s']:.0f} | {_fmt(a)} | {d.value:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] | "
                         f"{sum(after[i] > before[i] for i in ids)} / {sum(after[i] < before[i] for i in ids)} | "
                         f"{sum(drawn[:3]) / 3:.2f} -> {sum(drawn[-3:]) / 3:.2f} | {frac(c[:3]):.2f} -> {frac(c[-3:]):.2f} | "
                         f"{ret(c[:3]):.3f} -> {ret(c[-3:]):.3f} |")
    if drawn_all:
        lines += ["", f"Tied groups among all drawn groups, mean over every step of every run: {sum(drawn_all) / len(drawn_all):.2f}"]
    lines += ["", "| method | seeds | mean paired diff | sd | min | max |", "| --- | --- | --- | --- | --- | --- |"]
    for m, diffs in summary.items():
        sm = across_seeds(diffs)
        lines.append(f"| {m} | {len(diffs)} | {sm.mean:+.3f} | {sm.std:.3f} | {min(diffs):+.3f} | {max(diffs):+.3f} |")
    hops = _hops(args.recipe) if len(_splits(args)) == 1 else {}
    before_rec = before_recs[0]
    if hops:
        ks = sorted(set(hops.values()))
        lines += ["", "Per hop count: greedy test EM / share of episodes with as many searches as the question has hops", "",
                  "| run | " + " | ".join(f"{k}-hop ({sum(1 for i in ids if hops.get(i) == k)} q.)" for k in ks) + " |",
                  "| --- |" + " --- |" * len(ks), f"| SFT | {_by_hops(before_rec, hops)} |"]
        lines += [f"| {name} | {_by_hops(records[0], hops)} |" for name, records in finished]
    else:
        lines += _by_split([("SFT", before_recs)] + finished, args)
        lines += _by_type([("SFT", before_recs)] + finished)
    samp_file = out / "sampled.json"
    if samp_file.exists():
        samp = json.loads(samp_file.read_text())
        if "sft" in samp:
            base = samp["sft"]
            sid = sorted(base)
            lines += ["", f"Sampled (T=1) test EM, mean of the samples per question, {len(sid)} questions: SFT {mean([base[i] for i in sid])}", "",
                      "| run | sampled EM after | paired diff after-before [95% CI] |", "| --- | --- | --- |"]
            for name, sc in samp.items():
                if name == "sft":
                    continue
                d = mean([sc[i] - base[i] for i in sid])
                lines.append(f"| {name} | {sum(sc[i] for i in sid) / len(sid):.3f} | {d.value:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] |")
    text = "\n".join(lines)
    print(text)
    (out / "report.md").write_text(text + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["run", "report", "worker", "sampled"])
    p.add_argument("--samples", type=int, default=2, help="sampled mode: samples per question")
    p.add_argument("--methods", type=lambda s: s.split(","), default=SEARCHQA_METHODS,
                   help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    p.add_argument("--method", default="grpo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-n", type=int, default=300)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--sft", type=Path, default=SFT)
    p.add_argument("--recipe", type=Path, default=RECIPE)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--tag", default="", help="Appended to the leaderboard labels, e.g. the model size: '3.5M'.")
    p.add_argument("--eval-splits", type=lambda s: s.split(","), default=None,
                   help="comma list of eval splits (default: the recipe's eval split), e.g. valid_seen,valid_unseen")
    p.add_argument("--demos", default="oracle", help="Who the SFT cloned, for the SFT row's label: oracle, planner.")
    p.add_argument("--set", action="append", help="Recipe override section.key=value for every run (repeatable).")
    args = p.parse_args()
    {"run": run, "report": report, "worker": worker, "sampled": sampled}[args.mode](args)


if __name__ == "__main__":
    main()
