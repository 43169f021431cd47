"""`stratagym bench` end to end on a tiny suite: trains through the real Trainer, evaluates, submits,
renders; a rerun resumes (no retraining) and reports records already on the board."""

from __future__ import annotations

import json
import textwrap

import pytest

from pathlib import Path

from stratagym.eval.suite import SuiteError, load_suite

ROOT = Path(__file__).resolve().parents[2]

SUITE = textwrap.dedent(
    """
    name: tiny
    seeds: [0, 1]
    batch_size: 8
    evals:
      - {env: stratagym/DifficultyMix-v0}
      - {env: stratagym/NotInstalled-v0}
    baselines: [scripted:random]
    train:
      envs: [stratagym/DifficultyMix-v0]
      algorithms:
        - {label: GRPO, estimator: grpo}
        - {label: GRPO + HA-DW, estimator: grpo+hadw}
      config:
        policy: {class: "stratagym.agents.scorer:ScorerPolicy", hidden: 16, memory: 1, seed: auto}
        rollout: {group_size: 4, tasks_per_step: 4}
        optim: {lr: 0.05, micro_batch_size: 100000}
        train: {total_steps: 4, save_every: 0}
    """
)


@pytest.mark.slow
def test_bench_trains_evaluates_submits_renders_and_resumes(tmp_path):
    from stratagym.bench.runner import run_bench
    from stratagym.leaderboard.store import Leaderboard

    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    kw = dict(board=str(tmp_path / "b.db"), board_dir=tmp_path / "site", runs_dir=tmp_path / "runs", progress=False, log=lambda s: None)
    res = run_bench(suite, **kw)
    assert res.skipped == ["stratagym/NotInstalled-v0: not registered here"]
    labels = [r["agent"]["label"] for r in res.records]
    assert labels == ["scripted:random", "GRPO", "GRPO + HA-DW"]
    trained = res.records[1]
    assert trained["seeds"] == [0, 1] and trained["agent"]["algorithm"] == "grpo"
    assert trained["n_episodes"] == 2 * 32  # every task once per training seed
    curve = trained["training"]["curve"]
    assert sorted(curve) == ["0", "1"] and [p["step"] for p in curve["0"]] == [1, 2, 3, 4]
    assert (tmp_path / "runs" / "tiny" / "train" / "grpo" / "stratagym-difficultymix-v0" / "seed1" / "checkpoints").is_dir()
    assert res.submitted == 3 and res.already_on_board == 0
    md = res.markdown.read_text()
    assert "GRPO + HA-DW" in md and "training curves" in md
    assert len(list((tmp_path / "site" / "records").glob("*.json"))) == 3
    with Leaderboard(kw["board"]) as lb:
        assert len(lb) == 3

    # rerun: finished runs are reloaded, evals resume from their complete progress files -> same records
    messages = []
    res2 = run_bench(suite, **{**kw, "log": messages.append})
    assert [r["record_id"] for r in res2.records] == [r["record_id"] for r in res.records]
    assert res2.submitted == 0 and res2.already_on_board == 3
    assert any("already on the board" in m for m in messages)


    # the records folder is the board's source: a fresh clone has no board.db, and records added to the
    # folder by hand (a study) are on the rendered board too; a broken file is reported, not fatal
    extra = dict(res.records[0], agent={**res.records[0]["agent"], "label": "from a study"})
    extra.pop("record_id")
    from stratagym.eval.records import finalize_record
    from stratagym.atomic import write_json_atomic

    write_json_atomic(tmp_path / "site" / "records" / "study__x.json", finalize_record(extra))
    (tmp_path / "site" / "records" / "broken.json").write_text("{not json")
    messages = []
    res3 = run_bench(suite, **{**kw, "board": str(tmp_path / "fresh.db"), "log": messages.append})
    assert res3.submitted == 3
    assert "from a study" in res3.markdown.read_text()
    assert any("not added from broken.json" in m for m in messages)
    with Leaderboard(str(tmp_path / "fresh.db")) as lb:
        assert len(lb) == 4


    # an entry retrained with another config (a new record id) replaces the suite's earlier record of the
    # same (label, env, split), in the folder and in the store: a changed suite or recipe schema never
    # duplicates rows on the committed board
    import shutil

    shutil.rmtree(tmp_path / "runs")
    suite.write_text(SUITE.replace("total_steps: 4", "total_steps: 3"))
    res4 = run_bench(suite, **{**kw, "board": str(tmp_path / "fresh.db"), "log": lambda s: None})
    new_ids = {r["record_id"] for r in res4.records}
    assert new_ids - {r["record_id"] for r in res.records}  # the retrained entries got new ids
    files = sorted(p.name for p in (tmp_path / "site" / "records").glob("grpo*.json"))
    assert len(files) == 2 and all(any(f.endswith(i[:12] + ".json") for i in new_ids) for f in files), files
    with Leaderboard(str(tmp_path / "fresh.db")) as lb:
        assert len(lb) == 4 and {r["record_id"] for r in lb.records()} >= new_ids


