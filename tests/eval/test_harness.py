"""The eval harness: known figures for scripted agents, records, resuming, agent specs."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

from stratagym.eval.agents import AgentSpecError, parse_agent_spec
from stratagym.eval.harness import EvalConfig, EvalError, evaluate, progress_path, read_progress
from stratagym.eval.records import SCHEMA, load_record, record_id, schema_problems
from toy_env import TOY_ID

# Uniform random over 5 admissible actions (search + 4 letters), 4 turns: P(win) = sum_k 0.2^k * 0.2, k < 4.
TOY_RANDOM_SUCCESS = sum(0.2**k * 0.2 for k in range(4))


def _within(p_hat: float, p: float, n: int, sigmas: float = 4.0) -> bool:
    return abs(p_hat - p) <= sigmas * math.sqrt(p * (1 - p) / n)


def test_oracle_scores_one_with_known_structure(tmp_path):
    out = tmp_path / "oracle.json"
    rec = evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, n=20, seeds=[0, 1], batch_size=4), out=out, progress=False)
    m = rec["metrics"]
    assert m["success"]["value"] == 1.0 and m["success"]["n"] == 40
    assert m["search_count"]["value"] == 0.5  # the oracle searches on odd tasks only
    assert m["turns"]["value"] == 1.5
    assert m["success/even"]["value"] == m["success/odd"]["value"] == 1.0
    assert rec["distributions"]["search_count"] == {"0": 20, "1": 20}
    assert rec["across_seeds"]["success"] == {"mean": 1.0, "std": 0.0, "n_seeds": 2, "min": 1.0, "max": 1.0}
    # the record: schema, identity, per-task outcomes, content id
    assert rec["schema"] == SCHEMA and schema_problems(rec) == []
    assert rec["record_id"] == record_id(rec)
    assert rec["env"]["id"] == TOY_ID and rec["env"]["version"] == "v0" and rec["env"]["data_hash"].startswith("sha256:")
    assert rec["agent"]["kind"] == "scripted" and rec["agent"]["content_hash"].startswith("sha256:")
    assert rec["split"] == "test" and rec["n_tasks"] == 20 and rec["seeds"] == [0, 1] and rec["n_episodes"] == 40
    assert [e["task_id"] for e in rec["episodes"][:3]] == ["t0", "t1", "t2"]
    assert {(e["seed"], e["task_id"]) for e in rec["episodes"]} == {(s, f"t{i}") for s in (0, 1) for i in range(20)}
    assert load_record(out) == rec


def test_random_agent_near_expected_value():
    rec = evaluate(EvalConfig(agent="scripted:random", env_id=TOY_ID, n=40, seeds=list(range(10)), batch_size=8), progress=False)
    m = rec["metrics"]["success"]
    assert _within(m["value"], TOY_RANDOM_SUCCESS, m["n"])
    assert m["ci_low"] <= TOY_RANDOM_SUCCESS <= m["ci_high"] or _within(m["value"], TOY_RANDOM_SUCCESS, m["n"], 3)
    assert rec["across_seeds"]["success"]["n_seeds"] == 10 and rec["across_seeds"]["success"]["std"] > 0


def test_registered_synthetic_envs_oracle_and_random():
    """On a registered env: oracle 1.0; uniform random over the codes wins with the env's own prior."""
    env_id = "stratagym/DifficultyMix-v0"
    oracle = evaluate(EvalConfig(agent="scripted:oracle", env_id=env_id, seeds=[0]), progress=False)
    assert oracle["metrics"]["success"]["value"] == 1.0
    env = gym.make(env_id)
    priors = [env.reset(options={"task_id": t})[1]["prior_success"] for t in env.unwrapped.task_ids()]
    env.close()
    expected = sum(priors) / len(priors)
    rnd = evaluate(EvalConfig(agent="scripted:random", env_id=env_id, seeds=list(range(20))), progress=False)
    assert _within(rnd["metrics"]["success"]["value"], expected, rnd["metrics"]["success"]["n"])


def test_uninterrupted_eval_is_reproducible():
    cfg = EvalConfig(agent="scripted:random", env_id=TOY_ID, n=12, seeds=[3, 4], batch_size=5)
    a = evaluate(cfg, progress=False)
    b = evaluate(EvalConfig(agent="scripted:random", env_id=TOY_ID, n=12, seeds=[3, 4], batch_size=5), progress=False)
    assert a["record_id"] == b["record_id"] and a["episodes"] == b["episodes"]


