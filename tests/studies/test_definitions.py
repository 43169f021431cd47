"""Study definitions are YAML files in suites/studies/: each one is the definition the committed results in
studies/ were run with, the committed reports re-render identically from them, and a bad file fails with a
message that names the file, the field and the valid choices (exit 2 from the CLI, no traceback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stratagym.errors import ConfigError
from stratagym.studies.definitions import (
    STUDY_DIR,
    Study,
    get_study,
    legacy_study_dict,
    load_studies,
    load_study,
    study_from_dict,
    study_names,
)
from stratagym.studies.runner import SCORER_CLASS, recipe_for, rerender, slug

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies"
COMMITTED = sorted(p.parent.name for p in RESULTS.glob("*/results.json"))

#: Fields added to the definition after the first committed runs (search-strata, difficulty, context at
#: 80fd5e4). Those runs were made with the value given here where it changes the runs: ``run_one``'s
#: fixed ``final_episodes_per_task=16`` and an evaluation on every task (git show 80fd5e4:
#: stratagym/studies/runner.py, line 107), and with no evaluation set but the training env's and no registration
#: (``eval_splits``, ``registration``: added for alfworld-scorer), with a goal-blind scorer started from
#: random weights (``goal``, ``warm_start``: added for alfworld-warm). The others only choose what the
#: report shows (None: any value).
ADDED_LATER = {"final_episodes_per_task": 16, "eval_tasks": None, "prediction": None, "extra_metrics": None,
               "compare_to": None, "eval_splits": {}, "registration": {}, "goal": False, "warm_start": {}}


def _plain(value):
    """JSON's view of a value (tuples become lists), as results.json stores it."""
    return json.loads(json.dumps(value))


def test_one_yaml_per_committed_study_and_nothing_else():
    assert len(COMMITTED) >= 9 and set(COMMITTED) <= set(study_names())
    # a registered study is committed before its runs (the commit is the registration's proof), so it is the
    # one kind of study file that may have no results yet
    pending = [n for n in study_names() if n not in COMMITTED]
    assert all(get_study(n).registration for n in pending), pending
    assert STUDY_DIR == ROOT / "suites" / "studies"


@pytest.mark.parametrize("name", COMMITTED)
def test_yaml_is_the_definition_the_committed_results_were_run_with(name):
    study = get_study(name)
    results = json.loads((RESULTS / name / "results.json").read_text())
    recorded = legacy_study_dict(results["study"])
    mine = _plain(study.to_dict())
    for key, value in recorded.items():
        assert mine[key] == value, f"{name}: {key} is {mine[key]!r} in the YAML but {value!r} in results.json"
    missing = set(mine) - set(recorded)
    assert missing <= set(ADDED_LATER), missing
    for key in missing:
        if key in ("final_episodes_per_task", "eval_tasks", "eval_splits", "registration", "goal", "warm_start"):
            assert getattr(study, key) == ADDED_LATER[key], (name, key)
    # the runs themselves: seeds 0..n-1 for every method, nothing else
    assert results["seeds"] == list(range(study.n_seeds))
    runs = {(r["method"], r["seed"]) for r in results["runs"]}
    assert runs == {(m.label, s) for m in study.methods for s in range(study.n_seeds)}
    # the leaderboard records of each method carry the training recipe and the env's kwargs (a study whose
    # records step failed part way says why in results.json and has records for the methods before the
    # failure only: alfworld-scorer, a full disk before HGPO K=4's record)
    methods = study.methods
    if "records_error" in results:
        methods = [m for m in study.methods if m.label in results.get("greedy_success", {})]
        assert {p.stem for p in (RESULTS / name / "records").glob("*.json")} == {slug(m.label) for m in methods}
    for method in methods:
        rec = json.loads((RESULTS / name / "records" / f"{slug(method.label)}.json").read_text())
        training = rec["training"]
        assert training["study"] == name and training["estimator"] == method.estimator
        assert training["estimator_kwargs"] == _plain(method.estimator_kwargs)
        for key in ("iterations", "tasks_per_iteration", "group_size", "lr"):
            assert training[key] == getattr(study, key), (name, method.label, key)
        assert (training["policy"]["hidden"], training["policy"]["memory"]) == (study.hidden, study.memory)
        assert rec["env"]["id"] == study.env
        assert rec["env"]["kwargs"] == _plain({**study.env_kwargs, **method.env_kwargs})
        assert rec["seeds"] == list(range(study.n_seeds))


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_report_rerenders_byte_for_byte(name, tmp_path):
    shutil.copy(RESULTS / name / "results.json", tmp_path / "results.json")
    rerender(get_study(name), tmp_path)
    assert (tmp_path / "table.md").read_bytes() == (RESULTS / name / "table.md").read_bytes()
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_arms_differ_only_in_estimator_and_context_k(tmp_path):
    for study in load_studies().values():
        recipes = [recipe_for(study, m, 0, str(tmp_path)).to_dict() for m in study.methods]
        assert all(r["policy"]["class"] == SCORER_CLASS for r in recipes)
        for r in recipes:
            del r["name"], r["algorithm"]["estimator"], r["algorithm"]["estimator_kwargs"]
            r["env"]["kwargs"].pop("context_k", None)
        assert all(r == recipes[0] for r in recipes), study.name


# ---- validation ---------------------------------------------------------------------------------------

def _base() -> dict:
    return yaml.safe_load((STUDY_DIR / "context.yaml").read_text())


