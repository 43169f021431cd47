#!/usr/bin/env python
"""Synchronous vs asynchronous rollouts (issue 33): tokens/s and optimizer steps per hour, side by side.

    OMP_NUM_THREADS=1 python benchmarks/async_rollouts.py [--steps 4] [--repeats 3] [--tasks 2] [--group 4]
                                                          [--max-new 24] [--max-turns 2] [--env stratagym/SearchQA-v0]
    OMP_NUM_THREADS=1 python benchmarks/async_rollouts.py --recipe recipes/cpu/grpo-tiny-searchqa.yaml --max-turns 4

Three trainers on the same recipe (the tiny local model, or ``--recipe``'s policy and env; ``--tasks`` x ``--group`` episodes per step):
``sync`` (``rollout.mode: sync``), ``async-1`` (1 rollout actor, ``max_staleness: 1``) and ``async-2``
(2 actors, ``max_staleness: 2``). Each is built once and trains one untimed warm-up step (it starts the
actors and loads their models); then every repeat times ``--steps`` more steps of each, in a rotated
order (the load of this shared machine hits all alike). An async trainer's block ends when the job it
dispatched for its next step is finished too, so that job is generated inside its own timed block (in
steady state a block generates ``--steps`` jobs) and not while another trainer is timed. Printed per trainer: generated tokens per
wall-clock second of training (the rollout's tokens over the whole step time, update included: the
throughput a run sees), optimizer steps per hour, each as mean [min-max] over repeats, the mean lag of
the trained groups, and the dropped groups. Wall time, not CPU time: overlap is the point.

Ray runs as a private local instance (``address="local"``, 3 CPU slots on the 2 cores: the 3 actors
reserve 1 each), the learner runs in this process. On a 2-core machine the learner and 2 actors share 2 cores, so async-2
cannot beat async-1 by much; the figures say what this machine gives, not what a cluster would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))


def _recipe(args: argparse.Namespace, out: str, mode: str, workers: int, staleness: int) -> dict:
    """The timed recipe: ``--recipe``'s policy and env (its model, prompt and env kwargs, e.g. the
    committed SFT checkpoint's), or the tiny model on ``--env``; the rollout, loss and train settings
    are the benchmark's own, so only the model and the env differ between figures."""
    if args.recipe:
        import yaml

        base = yaml.safe_load(Path(args.recipe).read_text())
        policy = {**base["policy"], "max_new_tokens": args.max_new}
        env = {key: base["env"][key] for key in ("id", "tasks", "kwargs") if key in base["env"]}
    else:
        policy = {"model": "tiny", "max_new_tokens": args.max_new, "memory_k": 1}
        env = {"id": args.env, "kwargs": {"max_turns": 1} if args.env == "stratagym/SearchQA-v0" else {}}
    return {
        "name": f"bench-{mode}-{workers}",
        "policy": policy,
        "env": env,
        "rollout": {"group_size": args.group, "tasks_per_step": args.tasks, "max_turns": args.max_turns,
                    "mode": mode, "max_staleness": staleness, "async_workers": workers},
        "algorithm": {"estimator": "grpo", "invalid_action_penalty": 0.1},
        "loss": {"off_policy": {"tis": "token", "tis_cap": 2.0}},
        "optim": {"lr": 1.0e-4},
        "train": {"total_steps": 10_000, "output_dir": out, "save_every": 0, "progress": False, "tensorboard": False},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=24)
    ap.add_argument("--env", default="stratagym/SearchQA-v0", help="with the tiny model (no --recipe)")
    ap.add_argument("--recipe", default=None,
                    help="take the policy and env from this recipe (e.g. recipes/cpu/grpo-tiny-searchqa.yaml: "
                         "the committed SFT model)")
    ap.add_argument("--max-turns", type=int, default=2, help="turns per episode")
    args = ap.parse_args()

    import ray

    from stratagym.training.config import RecipeConfig
    from stratagym.training.trainer import Trainer

    os.environ.pop("RAY_ADDRESS", None)
    # a busy shared machine can take longer than Ray's default 10 s to register the raylet
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    load0 = os.getloadavg()
    # 3 actors live at once (async-1's and async-2's two), 1 CPU slot each: with fewer slots one actor is
    # never scheduled and its job never returns
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    kinds = [("sync", "sync", 1, 0), ("async-1", "async", 1, 1), ("async-2", "async", 2, 2)]
    tmp = tempfile.mkdtemp(prefix="async-bench-")
    trainers = {}
    try:
        for name, mode, workers, staleness in kinds:
            trainers[name] = Trainer(RecipeConfig.from_dict(_recipe(args, f"{tmp}/{name}", mode, workers, staleness)))
            trainers[name].train(max_steps=1)  # warm-up: actors started, models loaded, first weights published
        tok_s: dict[str, list[float]] = {k[0]: [] for k in kinds}
        steps_h: dict[str, list[float]] = {k[0]: [] for k in kinds}
        lags: dict[str, list[float]] = {k[0]: [] for k in kinds}
        publish: list[float] = []  # seconds per ray.put of the weights (async trainers)
        for rep in range(args.repeats):
            order = kinds[rep % len(kinds):] + kinds[: rep % len(kinds)]
            for name, *_ in order:
                t0 = time.perf_counter()
                rows = trainers[name].train(max_steps=args.steps)
                runner = trainers[name]._async
                if runner is not None and runner.in_flight:  # the prefetched job is paid inside this block,
                    refs = [j.ref for j in runner.in_flight]   # not generated while another trainer is timed
                    ray.wait(refs, num_returns=len(refs))
                wall = time.perf_counter() - t0
                tok_s[name].append(sum(r["rollout/tokens"] for r in rows) / wall)
                steps_h[name].append(3600.0 * len(rows) / wall)
                lags[name].extend(r.get("async/lag", 0.0) for r in rows)
                if "async/publishes" in rows[0]:
                    puts = rows[-1]["async/publishes"] - rows[0]["async/publishes"] + 1
                    publish.append(sum(r["async/publish_s"] for r in rows) / max(puts, 1))
        model = trainers["sync"].config.policy["model"]
        env_id = trainers["sync"].config.env.id
        print(f"env {env_id}, model {model}, {args.max_turns} turns, {args.tasks} tasks x {args.group} episodes per step, "
              f"{args.steps} steps x {args.repeats} repeats, {os.cpu_count()} CPUs, load {load0[0]:.1f} -> "
              f"{os.getloadavg()[0]:.1f}")
        print(f"{'trainer':<9} {'tokens/s':>24} {'steps/hour':>24} {'mean lag':>9} {'dropped':>8}")
        base = statistics.mean(steps_h["sync"])
        for name, *_ in kinds:
            t, s = tok_s[name], steps_h[name]
            dropped = trainers[name]._async.dropped_groups if trainers[name]._async is not None else 0
            print(f"{name:<9} {statistics.mean(t):>8.1f} [{min(t):6.1f}-{max(t):6.1f}] "
                  f"{statistics.mean(s):>8.0f} [{min(s):6.0f}-{max(s):6.0f}] {statistics.mean(lags[name]):>9.2f} "
                  f"{dropped:>8}")
        print("steps/hour ratio to sync: " + ", ".join(
            f"{name} {statistics.mean(steps_h[name]) / base:.2f}" for name, *_ in kinds[1:]))
        # paired within a repeat (the machine's load changes between repeats more than between trainers)
        for name, *_ in kinds[1:]:
            r = [a / b for a, b in zip(steps_h[name], steps_h["sync"])]
            print(f"  {name}/sync per repeat: " + " ".join(f"{x:.2f}" for x in r))
        if publish:
            print(f"publish (one ray.put of the weights per version): mean {1e3 * statistics.mean(publish):.1f} ms "
                  f"[{1e3 * min(publish):.1f}-{1e3 * max(publish):.1f}]")
    finally:
        for t in trainers.values():
            t.close()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
