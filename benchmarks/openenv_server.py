"""Steps/s of a stratagym env in-process vs through its OpenEnv server on loopback, side by side.

The same episodes both ways: the env's oracle plays each task in-process once and its actions are
recorded; then each repeat replays them (reset + steps) on the bare env in this process, and on
``stratagym/OpenEnv-v0`` (openenv-core's ``GenericEnvClient``, one WebSocket session) against
``stratagym serve env`` running in another process on 127.0.0.1. The transcripts (observations,
rewards, ends, info) are compared, and the ratio in-process / server is reported per repeat and as the
median. (OpenEnv's HTTP ``/step`` is stateless, a fresh env per request, so episodes are WebSocket-only.)

Run: ``OMP_NUM_THREADS=1 python benchmarks/openenv_server.py [--envs ID,ID] [--tasks 20] [--rounds 10] [--repeats 3]``;
``--smoke`` runs one synthetic env, 2 tasks, 1 repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Run as a script, this file's folder is sys.path[0], where benchmarks/alfworld.py would shadow the
# alfworld package that stratagym/ALFWorld-v0 imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import gymnasium as gym  # noqa: E402
import httpx  # noqa: E402

import stratagym  # noqa: F401,E402
from stratagym.envs.core import EpisodeKey  # noqa: E402
from stratagym.envs.registry import agent_env_kwargs, make_agent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ENVS = "stratagym/SearchStrata-v0,stratagym/SearchQA-v0,stratagym/ALFWorld-v0"
# the scripted agent that wins each env ("oracle" unless the env names its expert otherwise)
EXPERT = {"stratagym/ALFWorld-v0": "planner"}


def record(env_id: str, kwargs: dict, n_tasks: int) -> list[tuple[str, int, list[str]]]:
    """(task id, seed, the expert's actions) for the first ``n_tasks`` tasks, played in-process."""
    env = gym.make(env_id, **kwargs)
    agent = make_agent(env_id, EXPERT.get(env_id, "oracle"), env, seed=0)
    episodes = []
    for i, task in enumerate(list(env.unwrapped.task_ids())[:n_tasks]):
        obs, info = env.reset(seed=i, options={"task_id": task})
        actions = []
        for _ in range(100):
            (action,) = agent.act([obs], [info], [EpisodeKey(task, i, 0)])
            actions.append(action)
            obs, _, term, trunc, info = env.step(action)
            if term or trunc:
                break
        episodes.append((task, i, actions))
    env.close()
    return episodes


def replay(env, episodes) -> tuple[float, int, list]:
    """Seconds to replay ``episodes`` on ``env``, steps taken, and the transcript."""
    transcript = []
    steps = 0
    t0 = time.perf_counter()
    for task, seed, actions in episodes:
        transcript.append(env.reset(seed=seed, options={"task_id": task}))
        for action in actions:
            transcript.append(env.step(action))
            steps += 1
    return time.perf_counter() - t0, steps, transcript


def start_server(env_id: str, kwargs: dict) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = [a for k, v in kwargs.items() for a in ("-E", f"{k}={json.dumps(v)}")]
    proc = subprocess.Popen([sys.executable, "-m", "stratagym.cli", "serve", "env", env_id, "--port", str(port), *extra],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.communicate()[1][-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the server for {env_id} did not start in 120 s")


def bench(env_id: str, n_tasks: int, repeats: int, rounds: int = 10) -> None:
    kwargs = agent_env_kwargs(env_id, EXPERT.get(env_id, "oracle"))
    episodes = record(env_id, kwargs, n_tasks)
    local = gym.make(env_id, **kwargs).unwrapped  # bare envs both sides: the wrappers' checks are not timed
    proc, url = start_server(env_id, kwargs)
    remote = gym.make("stratagym/OpenEnv-v0", base_url=url, tasks=[t for t, _, _ in episodes]).unwrapped
    try:
        replay(local, episodes[:1]), replay(remote, episodes[:1])  # warm-up: imports, connection, caches
        ratios = []
        for r in range(repeats):
            t_local, steps, a = replay(local, episodes * rounds)
            t_remote, _, b = replay(remote, episodes * rounds)
            same = a == b
            ratios.append((steps / t_local) / (steps / t_remote))
            print(f"{env_id} repeat {r + 1}: {steps} steps (+ {len(episodes) * rounds} resets, timed too); in-process {steps / t_local:,.0f} steps/s, "
                  f"OpenEnv server (WebSocket, loopback) {steps / t_remote:,.0f} steps/s; "
                  f"ratio {ratios[-1]:.1f}; transcripts identical: {same}")
            if not same:
                raise SystemExit(f"{env_id}: the transcripts differ")
        print(f"{env_id}: median ratio in-process / server {statistics.median(ratios):.1f} over {repeats} repeats")
    finally:
        remote.close()
        local.close()
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", default=DEFAULT_ENVS, help="comma-separated env ids (each needs an oracle agent)")
    ap.add_argument("--tasks", type=int, default=20, help="episodes per repeat (one per task)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10, help="times the episodes are replayed per repeat")
    ap.add_argument("--smoke", action="store_true", help="one synthetic env, 2 tasks, 1 repeat")
    args = ap.parse_args()
    if args.smoke:
        args.envs, args.tasks, args.repeats, args.rounds = "stratagym/SearchStrata-v0", 2, 1, 1
    for env_id in args.envs.split(","):
        bench(env_id.strip(), args.tasks, args.repeats, args.rounds)


if __name__ == "__main__":
    main()
