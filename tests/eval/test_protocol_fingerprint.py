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


# ---- the prompt template by content (issue 32) ------------------------------------------------------------


def _custom(text: str, **kw):
    from stratagym.agents.prompts import PromptTemplate, parse_plain

    return PromptTemplate("custom", lambda obs, info, history, k: [{"role": "user", "content": text + obs}], parse_plain, **kw)


def test_a_template_is_fingerprinted_by_what_it_renders_and_parses_not_by_its_name():
    from stratagym.agents.prompts import TEMPLATES, parse_search_r1, template_content_hash, template_fingerprint

    brief, long = _custom("Answer briefly: "), _custom("Answer at length: ")
    assert template_fingerprint(brief).startswith("custom sha256:")
    assert template_fingerprint(brief) != template_fingerprint(long)  # one name, two prompts: two protocols
    # the same text from other code under another name: the same content
    other = _custom("Answer briefly: ")
    assert template_content_hash(other) == template_content_hash(brief)
    # stop strings and parsing are part of what a template does
    assert template_content_hash(_custom("Answer briefly: ", stop=("</a>",))) != template_content_hash(brief)
    from dataclasses import replace

    assert template_content_hash(replace(brief, parse=parse_search_r1)) != template_content_hash(brief)
    # the built-in templates differ from each other and hash the same on every call
    hashes = {name: template_content_hash(t) for name, t in TEMPLATES.items()}
    assert len(set(hashes.values())) == len(hashes)
    assert hashes == {name: template_content_hash(t) for name, t in TEMPLATES.items()}


def test_protocol_template_follows_the_agent_the_tools_protocol_and_the_spec():
    from stratagym.agents.prompts import TEMPLATES, TOOLS, protocol_template, template_fingerprint
    from stratagym.errors import ConfigError

    assert protocol_template("stratagym/SearchQA-v0") == template_fingerprint(TEMPLATES["search_r1"])
    assert protocol_template("stratagym/SearchQA-v0", override="plain") == template_fingerprint(TEMPLATES["plain"])
    assert protocol_template("stratagym/SearchQA-v0", protocol="tools", override="plain") == template_fingerprint(TOOLS)
    assert protocol_template("stratagym/SearchStrata-v0") is None  # the spec names none: chosen per observation
    with pytest.raises(ConfigError, match="unknown prompt template 'nope'"):
        protocol_template("stratagym/SearchQA-v0", override="nope")


def test_a_saved_policy_forces_its_template_unless_the_options_say_otherwise(tmp_path):
    import json

    from stratagym.eval.agents import AgentSpec

    (tmp_path / "stratagym_policy.json").write_text(json.dumps({"template": "plain", "memory_k": 2}))
    spec = AgentSpec(str(tmp_path), "checkpoint", str(tmp_path))
    assert spec.forced_template({}) == "plain"
    assert spec.forced_template({"template": "think_action"}) == "think_action"
    assert AgentSpec("scripted:oracle", "scripted", "oracle").forced_template({}) is None


def test_evals_with_two_custom_templates_of_one_name_are_not_ranked_together(tmp_path, monkeypatch):
    from stratagym.agents import prompts
    from stratagym.eval.harness import EvalConfig, evaluate
    from stratagym.leaderboard.protocols import compare_records
    from stratagym.leaderboard.render import board_tables
    from stratagym.leaderboard.store import Leaderboard

    records = []
    for text in ("Answer briefly: ", "Answer at length: "):
        monkeypatch.setitem(prompts.TEMPLATES, "custom", _custom(text))
        records.append(evaluate(EvalConfig(agent="scripted:oracle", env_id="stratagym/SearchStrata-v0", n=2,
                                           agent_options={"template": "custom"}), progress=False))
    fields = [r["protocol"]["fields"]["prompt_template"] for r in records]
    assert fields[0] != fields[1] and all(f.startswith("custom sha256:") for f in fields)
    diff = compare_records(records[0], records[1])
    assert len(diff) == 1 and diff[0].startswith("prompt_template: custom sha256:")
    lb = Leaderboard(tmp_path / "b.db")
    for r in records:
        lb.submit(r)  # both sound
    assert len(board_tables(lb)) == 2
    lb.close()


def test_a_record_fingerprinted_by_template_name_stays_readable_and_apart():
    from stratagym.agents.prompts import protocol_template

    old = _protocol("stratagym/SearchQA-v0")  # what records before content hashing carry: the name alone
    env = gym.make("stratagym/SearchQA-v0", split="test")
    try:
        tasks = list(env.unwrapped.task_ids())[:3]
        new = protocol_of(env, "stratagym/SearchQA-v0", {"split": "test"}, tasks, "test",
                          prompt_template=protocol_template("stratagym/SearchQA-v0"))
    finally:
        env.close()
    assert old["fields"]["prompt_template"] == "search_r1"
    assert new["fields"]["prompt_template"].startswith("search_r1 sha256:")
    diff = protocol_diff(old["fields"], new["fields"])
    assert len(diff) == 1 and diff[0].startswith("prompt_template: search_r1 vs search_r1 sha256:")
