"""Run-level statistics (unit: the training seed) and rliable's estimators, pinned to hand-computed
values and to the definitions of Agarwal et al. 2021 as rliable 1.2.0 implements them
(rliable/metrics.py: ``aggregate_iqm`` line 61, ``probability_of_improvement`` lines 73-95;
rliable/library.py: ``StratifiedBootstrap.update_indices`` lines 114-122, percentile intervals)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from stratagym.eval.run_level import (iqm, is_binary, paired_matrices, performance_profile, probability_of_improvement,
                                      run_level_reading, seed_interval, stratified_bootstrap)


def test_the_seed_level_interval_of_the_issue_example():
    # Stratified GRPO vs GRPO (studies/llm/stratified-smollm2-hops): per-seed differences +0.230, +0.110, +0.015;
    # the issue quotes +0.118 [-0.149, +0.386] over the three seeds: mean 0.1183, sd 0.1077, t(2) 4.303
    m, lo, hi = seed_interval([0.230, 0.110, 0.015])
    assert round(m, 3) == 0.118 and round(lo, 3) == -0.149 and round(hi, 3) == 0.386
    m, lo, hi = seed_interval([0.5])
    assert m == 0.5 and math.isnan(lo) and math.isnan(hi)  # one run says nothing about the spread between runs


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm(np.array([[1, 2, 3, 4], [5, 6, 7, 8]])) == 4.5  # (3 + 4 + 5 + 6) / 4
    assert iqm(np.array([[0, 0, 0, 100]])) == 0.0  # the outlier is trimmed; the mean would say 25


def test_probability_of_improvement_by_hand():
    # one task: X's runs 1, 0 against Y's 0, 0: pairs (1>0, 1>0, 0=0, 0=0) -> (2 + 0.5 * 2) / 4
    assert probability_of_improvement(np.array([[1.0], [0.0]]), np.array([[0.0], [0.0]])) == 0.75
    # identical runs on a task: one half (rliable's special case agrees with U / (n m))
    assert probability_of_improvement(np.array([[1.0, 3.0]]), np.array([[1.0, 2.0]])) == 0.75  # (0.5 + 1) / 2


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 5), st.integers(0, 10_000))
def test_probability_of_improvement_is_mann_whitney_u_averaged_over_tasks(nx, ny, tasks, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, size=(nx, tasks)).astype(float)
    y = rng.integers(0, 3, size=(ny, tasks)).astype(float)
    expected = []
    for t in range(tasks):
        if np.array_equal(x[:, t], y[:, t]):
            expected.append(0.5)
        else:
            expected.append(stats.mannwhitneyu(x[:, t], y[:, t], alternative="greater").statistic / (nx * ny))
    assert probability_of_improvement(x, y) == pytest.approx(float(np.mean(expected)))
    assert probability_of_improvement(x, y) + probability_of_improvement(y, x) == pytest.approx(1.0)


def test_performance_profile_counts_scores_strictly_above():
    assert performance_profile(np.array([[0, 1, 1, 2]]), [0, 1, 1.5]) == [0.75, 0.25, 0.25]


def test_the_stratified_bootstrap_resamples_runs_within_each_task():
    # every run scores alike on each task: no resample can move the mean
    same = np.tile(np.array([[0.0, 1.0, 1.0]]), (3, 1))
    assert stratified_bootstrap([same], np.mean, reps=200) == (2 / 3, 2 / 3, 2 / 3)
    # paired: new = base + 0.1 on every (run, task): the difference's interval is a point
    rng = np.random.default_rng(0)
    base = rng.random((3, 20))
    v, lo, hi = stratified_bootstrap([base, base + 0.1], lambda b, n: float(np.mean(n - b)), reps=300)
    assert v == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
    # deterministic for a seed, and a task's values never move to another task: column 1 is all ones
    cols = np.array([[0.0, 1.0], [0.5, 1.0]])
    assert stratified_bootstrap([cols], lambda a: float(a[:, 1].min()), reps=100) == (1.0, 1.0, 1.0)
    assert stratified_bootstrap([base], iqm, reps=100, seed=3) == stratified_bootstrap([base], iqm, reps=100, seed=3)
    with pytest.raises(ValueError, match="one shape"):
        stratified_bootstrap([base, base[:, :5]], np.mean)


def test_run_level_reading_of_a_paired_comparison():
    pairs = [({"a": 0.0, "b": 1.0, "c": 0.0}, {"a": 1.0, "b": 1.0, "c": 0.0, "extra": 1.0}),
             ({"a": 0.0, "b": 0.0, "c": 1.0}, {"a": 1.0, "b": 1.0, "c": 1.0})]
    base, new = paired_matrices(pairs)
    assert base.tolist() == [[0, 1, 0], [0, 0, 1]] and new.tolist() == [[1, 1, 0], [1, 1, 1]]  # tasks a, b, c
    r = run_level_reading(base, new, reps=200)
    assert r["unit"] == "seed" and (r["n_seeds"], r["n_tasks"]) == (2, 3)
    assert r["seed_diff"]["per_seed"] == pytest.approx([1 / 3, 2 / 3]) and r["seed_diff"]["mean"] == pytest.approx(0.5)
    assert r["diff_mean"]["value"] == pytest.approx(0.5) and r["new_mean"]["value"] == pytest.approx(5 / 6)
    # P(new > base) per task: a: new (1, 1) vs base (0, 0) -> 1; b: (1, 1) vs (1, 0) -> 0.75; c: (0, 1) vs (0, 1) -> 0.5
    assert r["p_improvement"]["value"] == pytest.approx((1 + 0.75 + 0.5) / 3)
    assert is_binary(base, new) and not is_binary(np.array([0, 2]))
