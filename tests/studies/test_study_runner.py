"""The study machinery: statistics with known answers, a tiny study end to end through the Trainer.
(The definitions and the command: test_definitions.py.)"""

from __future__ import annotations

import json
import math

import pytest

from stratagym.eval.records import schema_problems
from stratagym.studies.definitions import Method, get_study
from stratagym.studies.report import summarize, t_interval
from stratagym.studies.runner import run_one, run_study, slug


def test_t_interval_known_answer():
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n), sd = 1
    assert m == 2.0 and lo == pytest.approx(2 - half) and hi == pytest.approx(2 + half)
    assert t_interval([0.5]) == (0.5, 0.5, 0.5)


def test_summarize_pairs_seeds():
    results = {
        "study": {"methods": [{"label": "A"}, {"label": "B"}]},
        "runs": [
            {"method": "A", "seed": 0, "final": {"success": 0.1}, "seconds": 1.0},
            {"method": "A", "seed": 1, "final": {"success": 0.5}, "seconds": 1.0},
            {"method": "B", "seed": 1, "final": {"success": 0.7}, "seconds": 1.0},
            {"method": "B", "seed": 0, "final": {"success": 0.3}, "seconds": 1.0},
        ],
    }
    rows = summarize(results, ["success"])
    assert rows[0]["success"]["per_seed"] == [0.1, 0.5]
    diff = rows[1]["success"]["diff_vs_first"]
    # paired differences are exactly 0.2 for both seeds: zero-width interval
    assert diff["mean"] == pytest.approx(0.2) and diff["ci_low"] == pytest.approx(0.2) and diff["ci_high"] == pytest.approx(0.2)


def _tiny(name: str, **kw):
    return get_study(name).with_overrides(iterations=2, tasks_per_iteration=2, group_size=2, eval_every=1,
                                          eval_episodes_per_task=1, n_seeds=2, **kw)


def test_run_one_is_deterministic_and_trains():
    study = _tiny("context")
    method = Method("HGPO K=2", "hgpo", {"gamma": 0.95}, {"context_k": 2})
    a = run_one(study, method, 0, final_episodes_per_task=1)
    b = run_one(study, method, 0, final_episodes_per_task=1)
    assert [p["iteration"] for p in a.curve] == [0, 1, 2]
    assert a.curve == b.curve and a.final == b.final


@pytest.mark.slow
def test_run_study_writes_everything(tmp_path):
    study = _tiny("difficulty")
    board = str(tmp_path / "board.db")
    results = run_study(study, tmp_path, log=lambda _: None, board=board)
    assert {p.name for p in tmp_path.iterdir()} >= {"results.json", "table.md", "curves.png", "records"}
    assert len(results["runs"]) == 2 * len(study.methods)  # every method x 2 seeds, all reported
    for method in study.methods:
        rec = json.loads((tmp_path / "records" / f"{slug(method.label)}.json").read_text())
        assert schema_problems(rec) == []
        assert rec["seeds"] == [0, 1] and rec["agent"]["algorithm"] == method.estimator
    table = (tmp_path / "table.md").read_text()
    assert "success/hard" in table and "GRPO + HA-DW" in table
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    from stratagym.leaderboard import Leaderboard

    with Leaderboard(board) as lb:
        assert len(lb) == len(study.methods)  # one validated record per method on the board


def test_parallel_runs_equal_the_sequential_ones(tmp_path):
    """Worker count must not change a result: jobs=2 trains in spawned processes, and every run, the
    order they are listed in and the summary equal jobs=1's (only wall times differ)."""
    study = _tiny("difficulty").with_overrides(n_seeds=1)
    one = run_study(study, tmp_path / "one", log=lambda _: None, records=False)
    two = run_study(study, tmp_path / "two", log=lambda _: None, records=False, jobs=2)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(two["runs"]) == strip(one["runs"]) and len(one["runs"]) == len(study.methods)
    assert strip(two["summary"]) == strip(one["summary"])


