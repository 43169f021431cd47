"""Answer metrics: known SQuAD/Search-R1 values and properties that must hold for any text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.metrics import exact_match, f1, normalize_answer, substring_match


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a  cat,   AN apple  ", "cat apple"),
        ("the", ""),
        ("Theatre", "theatre"),  # articles only as whole words
        ("U.S.A.", "usa"),
        ("", ""),
    ],
)
def test_normalize_answer_known(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_known():
    assert exact_match("The Beijing.", "beijing") == 1.0
    assert exact_match("Beijing", ["Shanghai", "beijing "]) == 1.0
    assert exact_match("Beijing city", ["Beijing"]) == 0.0
    assert exact_match(None, ["x"]) == 0.0
    assert exact_match("x", []) == 0.0
    assert exact_match("x", None) == 0.0


def test_substring_match_known():
    assert substring_match("It is the city of Beijing, China", ["beijing"]) == 1.0
    assert substring_match("Bei jing", ["beijing"]) == 0.0
    assert substring_match("anything", [""]) == 1.0  # as Search-R1's subem_check: "" is in every string


def test_f1_known():
    # SQuAD: pred "the cat sat" vs gold "cat sat on mat" -> tokens cat sat / cat sat on mat: p=1, r=0.5
    assert f1("the cat sat", "cat sat on the mat") == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert f1("cat", ["dog", "cat"]) == 1.0
    assert f1("yes", "no") == 0.0
    assert f1("no", "no") == 1.0
    assert f1("yes it is", "yes") == 0.0  # HotpotQA/FlashRAG rule for yes/no answers
    assert f1("", "cat") == 0.0
    assert f1(None, "cat") == 0.0
    assert f1("cat cat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)


text = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(text, st.lists(text, max_size=4))
def test_metric_properties(pred, golds):
    em, sub, score = exact_match(pred, golds), substring_match(pred, golds), f1(pred, golds)
    for v in (em, sub, score):
        assert 0.0 <= v <= 1.0
    if em == 1.0 and normalize_answer(pred):
        assert sub == 1.0
        assert score == 1.0
    assert exact_match(pred, golds + [pred]) == 1.0  # a prediction always matches itself
    assert normalize_answer(normalize_answer(pred)) == normalize_answer(pred)  # idempotent
    # best over the list: adding answers never lowers a score
    assert f1(pred, golds + ["zzz"]) >= score


def test_single_string_equals_list():
    assert exact_match("a b", "A B") == exact_match("a b", ["A B"])
    assert f1("a b c", "b c d") == f1("a b c", ["b c d"])
