"""Pinned transcripts of scripted episodes, one small set per env family, so that a change in what an env
does cannot land without a bump of its ``EnvSpec.behaviour_version`` (the protocol fingerprint's
version field, docs/protocol.md).

Each pinned env plays a few episodes with its scripted agents (fixed tasks, seeds and agent seeds); every
step's observation, action, reward, termination flags and ``info`` go into one sha256. The pins file
holds, per env id, the behaviour version the hash was taken under and the hash.

After an intended behaviour change: bump the family's ``behaviour_version``, then rewrite the pins with

    .venv/bin/python -m tests.core.behaviour_transcripts --update
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

PINS = Path(__file__).with_name("behaviour_pins.json")

#: env id -> (agents, env kwargs, number of tasks). Cheap episodes only (the whole set runs in seconds).
PINNED: dict[str, tuple[tuple[str, ...], dict[str, Any], int]] = {
    "stratagym/SearchQA-v0": (("oracle", "random"), {"split": "test"}, 2),
    "stratagym/ALFWorld-v0": (("planner",), {"split": "in_distribution"}, 1),
    "stratagym/WebShop-v0": (("oracle", "random"), {"split": "test"}, 2),
    "stratagym/SearchStrata-v0": (("oracle", "random"), {}, 2),
    "stratagym/DifficultyMix-v0": (("oracle", "random"), {}, 2),
    "stratagym/CueCorridor-v0": (("oracle", "random"), {}, 2),
    "stratagym/ValueCorridor-v0": (("oracle", "random"), {}, 2),
    "stratagym/SearchArchives-v0": (("oracle", "random"), {}, 2),
    "stratagym/DifficultyShared-v0": (("oracle", "random"), {}, 2),
}
#: Registered built-in envs without pins, and why (a new env must be pinned or named here).
UNPINNED: dict[str, str] = {
    "stratagym/WebShopBrowser-v0": "serves the text env's pages (ShopSite) through Chromium; WebShop-v0's pin covers them",
    "stratagym/OpenEnv-v0": "a client of another env's server: its behaviour is the served env's",
    "stratagym/GEM-v0": "a wrapper of GEM's own envs: their behaviour is GEM's (its version belongs in the spec's libraries)",
}


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def transcript_hash(env_id: str) -> str:
    """sha256 over the pinned episodes of ``env_id`` (see the module docstring)."""
    import gymnasium as gym

    import stratagym  # noqa: F401  (registers the envs)
    from stratagym.envs.core import EpisodeKey
    from stratagym.envs.registry import agent_env_kwargs, make_agent

    agents, kwargs, n_tasks = PINNED[env_id]
    h = hashlib.sha256()
    for name in agents:
        env = gym.make(env_id, **{**kwargs, **agent_env_kwargs(env_id, name)})
        try:
            agent = make_agent(env_id, name, env, seed=0)
            for task in list(env.unwrapped.task_ids())[:n_tasks]:
                obs, info = env.reset(seed=0, options={"task_id": task})
                key = EpisodeKey(task, 0)
                steps: list[Any] = [obs, _plain(info)]
                done = False
                while not done:
                    action = agent.act([obs], [info], [key])[0]
                    obs, reward, terminated, truncated, info = env.step(action)
                    steps.append([action, obs, float(reward), bool(terminated), bool(truncated), _plain(info)])
                    done = terminated or truncated
                h.update(json.dumps([name, task, steps], sort_keys=True, ensure_ascii=False).encode("utf-8"))
        finally:
            env.close()
    return "sha256:" + h.hexdigest()


def current(env_id: str) -> dict[str, Any]:
    """The pin ``env_id`` would get now: its spec's behaviour version and its transcript hash."""
    from stratagym.envs.registry import get_spec

    return {"behaviour_version": get_spec(env_id).behaviour_version, "transcripts": transcript_hash(env_id)}


def main(argv: list[str]) -> int:
    if argv != ["--update"]:
        print(__doc__)
        return 2
    pins = {env_id: current(env_id) for env_id in sorted(PINNED)}
    PINS.write_text(json.dumps(pins, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PINS} ({len(pins)} envs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def pin_problem(env_id: str, pinned: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """Why ``env_id``'s pin and its current behaviour disagree (None: they agree)."""
    fix = "then run `.venv/bin/python -m tests.core.behaviour_transcripts --update`"
    if pinned is None:
        return f"{env_id} has no pin; {fix}"
    if now["transcripts"] != pinned["transcripts"] and now["behaviour_version"] == pinned["behaviour_version"]:
        return (f"{env_id}: the pinned scripted transcripts changed but behaviour_version is still "
                f"{now['behaviour_version']}; bump behaviour_version in its EnvSpec (records of the old and new "
                f"behaviour must not be ranked together), {fix}")
    if now != pinned:
        return f"{env_id}: pinned {pinned}, now {now}; {fix}"
    return None