def _write(tmp_path: Path, data: dict, name: str = "mine") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(iteratons=3), r"unknown key\(s\) 'iteratons'; valid keys: claim, compare_to, env, "),
        (lambda d: d["methods"][1].update(options={"gamma": 0.9}),
         r"methods\[1\]: unknown key\(s\) 'options'; valid keys: env_kwargs, estimator, estimator_kwargs, label"),
        (lambda d: d["methods"][0].update(recipe={"optim": {"lr": 1}}), r"methods\[0\]: unknown key\(s\) 'recipe'"),
        (lambda d: d.update(iterations=0), r"iterations must be a positive integer, got 0"),
        (lambda d: d.update(n_seeds="5"), r"n_seeds must be a positive integer, got '5'"),
        (lambda d: d.update(requires_env="yes"), r"requires_env must be true or false"),
        (lambda d: d.update(lr=float("nan")), r"lr must be a positive number"),
        (lambda d: d.update(track="best_doors"), r"track must be a list of strings"),
        (lambda d: d["methods"][0].update(estimator="grpoo"), r"methods\[0\]: unknown estimator 'grpoo'; registered: "),
        (lambda d: d["methods"][1].update(estimator_kwargs={"gama": 0.9}),
         r"methods\[1\]: gigpo: unknown option\(s\) \['gama'\]; valid: \["),
        (lambda d: d["methods"][1].update(label="GRPO"), r"methods: labels must be distinct"),
        (lambda d: d.update(compare_to=["GIGPO"]), r"compare_to names \['GIGPO'\], which are not methods"),
        (lambda d: d.update(name="other"), r"name 'other' differs from the file name 'mine'"),
        (lambda d: d.pop("env"), r"missing env"),
        (lambda d: d.update(methods=[]), r"methods must be a non-empty list"),
    ],
)
def test_bad_files_name_the_field_and_the_valid_choices(tmp_path, change, expected):
    data = _base()
    data.pop("name")
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError, match=expected) as info:
        load_study(path)
    assert str(path) in str(info.value)


def test_unreadable_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_study(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="a study is a mapping"):
        load_study(bad)
    with pytest.raises(ConfigError, match="cannot read study file"):
        load_study(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match=r"unknown study 'nope'; studies: alfworld-context, alfworld-scorer, alfworld-warm, context, "):
        get_study("nope")


def test_safe_load_only(tmp_path):
    """A Python tag is data, never code: safe_load refuses it."""
    path = tmp_path / "evil.yaml"
    path.write_text("title: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_study(path)


@settings(max_examples=40, deadline=None)
@given(
    n_seeds=st.integers(1, 20), iterations=st.integers(1, 500), tasks=st.integers(1, 64), group=st.integers(1, 32),
    lr=st.floats(1e-6, 1.0), memory=st.integers(0, 8), eval_tasks=st.none() | st.integers(1, 100),
    alpha=st.floats(0.0, 1.0),
)
def test_to_dict_round_trips(n_seeds, iterations, tasks, group, lr, memory, eval_tasks, alpha):
    """A study written out as plain data (results.json's ``study``, or a YAML file) reads back equal."""
    base = get_study("search-strata")
    methods = (base.methods[0], type(base.methods[1])("S", "stratified", {"alpha": alpha}))
    study = base.with_overrides(n_seeds=n_seeds, iterations=iterations, tasks_per_iteration=tasks, group_size=group,
                                lr=lr, memory=memory, eval_tasks=eval_tasks, methods=methods)
    data = yaml.safe_load(yaml.safe_dump(_plain(study.to_dict())))
    again = study_from_dict(data, where="<memory>")
    assert again == study and isinstance(again, Study)


# ---- the command ---------------------------------------------------------------------------------------

def _cli(args):
    from stratagym.cli import _load_plugins, app

    _load_plugins()
    return CliRunner().invoke(app, args)


def test_cli_lists_every_yaml():
    res = _cli(["study", "list"])
    assert res.exit_code == 0, res.output
    for name in COMMITTED:
        assert name in res.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["study", "nope"], "unknown study 'nope'; studies: alfworld-context"),
        (["study", "nope", "--report-only", "--out", "{tmp}"], "unknown study 'nope'"),
        (["study", "context", "--report-only", "--out", "{tmp}"], "results.json: run the study first"),
        (["study", "{tmp}/typo.yaml"], "unknown key(s) 'group'; valid keys:"),
        (["study", "{tmp}/noenv.yaml", "--no-records"], "env stratagym/NoSuch-v0 is not a registered env"),
        (["study", "context", "--seeds", "-1"], "--seeds and --iterations must be >= 0"),
    ],
)
def test_cli_user_errors_exit_2_without_traceback(tmp_path, args, expected):
    data = _base()
    data.pop("name")
    _write(tmp_path, {**data, "group": 3}, "typo")
    _write(tmp_path, {**data, "env": "stratagym/NoSuch-v0"}, "noenv")
    res = _cli([a.replace("{tmp}", str(tmp_path)) for a in args])
    assert res.exit_code == 2, res.output
    assert expected in res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)


def test_cli_report_only_rerenders_the_committed_table(tmp_path):
    shutil.copy(RESULTS / "context" / "results.json", tmp_path / "results.json")
    res = _cli(["study", "context", "--report-only", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "table.md").read_text() == (RESULTS / "context" / "table.md").read_text()
