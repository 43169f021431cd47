"""`stratagym leaderboard compare`: a record paired against its baseline per task, and several records (one per
training seed) read over runs as well: figures computed by hand, the refusals, and the command's messages."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from stratagym.eval.records import finalize_record
from stratagym.leaderboard.compare import CompareError, compare_metric, pair_baselines, protocol_differences, report_lines

from .lb_helpers import make_record

SFT = [1, 0, 0, 1, 0, 0, 1, 0, 0, 0]     # 0.3
RL_0 = [1, 1, 0, 1, 0, 1, 1, 0, 0, 0]    # 0.5: better on tasks 1 and 5
RL_1 = [0, 1, 1, 1, 0, 0, 1, 0, 0, 0]    # 0.4: better on 1 and 2, worse on 0


def _edited(record: dict, fn) -> dict:
    rec = copy.deepcopy(record)
    fn(rec)
    rec.pop("record_id", None)
    return finalize_record(rec)


def test_one_record_against_its_baseline_gives_the_paired_difference_by_hand():
    sft, rl = make_record("sft", SFT), make_record("rl", RL_0)
    res = compare_metric(pair_baselines([sft], [rl]), "won")
    (c,) = res.per_record
    assert (c.n, c.base, c.new, c.diff, c.wins, c.losses) == (10, 0.3, 0.5, pytest.approx(0.2), 2, 0)
    assert c.mcnemar_p == pytest.approx(0.5)  # two discordant tasks, both one way: 2 * 0.5**2
    assert res.binary and res.pooled is None and res.run_level is None and res.unpaired_tasks == 0
    text = "\n".join(report_lines(res))
    assert "0.300 -> 0.500, difference +0.200" in text and "better in 2 tasks, worse in 0" in text
    assert "McNemar p 0.5" in text and "unit: the task" in text and "over training runs" not in text


def test_two_seeds_read_over_tasks_and_over_runs():
    sft = make_record("sft", SFT)
    res = compare_metric(pair_baselines([sft], [make_record("rl-s0", RL_0), make_record("rl-s1", RL_1)]), "won")
    assert [c.diff for c in res.per_record] == [pytest.approx(0.2), pytest.approx(0.1)]
    assert res.pooled.diff == pytest.approx(0.15) and (res.pooled.wins, res.pooled.losses) == (4, 1)
    sd = res.run_level["seed_diff"]
    # two runs, differences 0.2 and 0.1: mean 0.15, s = 0.0707, t(0.975, 1) = 12.706, half-width 12.706 * 0.05
    assert sd["mean"] == pytest.approx(0.15) and sd["per_seed"] == [pytest.approx(0.2), pytest.approx(0.1)]
    assert sd["ci_high"] - sd["mean"] == pytest.approx(12.7062 * 0.05, rel=1e-4)
    assert res.run_level["unit"] == "seed" and res.run_level["n_seeds"] == 2
    text = "\n".join(report_lines(res))
    assert "over training runs (unit: the run, 2 runs" in text and "per run +0.200, +0.100" in text
    pooled_line = next(line for line in text.splitlines() if "records, each task's difference averaged" in line)
    assert "(run, task) pairs" in pooled_line and "McNemar" not in pooled_line  # runs are not independent draws
    assert "IQM" not in text  # 0/1 outcomes: the IQM only rounds the mean


def test_scores_that_are_not_binary_show_the_iqm_and_no_mcnemar():
    sft = make_record("sft", SFT)
    half = _edited(make_record("rl", RL_0), lambda r: [e.update(score=0.5 * e["score"] + 0.25) for e in r["episodes"]])
    res = compare_metric(pair_baselines([sft], [half, make_record("rl-s1", RL_1)]), "score")
    assert not res.binary
    text = "\n".join(report_lines(res))
    assert "IQM baseline" in text and "McNemar" not in text


def test_each_seed_may_have_its_own_baseline_paired_in_order():
    a0, a1 = make_record("sft-s0", SFT), make_record("sft-s1", RL_1)
    pairs = pair_baselines([a0, a1], [make_record("rl-s0", RL_0), make_record("rl-s1", RL_1)])
    res = compare_metric(pairs, "won")
    assert [c.diff for c in res.per_record] == [pytest.approx(0.2), pytest.approx(0.0)]
    with pytest.raises(CompareError, match="3 baselines for 2 records"):
        pair_baselines([a0, a1, a0], [a0, a1])
    with pytest.raises(CompareError, match="at least one record"):
        pair_baselines([a0], [])


def test_records_of_other_tasks_or_protocols_are_refused_with_the_fix():
    sft, rl = make_record("sft", SFT), make_record("rl", RL_0)
    with pytest.raises(CompareError, match="not evaluations of the same tasks .*split: default vs test"):
        protocol_differences([(sft, make_record("rl", RL_0, split="test"))], across_protocols=True)
    other = _edited(rl, lambda r: r["env"].update(kwargs={"max_steps": 3}))
    with pytest.raises(CompareError, match="--across-protocols"):
        protocol_differences([(sft, other)], across_protocols=False)
    assert protocol_differences([(sft, other)], across_protocols=True) == [
        f"sft ({sft['record_id'][:12]}) vs rl ({other['record_id'][:12]}): max_steps None vs 3"]
    assert protocol_differences([(sft, rl)], across_protocols=False) == []
    with pytest.raises(CompareError, match="no episode of the record has 'nope'"):
        compare_metric([(sft, rl)], "nope")


def test_tasks_missing_from_a_record_are_counted_and_left_out():
    sft = make_record("sft", SFT)
    short = _edited(make_record("rl", RL_0), lambda r: r.update(episodes=r["episodes"][:8]))
    res = compare_metric([(sft, short)], "won")
    assert res.per_record[0].n == 8 and res.unpaired_tasks == 2
    assert "2 task(s) are not in every record" in "\n".join(report_lines(res))


def test_the_command_prints_both_units_writes_json_and_fails_cleanly(tmp_path):
    from stratagym.cli import _load_plugins, app

    _load_plugins()
    paths = {}
    for name, wins in (("sft", SFT), ("rl0", RL_0), ("rl1", RL_1)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(make_record(name, wins)))
    out = CliRunner().invoke(app, ["leaderboard", "compare", str(paths["rl0"]), str(paths["rl1"]), "--base", str(paths["sft"]),
                                   "-m", "won", "--json", str(tmp_path / "c.json")])
    assert out.exit_code == 0, out.output
    assert "unit: the task" in out.output and "unit: the run, 2 runs" in out.output
    saved = json.loads((tmp_path / "c.json").read_text())
    (won,) = saved["metrics"]
    assert won["metric"] == "won" and won["pooled"]["diff"] == pytest.approx(0.15)
    assert [r["diff"] for r in won["per_record"]] == [pytest.approx(0.2), pytest.approx(0.1)]
    assert all(r["unit"] == "task" for r in won["per_record"]) and won["run_level"]["unit"] == "seed"
    assert not math.isnan(won["run_level"]["seed_diff"]["ci_low"])
    bad = subprocess.run([sys.executable, "-m", "stratagym.cli", "leaderboard", "compare", str(paths["rl0"]),
                          "--base", str(tmp_path / "nope.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stdout + bad.stderr
    assert "no result record" in bad.stdout + bad.stderr


def test_changed_episodes_are_those_whose_outcome_moved_in_the_baselines_order():
    from stratagym.leaderboard.compare import changed_episodes

    sft, rl1 = make_record("sft", SFT), make_record("rl1", RL_1)
    tasks = [e["task_id"] for e in sft["episodes"]]
    # RL_1 wins tasks 1 and 2 that SFT lost and loses task 0 that SFT won (the module's table)
    assert changed_episodes(sft, rl1, "won") == [(tasks[0], 0, 1.0, 0.0), (tasks[1], 0, 0.0, 1.0), (tasks[2], 0, 0.0, 1.0)]
    assert changed_episodes(sft, sft, "won") == []


def test_changes_lists_the_moved_goals_with_both_records_actions_from_the_committed_archives():
    """`compare --changes` on two committed board rows (no progress file: the transcript archives), the GiGPO
    WebShop adapter of seed 0 against the SFT adapter it started from (docs/llm-learning.md, "What changed")."""
    from pathlib import Path

    from stratagym.cli import _load_plugins, app

    _load_plugins()
    root = Path(__file__).resolve().parents[2]
    (sft,) = root.glob("leaderboard/records/*__3930915f749e.json")
    (rl,) = root.glob("leaderboard/records/*__86db11403b92.json")
    out = CliRunner().invoke(app, ["leaderboard", "compare", str(rl), "--base", str(sft), "-m", "score", "--changes",
                                   "--archives", str(root / "leaderboard" / "transcripts")])
    assert out.exit_code == 0, out.output
    assert "the 4 episode(s)" in out.output
    assert [line.split(":")[0].strip() for line in out.output.splitlines() if "(seed 0):" in line] == [
        "webshop-2 (seed 0)", "webshop-58 (seed 0)", "webshop-64 (seed 0)", "webshop-66 (seed 0)"]
    assert "baseline: search[keto friendly and gluten free dark chocolate with flavor raspberry] | click[b0l17kwgn0] | click[almond] | click[buy now]" in out.output
    assert "new:      search[keto friendly and gluten free dark chocolate with flavor raspberry] | click[b0l17kwgn0] | click[raspberry] | click[buy now]" in out.output