def test_a_stopped_study_resumes_to_the_results_of_one_start(tmp_path):
    """Interrupted work resumes exactly: a study stopped after its first run keeps that run (its saved
    policy, checked against its hash), trains the rest, and ends with the runs, summary and leaderboard
    records of a study run at once. A tampered policy is trained again; another definition starts afresh."""
    from stratagym.studies.runner import policy_dir

    study = _tiny("difficulty").with_overrides(n_seeds=1)
    quiet = lambda _: None  # noqa: E731
    fresh = run_study(study, tmp_path / "fresh", log=quiet)

    class Stop(Exception):
        pass

    def stop_after_first_run(line: str) -> None:
        if " seed 0: " in line:
            raise Stop

    out = tmp_path / "stopped"
    with pytest.raises(Stop):
        run_study(study, out, log=stop_after_first_run)
    stopped = json.loads((out / "results.json").read_text())
    assert stopped["complete"] is False and len(stopped["runs"]) == 1
    first = stopped["runs"][0]
    assert (policy_dir(out, first["method"], 0) / "model.safetensors").is_file()

    lines: list[str] = []
    resumed = run_study(study, out, log=lines.append)
    assert any("1 of its 1 finished runs kept" in line for line in lines)
    trained = [line for line in lines if " seed 0: " in line]
    assert len(trained) == len(study.methods) - 1  # only the runs the stopped start had not finished
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(resumed["runs"]) == strip(fresh["runs"])
    assert strip(resumed["summary"]) == strip(fresh["summary"])
    assert resumed["greedy_success"] == fresh["greedy_success"]  # the records' greedy play of the kept policy
    assert "complete" not in resumed

    # a complete study is run again, not resumed; a stopped start with a tampered policy retrains that run
    resumed["complete"] = False
    (out / "results.json").write_text(json.dumps(resumed))
    weights = policy_dir(out, first["method"], 0) / "model.safetensors"
    weights.write_bytes(b"not a safetensors file")
    lines.clear()
    again = run_study(study, out, log=lines.append, records=False)
    assert any(f"{len(study.methods) - 1} of its {len(study.methods)} finished runs kept" in line for line in lines)
    assert strip(again["runs"]) == strip(fresh["runs"])

    # a stopped start whose every run finished (stopped in the records step) trains nothing more
    again["complete"] = False
    (out / "results.json").write_text(json.dumps(again))
    lines.clear()
    done = run_study(study, out, log=lines.append, records=False)
    assert not [line for line in lines if " seed 0: " in line] and strip(done["runs"]) == strip(fresh["runs"])

    # another definition (here: its iterations) does not reuse the runs
    again["complete"] = False
    (out / "results.json").write_text(json.dumps(again))
    lines.clear()
    other = run_study(study.with_overrides(iterations=1), out, log=lines.append, records=False)
    assert any("another study; starting afresh" in line for line in lines)
    assert len([line for line in lines if " seed 0: " in line]) == len(study.methods)
    assert other["study"]["iterations"] == 1


def test_labels_cannot_break_the_markdown_table():
    """A label is user text from a study file: a '|' or a newline in it must not add cells or rows."""
    from stratagym.studies.report import markdown_table, md_cell

    assert md_cell("GRPO + HA-DW (window anchor)") == "GRPO + HA-DW (window anchor)"
    assert md_cell("a|b\nc") == "a\\|b c"
    results = {
        "study": {"methods": [{"label": "A|x"}, {"label": "B\n| y"}]},
        "runs": [{"method": m, "seed": s, "final": {"success": v}, "seconds": 1.0}
                 for m, s, v in (("A|x", 0, 0.1), ("A|x", 1, 0.2), ("B\n| y", 0, 0.3), ("B\n| y", 1, 0.5))],
    }
    table = markdown_table(summarize(results, ["success"]), ["success"], base="A|x")
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) == 2 + 2 + 2 + 1  # header+rule+2 methods, then header+rule+1 difference
    for line in rows:  # unescaped pipes delimit cells: 4 columns in the main table, 2 in the differences
        cells = line.replace("\\|", "").count("|") - 1
        assert cells in (4, 2), line


def test_labels_are_drawn_literally_in_the_curves(tmp_path):
    """A label with ``$...$`` is drawn as written: matplotlib would parse it as maths, and ``$\\foo$`` (an
    unknown command) would fail the whole figure."""
    from stratagym.studies.report import plot_curves

    results = {"study": {"title": "t $x$", "methods": [{"label": r"A $\foo$"}, {"label": "B"}]},
               "runs": [{"method": m, "seed": s, "curve": [{"iteration": i, "success": 0.1 * i} for i in range(3)]}
                        for m in (r"A $\foo$", "B") for s in (0, 1)]}
    path = plot_curves(results, [("success", "success")], tmp_path / "curves.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
