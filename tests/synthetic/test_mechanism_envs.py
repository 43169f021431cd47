"""The mechanism variants (ValueCorridor, SearchArchives, DifficultyShared) keep the contract and have
exactly the structure docs/envs/synthetic.md states."""

from __future__ import annotations

import itertools

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401  (registers the envs)
from tests.helpers import play_records
from stratagym.envs.core import INFO_KEYS, ConfigError
from stratagym.envs.registry import agent_env_kwargs, make_agent

IDS = ["stratagym/ValueCorridor-v0", "stratagym/SearchArchives-v0", "stratagym/DifficultyShared-v0"]


@pytest.mark.parametrize("env_id", IDS)
def test_contract_and_oracle(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert set(INFO_KEYS) <= set(info) and info["admissible_actions"]
    assert env.reset(seed=3) == (obs, info)
    gym.make_vec(env_id, num_envs=2, vectorization_mode="sync").close()
    envs = [gym.make(env_id, **agent_env_kwargs(env_id, "oracle")) for _ in range(4)]
    agent = make_agent(env_id, "oracle", envs[0])
    n = len(envs[0].unwrapped.task_ids())
    recs = play_records(envs, agent, [(i % n, i) for i in range(2 * n)])
    assert all(r.won for r in recs)


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=20, deadline=None)
@given(text=st.text(max_size=60))
def test_any_text_is_a_normal_step(env_id, text):
    env = gym.make(env_id)
    env.reset(seed=0)
    for _ in range(3):
        obs, reward, term, trunc, info = env.step(text)
        assert isinstance(obs, str) and 0.0 <= reward <= 1.0
        if term or trunc:
            break


def _fork(env, lever: str, seed: int):
    _, info = env.reset(seed=seed, options={"task_index": 0})
    _, _, _, _, info = env.step(f"pull lever {lever}")
    cue = info["cue"]
    while info["phase"] != "fork":
        _, _, _, _, info = env.step("walk forward")
    return info, cue


def test_value_corridor_payoffs_and_contexts():
    env = gym.make("stratagym/ValueCorridor-v0", context_k=4).unwrapped
    (ia, cue_a), (ib, cue_b) = _fork(env, "A", 0), _fork(env, "B", 0)
    assert {cue_a, cue_b} == {"gold", "grey"}
    # same fork observation, histories split from level cue_distance = 2 on
    assert ia["state_hash"] == ib["state_hash"]
    assert ia["context_hashes"][:2] == ib["context_hashes"][:2] and ia["context_hashes"][2] != ib["context_hashes"][2]
    pay = {}
    for lever, door in itertools.product("AB", ("left", "right")):
        _, cue = _fork(env, lever, 0)
        _, r, term, _, info = env.step(f"go {door}")
        assert not term and info["hall"] == 1 and info["fork_cue"] == cue  # every fork pays, the episode goes on
        pay[(cue, door)] = r * env.segments
        assert info["fork_best"] == ((door == "left") == (cue == "gold"))
    assert pay == pytest.approx({("gold", "left"): 1.0, ("gold", "right"): 0.8,
                                 ("grey", "right"): 0.2, ("grey", "left"): 0.0})


def test_value_corridor_won_means_every_best_door():
    env = gym.make("stratagym/ValueCorridor-v0", segments=2, oracle_info=True).unwrapped
    for doors in itertools.product((True, False), repeat=2):
        _, info = env.reset(seed=1, options={"task_index": 0})
        for best in doors:
            while info["phase"] != "fork":
                _, _, _, _, info = env.step(info["oracle_action"])
            good = info["oracle_action"]
            other = "go right" if good == "go left" else "go left"
            _, _, term, _, info = env.step(good if best else other)
        assert term and info["won"] == all(doors) and info["best_doors"] == sum(doors)


def _archive_episode(env, archive: str, relevant: list[bool], right: bool, seed: int = 4):
    _, info = env.reset(seed=seed, options={"task_index": 0})
    _, _, _, _, info = env.step(f"open[archive {archive}]")
    query, noise = info["admissible_actions"]
    k = 0
    while info["phase"] == "search":
        _, _, _, _, info = env.step(query if relevant[min(k, len(relevant) - 1)] else noise)
        k += 1
    answer = env._answer if right else next(c for c in env._t["candidates"] if c != env._answer)
    _, r, term, _, info = env.step(f"answer[{answer}]")
    assert term
    return r, info


def test_search_archives_strata_and_offset():
    env = gym.make("stratagym/SearchArchives-v0").unwrapped
    seen = {}
    for archive in "AB":
        for right in (True, False):
            r, info = _archive_episode(env, archive, [True], right)
            seen[(info["archive"], right)] = (r, info["search_count"])
    # the archive forces the stratum; full records pay 0.5 more whatever the answer
    assert seen == {("full", True): (1.0, 2), ("full", False): (0.5, 2),
                    ("summary", True): (0.5, 1), ("summary", False): (0.0, 1)}
    # which archive is full is drawn per episode: the archive choice cannot be learned
    fulls = set()
    for seed in range(20):
        env.reset(seed=seed, options={"task_index": 0})
        fulls.add(env._full)
    assert fulls == {"A", "B"}
    # the relevant query finds the answer; the distractor finds nothing
    env.reset(seed=2, options={"task_index": 1})
    env.step("open[archive A]")
    obs, *_ = env.step("search[weather forecast]")
    assert "nothing yet" in obs
    with pytest.raises(ConfigError):
        gym.make("stratagym/SearchArchives-v0", full_searches=1)


def test_difficulty_shared_keys():
    env = gym.make("stratagym/DifficultyShared-v0").unwrapped
    for i, level in ((0, "easy"), (20, "hard")):
        _, info = env.reset(seed=i, options={"task_index": i})
        acts = info["admissible_actions"]
        assert info["difficulty"] == level and len(acts) == (2 if level == "easy" else 10)
        wins = {}
        for a in acts:
            env.reset(seed=i, options={"task_index": i})
            _, r, _, _, info = env.step(a)
            wins.setdefault(info["metal"], []).append(r)
        opens = "brass" if level == "easy" else "copper"
        assert wins[opens] == [1.0] and all(v == 0.0 for m, rs in wins.items() if m != opens for v in rs)
        if level == "hard":
            assert len(wins["brass"]) == 4  # the easy tasks' answer is a decoy here


def test_value_corridor_reports_best_doors_as_a_mean_beside_success():
    """The LLM study's registered metric is a board column, summarised as a mean (0..segments), not a rate:
    by hand, best doors 0, 1, 3, 3 average 1.75 while success (every fork right) is 2 of 4."""
    from stratagym.envs.registry import get_spec
    from stratagym.eval.aggregate import aggregate

    spec = get_spec("stratagym/ValueCorridor-v0")
    assert spec.primary_metric == "success" and spec.board_columns == ("best_doors", "turns")
    episodes = [{"task_id": f"t{i}", "seed": 0, "total_reward": 0.0, "won": d == 3, "score": float(d == 3),
                 "turns": 12, "search_count": 0, "valid_actions": 12, "truncated": False, "extra": {"best_doors": d}}
                for i, d in enumerate([0, 1, 3, 3])]
    m = aggregate(episodes, env_id="stratagym/ValueCorridor-v0").metrics
    assert (m["best_doors"].value, m["best_doors"].method) == (1.75, "bootstrap")
    assert m["success"].value == 0.5
