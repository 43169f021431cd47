"""The synthetic envs keep the contract and have exactly the structure their docs claim."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401  (registers the envs)
from tests.helpers import play_records
from stratagym.envs.core import ConfigError, INFO_KEYS
from stratagym.envs.registry import agent_env_kwargs, make_agent

IDS = ["stratagym/SearchStrata-v0", "stratagym/DifficultyMix-v0", "stratagym/CueCorridor-v0"]


@pytest.mark.parametrize("env_id", IDS)
def test_contract(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert set(INFO_KEYS) <= set(info)
    assert info["admissible_actions"]
    obs2, info2 = env.reset(seed=3)
    assert (obs, info) == (obs2, info2)
    vec = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    vec.reset(seed=0)
    vec.close()


@pytest.mark.parametrize("env_id", IDS)
def test_oracle_always_wins(env_id):
    envs = [gym.make(env_id, **agent_env_kwargs(env_id, "oracle")) for _ in range(4)]
    agent = make_agent(env_id, "oracle", envs[0])
    n = len(envs[0].unwrapped.task_ids())
    recs = play_records(envs, agent, [(i, None) for i in range(n)])
    assert len(recs) == n and all(r.won and r.total_reward == 1.0 for r in recs)


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=30, deadline=None)
@given(text=st.text(max_size=80))
def test_any_text_is_a_normal_step(env_id, text):
    env = gym.make(env_id)
    env.reset(seed=0)
    for _ in range(3):
        obs, reward, term, trunc, info = env.step(text)
        assert isinstance(obs, str) and reward in (0.0, 1.0)
        if term or trunc:
            break


def _first_info(env_id, **kw):
    env = gym.make(env_id, **kw)
    return env, env.reset(seed=0)[1]


# ---- SearchStrata ----------------------------------------------------------------------------------


def _play_search(env, relevant: int, distractor: int, answer_index: int):
    _, info = env.reset(seed=7, options={"task_index": 0})
    query, noise = info["admissible_actions"][:2]
    for _ in range(relevant):
        _, _, _, _, info = env.step(query)
    for _ in range(distractor):
        _, _, _, _, info = env.step(noise)
    answers = [a for a in info["admissible_actions"] if a.startswith("answer[")]
    left = info["n_left"]
    assert len(answers) == left  # the admissible answers are the candidates left
    all_answers = [f"answer[{c}]" for c in env._t["candidates"]]
    _, r, term, _, info = env.step(all_answers[answer_index])
    assert term
    return info, left


def test_search_strata_structure():
    env = gym.make("stratagym/SearchStrata-v0").unwrapped
    for relevant in range(4):
        for distractor in range(4 - relevant):
            wins, lefts = 0, set()
            for k in range(4):
                info, left = _play_search(env, relevant, distractor, k)
                wins += info["won"]
                lefts.add(left)
                assert info["search_count"] == relevant + distractor  # the stratum key
                assert info["relevant_searches"] == relevant
            assert wins == 1  # exactly one answer is right
            assert lefts == {4 - relevant}  # uniform answering among the admissible wins 1/(4 - r)


def test_search_answer_is_per_episode_not_per_task():
    env = gym.make("stratagym/SearchStrata-v0", oracle_info=True).unwrapped
    answers = set()
    for seed in range(40):
        _, info = env.reset(seed=seed, options={"task_index": 2})
        for _ in range(3):
            _, _, _, _, info = env.step(info["oracle_action"])
        answers.add(info["oracle_action"])
        env.reset(seed=seed, options={"task_index": 2})  # same seed, same answer (group rollouts)
        for _ in range(3):
            _, _, _, _, info2 = env.step(f"search[{env._t['query']}]")
        assert info2["oracle_action"] == info["oracle_action"]
    assert len(answers) == 4  # every candidate is the answer in some episode: nothing to memorise


def test_search_limit_and_invalid_answers():
    env = gym.make("stratagym/SearchStrata-v0").unwrapped
    _, info = env.reset(options={"task_index": 1})
    q = info["admissible_actions"][0]
    for _ in range(3):
        _, _, _, _, info = env.step(q)
    assert not any(a.startswith("search[") for a in info["admissible_actions"])
    _, _, term, _, info = env.step(q)
    assert not term and not info["action_valid"] and info["search_count"] == 3
    _, _, term, _, info = env.step("answer[atlantis]")
    assert not term and not info["action_valid"]
    # an LLM-style free query naming the topic is a relevant search
    _, info = env.reset(options={"task_index": 1})
    topic = env._t["topic"]
    _, _, _, _, info = env.step(f"search[  where is the {topic.upper()} thing ]")
    assert info["relevant_searches"] == 1 and info["n_left"] == 3


def test_search_strata_config_errors():
    with pytest.raises(ConfigError):
        gym.make("stratagym/SearchStrata-v0", max_searches=9)
    with pytest.raises(ConfigError):
        gym.make("stratagym/SearchStrata-v0", n_tasks=0)


# ---- DifficultyMix ---------------------------------------------------------------------------------


def test_difficulty_mix_known_difficulty():
    env = gym.make("stratagym/DifficultyMix-v0").unwrapped
    seen = {"easy": 0, "hard": 0}
    for i in range(len(env.task_ids())):
        _, info = env.reset(options={"task_index": i})
        acts = info["admissible_actions"]
        expected = 2 if info["difficulty"] == "easy" else 10
        assert len(acts) == expected and info["prior_success"] == pytest.approx(1 / expected)
        assert env.task_difficulty(info["task_id"]) == info["difficulty"]
        seen[info["difficulty"]] += 1
        wins = []
        for a in acts:
            env.reset(options={"task_index": i})
            _, r, term, _, _ = env.step(a)
            assert term
            wins.append(r)
        assert sum(wins) == 1.0
    assert seen == {"easy": 16, "hard": 16}


# ---- CueCorridor -----------------------------------------------------------------------------------


def _to_fork(env, lever: str, seed: int = 0):
    _, info = env.reset(seed=seed, options={"task_index": 0})
    _, _, _, _, info = env.step(f"pull lever {lever}")
    cue = info["cue"]
    while info["phase"] != "fork":
        _, _, _, _, info = env.step("walk forward")
    return info, cue


@pytest.mark.parametrize("corridor", [0, 1, 3])
def test_cue_corridor_context_inconsistency(corridor):
    env = gym.make("stratagym/CueCorridor-v0", corridor=corridor, context_k=6).unwrapped
    (ia, cue_a), (ib, cue_b) = _to_fork(env, "A"), _to_fork(env, "B")
    assert cue_a != cue_b
    d = env.cue_distance
    assert d == corridor + 1
    ca, cb = ia["context_hashes"], ib["context_hashes"]
    assert ia["state_hash"] == ib["state_hash"]
    for k in range(len(ca)):
        if k < d:
            assert ca[k] == cb[k], f"level {k} should not see the cue"
        else:
            assert ca[k] != cb[k], f"level {k} should see the cue"


def test_cue_corridor_right_exit_depends_on_cue():
    env = gym.make("stratagym/CueCorridor-v0").unwrapped
    for lever in "AB":
        outcomes = {}
        for door in ("left", "right"):
            info, cue = _to_fork(env, lever)
            _, r, term, _, info = env.step(f"go {door}")
            outcomes[door] = (term, info["hall"])
        right = "left" if cue == "green" else "right"
        wrong = "right" if right == "left" else "left"
        assert outcomes[wrong] == (True, 0)  # wrong door: lost
        assert outcomes[right] == (False, 1)  # right door: next hall


def test_cue_corridor_lever_colours_vary_by_episode():
    env = gym.make("stratagym/CueCorridor-v0").unwrapped
    cues = {_to_fork(env, "A", seed)[1] for seed in range(20)}
    assert cues == {"green", "amber"}  # lever A's colour cannot be memorised per task


def test_cue_corridor_uniform_policy_success():
    # exact: each fork is a fair coin for a uniform policy; levers do not matter
    env = gym.make("stratagym/CueCorridor-v0", segments=2).unwrapped
    wins = total = 0
    import itertools

    for levers in itertools.product("AB", repeat=2):
        for doors in itertools.product(("left", "right"), repeat=2):
            env.reset(seed=5, options={"task_index": 3})
            won = False
            for lever, door in zip(levers, doors):
                env.step(f"pull lever {lever}")
                env.step("walk forward")
                env.step("walk forward")
                _, r, term, _, info = env.step(f"go {door}")
                if term:
                    won = info["won"]
                    break
            wins += won
            total += 1
    assert wins / total == 0.25


# ---- the door-blind demonstrator (the HGPO vs GiGPO LLM study's SFT start) --------------------------------


def _blind_doors_forks(n_seeds: int) -> tuple[list[tuple[str, bool]], list[bool], list[str], list[str]]:
    """Play ``blind_doors`` on every ValueCorridor task for ``n_seeds`` seeds, one env, one episode at a
    time; return (lamp, best door taken) per fork, won per episode, the invalid actions and the levers."""
    from stratagym.envs.core import EpisodeKey

    env_id = "stratagym/ValueCorridor-v0"
    env = gym.make(env_id, **agent_env_kwargs(env_id, "blind_doors"))
    agent = make_agent(env_id, "blind_doors", env)
    forks, wins, invalid, levers = [], [], [], []
    for task in env.unwrapped.task_ids():
        for seed in range(n_seeds):
            obs, info = env.reset(seed=seed, options={"task_id": task})
            key, done = EpisodeKey(task, seed), False
            while not done:
                (action,) = agent.act([obs], [info], [key])
                if action not in info["admissible_actions"]:
                    invalid.append(action)
                lamp = info.get("cue") if info.get("phase") == "fork" else None
                if info.get("phase") == "levers":
                    levers.append(action)
                best_before = info.get("best_doors", 0)
                obs, _, term, trunc, info = env.step(action)
                if lamp is not None:
                    forks.append((lamp, info["best_doors"] > best_before))
                done = term or trunc
            wins.append(bool(info["won"]))
    return forks, wins, invalid, levers


def test_blind_doors_knows_the_moves_but_not_which_door_a_lamp_calls_for():
    """Every action is admissible; at a fork the best door is taken half the time after either lamp (the
    rule is absent from its demonstrations), so it wins like the uniform policy, 0.5 ** 3. The lever is a
    coin too, so copies of one group (one reset seed) reach the fork under both lamps."""
    forks, wins, invalid, levers = _blind_doors_forks(40)  # 8 tasks x 40 seeds: 320 episodes, 960 forks
    assert not invalid and len(forks) == 960 and len(levers) == 960
    assert 0.42 < levers.count("pull lever A") / len(levers) < 0.58
    for lamp in ("gold", "grey"):
        best = [b for c, b in forks if c == lamp]
        assert len(best) > 300 and 0.42 < sum(best) / len(best) < 0.58, (lamp, sum(best), len(best))
    assert 0.08 < sum(wins) / len(wins) < 0.17


def test_blind_doors_does_not_depend_on_batching():
    """The same episodes played one at a time and four at a time take the same doors."""
    env_id = "stratagym/ValueCorridor-v0"
    kw = agent_env_kwargs(env_id, "blind_doors")
    episodes = [(t, s) for t in range(4) for s in (0, 1)]
    runs = []
    for width in (1, 4):
        envs = [gym.make(env_id, **kw) for _ in range(width)]
        recs = play_records(envs, make_agent(env_id, "blind_doors", envs[0]), episodes)
        runs.append(sorted((r.task_id, r.seed, r.total_reward, r.extra["best_doors"]) for r in recs))
    assert runs[0] == runs[1] and len({r[2] for r in runs[0]}) > 1
    assert {r[3] for r in runs[0]} <= {0, 1, 2, 3}  # records keep best_doors (the corridor study's metric)
