"""Scripted agents key everything per episode, never per batch position."""

from __future__ import annotations

import gymnasium as gym
import pytest

import stratagym  # noqa: F401
from stratagym.agents.policy import GenerationRequest
from stratagym.agents.scripted import RandomAgent, ScriptedPolicy
from stratagym.envs.core import EpisodeKey


def _first_actions(agent, keys, infos):
    return agent.act(["obs"] * len(keys), infos, keys)


def test_random_agent_acts_per_episode_whatever_its_batch_mates():
    env = gym.make("stratagym/DifficultyMix-v0")
    _, info = env.reset(seed=0, options={"task_id": env.unwrapped.task_ids()[0]})
    a, b, c = EpisodeKey("t00", 0, 0), EpisodeKey("t00", 0, 1), EpisodeKey("t01", 3, 0)
    alone = [RandomAgent(env, seed=7).act(["obs"], [info], [k])[0] for k in (a, b, c)]
    together = RandomAgent(env, seed=7).act(["obs"] * 3, [info] * 3, [c, a, b])
    assert together == [alone[2], alone[0], alone[1]]
    # an episode's later draws continue its own generator, also when it acts alone
    agent1, agent2 = RandomAgent(env, seed=7), RandomAgent(env, seed=7)
    later = dict(info, step=1)
    agent1.act(["obs"] * 2, [info, info], [a, b])
    agent2.act(["obs"], [info], [a])
    assert agent1.act(["obs"], [later], [a]) == agent2.act(["obs"], [later], [a])
    env.close()


def test_scripted_policy_refuses_requests_without_episode_keys():
    env = gym.make("stratagym/DifficultyMix-v0")
    policy = ScriptedPolicy(RandomAgent(env, seed=0))
    _, info = env.reset(seed=0)
    with pytest.raises(ValueError, match="episode"):
        policy.generate([GenerationRequest("obs", info)])
    (gen,) = policy.generate([GenerationRequest("obs", info, episode=EpisodeKey(info["task_id"], 0, 0))])
    assert gen.action in info["admissible_actions"]
    env.close()
