"""Every stratagym env under GEM's API (issue 30 item 4, one way): ``stratagym.interop.gem.register_all()``
then ``gem.make("stratagym/...")`` gives an env on GEM's contract (gem/core.py: ``reset(seed) -> (obs,
info)``, ``step(action) -> 5-tuple``) that plays exactly the in-process transcript, with stratagym's info
schema in ``info``, and that GEM's own wrappers and vector env drive unchanged."""

from __future__ import annotations

import gymnasium as gym
import pytest

import stratagym
from stratagym.envs.core import INFO_KEYS, EpisodeKey
from stratagym.interop.gem import register_all
from stratagym.envs.registry import agent_env_kwargs, make_agent

from stratagym.interop.gem.compat import import_gem

gem = import_gem()  # the `gem` extra; `make test` installs it (no skip: a missing GEM fails here)
register_all()


def _play(env, agent, key, reset):
    """One episode: ``reset()`` then the agent's actions; rows of (obs, reward, terminated, truncated, info)."""
    obs, info = reset()
    rows = [(obs, None, False, False, info)]
    for _ in range(60):
        (action,) = agent.act([obs], [info], [key])
        obs, reward, term, trunc, info = env.step(action)
        rows.append((obs, reward, term, trunc, info))
        if term or trunc:
            break
    return rows


def test_every_stratagym_env_is_registered_with_gem_once():
    from gem.envs.registration import ENV_REGISTRY

    ids = {s.id for s in stratagym.list_envs()} - {"stratagym/GEM-v0"}
    assert ids <= set(ENV_REGISTRY)
    assert "stratagym/GEM-v0" not in ENV_REGISTRY
    assert register_all() == []  # idempotent: GEM's own register would raise on a second call


@pytest.mark.parametrize("env_id", ["stratagym/SearchStrata-v0", "stratagym/CueCorridor-v0", "stratagym/SearchQA-v0"])
def test_gem_make_plays_the_in_process_transcript(env_id):
    kwargs = agent_env_kwargs(env_id, "oracle")
    local = gym.make(env_id, **kwargs)
    through_gem = gem.make(env_id, **kwargs)
    try:
        assert isinstance(through_gem, gem.Env) and through_gem.env_id == env_id
        for i, task_id in enumerate(list(local.unwrapped.task_ids())[:3]):
            key = EpisodeKey(task_id, i, 0)
            a = _play(local, make_agent(env_id, "oracle", local, seed=0), key,
                      lambda: local.reset(seed=i, options={"task_id": task_id}))
            b = _play(through_gem, make_agent(env_id, "oracle", local, seed=0), key,
                      lambda: through_gem.reset(seed=i, task_id=task_id))
            assert len(a) == len(b) >= 2
            for step, (x, y) in enumerate(zip(a, b)):
                assert x[:4] == y[:4], f"{task_id} step {step}"
                assert x[4] == y[4] and set(INFO_KEYS) <= set(y[4]), f"{task_id} step {step}: info differs"
            assert b[-1][4]["won"] is True  # the oracle wins these tasks
    finally:
        local.close()
        through_gem.close()


def test_a_group_reset_with_one_seed_shares_its_start():
    """GEM's reset takes only a seed: the seed picks the task, so G copies reset with it start alike."""
    group = [gem.make("stratagym/SearchStrata-v0") for _ in range(4)]
    starts = [env.reset(seed=11) for env in group]
    assert all(s == starts[0] for s in starts)
    assert starts[0][1]["step"] == 0 and starts[0][1]["task_id"] in group[0].task_ids()
    other = group[0].reset(seed=11, task_id=group[0].task_ids()[5])
    assert other[1]["task_id"] == group[0].task_ids()[5]


def test_gem_wrappers_and_vector_env_drive_it():
    """GEM's EpisodeTrackingWrapper over its ObservationWrapper ("concat"), and make_vec's per-copy seeds."""
    from gem.wrappers.episode_tracking_wrapper import EpisodeTrackingWrapper
    from gem.wrappers.observation_wrapper import ObservationWrapper

    env = EpisodeTrackingWrapper(ObservationWrapper(gem.make("stratagym/CueCorridor-v0"), include_action=False,
                                                    include_chat_template=False))
    first, info = env.reset(seed=2)
    assert info["step_counter"] == 0 and info["step"] == 0
    rewards = []
    for action in ("look", "east", "north"):
        obs, reward, term, trunc, info = env.step(action)
        rewards.append(reward)
        if term or trunc:
            break
    assert obs.startswith(first)  # "concat" joins every observation so far, the first one first
    assert info["cumulative_rewards"] == pytest.approx(sum(rewards)) and info["step_counter"] == info["step"]

    vec = gem.make_vec(["stratagym/SearchStrata-v0"] * 2, seed=3)
    obs, infos = vec.reset()  # make_vec gave copy i the seed 3 + i; its first reset uses it
    solo = gym.make("stratagym/SearchStrata-v0")
    assert obs == [solo.reset(seed=3)[0], solo.reset(seed=4)[0]]
    obs, rewards, term, trunc, infos = vec.step(["search[x]", "answer[y]"])
    assert len(obs) == 2 and rewards.shape == (2,) and all(set(INFO_KEYS) <= set(i) for i in infos)


def test_random_actions_spawn_and_bad_text():
    env = gem.make("stratagym/SearchStrata-v0")
    _, info = env.reset(seed=0)
    assert env.sample_random_action() in info["admissible_actions"]
    obs, reward, term, trunc, info = env.step("\x00<script>alert(1)</script>" * 3)
    assert isinstance(obs, str) and info["action_valid"] is False
    twin = env.spawn()
    assert twin.strata_id == env.strata_id and twin.reset(seed=0)[0] == env.reset(seed=0)[0]
    with pytest.raises(ValueError, match="drop the overrides"):
        env.spawn(same_state=True, max_steps=3)


@pytest.mark.parametrize("env_id", ["stratagym/SearchStrata-v0", "stratagym/CueCorridor-v0"])
def test_spawn_same_state_replays_the_episode_and_answers_as_the_original(env_id):
    env = gem.make(env_id)
    env.reset(seed=3)
    for _ in range(2):
        env.step(env.sample_random_action())
    twin = env.spawn(same_state=True)
    assert twin._info["context_hashes"] == env._info["context_hashes"] and twin._info["step"] == env._info["step"]
    action = env.sample_random_action()
    assert twin.step(action) == env.step(action)  # same observation, reward, flags and info
    fresh = gem.make(env_id)
    with pytest.raises(ValueError, match="reset\\(seed=...\\)"):
        fresh.reset()
        fresh.spawn(same_state=True)
