"""Paired comparisons (stratagym.eval.paired): every p-value and difference below is computed by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.errors import UserError
from stratagym.eval.paired import (
    PairedComparison,
    PairedError,
    compare,
    compare_seeds,
    decide,
    mcnemar_exact,
    outcomes_by_task,
    sign_flip_test,
)


def test_mcnemar_exact_by_hand():
    # 1 win, 4 losses: 2 * (C(5,0) + C(5,1)) / 2^5 = 12 / 32
    assert mcnemar_exact(1, 4) == pytest.approx(0.375)
    assert mcnemar_exact(4, 1) == pytest.approx(0.375)
    # 0 wins, 6 losses: 2 * 1 / 64
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)
    # balanced: 2 * (1 + 6 + 15 + 20) / 64 > 1, capped
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_mcnemar_matches_the_smollm2_figures_in_llm_learning():
    # docs/llm-learning.md, SmolLM2 RL table: GRPO 54 won / 78 lost -> p 0.045; Stratified 55 / 83 -> 0.021
    assert round(mcnemar_exact(54, 78), 3) == 0.045
    assert round(mcnemar_exact(55, 83), 3) == 0.021


def test_sign_flip_exact_by_hand():
    # [1, 2, 3]: only all-plus and all-minus reach |mean| 2: 2 of 8 assignments
    assert sign_flip_test([1, 2, 3]) == pytest.approx(0.25)
    # [3, -1, 1]: sums 5, 3, 3, 1, -1, -3, -3, -5; |sum| >= 3 in 6 of 8
    assert sign_flip_test([3, -1, 1]) == pytest.approx(0.75)
    assert sign_flip_test([1, -1]) == 1.0
    assert sign_flip_test([0, 0, 0]) == 1.0
    assert sign_flip_test([]) == 1.0


def test_sign_flip_monte_carlo_counts_the_observed_assignment():
    # 30 equal differences: only 2 of 2^30 assignments reach the observed mean, so no random one does
    assert sign_flip_test([1.0] * 30, n_perm=20_000) == pytest.approx(1 / 20_001)
    # deterministic for a seed
    d = [0.5, -1, 1, 1, 0, 1, -0.5, 1] * 3
    assert sign_flip_test(d, exact_up_to=4, seed=3) == sign_flip_test(d, exact_up_to=4, seed=3)


def test_compare_one_seed_by_hand():
    base = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}
    new = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0, "e": 1.0}  # e is not in base: not paired
    c = compare(base, new)
    assert c.n == 4 and c.base == 0.5 and c.new == 0.75 and c.diff == pytest.approx(0.25)
    assert (c.wins, c.losses) == (2, 1)
    assert c.mcnemar_p == 1.0  # 2 * (1 + 3) / 8
    assert c.permutation_p == 1.0  # +-1 +-1 +-1 always has |sum| >= 1
    assert c.ci_low <= c.diff <= c.ci_high
    assert c.per_seed == [pytest.approx(0.25)]


def test_compare_seeds_by_hand():
    s0 = ({"q1": 0.0, "q2": 0.0, "q3": 1.0}, {"q1": 1.0, "q2": 0.0, "q3": 1.0})
    s1 = ({"q1": 0.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}, {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 1.0})
    c = compare_seeds([s0, s1])
    # q4 is missing from seed 0: tasks q1..q3; per task: q1 (1+1)/2, q2 0, q3 (0-1)/2
    assert c.n == 3
    assert c.diff == pytest.approx((1.0 + 0.0 - 0.5) / 3)
    assert c.base == pytest.approx(3 / 6) and c.new == pytest.approx(4 / 6)
    assert c.per_seed == [pytest.approx(1 / 3), pytest.approx(0.0)]
    assert (c.wins, c.losses) == (2, 1)
    # per-task differences [1, 0, -0.5]: |sum| >= 0.5 for +-1 +-0.5 in all 4 sign pairs (x2 for the zero)
    assert c.permutation_p == 1.0


def test_records_and_errors_are_user_errors():
    rec = {"episodes": [
        {"task_id": "t1", "seed": 0, "won": True, "extra": {"em": 1.0}},
        {"task_id": "t1", "seed": 1, "won": False, "extra": {"em": 0.0}},
        {"task_id": "t2", "seed": 0, "won": False, "extra": {"em": 0.0}},
    ]}
    assert outcomes_by_task(rec, "em") == {"t1": 0.5, "t2": 0.0}
    assert outcomes_by_task(rec, "won") == {"t1": 0.5, "t2": 0.0}
    assert outcomes_by_task(rec, "em", by_seed=True) == {"t1#0": 1.0, "t1#1": 0.0, "t2#0": 0.0}
    with pytest.raises(PairedError, match="f1_typo"):
        outcomes_by_task(rec, "f1_typo")
    with pytest.raises(UserError, match="share no task"):
        compare({"a": 1.0}, {"b": 1.0})
    with pytest.raises(PairedError):
        compare_seeds([])


def _c(diff, lo, hi, p, per_seed):
    return PairedComparison(n=100, base=0.5, new=0.5 + diff, diff=diff, ci_low=lo, ci_high=hi, wins=0, losses=0,
                            mcnemar_p=p, permutation_p=p, per_seed=per_seed)


def test_decide_follows_the_preregistered_rule():
    kw = dict(direction="greater", test="permutation", alpha=0.05, min_effect=0.03)
    assert decide(_c(0.06, 0.02, 0.10, 0.01, [0.05, 0.07, 0.06]), **kw) == "reproduced"
    # one seed the other way: not reproduced, and the interval still allows the effect
    assert decide(_c(0.06, 0.02, 0.10, 0.01, [0.05, 0.15, -0.02]), **kw) == "undecided"
    # significant but smaller than the registered effect, interval below it: refuted
    assert decide(_c(0.01, 0.005, 0.02, 0.01, [0.01, 0.01, 0.01]), **kw) == "refuted"
    # the opposite sign, significant: refuted
    assert decide(_c(-0.08, -0.12, -0.04, 0.001, [-0.1, -0.07, -0.07]), **kw) == "refuted"
    # wide interval, not significant: undecided
    assert decide(_c(0.02, -0.05, 0.09, 0.4, [0.0, 0.05, 0.01]), **kw) == "undecided"
    # direction less mirrors greater
    assert decide(_c(-0.06, -0.10, -0.02, 0.01, [-0.05, -0.07, -0.06]), **{**kw, "direction": "less"}) == "reproduced"
    with pytest.raises(ValueError):
        decide(_c(0.0, 0.0, 0.0, 1.0, [0.0]), **{**kw, "direction": "up"})


outcome_maps = st.dictionaries(st.sampled_from([f"q{i}" for i in range(12)]), st.sampled_from([0.0, 1.0]),
                               min_size=1)


@settings(max_examples=40, deadline=None)
@given(outcome_maps, st.randoms(use_true_random=False))
def test_swapping_the_arms_negates_the_difference_and_keeps_the_p_values(base, rnd):
    new = {k: rnd.choice([0.0, 1.0]) for k in base}
    ab, ba = compare(base, new), compare(new, base)
    assert ab.diff == pytest.approx(-ba.diff)
    assert (ab.wins, ab.losses) == (ba.losses, ba.wins)
    assert ab.mcnemar_p == ba.mcnemar_p and ab.permutation_p == pytest.approx(ba.permutation_p)
    same = compare(base, base)
    assert same.diff == 0 and same.mcnemar_p == 1.0 and same.permutation_p == 1.0
    assert 0.0 <= ab.mcnemar_p <= 1.0 and not math.isnan(ab.permutation_p)
