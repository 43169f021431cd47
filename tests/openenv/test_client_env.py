"""``stratagym/OpenEnv-v0``: an OpenEnv server as a stratagym env over openenv-core's own client (issue 30
item 2). Against a stratagym env served by ``stratagym serve env``'s app, the transcripts equal the
in-process ones step by step; a server that is down, slow or answers nonsense fails its episode with the
reason, and nothing hangs. Every server is started and stopped here, on 127.0.0.1."""

from __future__ import annotations

import json
import math
import socket
import threading
import time

import gymnasium as gym
import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.agents.scripted import ScriptedPolicy
from stratagym.envs.core import EpisodeKey, stable_hash
from stratagym.interop.openenv.client_env import OpenEnvError
from stratagym.interop.openenv.server import create_server_app
from stratagym.serving import serve_in_thread
from stratagym.envs.registry import agent_env_kwargs, make_agent
from stratagym.training.rollout import InProcessPool, play

OPENENV = "stratagym/OpenEnv-v0"


@pytest.fixture(scope="module", params=["stratagym/SearchStrata-v0", "stratagym/CueCorridor-v0", "stratagym/SearchQA-v0"])
def served(request):
    # served with the kwargs the oracle needs (its next action travels in info, like every env-specific key)
    srv = serve_in_thread(create_server_app(request.param, agent_env_kwargs(request.param, "oracle"),
                                            max_concurrent_envs=8, idle_timeout_s=None))
    yield request.param, srv.url
    srv.stop()


def _play(env, agent, task_id, seed, key):
    """One episode with a scripted agent; the transcript as (obs, reward, terminated, truncated, info) rows."""
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    rows = [(obs, None, False, False, info)]
    for _ in range(60):
        (action,) = agent.act([obs], [info], [key])
        obs, reward, term, trunc, info = env.step(action)
        rows.append((obs, reward, term, trunc, info))
        if term or trunc:
            break
    return rows


def test_transcripts_through_the_server_equal_in_process(served):
    env_id, url = served
    local = gym.make(env_id, **agent_env_kwargs(env_id, "oracle"))
    task_ids = list(local.unwrapped.task_ids())[:4]
    remote = gym.make(OPENENV, base_url=url, tasks=task_ids)
    try:
        assert list(remote.unwrapped.task_ids()) == task_ids
        for i, task_id in enumerate(task_ids):
            key = EpisodeKey(task_id, i, 0)
            a = _play(local, make_agent(env_id, "oracle", local, seed=0), task_id, i, key)
            b = _play(remote, make_agent(env_id, "oracle", local, seed=0), task_id, i, key)
            assert len(a) == len(b) and len(a) >= 2
            for step, (x, y) in enumerate(zip(a, b)):
                assert x[:4] == y[:4], f"{task_id} step {step}"
                assert x[4] == y[4], f"{task_id} step {step}: info differs"  # hashes, counts, score, extras
            assert a[-1][2] and a[-1][4]["won"] in (True, False)
    finally:
        local.close()
        remote.close()


def test_hashes_come_from_the_observations_when_the_server_is_not_stratagym(served):
    """A server without stratagym's info (here: the text alone is used) still gets state and context hashes."""
    env_id, url = served
    env = gym.make(OPENENV, base_url=url, tasks=[{"task_id": gym.make(env_id).unwrapped.task_ids()[0]}], context_k=2).unwrapped
    try:
        obs, info = env.reset(seed=0)
        from stratagym.envs.core import combine_hashes, stable_hash

        assert info["state_hash"] == stable_hash(obs) and info["context_hashes"] == [stable_hash(obs)]
        obs2, *_, info2 = env.step("look")
        assert len(info2["context_hashes"]) == 2
        assert info2["context_hashes"][1] == combine_hashes([info["state_hash"], info2["state_hash"]])
    finally:
        env.close()


def test_group_members_start_from_the_same_observation_and_play_through_the_collector(served):
    env_id, url = served
    envs = [gym.make(OPENENV, base_url=url, tasks=list(gym.make(env_id).unwrapped.task_ids())[:2]) for _ in range(3)]
    try:
        firsts = {e.reset(seed=5, options={"task_index": 1})[0] for e in envs}
        assert len(firsts) == 1
        policy = ScriptedPolicy(make_agent(env_id, "random", envs[0], seed=0))
        trajs = play(policy, [(envs[0].unwrapped.task_ids()[0], 3)] * 3, env_id=OPENENV,
                     pool=InProcessPool.from_envs(envs), batch_size=3, greedy=True)
        assert not any(t.failed for t in trajs) and all(t.steps for t in trajs)
        assert all(isinstance(s.state_hash, int) and s.context for t in trajs for s in t.steps)
    finally:
        for e in envs:
            e.close()


