"""Every registered env (built-in and plug-in) honours the contract: gymnasium's checker, vector envs,
bad agent text, scripted agents. Parametrised over the registry, not a hand-written list."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import stratagym
from tests.helpers import play_records
from stratagym.envs.core import INFO_KEYS
from stratagym.envs.registry import agent_env_kwargs, make_agent, scripted_agent_names

SPECS = stratagym.list_envs()
BAD_TEXT = ["", "x" * 100_000, "\x00\x01\x1b[31m\x7f", "\ud83d broken \udc00", "<script>alert('x')</script><b>&amp;", "click[" * 50]


def _ids(specs):
    return [pytest.param(s.id, marks=_marks(s), id=s.id) for s in specs]


def _marks(spec):
    marks = []
    if not spec.available:
        marks.append(pytest.mark.skip(reason=spec.availability()))
    if "Browser" in spec.id:
        marks.append(pytest.mark.browser)
    return marks


def test_builtin_envs_are_registered_under_the_namespace():
    ids = {s.id for s in SPECS}
    assert all(i in gym.registry for i in ids)
    assert all(i.startswith("stratagym/") for i in ids if stratagym.get_spec(i).source == "stratagym")


@pytest.mark.parametrize("env_id", _ids(SPECS))
def test_check_env(env_id):
    env = gym.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", _ids(SPECS))
def test_agent_text_never_crashes(env_id):
    env = gym.make(env_id)
    try:
        _, info = env.reset(seed=0)
        assert set(INFO_KEYS) <= set(info)
        for text in BAD_TEXT:
            obs, reward, term, trunc, info = env.step(text)
            assert isinstance(obs, str) and info["action_valid"] is False
            assert set(INFO_KEYS) <= set(info)
            if term or trunc:
                env.reset(seed=1)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", _ids([s for s in SPECS if "Browser" not in s.id]))
def test_make_vec_sync(env_id):
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    try:
        obs, infos = envs.reset(seed=[3, 3])
        assert obs[0] == obs[1], "same seed must give the same task"
        for _ in range(3):
            obs, rewards, term, trunc, infos = envs.step(["look", "search[x]"])
            assert len(obs) == 2 and rewards.shape == (2,)
    finally:
        envs.close()


@pytest.mark.parametrize("env_id", _ids(SPECS))
def test_scripted_agents_finish_episodes(env_id):
    for name in scripted_agent_names(env_id):
        env = gym.make(env_id, **agent_env_kwargs(env_id, name))
        try:
            agent = make_agent(env_id, name, env, seed=0)
            (record,) = play_records([env], agent, [(0, 0)])
            assert record.turns >= 1 and 0.0 <= record.score <= 1.0
        finally:
            env.close()
