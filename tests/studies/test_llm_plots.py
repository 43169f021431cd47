"""The LLM study figure: every panel with data is drawn (the registered test, strata, training logs) and
labels from study files are drawn literally."""

from __future__ import annotations

import pytest

from stratagym.studies import llm_plots


def _results(label: str) -> dict:
    c = {"diff": 0.1, "ci_low": 0.02, "ci_high": 0.18}
    return {"study": {"title": "a $study$", "strata": "hops"},
            "preregistration": {"metric": "em", "split": "test_unseen", "min_effect": 0.05},
            "seeds_done": [0, 1], "complete": False,
            "arms": {"Base": {"by_stratum": {"1": {"mean": 0.5, "n": 3}}},
                     label: {"by_stratum": {"1": {"mean": 0.7, "n": 3}, "2": {"mean": 0.1, "n": 2}}}},
            "hypotheses": [{"arm": label, "baseline": "Base", "direction": "greater", "verdict": "incomplete",
                            "per_seed": {"0": c, "1": c}, "pooled": c}]}


def test_panels_follow_the_data():
    rows = [{"step": s, "rollout/return": 0.1 * s, "groups/level0/size": 8.0, "groups/level2/size": 4.0,
             "groups/levelx/size": 1.0} for s in (1, 2, 3)]
    curves = {"Base": {0: rows, 1: rows[:2]}}
    assert llm_plots._levels(curves) == [0, 2]  # malformed level names are not levels
    assert llm_plots._has(curves, "rollout/return") and not llm_plots._has(curves, "adv/tied_groups")
    steps, values = llm_plots._series(rows, "rollout/return")
    assert steps == [1, 2, 3] and values == pytest.approx([0.1, 0.2, 0.3])


def test_a_figure_is_written_with_literal_labels(tmp_path):
    label = r"GRPO $\foo$"  # matplotlib maths would fail on the unknown command
    rows = [{"step": s, "rollout/return": 0.1 * s, "adv/tied_groups": 0.5, "groups/level0/size": 8.0} for s in (1, 2)]
    path = llm_plots.plot_llm_study(_results(label), {label: {0: rows}, "Base": {0: rows}}, tmp_path / "f.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    bare = llm_plots.plot_llm_study(_results(label), {}, tmp_path / "bare.png")  # no training logs kept
    assert bare.read_bytes()[:4] == b"\x89PNG"
