"""``stratagym/GEM-v0``: GEM's own envs as stratagym envs (issue 30 item 4, other way). GEM's Guess The
Number (gem/envs/game_env/guess_the_number.py) is played through stratagym's rollout loop and pinned
against GEM's own code: the target is ``random.randint(1, 10)`` right after ``random.seed(seed)``
(guess_the_number.py:52-58, gem/core.py:60, gem/utils/seeding.py:38), text without ``\\boxed{N}`` ends the
episode with ``format_error_reward`` -0.1 (guess_the_number.py:70-77, gem/utils/constants.py:28)."""

from __future__ import annotations

import random
import re

import gymnasium as gym
import numpy as np
import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.envs.core import INFO_KEYS, ConfigError, EpisodeKey
from stratagym.interop.gem.compat import import_gem
from stratagym.interop.gem.gem_env import GEMTextEnv
from tests.helpers import play_records

gem = import_gem()
GUESS = "game:GuessTheNumber-v0-easy"  # 1..10, 4 turns


class BisectAgent:
    """Guess The Number by bisection on GEM's hints: 10 numbers take at most 4 guesses."""

    def __init__(self):
        self.bounds: dict[EpisodeKey, tuple[int, int, int]] = {}

    def act(self, observations, infos, episodes):
        out = []
        for obs, info, key in zip(observations, infos, episodes):
            lo, hi, last = (1, 10, 0) if info["step"] == 0 else self.bounds[key]
            if "is higher than" in obs:
                lo = last + 1
            elif "is lower than" in obs:
                hi = last - 1
            guess = (lo + hi) // 2
            self.bounds[key] = (lo, hi, guess)
            out.append(f"I guess \\boxed{{{guess}}}")
        return out


def _turns_to_find(target: int) -> int:
    lo, hi, n = 1, 10, 0
    while True:
        n += 1
        guess = (lo + hi) // 2
        if guess == target:
            return n
        lo, hi = (guess + 1, hi) if guess < target else (lo, guess - 1)


def test_guess_the_number_through_the_rollout_loop_matches_gems_own_rules():
    envs = [gym.make("stratagym/GEM-v0", gem_id=GUESS, tasks=12) for _ in range(3)]
    try:
        records = play_records(envs, BisectAgent(), [(t, 0) for t in range(12)])
        assert len(records) == 12 and all(r.won and r.score == 1.0 for r in records)
        for r in records:
            target = random.Random(int(r.task_id.removeprefix("seed-"))).randint(1, 10)  # GEM's reset, by hand
            assert r.turns == _turns_to_find(target), r.task_id
    finally:
        for e in envs:
            e.close()


def test_observations_rewards_and_info_follow_gem():
    env = gym.make("stratagym/GEM-v0", gem_id=GUESS, tasks=[7])
    from gem.wrappers.observation_wrapper import ObservationWrapper

    # GEM's own "concat" wrapper builds the first observation from the text and info["suffix"]
    direct = ObservationWrapper(gem.make(GUESS), include_action=False, include_chat_template=False)
    text, ginfo = direct.reset(seed=7)
    obs, info = env.reset(seed=0)
    assert obs == text and text.endswith(ginfo["suffix"])
    assert info["task_id"] == "seed-7" and set(INFO_KEYS) <= set(info) and info["gem_info"] == ginfo
    target = random.Random(7).randint(1, 10)
    wrong = 1 if target != 1 else 2
    obs, reward, term, trunc, info = env.step(f"\\boxed{{{wrong}}}")
    hint = "higher" if target > wrong else "lower"
    assert obs.startswith(f"At turn 1, you guessed {wrong}, and the target number is {hint} than {wrong}.")
    assert (reward, term, trunc, info["action_valid"], info["won"]) == (0.0, False, False, True, False)
    assert info["state_hash"] != info["context_hashes"][1] and len(info["context_hashes"]) == 2
    obs, reward, term, trunc, info = env.step("no box here")
    assert obs.startswith("At turn 2, you did not provide a valid guess.")
    assert (reward, term, info["action_valid"], info["won"], info["score"]) == (-0.1, True, False, False, 0.0)
    _, info = env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(f"\\boxed{{{target}}}")
    assert obs.startswith(f"Congratulations! You guessed the correct number {target} in 1 turns.")
    assert (reward, term, info["won"], info["score"]) == (1.0, True, True, 1.0)
    env.close()


