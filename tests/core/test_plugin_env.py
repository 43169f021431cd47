"""A third-party env package, really installed, registers through the entry point and trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "custom_env"

PROBE = r"""
import json
import gymnasium as gym
import torch
from gymnasium.utils.env_checker import check_env
import stratagym
from stratagym.agents.prompts import template_for_env
from stratagym.agents.scripted import ScriptedPolicy
from stratagym.eval.aggregate import aggregate, primary_metric
from stratagym.eval.episodes import EpisodeRecord
from stratagym.training.rollout import InProcessPool, play
from stratagym.algorithms.advantages import grpo
from stratagym.envs.registry import make_agent

spec = stratagym.get_spec("kvlookup/KVLookup-v0")
env = gym.make(spec.id)
check_env(env.unwrapped, skip_render_check=True)
# An algorithm-ready rollout: G=4 copies of each of 3 tasks, oracle vs random agents mixed.
rows = []
recs = []
for g, task in enumerate(env.unwrapped.task_ids()[:3]):
    for member in range(4):
        agent = make_agent(spec.id, "oracle" if member % 2 == 0 else "random", env, seed=member)
        (traj,) = play(ScriptedPolicy(agent), [(task, member)], pool=InProcessPool.from_envs([env]), batch_size=1)
        rec = EpisodeRecord.from_trajectory(traj, spec.record_info_keys)
        rows.append((g, rec.total_reward, rec.search_count))
        recs.append(rec)
rewards = torch.tensor([r for _, r, _ in rows])
group = torch.tensor([g for g, _, _ in rows])
adv = grpo(rewards, group)
agg = aggregate(recs, env_id=spec.id)
print(json.dumps({"source": spec.source, "listed": spec.id in [s.id for s in stratagym.list_envs()],
                  "template": template_for_env(spec.id).name, "metric": primary_metric(spec.id),
                  "metric_value": agg.metrics[primary_metric(spec.id)].value,
                  "metadata_keys": list(spec.metadata_keys), "extra_keys": sorted({k for r in recs for k in r.extra}),
                  "rewards": rewards.tolist(), "searches": [s for *_, s in rows], "adv": adv.tolist()}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), str(EXAMPLE)],
        check=True, capture_output=True, text=True,
    )
    return target


def test_entry_point_env_registers_and_trains(installed):
    env = dict(os.environ, PYTHONPATH=str(installed))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["source"] == "stratagym-example-kv" and result["listed"]
    # Everything beyond the env comes from its spec alone: prompt, leaderboard metric, record keys,
    # and metadata keys derived from the contract (a search tool, listed actions).
    assert result["template"] == "think_action" and result["metric"] == "success"
    assert result["metric_value"] == sum(r == 1.0 for r in result["rewards"]) / 12 >= 0.5  # the oracle half wins
    assert result["extra_keys"] == ["answer"]
    assert result["metadata_keys"] == ["task_id", "step", "action_valid", "tool_calls", "search_count", "state_hash",
                                       "context_hashes", "won", "score", "admissible_actions"]
    rewards, searches, adv = result["rewards"], result["searches"], result["adv"]
    # Oracle members (even indices) search twice and win.
    assert [rewards[i] for i in range(0, 12, 2)] == [1.0] * 6
    assert [searches[i] for i in range(0, 12, 2)] == [2] * 6
    # Group-relative advantages: zero mean inside each group of 4.
    for g in range(3):
        assert abs(sum(adv[4 * g : 4 * g + 4])) < 1e-5


def test_envs_list_cli_shows_plugin(installed):
    env = dict(os.environ, PYTHONPATH=str(installed), COLUMNS="250")
    out = subprocess.run([sys.executable, "-m", "stratagym.cli", "envs", "list"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "kvlookup/KVLookup-v0" in out.stdout and "available" in out.stdout
