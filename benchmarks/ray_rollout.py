#!/usr/bin/env python
"""ALFWorld rollouts through the three env pools: in-process, 2 worker processes, 2 Ray actors.

    OMP_NUM_THREADS=1 python benchmarks/ray_rollout.py [--tasks 4] [--group 4] [--steps 20] [--repeats 5]
                                                       [--workers 2] [--nice15] [--busy 2]

Issue 16's target: 2 Ray workers give >= 1.6x the rollout throughput of one in-process worker on
ALFWorld, the env-bound case (a scripted agent costs nothing, so the env steps are the whole work).

Each pool plays the same collection a trainer's rollout does: ``RolloutCollector.collect`` of
``--tasks`` bundled train games x ``--group`` episodes each, at most ``--steps`` turns, with the
scripted random agent (:class:`~stratagym.agents.scripted.RandomAgent` behind ``ScriptedPolicy``). So
every turn the collector sends each worker ONE call carrying the actions of all the envs it hosts
(``tasks x group / workers`` of them), as in training. The pools are built once and kept across
repeats, as a trainer keeps them across steps; one untimed warm-up collection builds the envs and
loads the games in every worker first. Each repeat then runs the pools one after the other, in
a rotated order (load on this shared machine hits all of them alike), on that repeat's seeds.

Printed: env steps/s per pool (wall time of the whole collection: resets, steps, the agent), each
pool's ratio to in-process per repeat and as mean [min-max]; the actors' niceness; the Ray round trip
of a no-op call to all actors at once, and the pickled size of one turn's answers; the CPU count and
the load average at start and end. Wall time, not CPU time: overlap across workers is the point.
Exits 1 if any pool's trajectories differ from in-process ones. ``--nice15`` adds Ray actors left at
Ray's default worker niceness (15), which is how RayPool ran before it matched the driver's;
``--busy N`` runs N CPU-bound nice-0 processes in this session during the timed repeats, the case
where that niceness matters (Linux's autogroup weighs niceness only within a session).

Ray runs as a private local instance (``address="local"``, ``--workers`` CPUs), never someone's cluster.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's folder is sys.path[0] and benchmarks/alfworld.py would shadow the
# alfworld package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

ENV = "stratagym/ALFWorld-v0"
ENV_KWARGS = {"data_path": "bundled"}


def signature(batch) -> list:
    """What the env decides in each trajectory: actions, rewards, state hashes, ends."""
    return [(t.traj, t.task_id, t.seed, t.failed, t.terminated, t.truncated, t.won,
             [(s.action, s.reward, s.action_valid, s.state_hash) for s in t.steps]) for t in batch.trajectories]


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def fmt(xs: list[float], spec: str = ".2f") -> str:
    return f"{statistics.mean(xs):{spec}} [{min(xs):{spec}}-{max(xs):{spec}}]"


def _spin(stop) -> None:
    """A CPU-bound nice-0 process (--busy): competes with the workers as a trainer's own processes do."""
    while not stop.is_set():
        sum(range(10_000))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=4, help="games per collection")
    ap.add_argument("--group", type=int, default=4, help="episodes per game (G)")
    ap.add_argument("--steps", type=int, default=20, help="max turns per episode")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2, help="worker processes / Ray actors")
    ap.add_argument("--noop-calls", type=int, default=200, help="no-op Ray round trips to time")
    ap.add_argument("--nice15", action="store_true",
                    help="also run a 4th pool: Ray actors left at Ray's default worker niceness 15 (RayPool "
                         "before it matched the driver's niceness)")
    ap.add_argument("--busy", type=int, default=0,
                    help="start this many CPU-bound nice-0 processes in this session for the timed repeats "
                         "(a trainer's other work; with --nice15 it shows what Ray's niceness 15 costs)")
    args = ap.parse_args()

    try:
        import ray
    except ImportError:  # `make bench` runs every script; Ray is the optional `dist` extra
        print("ray not installed (pip install -e '.[dist]'): skipped")
        return 0

    from stratagym.agents.scripted import RandomAgent, ScriptedPolicy
    from stratagym.training.rollout import InProcessPool, RayPool, RolloutCollector, SubprocessPool

    print(f"cpus: {os.cpu_count()}  load average at start: {load()}")
    print(f"work: {args.tasks} tasks x G={args.group} episodes x <= {args.steps} turns, random agent, "
          f"{args.workers} workers; {args.tasks * args.group // args.workers} envs per worker call")
    os.environ.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    # each actor reserves 1 logical CPU: the --nice15 pool's actors need their own
    ray.init(address="local", num_cpus=args.workers * (2 if args.nice15 else 1), include_dashboard=False,
             log_to_driver=False)
    print(f"ray {ray.__version__} start: {time.perf_counter() - t0:.1f} s")

    pools = {
        "inprocess": InProcessPool(ENV, ENV_KWARGS),
        "subprocess": SubprocessPool(ENV, ENV_KWARGS, num_workers=args.workers),
        "ray": RayPool(ENV, ENV_KWARGS, num_workers=args.workers),
    }
    if args.nice15:
        pools["ray-nice15"] = RayPool(ENV, ENV_KWARGS, num_workers=args.workers)
        pools["ray-nice15"]._niceness = None  # its actors keep the niceness Ray gives its workers
    names = list(pools)

    def collector(name: str) -> RolloutCollector:
        # a fresh agent per collection: its per-episode RNGs then depend only on the episode keys
        return RolloutCollector(ENV, ScriptedPolicy(RandomAgent(seed=0)), group_size=args.group,
                                pool=pools[name], max_turns=args.steps)

    rc = 0
    try:
        tasks = collector("inprocess").task_ids()[: args.tasks]
        for name in names:  # warm-up: envs built, games loaded in every worker
            t0 = time.perf_counter()
            collector(name).collect(tasks, list(range(1000, 1000 + len(tasks))))
            print(f"warm-up {name}: {time.perf_counter() - t0:.1f} s")

        import multiprocessing as mp

        stop = mp.get_context("spawn").Event()
        spinners = [mp.get_context("spawn").Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.busy)]
        for p in spinners:
            p.start()
        if spinners:
            print(f"{len(spinners)} busy nice-0 processes running")
        rates: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.repeats):
            seeds = [r * 100 + i for i in range(len(tasks))]
            order = names[r % len(names):] + names[: r % len(names)]
            sigs, row = {}, {}
            for name in order:
                t0 = time.perf_counter()
                batch = collector(name).collect(tasks, seeds)
                dt = time.perf_counter() - t0
                nsteps = sum(len(t.steps) for t in batch.trajectories)
                failed = sum(t.failed for t in batch.trajectories)
                rates[name].append(nsteps / dt)
                sigs[name] = signature(batch)
                row[name] = f"{name} {nsteps / dt:6.1f} steps/s ({nsteps} steps, {dt:.2f} s, env {batch.env_seconds:.2f} s" \
                            + (f", {failed} FAILED" if failed else "") + ")"
            same = all(sigs[n] == sigs["inprocess"] for n in names)
            rc |= 0 if same else 1
            print(f"repeat {r} (order {','.join(order)}; load {load()}): " + "; ".join(row[n] for n in names)
                  + "; " + ", ".join(f"{n}/inprocess {rates[n][-1] / rates['inprocess'][-1]:.2f}x" for n in names[1:])
                  + f"; trajectories {'identical' if same else 'DIFFER'}")

        stop.set()
        for p in spinners:
            p.join(timeout=5)
        print()
        for name in names:
            print(f"{name:>10}: {fmt(rates[name], '.1f')} steps/s")
        for name in names[1:]:
            ratios = [a / b for a, b in zip(rates[name], rates["inprocess"])]
            print(f"{name}/inprocess: {fmt(ratios)}x" + ("  (target: >= 1.6x)" if name == "ray" else ""))

        # the cost of Ray's call itself: one no-op call to every actor, all sent before any is awaited
        actors = [a for a in pools["ray"].actors() if a is not None]
        ray.get([a.pid.remote() for a in actors])
        t0 = time.perf_counter()
        for _ in range(args.noop_calls):
            ray.get([a.pid.remote() for a in actors])
        rt = (time.perf_counter() - t0) / args.noop_calls
        # what one turn's answers weigh on the wire (the same pickles cross the subprocess pipes)
        pool = pools["inprocess"]
        res = pool.reset([(k, 7, {"task_id": tasks[k // args.group]}) for k in range(args.tasks * args.group)])
        res = pool.step([(k, str(info.get("admissible_actions", ["look"])[0])) for k, (_, info) in enumerate(res)])
        size = len(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))
        nice = {n: ray.get([a.niceness.remote() for a in pools[n].actors() if a is not None]) for n in names if n.startswith("ray")}
        print(f"niceness: driver {os.getpriority(os.PRIO_PROCESS, 0)}, " + ", ".join(f"{n} actors {v}" for n, v in nice.items()))
        print(f"ray no-op round trip to {len(actors)} actors: {rt * 1e3:.2f} ms; one turn's answers: "
              f"{size / 1024:.1f} KiB pickled ({size / len(res) / 1024:.1f} KiB per env)")
    finally:
        for p in pools.values():
            p.close()
        ray.shutdown()
    print(f"load average at end: {load()}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
