"""The search-dependence eval (issue 50 item 7): SearchQA's ``retrieval_ablation`` and
``stratagym eval --retriever-ablation``. A reader loses its EM without real retrieval; an agent that knows
the answers (the scripted oracle: a memoriser) does not."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import stratagym  # noqa: F401  (registers the envs)
from stratagym.agents.scripted import ScriptedPolicy
from stratagym.envs.core import ConfigError
from stratagym.eval.harness import EvalConfig, evaluate
from stratagym.eval.records import load_record, record_id
from stratagym.eval.search_dependence import ABLATIONS, ablation_out, run_ablations, search_dependence_block
from stratagym.leaderboard.render import search_dependence_cell

SPLIT = dict(split="test_unseen", topk=1)


def _first_search(ablation, task="sqa-test_unseen-00001", **kw):
    env = gym.make("stratagym/SearchQA-v0", **SPLIT, retrieval_ablation=ablation, **kw)
    env.reset(options={"task_id": task})
    ex = env.unwrapped.example(task)
    obs, _, _, _, info = env.step(f"<search> {ex.oracle_queries[0]} </search>")
    return env, ex, obs, info


def test_each_ablation_replaces_what_a_search_returns_and_the_search_still_counts():
    _, ex, real, _ = _first_search(None)
    assert ex.golden_answers[0].split()[0] in real or "Doc 1" in real
    _, _, none, info = _first_search("no_retrieval")
    assert none.strip() == "<information></information>" and info["search_count"] == 1
    env, _, rand, info = _first_search("random_passage")
    assert rand != real and "Doc 1" in rand and info["search_count"] == 1
    assert _first_search("random_passage")[2] == rand  # drawn per question and search: the same for every agent
    assert _first_search("random_passage", task="sqa-test_unseen-00002")[2] != rand
    # shuffled_gold: exactly what the next question's first gold query retrieves
    env, _, shuffled, _ = _first_search("shuffled_gold")
    nxt = env.unwrapped.example("sqa-test_unseen-00002")
    _, _, expected, _ = _first_search(None, task="sqa-test_unseen-00002")
    assert nxt.oracle_queries and shuffled == expected and shuffled != real
    # the last question borrows from the first (a rotation: no question keeps its own passages)
    last = env.unwrapped.task_ids()[-1]
    assert env.unwrapped._partner[last].id == env.unwrapped.task_ids()[0]


def test_a_bad_ablation_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="no_retrieval, random_passage, shuffled_gold"):
        gym.make("stratagym/SearchQA-v0", **SPLIT, retrieval_ablation="none")


class _Reader:
    """Searches each gold query, then answers with a gold answer only if the passages it read hold it:
    the score comes from retrieval."""

    def __init__(self, env):
        self.env = env.unwrapped
        self.read: dict = {}

    def act(self, observations, infos, episodes):
        out = []
        for obs, info, key in zip(observations, infos, episodes):
            ex = self.env.example(info["task_id"])
            seen = self.read.setdefault(key, [])
            seen.append(obs)
            done = int(info.get("search_count", 0))
            if done < len(ex.oracle_queries):
                out.append(f"<search> {ex.oracle_queries[done]} </search>")
            else:
                found = [a for a in ex.golden_answers if a in "".join(seen[1:])]
                out.append(f"<answer> {found[0] if found else 'unknown'} </answer>")
        return out


def test_a_reader_depends_on_search_and_a_memoriser_does_not(tmp_path):
    cfg = EvalConfig(agent="scripted:oracle", env_id="stratagym/SearchQA-v0", split="test_unseen", n=12,
                     env_kwargs={"topk": 1}, batch_size=4)
    results = {}
    reader = lambda seed: ScriptedPolicy(_Reader(gym.make("stratagym/SearchQA-v0", **SPLIT)))  # noqa: E731
    for name, factory in (("oracle", None), ("reader", reader)):
        c = EvalConfig(**{**cfg.__dict__, "label": name})
        record = evaluate(c, out=tmp_path / f"{name}.json", progress=False, agent_factory=factory)
        ablated = run_ablations(c, tmp_path / f"{name}.json", evaluate, progress=False, agent_factory=factory)
        results[name] = search_dependence_block(record, ablated)
        assert set(ablated) == set(ABLATIONS) and ablation_out(tmp_path / f"{name}.json", "no_retrieval").is_file()
    oracle, reader = results["oracle"], results["reader"]
    assert oracle["real"]["value"] == 1.0 and all(oracle["ablations"][a]["value"] == 1.0 for a in ABLATIONS)
    assert all(d == 0.0 for d in oracle["drop"].values())  # it knows the answers: retrieval does not matter
    assert reader["real"]["value"] == 1.0
    assert reader["ablations"]["no_retrieval"]["value"] == 0.0 and reader["drop"]["no_retrieval"] == 1.0
    assert reader["ablations"]["shuffled_gold"]["value"] <= 0.1 and reader["ablations"]["random_passage"]["value"] <= 0.1
    # every figure recomputes from the outcomes it keeps
    for a in ABLATIONS:
        x = reader["ablations"][a]
        assert x["value"] == sum(x["outcomes"].values()) / len(x["outcomes"]) and x["n"] == 12


def test_the_eval_cli_adds_the_block_without_changing_the_record_id(tmp_path):
    out = tmp_path / "oracle.json"
    cmd = [sys.executable, "-c", "from stratagym.cli import main; main()", "eval", "scripted:oracle", "--env",
           "stratagym/SearchQA-v0", "--split", "test_unseen", "-n", "4", "-E", "topk=1", "-q", "--retriever-ablation",
           "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    rec = load_record(out)
    block = rec["search_dependence"]
    assert list(block["ablations"]) == list(ABLATIONS) and block["metric"] == "em"
    assert record_id(rec) == rec["record_id"]  # an attachment, like transcripts
    assert search_dependence_cell(rec) == "1.000 / 1.000 / 1.000"
    for a in ABLATIONS:
        ablated = json.loads(ablation_out(out, a).read_text())
        assert ablated["env"]["kwargs"]["retrieval_ablation"] == a and block["ablations"][a]["record_id"] == ablated["record_id"]
    # a non-SearchQA env is refused with the reason, no traceback
    bad = subprocess.run([*cmd[:4], "scripted:oracle", "--env", "stratagym/SearchStrata-v0", "-n", "2", "-q",
                          "--retriever-ablation", "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "applies to SearchQA envs" in bad.stderr + bad.stdout and "Traceback" not in bad.stderr


def test_the_probe_joins_the_protocol_only_when_set():
    """An eval that does not ablate keeps the protocol of every record written before the option existed."""
    from stratagym.envs.fingerprint import resolved_task_kwargs
    from stratagym.envs.registry import get_spec

    spec = get_spec("stratagym/SearchQA-v0")
    assert "retrieval_ablation" not in resolved_task_kwargs(spec, {"topk": 1})
    assert "retrieval_ablation" not in resolved_task_kwargs(spec, {"topk": 1, "retrieval_ablation": None})
    assert resolved_task_kwargs(spec, {"retrieval_ablation": "no_retrieval"})["retrieval_ablation"] == "no_retrieval"
    old = load_record(next(Path(__file__).resolve().parents[2].glob("leaderboard/records/*__888fbad301ce.json")))
    assert "retrieval_ablation" not in old["protocol"]["fields"]["task_kwargs"]
    assert resolved_task_kwargs(spec, {k: v for k, v in old["env"]["kwargs"].items()}) == old["protocol"]["fields"]["task_kwargs"]
