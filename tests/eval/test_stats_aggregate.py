"""Metric aggregation against hand-computed cases; CI properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.eval.aggregate import aggregate, primary_metric
from stratagym.eval.stats import across_seeds, bootstrap_interval, mean, proportion, wilson_interval


def ep(task, seed=0, won=False, score=0.0, reward=None, turns=1, searches=0, valid=None, **extra):
    return {
        "task_id": task, "seed": seed, "won": won, "score": score,
        "total_reward": score if reward is None else reward, "turns": turns, "search_count": searches,
        "valid_actions": turns if valid is None else valid, "truncated": False, "extra": extra,
    }


def test_wilson_known_values():
    # Textbook values (Wilson 1927 / Newcombe 1998): 0 of 10 -> [0, 0.2775]; 5 of 10 -> [0.2366, 0.7634].
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 200), st.integers(1, 200))
def test_wilson_contains_p_and_stays_in_unit_interval(k, n):
    k = min(k, n)
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_bootstrap_is_deterministic_and_brackets_the_mean():
    x = np.arange(20, dtype=float)
    a = bootstrap_interval(x, seed=3)
    assert a == bootstrap_interval(x, seed=3)
    assert a[0] < x.mean() < a[1]
    # the bootstrap CI of a mean is close to mean +- 1.96 * sd / sqrt(n)
    half = 1.96 * x.std(ddof=0) / math.sqrt(x.size)
    assert a[0] == pytest.approx(x.mean() - half, abs=0.6)
    assert a[1] == pytest.approx(x.mean() + half, abs=0.6)
    assert bootstrap_interval([2.0, 2.0, 2.0]) == (2.0, 2.0)
    assert mean([]).n == 0


def test_across_seeds_mean_and_sample_std():
    s = across_seeds([0.5, 0.7, 0.9])
    assert (s.mean, s.n_seeds, s.min, s.max) == (pytest.approx(0.7), 3, 0.5, 0.9)
    assert s.std == pytest.approx(0.2)  # sample std of 0.5, 0.7, 0.9
    assert across_seeds([0.3]).std == 0.0


def test_generic_aggregate_by_hand():
    eps = [
        ep("a", won=True, score=1.0, turns=2, searches=1),
        ep("b", won=False, score=0.0, turns=4, searches=3, valid=2),
        ep("c", won=True, score=1.0, turns=2, searches=1),
        ep("d", won=False, score=0.5, turns=4, searches=0, valid=3),
    ]
    agg = aggregate(eps, env_id="stratagym/SearchStrata-v0")
    m = agg.metrics
    assert m["success"].value == 0.5 and m["success"].n == 4 and m["success"].method == "wilson"
    assert (m["success"].ci_low, m["success"].ci_high) == pytest.approx(wilson_interval(2, 4))
    assert m["score"].value == pytest.approx(0.625)
    assert m["mean_reward"].value == pytest.approx(0.625)
    assert m["search_count"].value == pytest.approx(1.25)
    assert m["turns"].value == pytest.approx(3.0)
    assert m["valid_ratio"].value == pytest.approx((1 + 0.5 + 1 + 0.75) / 4)
    assert agg.distributions["search_count"] == {"0": 1, "1": 2, "3": 1}
    assert agg.distributions["turns"] == {"2": 2, "4": 2}
    for est in m.values():
        assert est.ci_low <= est.value <= est.ci_high


def test_webshop_score_is_mean_reward_times_100_and_success_is_score_one():
    eps = [ep("a", score=1.0), ep("b", score=0.5), ep("c", score=0.75), ep("d", score=1.0)]
    m = aggregate(eps, env_id="stratagym/WebShop-v0").metrics
    assert m["webshop_score"].value == pytest.approx(81.25)
    assert m["webshop_score"].ci_high <= 100.0
    assert m["success"].value == 0.5  # two of four reached score 1
    assert primary_metric("stratagym/WebShop-v0") == "webshop_score"


def test_alfworld_per_task_type_and_distribution():
    eps = [
        ep("g1", won=True, task_type="pick_and_place", split="valid_seen"),
        ep("g2", won=False, task_type="pick_and_place", split="valid_seen"),
        ep("g3", won=True, task_type="look_at_obj", split="valid_unseen"),
        ep("g4", won=True, task_type="look_at_obj", split="valid_unseen"),
        ep("g5", won=False, task_type="clean", split="valid_unseen"),
    ]
    m = aggregate(eps, env_id="stratagym/ALFWorld-v0").metrics
    assert m["success"].value == pytest.approx(3 / 5)
    assert m["success/pick_and_place"].value == 0.5 and m["success/pick_and_place"].n == 2
    assert m["success/look_at_obj"].value == 1.0
    assert m["success/clean"].value == 0.0
    assert m["success_in_distribution"].value == 0.5 and m["success_in_distribution"].n == 2
    assert m["success_out_of_distribution"].value == pytest.approx(2 / 3)
    # the eval's split is used when episodes do not carry their own
    m2 = aggregate([ep("x", won=True)], env_id="stratagym/ALFWorld-v0", split="valid_unseen").metrics
    assert m2["success_out_of_distribution"].value == 1.0 and "success_in_distribution" not in m2


def test_qa_metrics_from_env_info():
    eps = [
        ep("q1", won=True, em=1.0, f1=1.0, substring_em=1.0),
        ep("q2", won=False, em=0.0, f1=0.5, substring_em=1.0),
        ep("q3", won=False, em=0.0, f1=0.0, substring_em=0.0),
    ]
    m = aggregate(eps, env_id="stratagym/SearchQA-v0").metrics
    assert m["em"].value == pytest.approx(1 / 3) and m["em"].method == "wilson"
    assert m["substring_em"].value == pytest.approx(2 / 3)
    assert m["f1"].value == pytest.approx(0.5) and m["f1"].method == "bootstrap"
    assert primary_metric("stratagym/SearchQA-v0") == "em"  # from its EnvSpec


def test_across_seed_spread_in_aggregate():
    eps = [ep("a", seed=0, won=True), ep("b", seed=0, won=True), ep("a", seed=1, won=False), ep("b", seed=1, won=True)]
    agg = aggregate(eps, env_id="x/Toy-v0")
    assert agg.per_seed["0"]["success"] == 1.0 and agg.per_seed["1"]["success"] == 0.5
    s = agg.across_seeds["success"]
    assert s.mean == 0.75 and s.n_seeds == 2 and s.std == pytest.approx(math.sqrt(0.125))
    assert agg.metrics["success"].value == 0.75 and agg.metrics["success"].n == 4


def test_proportion_of_empty_and_aggregate_of_nothing():
    assert math.isnan(proportion([]).value)
    with pytest.raises(ValueError):
        aggregate([], env_id="x/Toy-v0")


def test_an_envs_own_numeric_record_keys_become_metrics():
    """A new env gets metric columns from its spec alone: every numeric ``record_info_keys`` value is
    aggregated (booleans as a Wilson rate, numbers as a bootstrap mean); text and dicts are not."""
    eps = [ep("a", won=True), ep("b", won=False), ep("c", won=True)]
    for e, (hit, cost) in zip(eps, [(True, 2.0), (False, 4.0), (True, 3.0)]):
        e["extra"].update({"hit": hit, "cost": cost, "note": "text", "detail": {"x": 1}})
    m = aggregate(eps, env_id="x/Toy-v0").metrics
    assert m["hit"].value == pytest.approx(2 / 3) and m["hit"].method == "wilson"
    assert m["cost"].value == pytest.approx(3.0) and m["cost"].method == "bootstrap"
    assert "note" not in m and "detail" not in m
