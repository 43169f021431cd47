"""The protocol fingerprint (issue 32, docs/protocol.md): computed by the env family, equal where the
task is equal (defaults typed or not, neutral kwargs), different and named where it is not."""

from __future__ import annotations

import gymnasium as gym
import pytest

import stratagym  # noqa: F401
from stratagym.envs.fingerprint import PROTOCOL_FIELDS, fingerprint_of, protocol_diff, protocol_of


def _protocol(env_id, split="test", n=3, **kwargs):
    if split is not None:
        kwargs["split"] = split
    env = gym.make(env_id, **kwargs)
    try:
        tasks = list(env.unwrapped.task_ids())[:n]
        return protocol_of(env, env_id, kwargs, tasks, getattr(env.unwrapped, "split", "default"))
    finally:
        env.close()


def test_searchqa_protocol_fields_and_what_changes_them():
    base = _protocol("stratagym/SearchQA-v0")
    f = base["fields"]
    assert list(f) == list(PROTOCOL_FIELDS) and base["source"] == "measured"
    assert base["fingerprint"] == fingerprint_of(f)
    assert f["task_kwargs"]["topk"] == 3 and f["task_kwargs"]["max_turns"] == 4  # defaults filled in
    assert f["data"]["retriever"]["backend"] == "bm25s" and f["data"]["corpus"].startswith("sha256:")
    assert f["libraries"]["bm25s"] and f["reward"].startswith("exact_match")
    # the default typed out, or a neutral kwarg: the same protocol
    assert _protocol("stratagym/SearchQA-v0", topk=3)["fingerprint"] == base["fingerprint"]
    assert _protocol("stratagym/SearchQA-v0", retrieval_timeout=5.0)["fingerprint"] == base["fingerprint"]
    # a task-changing kwarg, another task set, another world: a different protocol, with the difference named
    top1 = _protocol("stratagym/SearchQA-v0", topk=1)
    assert top1["fingerprint"] != base["fingerprint"]
    assert protocol_diff(top1["fields"], f) == ["topk 1 vs 3"]
    assert protocol_diff(_protocol("stratagym/SearchQA-v0", n=2)["fields"], f)[0].startswith("tasks: ")
    unseen = protocol_diff(_protocol("stratagym/SearchQA-v0", split="test_unseen")["fields"], f)
    assert any(d.startswith("data.corpus: ") for d in unseen) and any(d.startswith("split: test_unseen vs test") for d in unseen)


def test_a_kwarg_an_env_gains_joins_the_fingerprint_without_being_listed():
    # the synthetic spec names only oracle_info as neutral: every other kwarg (n_easy...) is compared
    a = _protocol("stratagym/DifficultyMix-v0", split=None, n_easy=16)
    b = _protocol("stratagym/DifficultyMix-v0", split=None, n_easy=8, n=3)
    assert any(d.startswith("n_easy 8 vs 16") for d in protocol_diff(b["fields"], a["fields"]))
    assert _protocol("stratagym/DifficultyMix-v0", split=None, oracle_info=True)["fingerprint"] == a["fingerprint"]


def test_diff_of_equal_and_unknown_protocols():
    f = _protocol("stratagym/DifficultyMix-v0", split=None)["fields"]
    assert protocol_diff(f, dict(f)) == []
    assert protocol_diff(None, None) == []
    assert protocol_diff(None, f) == ["protocol: unknown (legacy record) vs known"]
    older = {**f, "behaviour_version": None}
    assert protocol_diff(older, f) == ["behaviour_version: unknown vs 1"]


@pytest.mark.parametrize("env_id,split", [("stratagym/WebShop-v0", "test"), ("stratagym/ALFWorld-v0", "in_distribution")])
def test_data_is_hashed_by_content_for_every_family(env_id, split):
    f = _protocol(env_id, split=split, n=2)["fields"]
    assert f["behaviour_version"] == 1 and f["data"] and all(str(v).startswith("sha256:") for k, v in f["data"].items()
                                                                if k in ("catalog", "games"))
    assert not any(str(v).startswith("/") for v in f["task_kwargs"].values())  # no machine paths
