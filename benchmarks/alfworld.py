#!/usr/bin/env python
"""ALFWorld episodes, resets and steps: stock TextWorld vs stratagym's engine, side by side, same commands.

    OMP_NUM_THREADS=1 python benchmarks/alfworld.py [--repeats 3] [--steps 50] [--games 3] [--clock cpu|wall]

For one bundled train game of each task type (``--games``), a fixed command sequence (mostly admissible
commands, some junk, drawn once by a seeded RNG) is played as an *episode*: reset into that game (the
previous episode played another one), then ``--steps`` commands. Each repeat plays every game, in turn,
through four engines, one after the other (so machine load hits all four alike):

* **stock**: textworld's PddlEnv + alfworld's AlfredDemangler/AlfredInfos, as ALFWorld builds them,
  no stratagym patch active;
* **fast, cold**: :mod:`stratagym.envs.alfworld.speedups` active, the game never translated on this
  machine: the on-disk translation cache is off for this engine, and the process's per-game caches are
  emptied first (what the domain shares -- text templates, the parsed ``alfred.twl2`` -- stays, as in
  any process past its first game);
* **fast, on disk**: the same, but the game's translation is in the on-disk cache
  (:mod:`stratagym.envs.alfworld.disk_cache`, written by an earlier process -- here by this one before
  the repeats, into a temporary folder) and not in the process's memory (emptied first, as for cold):
  a new training run, env worker or Ray worker meeting a game any process translated before;
* **fast, warm**: the game was played before in this process (by any env): the per-game LRU caches
  hold its translation and grammar. This is the common case in training: every task is reset G times
  per group, and every epoch revisits the same games.

It prints, per repeat and as mean [min-max] over repeats: reset-into-a-new-game time, episode time and
steps/s for the four engines and their ratios to stock; the reset split into its parts (grammar
parse, PDDL->SAS translation, state build, text of the first observation, the rest); and whether all
transcripts (feedback, admissible commands, won) are byte-identical -- it exits 1 if they are not.
Before each episode a full garbage collection runs, untimed, so no engine pays for the collection the
allocations of the engine before it made due. Then the gymnasium env on top (info dict, hashing): steps/s. Times are this process's CPU time by
default (``--clock wall`` for wall time): on a machine shared with other jobs, wall time mostly measures
the wait for a core. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

# Run as a script, this file's folder is sys.path[0] and this file would shadow the alfworld package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

PARTS = ("grammar", "translation", "state build", "first text", "other")
# CPU time of this process by default: on a shared, busy machine wall time mostly measures the wait for
# a core (the spread between repeats was 5x in wall time); --clock wall switches back.
CLOCK = time.process_time


class ResetClock:
    """Inclusive timers around the engine functions a game load runs, to split a reset into parts.

    grammar = the grammar file's parse; translation = fast-downward's PDDL -> SAS; state build = the rest
    of ``PddlState`` (SAS into the C++ library, facts); first text = the intro and the admissible
    commands derived by ``PddlEnv.reset`` besides its own state build; other = JSON read, entity names,
    wrappers.
    """

    def __init__(self) -> None:
        self.t: dict[str, float] = defaultdict(float)
        self._in_reset = False
        self.last_total = 0.0

    def install(self) -> None:
        import fast_downward
        import textworld.envs.pddl.logic as pddl_logic
        import textworld.envs.pddl.pddl as pddl_env

        from stratagym.envs.alfworld import speedups

        speedups.install()
        clock = self

        def timed(name, fn, *, scoped=False):
            def wrapper(*args, **kwargs):
                key = name + ("@reset" if scoped and clock._in_reset else "")
                t0 = CLOCK()
                try:
                    return fn(*args, **kwargs)
                finally:
                    clock.t[key] += CLOCK() - t0
            return wrapper

        pddl_logic._parse_and_convert = timed("grammar", pddl_logic._parse_and_convert)
        fast_downward.pddl2sas = timed("translation", fast_downward.pddl2sas, scoped=True)
        pddl_logic.PddlState.__init__ = timed("state", pddl_logic.PddlState.__init__, scoped=True)
        stock_reset = pddl_env.PddlEnv.reset

        def reset(env):
            clock._in_reset = True
            t0 = CLOCK()
            try:
                return stock_reset(env)
            finally:
                clock._in_reset = False
                clock.t["reset"] += CLOCK() - t0

        pddl_env.PddlEnv.reset = reset

    @contextlib.contextmanager
    def measure(self, out: dict[str, float]):
        self.t.clear()
        t0 = CLOCK()
        yield
        total = CLOCK() - t0
        t = self.t
        translation = t["translation"] + t["translation@reset"]
        out["grammar"] = out.get("grammar", 0.0) + t["grammar"]
        out["translation"] = out.get("translation", 0.0) + translation
        out["state build"] = out.get("state build", 0.0) + t["state"] + t["state@reset"] - translation
        out["first text"] = out.get("first text", 0.0) + t["reset"] - t["state@reset"]
        out["other"] = out.get("other", 0.0) + total - t["grammar"] - t["state"] - t["reset"]
        self.last_total = total


def commands_for(game_file, n_steps: int, seed: int) -> list[str]:
    from stratagym.envs.alfworld.engine import AlfredEngine

    engine = AlfredEngine(fast=True, disk_cache=False)  # leaves nothing on disk for the "disk" engine to find
    state = engine.load(game_file)
    rng = random.Random(seed)
    out = []
    for _ in range(n_steps):
        cmd = rng.choice(["jump", "take it", "go to the moon"]) if rng.random() < 0.1 else rng.choice(state.admissible_commands)
        out.append(cmd)
        state = engine.step(cmd)
    engine.close()
    return out


def episode(engine, game_file, commands, clock: ResetClock, parts: dict[str, float]):
    """Reset ``engine`` into ``game_file`` and play ``commands``: (reset s, steps s, transcript)."""
    with clock.measure(parts):
        state = engine.load(game_file)
    reset_s = clock.last_total
    transcript = [(state.feedback, state.admissible_commands, state.won)]
    t0 = CLOCK()
    for cmd in commands:
        state = engine.step(cmd)
        transcript.append((state.feedback, state.admissible_commands, state.won))
    return reset_s, CLOCK() - t0, transcript


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.mean(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50, help="commands per episode")
    ap.add_argument("--games", type=int, default=3, help="games (one per task type, cycling through the six)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--env-steps", type=int, default=300, help="steps for the gymnasium env figure (0: skip)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="cpu: this process's CPU time (default; robust to other jobs on the machine); wall: perf_counter")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    # the disk-cache column reads entries this run writes, in a folder of its own (removed at exit)
    import shutil
    import tempfile

    disk_dir = tempfile.mkdtemp(prefix="stratagym-bench-sas-")
    os.environ["STRATAGYM_ALFWORLD_SAS_CACHE"] = disk_dir
    try:
        return _run(args)
    finally:
        shutil.rmtree(disk_dir, ignore_errors=True)


def _run(args: argparse.Namespace) -> int:
    import stratagym  # noqa: F401
    from stratagym.envs.alfworld import speedups
    from stratagym.envs.alfworld.engine import AlfredEngine
    from stratagym.envs.alfworld.games import resolve_games

    games = resolve_games("train", "bundled")
    by_type: dict[str, list] = {}
    for e in games.entries:
        by_type.setdefault(e.task_type, []).append(e)
    chosen = []
    for i in range(args.games):
        entries = list(by_type.values())[i % len(by_type)]
        chosen.append(entries[(i // len(by_type)) % len(entries)])
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS')}; {len(chosen)} games x {args.steps} commands x {args.repeats} repeats; "
          f"clock: {args.clock}")
    commands = [commands_for(e.game_file, args.steps, seed=i) for i, e in enumerate(chosen)]
    clock = ResetClock()
    clock.install()

    kinds = ("stock", "cold", "disk", "warm")
    engines = {"stock": AlfredEngine(fast=False), "cold": AlfredEngine(fast=True, disk_cache=False),
               "disk": AlfredEngine(fast=True, disk_cache=True), "warm": AlfredEngine(fast=True, disk_cache=False)}
    speedups.clear_caches(games_only=True)
    for e in chosen:  # an earlier process translated every game and left it on disk (an engine with the disk
        engines["disk"].load(e.game_file)  # cache on); the warm engine's process has met every game once
    assert speedups.cache_info()["disk_writes"] == len(chosen), speedups.cache_info()
    engines["warm"].load(games.entries[-1].game_file)
    disk_read = 0
    identical = True
    per_repeat = []  # {kind: {"reset": s, "steps": s, "n": commands}}
    parts = {k: defaultdict(float) for k in kinds}
    for r in range(args.repeats):
        row = {k: {"reset": 0.0, "steps": 0.0, "n": 0} for k in kinds}
        for e, cmds in zip(chosen, commands):
            transcripts = {}
            for k in kinds:
                if k in ("cold", "disk"):  # the game is new to the process (its translation on disk for "disk")
                    speedups.clear_caches(games_only=True)
                # Every engine starts from the same collector state, untimed: otherwise a full collection
                # owed by the previous engine's allocations (60-100 ms here: it walks the whole heap) lands
                # in the next one's reset -- measured: the "disk" reset paid ~15 ms a reset for the cold
                # translation's burst before it.
                gc.collect()
                reset_s, steps_s, transcripts[k] = episode(engines[k], e.game_file, cmds, clock, parts[k])
                if k == "disk":  # the translation came from disk, the translator did not run
                    info = speedups.cache_info()
                    disk_read += info["disk_hits"] >= 1 and info["disk_misses"] == 0
                row[k]["reset"] += reset_s
                row[k]["steps"] += steps_s
                row[k]["n"] += len(cmds)
            identical &= transcripts["stock"] == transcripts["cold"] == transcripts["disk"] == transcripts["warm"]
        per_repeat.append(row)
        s = row["stock"]
        print(f"repeat {r + 1}: reset stock {s['reset'] / len(chosen):.3f} s, cold {row['cold']['reset'] / len(chosen):.3f} s, "
              f"on disk {row['disk']['reset'] / len(chosen):.4f} s, warm {row['warm']['reset'] / len(chosen):.4f} s; "
              f"steps/s stock {s['n'] / s['steps']:.1f}, "
              f"fast {row['warm']['n'] / row['warm']['steps']:.1f}", flush=True)
    for eng in engines.values():
        eng.close()

    n_games = len(chosen)

    def figure(kind: str, what: str) -> list[float]:
        out = []
        for row in per_repeat:
            x = row[kind]
            out.append({"reset": x["reset"] / n_games, "episode": (x["reset"] + x["steps"]) / n_games,
                        "steps/s": x["n"] / x["steps"]}[what])
        return out

    def ratio(kind: str, what: str) -> list[float]:
        a, b = figure("stock", what), figure(kind, what)
        return [y / x for x, y in zip(b, a)] if what != "steps/s" else [x / y for x, y in zip(b, a)]

    fast_kinds = ("cold", "disk", "warm")
    heads = {"cold": "fast, cold game", "disk": "fast, on disk", "warm": "fast, warm game"}
    print(f"\n{'figure':42s} {'stock':>20s} " + " ".join(f"{heads[k]:>22s}" for k in fast_kinds))
    for what, fmt in (("reset", "{:.3f}"), ("episode", "{:.3f}"), ("steps/s", "{:.1f}")):
        label = {"reset": "reset into a new game (s)", "episode": f"episode: new game + {args.steps} steps (s)",
                 "steps/s": "steps/s"}[what]
        print(f"{label:42s} {spread(figure('stock', what), fmt):>20s} "
              + " ".join(f"{spread(figure(k, what), fmt):>22s}" for k in fast_kinds))
        print(f"{'  speed-up vs stock (x)':42s} {'':>20s} " + " ".join(f"{spread(ratio(k, what)):>22s}" for k in fast_kinds))
    # a GRPO group of G envs in one process resetting into the same new task: 1 cold load + G-1 warm
    g = 8
    group = [(c + (g - 1) * w) / g for c, w in zip(figure("cold", "reset"), figure("warm", "reset"))]
    group_ratio = [s / x for s, x in zip(figure("stock", "reset"), group)]
    ep_group = [(c + (g - 1) * w) / g for c, w in zip(figure("cold", "episode"), figure("warm", "episode"))]
    ep_group_ratio = [s / x for s, x in zip(figure("stock", "episode"), ep_group)]
    print(f"group of {g} copies of a new task (1 cold + {g - 1} warm resets): reset {spread(group, '{:.3f}')} s "
          f"= {spread(group_ratio)}x; episode {spread(ep_group, '{:.3f}')} s = {spread(ep_group_ratio)}x")

    n_resets = n_games * args.repeats
    print(f"\nreset split into parts (mean per reset, ms; translation on disk = reading it back):\n"
          f"{'part':14s} " + " ".join(f"{k:>9s}" for k in kinds))
    for part in PARTS:
        print(f"{part:14s} " + " ".join(f"{1000 * parts[k][part] / n_resets:9.1f}" for k in kinds))
    print(f"{'total':14s} " + " ".join(f"{1000 * sum(parts[k][p] for p in PARTS) / n_resets:9.1f}" for k in kinds))
    print(f"on-disk resets that read the translation from disk (translator not run): {disk_read}/{n_resets}")
    print(f"transcripts identical (stock = cold = on disk = warm, {args.repeats * sum(map(len, commands))} commands "
          f"and {n_resets} resets per engine): {identical}")

    if args.env_steps:
        import gymnasium as gym

        env = gym.make("stratagym/ALFWorld-v0", data_path="bundled", max_steps=100_000)
        obs, info = env.reset(options={"task_id": chosen[0].task_id})
        rng = random.Random(0)
        t0 = CLOCK()
        for _ in range(args.env_steps):
            obs, rew, term, trunc, info = env.step(rng.choice(info["admissible_actions"]))
            if term:
                obs, info = env.reset(options={"task_id": info["task_id"]})
        print(f"\ngym env step (random admissible actions, info + hashes): {args.env_steps / (CLOCK() - t0):.1f} steps/s")
        env.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
