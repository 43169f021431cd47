"""stratagym/SearchQA-v0: gymnasium contract, protocol, rewards, metadata, scripted agents, failures."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import stratagym  # noqa: F401  (registers the envs)
from tests.helpers import play_records
from stratagym.agents.scripted import RandomAgent
from stratagym.envs.core import ConfigError, EpisodeKey, stable_hash
from stratagym.envs.registry import make_agent
from stratagym.envs.search_qa.env import SearchQAEnv
from stratagym.envs.search_qa.protocol import INVALID_ACTION_MESSAGE, STOP_STRINGS
from stratagym.envs.search_qa.retrievers.base import Retriever

ENV_ID = "stratagym/SearchQA-v0"


@pytest.fixture(scope="module")
def env():
    e = gym.make(ENV_ID, split="test")
    yield e.unwrapped
    e.close()


def test_default_construction_passes_gymnasium_checks():
    e = gym.make(ENV_ID)
    check_env(e.unwrapped, skip_render_check=True)
    assert e.unwrapped.split == "train" and e.unwrapped.retriever.backend == "bm25s"
    assert e.unwrapped.stop_strings == STOP_STRINGS == e.unwrapped.metadata["stop_strings"]
    e.close()
    v = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync")
    obs, infos = v.reset(seed=3)
    assert len(obs) == 2 and all("Question:" in o for o in obs)
    obs, rew, term, trunc, infos = v.step(["<search> Kubae </search>", "<answer> no idea </answer>"])
    assert list(term) == [False, True] and list(infos["search_count"]) == [1, 0]
    v.close()


def test_reset_is_deterministic_and_selects_tasks(env):
    o1, i1 = env.reset(seed=11)
    o2, i2 = env.reset(seed=11)
    assert (o1, i1) == (o2, i2)
    ex = env.examples[7]
    obs, info = env.reset(options={"task_id": ex.id})
    assert obs.endswith(f"Question: {ex.question}\n") and info["task_id"] == ex.id
    assert info["state_hash"] == stable_hash(obs) and info["hops"] == ex.hops
    assert "golden_answers" not in info and "answer" not in info  # nothing leaks at reset
    _, info = env.reset(options={"task_index": 0})
    assert info["task_id"] == env.task_ids()[0]


def test_search_then_answer_episode(env):
    ex = next(e for e in env.examples if e.hops == 2)
    _, info = env.reset(options={"task_id": ex.id})
    q1, q2 = ex.oracle_queries
    obs, r, term, trunc, info = env.step(f"<think>hop 1</think>\n<search> {q1} </search>")
    assert obs.startswith("\n\n<information>Doc 1(Title: ") and obs.endswith("</information>\n\n")
    assert obs.count("Doc ") == 3 and ex.metadata["supporting_titles"][0] in obs
    assert (r, term, trunc, info["action_valid"], info["search_count"], info["tool_calls"]) == (0.0, False, False, True, 1, {"search": 1})
    assert info["state_hash"] == stable_hash(obs) and info["query"] == q1
    assert len(info["context_hashes"]) == 2
    obs, r, term, trunc, info = env.step(f"<search> {q2} </search>")
    obs, r, term, trunc, info = env.step(f"<think>done</think><answer> {ex.golden_answers[0].upper()}. </answer>")
    assert (r, term, trunc, info["won"], info["score"]) == (1.0, True, False, True, 1.0)
    assert info["em"] == info["f1"] == info["substring_em"] == 1.0 and info["search_count"] == 2
    assert info["answer"] == ex.golden_answers[0].upper() + "." and info["golden_answers"] == list(ex.golden_answers)
    obs, r, term, trunc, info = env.step("<answer> again </answer>")
    assert not info["action_valid"] and r == 0.0


def test_partial_answer_scores_f1_not_em(env):
    ex = next(e for e in env.examples if len(e.golden_answers) == 1 and e.golden_answers[0].count(" ") == 1)
    env.reset(options={"task_id": ex.id})
    _, r, term, _, info = env.step(f"<answer> {ex.golden_answers[0].split()[0]} </answer>")
    assert term and r == 0.0 and not info["won"] and 0.0 < info["f1"] < 1.0


@pytest.mark.parametrize("action, reason", [
    ("I think it is Kubae.", "no complete"),
    ("<search>Kubae</answer>", "no complete"),  # Search-R1: the closing tag must match the opening one
    ("<SEARCH>Kubae</SEARCH>", "no complete"),  # Search-R1's tags are case-sensitive
    (12345, "must be text"),
])
def test_invalid_turns_get_the_corrective_observation(env, action, reason):
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(action)
    assert obs == INVALID_ACTION_MESSAGE and r == 0.0 and not term and not trunc
    assert info["action_valid"] is False and reason in info["invalid_reason"] and info["search_count"] == 0


def test_turn_limit_truncates_with_zero_reward():
    # max_turns=2 is Search-R1's: two search rounds, then a final turn whose search retrieves nothing.
    e = SearchQAEnv(split="test", max_turns=2)
    e.reset(seed=0)
    for q in ("Kubae", "Kubae river"):
        obs, _, term, trunc, info = e.step(f"<search> {q} </search>")
        assert not term and not trunc and "em" not in info and "Doc 1" in obs
    obs, r, term, trunc, info = e.step("<search> Kubae king </search>")
    assert trunc and not term and r == 0.0 and info["em"] == 0.0 and info["answer"] is None
    assert info["search_count"] == 3 and obs == "\n\n<information></information>\n\n"


class _Broken(Retriever):
    backend = "broken"

    def batch_search(self, queries, k=3):
        raise RuntimeError("index shard 3 is unreadable")


def test_retriever_failure_is_an_observation():
    e = SearchQAEnv(split="test", retriever=_Broken())
    e.reset(seed=0)
    obs, r, term, trunc, info = e.step("<search> Kubae </search>")
    assert obs == "\n\n<information>Retrieval failed: RuntimeError: index shard 3 is unreadable</information>\n\n"
    assert info["action_valid"] and info["search_count"] == 1 and "unreadable" in info["retrieval_error"]
    assert not term


def test_dead_server_is_an_observation():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = SearchQAEnv(split="test", retrieval_urls=[f"http://127.0.0.1:{port}"], retrieval_retries=1, retrieval_timeout=2)
    e.reset(seed=0)
    obs, *_, info = e.step("<search> Kubae </search>")
    assert "Retrieval failed" in obs and "ConnectError" in info["retrieval_error"]
    e.close()


def test_bad_configuration_raises_config_error():
    for kwargs in ({"topk": 0}, {"max_turns": -1}, {"max_query_chars": 0}, {"split": "dev"}, {"dataset": "nq"},
                   {"retriever": "elastic"}, {"prompt_template": "no field"}, {"corpus": "/nonexistent.jsonl"}):
        with pytest.raises(ConfigError):
            SearchQAEnv(**kwargs)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300) | st.sampled_from(["<search>", "<answer>", "</search>", "<search><answer>"]))
def test_step_never_raises_on_any_text(text):
    e = _shared_env()
    e.reset(seed=1)
    obs, r, term, trunc, info = e.step(text)
    assert isinstance(obs, str) and r in (0.0, 1.0)


_ENV = []


def _shared_env():
    if not _ENV:
        _ENV.append(SearchQAEnv(split="test"))
    return _ENV[0]


def _play(agent_name, split="test", n=None, **kw):
    envs = [gym.make(ENV_ID, split=split, **kw) for _ in range(4)]
    agent = make_agent(ENV_ID, agent_name, envs[0], seed=0)
    n = n or len(envs[0].unwrapped.task_ids())
    recs = play_records(envs, agent, [(i, None) for i in range(n)])
    for e in envs:
        e.close()
    return recs


def test_oracle_reaches_em_1_on_the_bundled_test_split(env):
    recs = _play("oracle")
    assert len(recs) == 500
    assert all(r.won and r.total_reward == 1.0 and r.extra["em"] == 1.0 for r in recs)
    hops = {e.id: e.hops for e in env.examples}
    assert all(r.search_count == hops[r.task_id] and r.turns == hops[r.task_id] + 1 for r in recs)


def test_no_search_baseline_is_near_zero():
    recs = _play("no_search")
    em = np.mean([r.total_reward for r in recs])
    assert em < 0.05 and all(r.search_count == 0 and r.turns == 1 for r in recs)


def test_random_agent_plays_meaningful_turns():
    e = SearchQAEnv(split="test")
    agent = RandomAgent(e, seed=0)
    recs = play_records([e], agent, [(s, s) for s in range(30)])
    assert sum(r.search_count for r in recs) > 10  # it searches
    assert all(r.turns <= 5 for r in recs)  # max_turns=4 search rounds + the final turn (Search-R1)


def test_random_action_uses_the_given_task():
    e = SearchQAEnv(split="test")
    ex = e.examples[1]
    rng = np.random.default_rng(0)
    words = set(ex.question.replace("?", "").split())
    for _ in range(20):
        action = e.random_action(rng, {"task_id": ex.id})
        inner = action.split(">")[-2].split("<")[0].split() if "<" in action else []
        assert set(inner) <= words


class _Flaky(Retriever):
    """The bundled retriever, failing every third call (a retrieval error is a search step too)."""

    backend = "flaky"

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def batch_search(self, queries, k=3):
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError(f"shard {self.calls} is unreadable")
        return self.inner.batch_search(queries, k)


def _replay(use_c: bool, max_observation_chars: int | None = None) -> str:
    """Random episodes (searches, answers, invalid and unusable turns, last turns, steps after the end,
    failing retrievals) through ``SearchQAEnv.step``, with or without the C speed-ups; everything
    returned, as text (values, key order, types)."""
    from stratagym.envs import speedups

    before = speedups.ENABLED
    speedups.use(use_c)
    try:
        e = SearchQAEnv(split="test", max_turns=3, context_k=3, max_action_chars=200,
                        retriever=_Flaky(_shared_env().retriever))
        if max_observation_chars is not None:  # observations cut to fit (_fit)
            e.max_observation_chars = max_observation_chars
        rng, rows = np.random.default_rng(11), []
        for episode in range(30):
            rows.append(e.reset(seed=episode))
            info = rows[-1][1]
            for _ in range(6):  # up to two steps past the end of the episode
                u = float(rng.random())
                if u < 0.05:
                    action = None if u < 0.02 else "<search> " + "q" * 300 + " </search>"  # unusable
                else:
                    action = e.random_action(rng, info)
                out = e.step(action)
                rows.append((action, out))
                info = out[4]
        return repr(rows)
    finally:
        speedups.use(before)


def test_hostile_episodes_are_identical_with_and_without_the_speedups():
    from stratagym.envs import speedups

    reference = _replay(False)
    # the replay met every case it is there for
    assert "Retrieval failed: RuntimeError: shard" in reference and "action_valid': False" in reference
    assert "The episode is over" in reference
    assert "'em': 0.0" in reference and "'retrieval_error'" in reference
    if speedups.available():
        assert _replay(True) == reference
        assert _replay(True, 150) == _replay(False, 150)


def test_a_subclass_that_overrides_a_layer_is_heard():
    class Quiet(SearchQAEnv):
        def _search(self, query):
            result = super()._search(query)
            result.info["quiet"] = True
            return result

    e = Quiet(split="test", retriever=_shared_env().retriever)
    e.reset(seed=0)
    assert e.step("<search> Kubae </search>")[4]["quiet"] is True


def test_hops_keeps_only_questions_with_those_hop_counts():
    """The hop curriculum (issue 48 item 8): ``hops`` filters the split by ``metadata.hops``, in order."""
    from stratagym.envs.search_qa.data import load_qa

    every = load_qa("bundled", "train")
    three = [ex.id for ex in every if ex.hops == 3]
    e = gym.make(ENV_ID, split="train", hops=3).unwrapped
    assert list(e.task_ids()) == three and 0 < len(three) < len(every)
    obs, info = e.reset(seed=0)
    assert info["hops"] == 3
    e.close()
    e = gym.make(ENV_ID, split="train", hops=[2, "1"]).unwrapped
    assert list(e.task_ids()) == [ex.id for ex in every if ex.hops in (1, 2)]
    e.close()


@pytest.mark.parametrize("hops, fix", [(0, "hop count >= 1"), ([], "hop count >= 1"), ("three", "hop count >= 1"),
                                       (True, "hop count >= 1"), (9, "its questions have [1, 2, 3]")])
def test_bad_hops_is_a_config_error_that_names_the_fix(hops, fix):
    with pytest.raises(ConfigError, match=re.escape(fix)):
        gym.make(ENV_ID, split="train", hops=hops)


def test_hops_on_a_dataset_without_hop_counts_is_refused(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"id": "q1", "question": "Who?", "golden_answers": ["Ann"]}\n')
    with pytest.raises(ConfigError, match="drop the hops option"):
        gym.make(ENV_ID, dataset=str(tmp_path), split="train", hops=2)


def test_hops_leaves_the_protocol_fingerprint_to_the_task_list():
    """``hops`` is neutral like ``split``: unfiltered records keep their fingerprints, and a filtered one
    differs through its ``tasks`` field (count and hash of the task ids)."""
    from stratagym.envs.fingerprint import resolved_task_kwargs, tasks_hash
    from stratagym.envs.registry import get_spec

    spec = get_spec(ENV_ID)
    assert resolved_task_kwargs(spec, {"topk": 1}) == resolved_task_kwargs(spec, {"topk": 1, "hops": 3})
    e = gym.make(ENV_ID, split="train", hops=3).unwrapped
    assert tasks_hash(e.task_ids()) != tasks_hash(gym.make(ENV_ID, split="train").unwrapped.task_ids())
    e.close()


def test_the_oracle_chains_three_hops_at_top_1():
    """Issue 48 item 8: the demonstrations show the third hop. At ``topk=1`` (the SmolLM2 recipes' setting)
    the oracle searches three times on every 3-hop train question, its third search returns a passage
    that holds the gold answer, and it wins."""
    env = gym.make(ENV_ID, split="train", hops=3, topk=1, max_turns=4).unwrapped
    agent = make_agent(ENV_ID, "oracle", env)
    ids = list(env.task_ids())
    for task_id in ids:
        obs, info = env.reset(seed=0, options={"task_id": task_id})
        key = EpisodeKey(task_id, 0, 0)
        searched, done = [], False
        while not done:
            (action,) = agent.act([obs], [info], [key])
            obs, reward, term, trunc, info = env.step(action)
            done = term or trunc
            if "<search>" in action:
                searched.append(obs)
        answers = env.example(task_id).golden_answers
        assert reward == 1.0 and len(searched) == 3, task_id
        assert any(a.lower() in searched[-1].lower() for a in answers), task_id
    assert len(ids) > 100
    env.close()


def test_the_planning_oracle_lists_the_lookups_left_and_acts_as_the_oracle():
    """Issue 48 item 8, the demonstrations candidate: ``oracle_plan`` takes the oracle's actions, and its think
    text lists the relations still to look up (the oracle's queries without their entities), one fewer a turn."""
    env = gym.make(ENV_ID, split="train", hops=3, topk=1, max_turns=4).unwrapped
    plan, oracle = make_agent(ENV_ID, "oracle_plan", env), make_agent(ENV_ID, "oracle", env)
    task_id = env.task_ids()[0]
    ex = env.example(task_id)
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    key = EpisodeKey(task_id, 0, 0)
    thinks, done = [], False
    while not done:
        (action,) = plan.act([obs], [info], [key])
        (same,) = oracle.act([obs], [info], [key])
        assert action.split("</think>")[1] == same.split("</think>")[1]  # the oracle's search or answer
        thinks.append(re.search(r"<think>(.*)</think>", action).group(1))
        obs, reward, term, trunc, info = env.step(action)
        done = term or trunc
    # by hand from the question's oracle queries and supporting titles
    rel = [q[len(t):].strip() for q, t in zip(ex.oracle_queries, ex.metadata["supporting_titles"])]
    assert len(rel) == 3 and all(rel)
    assert thinks == [f"Left: {rel[0]}, {rel[1]}, {rel[2]}.", f"Left: {rel[1]}, {rel[2]}.", f"Left: {rel[2]}.",
                      "Left: nothing."]
    assert reward == 1.0
    env.close()


def test_lookups_names_each_hop_by_the_words_after_its_entity():
    from stratagym.envs.search_qa.agents import lookups
    from stratagym.envs.search_qa.data import QAExample

    ex = QAExample(id="q", question="Who rules the kingdom that contains the city where Zeis Mipurk was born?",
                   golden_answers=("Braes Tovryrath",),
                   metadata={"supporting_titles": ["Zeis Mipurk", "Skaelomos", "Gouzae"],
                             "oracle_queries": ["Zeis Mipurk born city", "Skaelomos city kingdom", "Gouzae kingdom ruled by"]})
    assert lookups(ex) == ["born city", "city kingdom", "kingdom ruled by"]
    # a query that does not start with its title, or is only its title, is its own lookup
    odd = QAExample(id="q", question="q?", golden_answers=("a",),
                    metadata={"supporting_titles": ["X", "Y"], "oracle_queries": ["where was X born", "Y"]})
    assert lookups(odd) == ["where was X born", "Y"]
    # no oracle queries: the oracle searches the question once
    assert lookups(QAExample(id="q", question="Who is Z?", golden_answers=("a",))) == ["Who is Z?"]