def test_suite_errors_name_the_field(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: x\nevals: [{env: a/B-v0, nn: 3}]\n")
    with pytest.raises(SuiteError, match=r"evals\[0\]: unknown key\(s\) 'nn'; valid keys: env, env_kwargs, max_steps, n, split"):
        load_suite(p)
    p.write_text("evals: [a/B-v0]\ntrain: {envs: [c/D-v0], algorithms: [grpo]}\n")
    with pytest.raises(SuiteError, match="have no entry in 'evals'"):
        load_suite(p)
    p.write_text("evals: [a/B-v0]\ntrain: {algorithms: [grpo, grpo]}\n")
    with pytest.raises(SuiteError, match="labels must be distinct"):
        load_suite(p)
    with pytest.raises(SuiteError, match="no suite file"):
        load_suite(tmp_path / "missing.yaml")


def test_bundled_suites_load():
    quick = load_suite(ROOT / "suites" / "quick.yaml")
    assert quick.name == "quick" and quick.baselines and quick.runs()
    full = load_suite(ROOT / "suites" / "full.yaml")
    assert full.name == "full" and full.runs()



def test_bundled_suite_recipes_validate_and_keep_group_env_options(tmp_path):
    """Every training run of the quick suite becomes a valid recipe; the LM group's ``env: {tasks: ...}``
    (RL on the train questions the SFT demos did not contain) survives next to the run's env id/kwargs."""
    from stratagym.bench.runner import recipe_for_run

    quick = load_suite(ROOT / "suites" / "quick.yaml")
    recipes = [recipe_for_run(quick, section, alg, env_id, seed, tmp_path / "o")
               for section in quick.train for alg in section.algorithms for env_id in section.envs for seed in (0,)]
    lm = [r for r in recipes if r.env.id == "stratagym/SearchQA-v0"]
    assert lm and all(r.env.tasks == "1500:" and r.env.kwargs["topk"] == 1 for r in lm)
    assert all(r.env.tasks is None for r in recipes if r.env.id != "stratagym/SearchQA-v0")
    p = tmp_path / "s.yaml"
    p.write_text("evals: [{env: a/B-v0}]\ntrain: {algorithms: [grpo], config: {env: {id: x}}}\n")
    with pytest.raises(SuiteError, match=r"config.env may only set 'tasks'"):
        load_suite(p)


def test_baselines_can_be_limited_to_envs_and_labelled(tmp_path):
    """A checkpoint trained for one env (the SFT LM on SearchQA) is a baseline of that env only."""
    p = tmp_path / "s.yaml"
    p.write_text("evals: [{env: a/B-v0}, {env: c/D-v0}]\n"
                 "baselines: [scripted:random, {agent: ckpt/dir, envs: [a/B-v0], label: SFT}]\n")
    b = load_suite(p).baselines
    assert [x.agent for x in b] == ["scripted:random", "ckpt/dir"]
    assert b[0].applies_to("c/D-v0") and b[1].applies_to("a/B-v0") and not b[1].applies_to("c/D-v0")
    assert b[1].label == "SFT"
    p.write_text("evals: [{env: a/B-v0}]\nbaselines: [{agent: ckpt/dir, envs: [x/Y-v0]}]\n")
    with pytest.raises(SuiteError, match="no eval entry lists"):
        load_suite(p)
    p.write_text("evals: [{env: a/B-v0}]\nbaselines: [{agent: ckpt/dir, env: a/B-v0}]\n")
    with pytest.raises(SuiteError, match=r"unknown key\(s\) 'env'; valid keys: agent, agent_options, envs, label, seeds"):
        load_suite(p)


def test_a_baseline_takes_its_own_seeds_and_agent_options(tmp_path):
    """A greedy model is evaluated on one seed (its other seeds replay the same episodes) and with its own
    options (the SmolLM2 baseline of the quick suite: dtype auto)."""
    p = tmp_path / "s.yaml"
    p.write_text("seeds: [0, 1, 2]\nevals: [{env: a/B-v0}]\n"
                 "baselines: [scripted:random, {agent: ckpt/dir, seeds: [0], agent_options: {dtype: auto}}]\n")
    b = load_suite(p).baselines
    assert b[0].seeds is None and b[0].agent_options == ()
    assert b[1].seeds == (0,) and dict(b[1].agent_options) == {"dtype": "auto"}
    p.write_text("evals: [{env: a/B-v0}]\nbaselines: [{agent: ckpt/dir, agent_options: [dtype]}]\n")
    with pytest.raises(SuiteError, match="agent_options must be a mapping"):
        load_suite(p)
    quick = [x for x in load_suite(ROOT / "suites" / "quick.yaml").baselines if "smollm2" in x.agent]
    assert quick and quick[0].seeds == (0,) and dict(quick[0].agent_options) == {"dtype": "auto"}
