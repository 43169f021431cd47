"""A controlled study's evaluation sets (``eval_splits``) and pre-registration (``registration``): the file
is checked field by field, the runner refuses a registered study whose file git does not hold unchanged,
the verdicts follow the registered rule on per-task outcomes (hand-computed cases), and a study stopped
part way renders as incomplete."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from stratagym.errors import ConfigError
from stratagym.studies.definitions import STUDY_DIR, get_study, load_study, study_from_dict, study_path
from stratagym.studies.preregistration import PreregistrationError
from stratagym.studies.report import registered_verdicts, verdict_lines
from stratagym.studies.runner import registration_proof, render, run_one, run_study

REGISTRATION = {
    "registered": "2026-12-02",
    "hypotheses": [{"arm": "HGPO K=2", "baseline": "GiGPO", "direction": "greater"}],
    "metrics": ["success/other"],
    "test": "permutation", "alpha": 0.05, "min_effect": 0.05, "testable_floor": 0.1,
}


def _data(**extra) -> dict:
    data = yaml.safe_load((STUDY_DIR / "context.yaml").read_text())
    data.update(name="mine", eval_splits={"other": {"data_seed": 1, "n_tasks": 3}}, registration=REGISTRATION)
    data.update(extra)
    return data


def test_the_alfworld_scorer_study_is_registered_on_both_held_out_splits():
    study = get_study("alfworld-scorer")
    assert set(study.eval_splits) == {"in_distribution", "out_of_distribution"}
    assert study.eval_splits["out_of_distribution"] == {"split": "out_of_distribution"}
    assert study.registration["metrics"] == ["success/out_of_distribution", "success/in_distribution"]
    assert [m.label for m in study.methods] == ["GRPO", "GiGPO", "HGPO K=2", "HGPO K=4"]
    assert study_path("alfworld-scorer") == STUDY_DIR / "alfworld-scorer.yaml"
    assert study_path("some/dir/x.yaml") == Path("some/dir/x.yaml")


def test_a_valid_registration_loads(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(_data()))
    study = load_study(path)
    assert study.registration == REGISTRATION and study.eval_splits == {"other": {"data_seed": 1, "n_tasks": 3}}
    assert study.to_dict()["registration"] == REGISTRATION


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["registration"].pop("min_effect"), r"registration: missing min_effect"),
        (lambda d: d["registration"].update(alpah=0.1), r"registration: unknown key\(s\) 'alpah'"),
        (lambda d: d["registration"].update(hypotheses=[{"arm": "HGPO K=9", "baseline": "GiGPO", "direction": "greater"}]),
         r"hypotheses\[0\]\.arm 'HGPO K=9' is not a method"),
        (lambda d: d["registration"].update(hypotheses=[{"arm": "GiGPO", "baseline": "GiGPO", "direction": "greater"}]),
         r"compares 'GiGPO' with itself"),
        (lambda d: d["registration"].update(hypotheses=[{"arm": "GRPO", "baseline": "GiGPO", "direction": "up"}]),
         r"direction must be greater or less"),
        (lambda d: d["registration"].update(metrics=["success/unseen"]),
         r"metrics must be a non-empty list of \['success', 'success/other'\]"),
        (lambda d: d["registration"].update(test="t-test"), r"test must be one of permutation, mcnemar"),
        (lambda d: d["registration"].update(alpha=1.5), r"alpha must be a number"),
        (lambda d: d["registration"].update(min_effect=0), r"min_effect must be a number"),
        (lambda d: d.update(eval_splits={"a/b": {}}), r"eval_splits names must be non-empty strings without '/'"),
        (lambda d: d.update(eval_splits={"other": 3}), r"eval_splits.other must be a mapping"),
    ],
)
def test_bad_registrations_name_the_field(change, expected):
    data = _data()
    data["registration"] = {k: (list(v) if isinstance(v, list) else v) for k, v in REGISTRATION.items()}
    change(data)
    with pytest.raises(ConfigError, match=expected):
        study_from_dict(data, where="mine.yaml", name="mine")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_a_registered_study_runs_only_from_a_committed_file(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    path = repo / "mine.yaml"
    path.write_text(yaml.safe_dump(_data()))
    study = load_study(path)
    with pytest.raises(PreregistrationError, match="never committed|uncommitted"):
        registration_proof(study, path)
    with pytest.raises(PreregistrationError):  # refused before any training
        run_study(study, tmp_path / "out", study_file=path, log=lambda _: None)
    assert not (tmp_path / "out").exists()
    _git(repo, "add", "mine.yaml")
    _git(repo, "commit", "-q", "-m", "register")
    proof = registration_proof(study, path)
    assert len(proof["commit"]) == 40 and proof["date"]
    path.write_text(path.read_text() + "# changed after registering\n")
    with pytest.raises(PreregistrationError, match="uncommitted changes"):
        registration_proof(study, path)
    assert registration_proof(study, path, require_commit=False) is None  # the report then says "not checked"
    plain = study.with_overrides()
    from dataclasses import replace

    assert registration_proof(replace(plain, registration={}), None) is None  # nothing to register


def _results(per_task_base, per_task_arm, seeds=(0, 1, 2), n_seeds=3, **reg):
    """Two arms with given per-task outcomes on the 'other' set, the same for every listed seed."""
    runs = []
    for s in seeds:
        for label, tasks in (("GiGPO", per_task_base), ("HGPO K=2", per_task_arm)):
            mean = sum(tasks.values()) / len(tasks)
            runs.append({"method": label, "seed": s, "seconds": 1.0, "curve": [{"iteration": 0, "success": mean}],
                         "final": {"success": mean, "success/other": mean}, "per_task": {"": tasks, "other": tasks}})
    study = {"title": "t", "methods": [{"label": "GiGPO"}, {"label": "HGPO K=2"}], "iterations": 1,
             "tasks_per_iteration": 1, "group_size": 2, "lr": 0.1, "track": [], "n_seeds": n_seeds,
             "registration": {**REGISTRATION, **reg}}
    return {"study": study, "seeds": list(range(n_seeds)), "runs": runs, "seconds": 1.0}


TASKS = [f"t{i}" for i in range(10)]


def test_verdict_reproduced_when_every_task_and_seed_improves_enough():
    v = registered_verdicts(_results({t: 0.2 for t in TASKS}, {t: 0.5 for t in TASKS}))
    assert len(v) == 1 and v[0]["verdict"] == "reproduced"
    assert v[0]["diff"] == pytest.approx(0.3) and v[0]["permutation_p"] == pytest.approx(2 / 1024)
    assert v[0]["per_seed"] == pytest.approx([0.3, 0.3, 0.3]) and v[0]["seeds"] == [0, 1, 2]


def test_verdict_refuted_when_no_difference_above_the_floor():
    v = registered_verdicts(_results({t: 0.5 for t in TASKS}, {t: 0.5 for t in TASKS}))
    assert v[0]["verdict"] == "refuted" and v[0]["diff"] == 0.0  # interval [0, 0] excludes +0.05


def test_verdict_not_testable_when_neither_arm_learned():
    base = {t: 0.0 for t in TASKS}
    arm = dict(base, t0=0.5)  # mean 0.05 < floor 0.1: nothing to compare, whatever the difference
    v = registered_verdicts(_results(base, arm))
    assert v[0]["verdict"] == "not testable" and v[0]["new"] == pytest.approx(0.05)
    assert "not testable" in verdict_lines(_results(base, arm))


def test_verdict_says_incomplete_while_a_seed_is_missing():
    v = registered_verdicts(_results({t: 0.2 for t in TASKS}, {t: 0.5 for t in TASKS}, seeds=(0, 1), n_seeds=5))
    assert v[0]["verdict"] == "incomplete (2 of 5 seeds): reproduced"
    none = _results({}, {}, seeds=(), n_seeds=5)
    assert registered_verdicts(none)[0]["verdict"] == "incomplete (0 of 5 seeds)"


def test_undecided_when_one_seed_points_the_other_way():
    res = _results({t: 0.2 for t in TASKS}, {t: 0.5 for t in TASKS})
    for r in res["runs"]:
        if r["seed"] == 2 and r["method"] == "HGPO K=2":
            r["per_task"]["other"] = {t: 0.1 for t in TASKS}
    assert registered_verdicts(res)[0]["verdict"] == "undecided"


def test_an_incomplete_study_renders_as_incomplete(tmp_path):
    res = _results({t: 0.2 for t in TASKS}, {t: 0.5 for t in TASKS}, seeds=(0,), n_seeds=5)
    res["study"].update(name="mine", eval_splits={"other": {}}, compare_to=[], extra_metrics=[])
    res["complete"] = False
    render(res, tmp_path)
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("# t\n\nSeeds 0, 1, 2, 3, 4, every finished run reported.\n\n"
                            "**Incomplete**: 2 of 10 runs finished (seeds with runs: 0). Budget per run")
    assert "success/other" in table and "incomplete (1 of 5 seeds): reproduced" in table
    assert "not checked against git" in table


def test_eval_splits_are_evaluated_beside_the_training_env():
    study = get_study("context").with_overrides(iterations=2, tasks_per_iteration=2, group_size=2, eval_every=1,
                                                eval_episodes_per_task=1, n_seeds=1)
    from dataclasses import replace

    study = replace(study, eval_splits={"other": {"data_seed": 1, "n_tasks": 3}})
    method = study.methods[1]
    a = run_one(study, method, 0, final_episodes_per_task=2)
    b = run_one(study, method, 0, final_episodes_per_task=2)
    assert [sorted(k for k in p if k.startswith("success")) for p in a.curve] == [["success", "success/other"]] * 3
    assert set(a.per_task) == {"", "other"} and len(a.per_task["other"]) == 3
    assert a.final["success/other"] == pytest.approx(sum(a.per_task["other"].values()) / 3)
    assert all(v in (0.0, 0.5, 1.0) for v in a.per_task["other"].values())  # 2 episodes per task
    assert a.curve == b.curve and a.final == b.final and a.per_task == b.per_task
    assert a.to_dict()["per_task"] == a.per_task


def test_random_win_rates_on_the_real_engine():
    """The measurement behind the alfworld-scorer design: one pass, every limit from the same episodes."""
    from stratagym.studies.alfworld_random import format_rates, random_win_rates

    a = random_win_rates("train", episodes=2, limits=(50, 5), task_types=["pick_and_place_simple"], max_games=2)
    b = random_win_rates("train", episodes=2, limits=(5, 50), task_types=["pick_and_place_simple"], max_games=2)
    assert a["per_type"] == b["per_type"] and a["limits"] == [5, 50]
    r = a["per_type"]["pick_and_place_simple"]
    assert r["episodes"] == 4 and r["wins@5"] == 0  # no pick-and-place game is won in 5 random steps
    assert 0 <= r["wins@50"] <= 4 and 4 * 5 <= a["steps"] <= 4 * 50
    assert "| pick_and_place_simple | 4 | 0 (0.000) |" in format_rates(a)


def test_a_failed_records_step_still_reports_the_runs(tmp_path):
    """The records come after every run; when they cannot be written (here: 'records' is a file, not a
    folder) the runs are still summarised and rendered, and the table says why greedy success is missing."""
    study = get_study("difficulty").with_overrides(iterations=1, tasks_per_iteration=2, group_size=2, eval_every=1,
                                                   eval_episodes_per_task=1, final_episodes_per_task=1, n_seeds=1)
    (tmp_path / "records").write_text("in the way")
    results = run_study(study, tmp_path, log=lambda _: None)
    assert "records_error" in results and "greedy_success" not in results and "complete" not in results
    assert len(results["runs"]) == len(study.methods) and results["summary"]
    table = (tmp_path / "table.md").read_text()
    assert "The leaderboard records step failed (" in table and "- GRPO:" not in table


def test_finish_results_reports_finished_runs_with_their_verdicts(tmp_path):
    from stratagym.studies.runner import finish_results

    res = _results({t: 0.2 for t in TASKS}, {t: 0.5 for t in TASKS})
    res["study"].update(name="mine", eval_splits={"other": {}}, compare_to=[], extra_metrics=[])
    finish_results(res, tmp_path)
    saved = __import__("json").loads((tmp_path / "results.json").read_text())
    assert [v["verdict"] for v in saved["verdicts"]] == ["reproduced"] and saved["summary"][1]["method"] == "HGPO K=2"
    assert "| HGPO K=2 > GiGPO | success/other |" in (tmp_path / "table.md").read_text()


def test_heldout_records_come_from_the_saved_policies_with_transcripts(tmp_path):
    """``stratagym study NAME --heldout SPLIT``: each arm's greedy record on every task of the split, from
    the finished study's saved policies (checked against results.json's hashes), with a progress file of
    transcripts; the record's agent names the same weights as the study's own record; a changed policy, an
    edited definition, an unknown split and a stopped start are refused with the fix."""
    import json
    from dataclasses import replace

    from stratagym.eval.harness import progress_path
    from stratagym.studies.runner import heldout_records, policy_dir

    study = get_study("context").with_overrides(iterations=1, tasks_per_iteration=2, group_size=2, eval_every=1,
                                                eval_episodes_per_task=1, final_episodes_per_task=1, n_seeds=2)
    study = replace(study, eval_splits={"other": {"data_seed": 1, "n_tasks": 3}}, methods=study.methods[:2])
    run_study(study, tmp_path, log=lambda _: None)
    lines: list[str] = []
    paths = heldout_records(study, tmp_path, "other", log=lines.append)
    assert [p.name for p in paths] == [f"{slug}--other.json" for slug in ("grpo", "gigpo")]
    for method, path in zip(study.methods, paths):
        rec = json.loads(path.read_text())
        own = json.loads((tmp_path / "records" / path.name.replace("--other", "")).read_text())
        assert rec["agent"]["spec"] == own["agent"]["spec"]  # the same weights (their digest is in the spec)
        assert rec["env"]["kwargs"] == {"data_seed": 1, "n_tasks": 3} != own["env"]["kwargs"]
        assert rec["n_episodes"] == 3 * 2 and sorted(rec["seeds"]) == [0, 1]  # every task, each training seed
        assert sum(1 for _ in progress_path(path).open()) == 1 + 6  # header + one transcript line per episode
    assert len(lines) == 2 and "greedy on other" in lines[0]

    with pytest.raises(ConfigError, match="no eval split 'nope'"):
        heldout_records(study, tmp_path, "nope")
    edited = replace(study, lr=study.lr * 2)  # the YAML edited after the run: its policies were not trained so
    with pytest.raises(ConfigError, match=r"another definition of study context \(fields that differ: lr\)"):
        heldout_records(edited, tmp_path, "other")
    weights = policy_dir(tmp_path, study.methods[0].label, 1) / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-8] + bytes(b ^ 0x55 for b in data[-8:]))  # the last weights changed
    with pytest.raises(ConfigError, match="run the study again"):
        heldout_records(study, tmp_path, "other")
    results = json.loads((tmp_path / "results.json").read_text())
    (tmp_path / "results.json").write_text(json.dumps({**results, "complete": False}))
    with pytest.raises(ConfigError, match="stopped start"):
        heldout_records(study, tmp_path, "other")