def test_gems_global_randomness_stays_private_to_each_env():
    """GEM's 2048 places tiles with the process-global ``random``: stepped in turn, two envs still play as
    each does alone, and the caller's global generators are untouched by GEM's reseeding."""
    moves = ["up", "left", "down", "right"] * 3

    def alone(task):
        env = GEMTextEnv(gem_id="game:Game2048-v0-easy", tasks=[task])
        rows = [env.reset(seed=0)[0]] + [env.step(f"\\boxed{{{m}}}")[0] for m in moves]
        env.close()
        return rows

    random.seed(123)
    np.random.seed(123)
    before = (random.getstate(), np.random.get_state()[1].copy())
    a, b = GEMTextEnv(gem_id="game:Game2048-v0-easy", tasks=[1]), GEMTextEnv(gem_id="game:Game2048-v0-easy", tasks=[2])
    rows_a, rows_b = [a.reset(seed=0)[0]], [b.reset(seed=0)[0]]
    for m in moves:
        rows_a.append(a.step(f"\\boxed{{{m}}}")[0])
        random.random()  # the caller drawing in between changes nothing either
        rows_b.append(b.step(f"\\boxed{{{m}}}")[0])
    assert rows_a == alone(1) and rows_b == alone(2) and rows_a != rows_b
    random.seed(123)
    np.random.seed(123)
    assert random.getstate() == before[0] and (np.random.get_state()[1] == before[1]).all()


class _Raising(gem.Env):
    """A GEM env that raises on some text and can emit non-text observations (a third-party env's bugs)."""

    def __init__(self, obs_kind: str = "text", fail_init: bool = False, **_):
        super().__init__()
        if fail_init:  # as nltk does when a corpus is missing: a coloured, multi-line message
            raise OSError("****************\n  \x1b[93mdata\x1b[0m missing:\n  fetch it first\n****************")
        self.obs_kind = obs_kind

    def reset(self, seed=None):
        super().reset(seed)
        return (["not", "text"] if self.obs_kind == "list" else "start"), {}

    def step(self, action):
        if "boom" in action:
            raise KeyError("boom")
        return "ok", float("nan") if "nan" in action else 0.5, False, False, {}


def _register_raising() -> None:
    from gem.envs.registration import ENV_REGISTRY

    if "stratagym-test:Raising-v0" not in ENV_REGISTRY:  # gem.register refuses a second registration
        gem.register("stratagym-test:Raising-v0", _Raising)


_register_raising()


def test_a_gem_env_that_fails_ends_the_episode_with_the_reason():
    env = GEMTextEnv(gem_id="stratagym-test:Raising-v0", tasks=2)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("fine")
    assert (obs, reward, info["action_valid"]) == ("ok", 0.5, True)
    obs, reward, term, trunc, info = env.step("boom")
    assert "the GEM env failed on it (KeyError: 'boom')" in obs and trunc and info["action_valid"] is False
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("nan please")
    assert "non-finite reward" in obs and trunc and reward == 0.0
    with pytest.raises(ConfigError, match="list observations, not text"):
        GEMTextEnv(gem_id="stratagym-test:Raising-v0", gem_kwargs={"obs_kind": "list"}).reset(seed=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"gem_id": "game:NoSuchGame-v0"}, "unknown GEM env id 'game:NoSuchGame-v0'; use one GEM registers"),
    ({"tasks": 0}, "tasks must be a positive count"),
    ({"tasks": [1, -2]}, "non-negative GEM reset seeds"),
    ({"invalid_reward": "sometimes"}, "invalid_reward must be a number"),
    ({"gem_kwargs": "min_number=3"}, "gem_kwargs must be a dict"),
    ({"gem_id": "stratagym-test:Raising-v0", "gem_kwargs": {"fail_init": True}},
     "GEM could not build 'stratagym-test:Raising-v0': OSError: data missing: fetch it first"),
])
def test_bad_configuration_names_the_fix(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        GEMTextEnv(**kwargs)
    assert "\x1b" not in str(error.value) and "\n" not in str(error.value)


def test_a_stratagym_env_round_trips_through_gem_with_its_info():
    local = gym.make("stratagym/SearchStrata-v0")
    via = gym.make("stratagym/GEM-v0", gem_id="stratagym/SearchStrata-v0")
    assert list(via.unwrapped.task_ids()) == list(local.unwrapped.task_ids())
    a, b = local.reset(seed=4), via.reset(seed=4)
    assert a == b
    for action in ("search[statue museum]", "<b>bad</b>", "answer[porto]"):
        x, y = local.step(action), via.step(action)
        assert x == y  # observation, reward, ends and the whole info (hashes, counts, validity, extras)
        if x[2] or x[3]:
            break