def test_default_serves_a_stratagym_env_on_loopback_itself():
    env = gym.make(OPENENV)
    try:
        obs, info = env.reset(seed=0)
        assert "Question" in obs and info["admissible_actions"] and info["task_id"].startswith("q")
    finally:
        env.close()


# ---- failures: each fails its episode with the reason, within the configured timeouts -------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _BadWsServer:
    """A WebSocket server on 127.0.0.1 that misbehaves on every message: ``reply(message) -> str | None``
    (None: never answer). Not OpenEnv, on purpose: it is the server stratagym must survive."""

    def __init__(self, reply):
        from websockets.sync.server import serve

        def handler(ws):
            try:
                for message in ws:
                    answer = reply(json.loads(message))
                    if answer is not None:
                        ws.send(answer)
            except Exception:
                pass

        self._server = serve(handler, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.socket.getsockname()[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self):
        self._server.shutdown()
        self._thread.join(timeout=5)


def _obs(data):
    return json.dumps({"type": "observation", "data": data})


@pytest.mark.parametrize("reply, reason", [
    (lambda m: None, "TimeoutError"),  # slow: never answers
    (lambda m: "{not json", "reset failed"),  # malformed JSON
    (lambda m: _obs({"observation": {"text": "x"}, "reward": math.nan, "done": False}), "non-finite"),
    (lambda m: _obs({"observation": {"text": "x"}, "reward": "1", "done": False}), "non-numeric"),
    (lambda m: _obs({"observation": {"a": "x", "b": "y"}, "reward": 0, "done": False}), "observation_field"),
    (lambda m: _obs({"observation": [1, 2], "reward": 0, "done": False}), "no observation object"),
    (lambda m: _obs({"observation": {"text": "x"}, "reward": 0, "done": "no"}), "not a boolean"),
    (lambda m: json.dumps({"type": "error", "data": {"message": "boom", "code": "EXECUTION_ERROR"}}), "boom"),
])
def test_a_misbehaving_server_fails_the_episode_with_the_reason(reply, reason):
    srv = _BadWsServer(reply)
    env = gym.make(OPENENV, base_url=srv.url, tasks=["t0"], connect_timeout_s=2, message_timeout_s=0.5)
    try:
        start = time.monotonic()
        with pytest.raises(OpenEnvError, match=reason):
            env.reset(seed=0)
        assert time.monotonic() - start < 5
    finally:
        env.close()
        srv.stop()


def test_a_dead_server_fails_only_its_episodes_and_nothing_hangs():
    env = gym.make(OPENENV, base_url=f"http://127.0.0.1:{_closed_port()}", tasks=["a", "b"], connect_timeout_s=2)
    try:
        with pytest.raises(OpenEnvError, match="unreachable"):
            env.reset(seed=0)
        start = time.monotonic()
        policy = ScriptedPolicy(make_agent(OPENENV, "random", env, seed=0))
        trajs = play(policy, [("a", 0), ("b", 1)], env_id=OPENENV, pool=InProcessPool.from_envs([env]), batch_size=1)
        assert all(t.failed and "unreachable" in t.error for t in trajs)
        assert time.monotonic() - start < 10
    finally:
        env.close()


def test_server_dying_mid_episode_fails_that_episode_and_the_next_reset_says_so():
    srv = serve_in_thread(create_server_app("stratagym/SearchStrata-v0", max_concurrent_envs=2, idle_timeout_s=None))
    env = gym.make(OPENENV, base_url=srv.url, tasks=["q000"], connect_timeout_s=2, message_timeout_s=2)
    try:
        env.reset(seed=0)
        srv.stop()
        start = time.monotonic()
        with pytest.raises(OpenEnvError, match="step failed"):
            env.step("search[x]")
        with pytest.raises(OpenEnvError, match="unreachable"):
            env.reset(seed=0)
        assert time.monotonic() - start < 10
    finally:
        env.close()


@pytest.mark.parametrize("kwargs, fragment", [
    ({"base_url": "ftp://x"}, "base_url"),
    ({"base_url": "http://127.0.0.1:1", "tasks": []}, "tasks is empty"),
    ({"base_url": "http://127.0.0.1:1", "tasks": [{"seed": 1}]}, "without 'seed'"),
    ({"base_url": "http://127.0.0.1:1", "tasks": ["a", "a"]}, "repeats"),
    ({"base_url": "http://127.0.0.1:1", "message_timeout_s": 0}, "message_timeout_s"),
])
def test_bad_configuration_is_a_config_error_naming_the_fix(kwargs, fragment):
    from stratagym.errors import ConfigError

    with pytest.raises(ConfigError, match=fragment):
        gym.make(OPENENV, **kwargs)


# ---- a server with a multi-field action schema: the agent writes JSON, checked against the schema -------


def _counter_app():
    """A small OpenEnv env written against openenv-core's own interfaces and served by its create_app."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class CountAction(Action):
        word: str
        times: int

    class CountObservation(Observation):
        said: str
        total: int

    class CountEnv(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.total = 0

        def reset(self, seed=None, episode_id=None, start=0, **kwargs):
            self.total = int(start)
            return CountObservation(said=f"start at {self.total}", total=self.total, reward=None, done=False)

        def step(self, action, timeout_s=None, **kwargs):
            self.total += action.times
            return CountObservation(said=" ".join([action.word] * action.times), total=self.total,
                                    reward=float(action.times), done=self.total >= 5)

        @property
        def state(self):
            return State(step_count=self.total)

    return create_app(CountEnv, CountAction, CountObservation, max_concurrent_envs=4)


def test_actions_follow_a_multi_field_schema_and_bad_json_is_an_invalid_step():
    srv = serve_in_thread(_counter_app())
    env = gym.make(OPENENV, base_url=srv.url, tasks=[{"start": 0}, {"start": 3}], observation_field="said")
    try:
        assert list(env.unwrapped.task_ids()) == ['{"start": 0}', '{"start": 3}']
        obs, info = env.reset(seed=0, options={"task_id": '{"start": 3}'})
        assert obs == "start at 3"
        for bad in ["hello", "[1, 2]", '{"word": "a"}', '{"word": "a", "times": "2"}', '{"word": "a", "times": 1, "x": 0}',
                    '{"word": "a", "times": true}']:
            obs2, reward, term, trunc, info2 = env.step(bad)
            assert not info2["action_valid"] and obs2.startswith("Invalid action:") and reward == 0.0 and not term
        obs3, reward, term, trunc, info3 = env.step('{"word": "hi", "times": 2}')
        assert obs3 == "hi hi" and reward == 2.0 and term and not trunc and info3["action_valid"]
        assert info3["step"] == 7 and info3["state_hash"] == stable_hash("hi hi")
    finally:
        env.close()
        srv.stop()


#: Reset arguments a caller may pass: gymnasium's seeds (an int >= 0, a bool) and what it refuses, with the
#: task options the contract reads (``task_id``, ``task_index``), good and bad.
RESET_BATTERY = [
    {}, {"seed": 0}, {"seed": 7}, {"seed": True}, {"seed": False}, {"seed": 2**40},
    {"seed": -1}, {"seed": 1.5}, {"seed": "3"}, {"seed": [1]},
    {"seed": 3, "options": {"task_index": 1}}, {"seed": 3, "options": {"task_index": 1.0}},
    {"seed": 3, "options": {"task_index": 2.5}}, {"seed": 3, "options": {"task_index": True}},
    {"seed": 3, "options": {"task_index": 10**6}}, {"seed": 3, "options": {"task_id": "no-such-task"}},
    {"seed": 3, "options": {}}, {"seed": True, "options": {"task_index": 0}},
]


def _outcome(env, kwargs):
    try:
        obs, info = env.reset(**kwargs)
    except Exception as exc:  # the same refusal, type and words (but the env class it names), on both sides
        return ("raises", type(exc).__name__, str(exc).replace(type(env.unwrapped).__name__, "<env>"))
    keep = ("task_id", "step", "action_valid", "state_hash", "context_hashes", "won", "score")
    return ("ok", obs, {k: info[k] for k in keep})


@pytest.mark.parametrize("kwargs", RESET_BATTERY, ids=lambda k: json.dumps(k, default=str))
def test_every_reset_argument_is_answered_as_the_local_env_answers_it(kwargs):
    """Issue 49 item 7: ``reset(seed=True)`` raised an undocumented OpenEnvError through a served env (the
    server refused a bool seed that gymnasium, and so every local env, takes). Each argument now gets the
    local answer: the same first observation and structure, or the same error."""
    env_id = "stratagym/SearchStrata-v0"
    srv = serve_in_thread(create_server_app(env_id, max_concurrent_envs=2, idle_timeout_s=None))
    local = gym.make(env_id)
    task_ids = list(local.unwrapped.task_ids())
    remote = gym.make(OPENENV, base_url=srv.url, tasks=task_ids)
    try:
        a, b = _outcome(local, kwargs), _outcome(remote, kwargs)
        if "seed" not in kwargs and a[0] == "ok":  # an unseeded reset draws its task: compare the kind only
            assert b[0] == "ok"
        else:
            assert a == b
    finally:
        local.close()
        remote.close()
        srv.stop()
