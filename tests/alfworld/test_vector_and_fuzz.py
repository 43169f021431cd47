"""Parallel rollouts (engine state in worker processes) and fuzzed agent text."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401
from stratagym.envs.alfworld.agents import PlannerExpertAgent
from stratagym.envs.core import EpisodeKey

ENV_ID = "stratagym/ALFWorld-v0"


@pytest.fixture(scope="module")
def fuzz_env():
    env = gym.make(ENV_ID, data_path="bundled")
    env.reset(seed=0)
    yield env
    env.close()


_commands = st.sampled_from(["go to", "take", "move", "open", "close", "heat", "cool", "clean", "use",
                             "examine", "look", "inventory", "help", "from", "with", "to", "apple 1",
                             "cabinet 1", "fridge 1", "countertop 2", "sinkbasin 1", "1", "\n", "  "])
_actions = st.one_of(
    st.text(max_size=200),
    st.lists(_commands, min_size=1, max_size=6).map(" ".join),
    st.binary(max_size=64),
    st.sampled_from([None, 0, 3.5, ["go to cabinet 1"], {"a": 1}]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(action=_actions)
def test_fuzzed_actions_never_crash(fuzz_env, action):
    admissible_before = fuzz_env.unwrapped.admissible_actions()
    obs, reward, term, trunc, info = fuzz_env.step(action)
    assert isinstance(obs, str) and obs
    if isinstance(action, str) and " ".join(action.split()).lower() in admissible_before:
        assert info["action_valid"]
    if not info["action_valid"]:
        assert obs == "Nothing happens."
        assert info["admissible_actions"] == admissible_before
    if term or trunc:
        fuzz_env.reset(seed=int(info["step"]))


def test_async_vector_env_group_plays_the_same_game():
    """G envs in worker processes, reset with the same task, give identical transcripts."""
    envs = gym.make_vec(ENV_ID, num_envs=3, vectorization_mode="async", data_path="bundled",
                        expert="planner")
    try:
        obs, infos = envs.reset(seed=11)  # seeds 11, 12, 13: (usually) different games
        task_id = infos["task_id"][0]
        obs, infos = envs.reset(options={"task_id": task_id})  # the group: one task for all
        assert len(set(obs)) == 1 and list(infos["task_id"]) == [task_id] * 3
        assert isinstance(obs, tuple) and obs[0].startswith("-= Welcome to TextWorld, ALFRED! =-")
        first = obs[0]
        won = np.zeros(3, dtype=bool)
        agent = PlannerExpertAgent()
        for _ in range(50):
            actions = agent.act(list(obs), [{"expert_action": a} for a in infos["expert_action"]],
                                [EpisodeKey(task_id, None, copy=i) for i in range(3)])
            assert len(set(actions)) == 1
            obs, rewards, term, trunc, infos = envs.step(actions)
            assert len(set(obs)) == 1 and len(set(rewards.tolist())) == 1
            assert obs[0] != first  # live observations, not the buffer decoded once
            won |= term
            if term.all():
                break
        assert won.all()
        # a worker survives junk: invalid text comes back as a normal step
        envs.reset(seed=[5, 5, 5])
        obs, rewards, term, trunc, infos = envs.step(["\x00\ud800" * 5, "x" * 10_000, "take take take"])
        assert list(obs) == ["Nothing happens."] * 3 and not infos["action_valid"].any()
    finally:
        envs.close()


def test_async_without_shared_memory_matches_sync():
    kwargs = dict(num_envs=2, data_path="bundled")
    a = gym.make_vec(ENV_ID, vectorization_mode="async", vector_kwargs={"shared_memory": False}, **kwargs)
    b = gym.make_vec(ENV_ID, vectorization_mode="sync", **kwargs)
    try:
        oa, ia = a.reset(seed=[8, 9])
        ob, ib = b.reset(seed=[8, 9])
        assert tuple(oa) == tuple(ob)
        actions = [ia["admissible_actions"][0][0], "jump"]
        assert tuple(a.step(actions)[0]) == tuple(b.step(actions)[0])
    finally:
        a.close()
        b.close()


def test_sync_vector_env_same_seed_same_game():
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync")
    try:
        obs, infos = envs.reset(seed=[4, 4])
        assert obs[0] == obs[1] and infos["task_id"][0] == infos["task_id"][1]
        obs, rewards, term, trunc, infos = envs.step(["look", "look"])
        assert obs[0] == obs[1]
    finally:
        envs.close()


@pytest.fixture(scope="module")
def async_envs():
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="async", data_path="bundled")
    envs.reset(seed=0)
    yield envs
    envs.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(_actions, min_size=2, max_size=2))
def test_fuzzed_actions_never_crash_a_worker(async_envs, actions):
    obs, rewards, term, trunc, infos = async_envs.step(actions)  # a worker error would raise here
    assert len(obs) == 2 and all(isinstance(o, str) and o for o in obs)