def test_resume_skips_done_episodes_and_cuts_a_torn_line(tmp_path):
    out = tmp_path / "r.json"
    cfg = dict(agent="scripted:oracle", env_id=TOY_ID, n=10, seeds=[0])
    full = evaluate(EvalConfig(**cfg), out=out, progress=False)
    prog = progress_path(out)
    lines = prog.read_bytes().splitlines(keepends=True)
    assert len(lines) == 11  # header + 10 episodes
    # simulate a kill after 4 episodes, mid-way through writing the 5th line
    prog.write_bytes(b"".join(lines[:5]) + lines[5][:17])
    out.unlink()
    seen = []
    rec = evaluate(EvalConfig(**cfg), out=out, progress=lambda done, total: seen.append(done))
    assert seen == list(range(5, 11))  # only the 6 missing episodes were played
    header, eps = read_progress(prog)
    keys = [tuple(e["key"]) for e in eps]
    assert len(keys) == len(set(keys)) == 10
    assert [e["session"] for e in eps] == [1] * 4 + [2] * 6
    assert rec["episodes"] == full["episodes"] and rec["record_id"] == full["record_id"]


def test_resume_refuses_another_evals_progress(tmp_path):
    out = tmp_path / "r.json"
    evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, n=4), out=out, progress=False)
    with pytest.raises(EvalError, match="different eval"):
        evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, n=5), out=out, progress=False)
    rec = evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, n=5), out=out, resume=False, progress=False)
    assert rec["n_tasks"] == 5


def test_split_and_bad_requests():
    rec = evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, split="train", n=3), progress=False)
    assert rec["split"] == "train" and [e["task_id"] for e in rec["episodes"]] == ["s0", "s1", "s2"]
    with pytest.raises(EvalError, match="only 40"):
        evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, n=41), progress=False)
    with pytest.raises(EvalError, match="unknown stratagym env"):
        evaluate(EvalConfig(agent="scripted:oracle", env_id="nope/Nothing-v0"), progress=False)
    with pytest.raises(AgentSpecError, match="no scripted agent"):
        evaluate(EvalConfig(agent="scripted:wizard", env_id=TOY_ID, n=2), progress=False)
    with pytest.raises(EvalError, match="distinct"):
        evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, seeds=[1, 1]), progress=False)


def test_agent_spec_parsing(tmp_path):
    assert parse_agent_spec("scripted:oracle").kind == "scripted"
    s = parse_agent_spec("openai:qwen@http://127.0.0.1:8000/v1")
    assert (s.kind, s.name, s.url) == ("openai", "qwen", "http://127.0.0.1:8000/v1")
    assert parse_agent_spec("hf:org/model").kind == "hf"
    ck = tmp_path / "ckpt"
    ck.mkdir()
    (ck / "model.safetensors").write_bytes(b"abc")
    s = parse_agent_spec(str(ck))
    assert s.kind == "checkpoint" and s.label == "ckpt"
    h1 = s.content_hash()
    (ck / "model.safetensors").write_bytes(b"abd")
    assert s.content_hash() != h1  # the hash follows the content
    for bad, msg in [("", "empty"), ("openai:qwen", "openai:<model>@<base url>"), ("nowhere/at/all", "unknown agent"), ("scripted:", "needs an agent name")]:
        with pytest.raises(AgentSpecError, match=msg):
            parse_agent_spec(bad)


def test_hub_name_fails_offline_with_a_clear_message(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    with pytest.raises(AgentSpecError, match="offline mode is on.*local checkpoint folder"):
        evaluate(EvalConfig(agent="hf:stratagym-no-such-org/no-such-model", env_id=TOY_ID, n=1), progress=False)


@pytest.mark.slow
def test_checkpoint_folder_llm_agent(tmp_path):
    """A real (tiny) transformers checkpoint is evaluated through the LLM agent."""
    from stratagym.agents.tiny_lm import tiny_lm_path

    ck = tiny_lm_path()
    rec = evaluate(EvalConfig(agent=str(ck), env_id=TOY_ID, n=4, seeds=[0], batch_size=4, max_steps=2,
                              agent_options={"max_new_tokens": 8}), progress=False)
    assert rec["agent"]["kind"] == "checkpoint" and rec["n_episodes"] == 4
    assert rec["agent"]["content_hash"] == parse_agent_spec(str(ck)).content_hash()
    assert schema_problems(rec) == []


def test_evaluate_resolves_the_env_spec_once(monkeypatch):
    """The harness looks the env's EnvSpec up once and hands it down (env construction, prompt template,
    metric rules): no lookup from eval/ or agents/ code besides that one. (The envs layer's own helpers,
    the scripted agent's class and the protocol fingerprint, still take the id.)"""
    import sys

    import stratagym.envs.registry as registry

    real, callers = registry.get_spec, []

    def counting(env_id):
        callers.append(sys._getframe(1).f_code.co_filename)
        return real(env_id)

    # every module that imported the lookup (at its top) counts too, not only the registry's own name
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("stratagym") and getattr(mod, "get_spec", None) is real:
            monkeypatch.setattr(mod, "get_spec", counting)
    evaluate(EvalConfig(agent="scripted:oracle", env_id=TOY_ID, n=4, seeds=[0, 1], batch_size=2), progress=False)
    ours = [f for f in callers if "/stratagym/eval/" in f or "/stratagym/agents/" in f]
    assert len(ours) == 1 and ours[0].endswith("harness.py"), callers
