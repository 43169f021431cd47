"""Fidelity to Search-R1 (issue 13, items 2-4): each test pins one behaviour of the original, read from its
code at commit a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06 of PeterGriffinJin/Search-R1 (see docs/fidelity.md).
"""

from __future__ import annotations

import pytest

from stratagym.envs.search_qa.env import SearchQAEnv
from stratagym.envs.search_qa.protocol import INVALID_ACTION_MESSAGE, cut_response, parse_action
from stratagym.metrics import substring_match


@pytest.fixture(scope="module")
def env():
    e = SearchQAEnv(split="test")
    yield e
    e.close()


# ---- item 2: turn semantics ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, kept",
    [
        # </search> is looked for first, wherever it is; the text after it is dropped
        ("<search>q</search> more <answer>a</answer>", "<search>q</search>"),
        ("<answer>a</answer> x <search>q</search> tail", "<answer>a</answer> x <search>q</search>"),
        # without </search>: cut at the first </answer>
        ("<answer>a</answer> then <answer>b</answer>", "<answer>a</answer>"),
        ("no tags at all", "no tags at all"),
    ],
)
def test_response_is_cut_at_first_search_then_answer_close(text, kept):
    """generation.py L61-66 (``_postprocess_responses``): ``resp.split('</search>')[0] + '</search>'`` if
    ``'</search>' in resp``, else the same with ``</answer>``, else the response unchanged."""
    assert cut_response(text) == kept
    assert parse_action(text).response == kept


@pytest.mark.parametrize(
    "text, kind, payload",
    [
        # the first complete tag pair of the cut turn is the action: an answer before a search wins
        ("<answer>Kubae</answer> <search>who rules Kubae</search>", "answer", "Kubae"),
        ("<search>who rules Kubae</search> <answer>Kubae</answer>", "search", "who rules Kubae"),
        # the old parser called a turn with both tags invalid
        ("<search>a</search><answer>b</answer>", "search", "a"),
        # a malformed closing tag never leaks into the payload: <search>..</answer> is no action
        ("<search>Kubae</answer>", "invalid", ""),
        # <search> without its closing tag, then a complete answer: the answer is the first complete pair
        ("<search>Kubae <answer>Kubae</answer>", "answer", "Kubae"),
        # tags are case-sensitive
        ("<ANSWER>Kubae</ANSWER>", "invalid", ""),
        ("<Search>Kubae</Search>", "invalid", ""),
        # the stray </search> of a turn with no <search> cuts the turn there; the answer after it is gone
        ("I will not search</search> <answer>Kubae</answer>", "invalid", ""),
    ],
)
def test_first_complete_case_sensitive_tag_pair_is_the_action(text, kind, payload):
    """generation.py L422-427 (``postprocess_predictions``): ``re.search(r'<(search|answer)>(.*?)</\\1>',
    prediction, re.DOTALL)`` on the cut response; the backreference makes ``<search>x</answer>`` no match,
    and there is no IGNORECASE flag; no match -> action ``None`` -> the invalid message (L395-401)."""
    action = parse_action(text)
    assert action.kind == kind
    if kind != "invalid":
        assert action.text == payload


def test_scored_answer_is_the_last_answer_of_the_cut_turn():
    """qa_em.py L73-82 (``extract_solution``): the scored answer is the last ``<answer>(.*?)</answer>``
    match, stripped. After the cut of generation.py L61-66 two answers survive only before a
    ``</search>``; the action is then the first answer (L423), the score uses the last."""
    action = parse_action("<answer>Kubae</answer> <answer> Paris </answer> <search>q</search>")
    assert (action.kind, action.text) == ("answer", "Paris")


def test_search_query_is_stripped_not_collapsed():
    """generation.py L425: ``content = match.group(2).strip()`` is posted as the query as it is (no length
    limit, empty allowed: L370 collects every 'search' action's content)."""
    assert parse_action("<search>  a\n  b </search>").text == "a\n  b"
    assert parse_action("<search></search>").kind == "search"
    assert parse_action("<search>" + "x" * 5000 + "</search>").kind == "search"


def test_env_acts_on_the_first_complete_tag(env):
    """generation.py L385-401 (``execute_predictions``): 'answer' ends the episode, 'search' returns the
    information block, anything else returns the fixed invalid message and the episode goes on."""
    ex = env.examples[0]
    env.reset(options={"task_id": ex.id})
    obs, r, term, trunc, info = env.step(f"<ANSWER>{ex.golden_answers[0]}</ANSWER>")
    assert obs == INVALID_ACTION_MESSAGE and r == 0.0 and not term and not info["action_valid"]
    obs, r, term, trunc, info = env.step(f"<answer>{ex.golden_answers[0]}</answer><search>more</search>")
    assert term and r == 1.0 and info["search_count"] == 0


# ---- item 3: max_turns ---------------------------------------------------------------------------------


def test_max_turns_counts_search_rounds_plus_a_final_answer_turn(env):
    """generation.py L234 (``for step in range(self.config.max_turns)``: rounds that may search) and
    L278-298 (one more generation with ``execute_predictions(..., do_search=False)``); Search-R1's scripts
    (e.g. scripts/nq_hotpotqa/v0.1/train_grpo.sh L81) pass ``max_turns=4``: 4 searches, then a 5th turn."""
    assert env.max_turns == 4 and env.max_steps == 5
    ex = env.examples[0]
    env.reset(options={"task_id": ex.id})
    for i in range(4):
        obs, r, term, trunc, info = env.step(f"<search> {ex.question} </search>")
        assert not (term or trunc) and "Doc 1(Title:" in obs
    obs, r, term, trunc, info = env.step(f"<answer> {ex.golden_answers[0]} </answer>")
    assert term and r == 1.0 and info["search_count"] == 4


def test_final_turn_search_retrieves_nothing(env):
    """generation.py L296-298 and L374-375: in the final turn ``do_search=False`` gives every search the
    result ``''``; the search still counts (``is_search`` 1, L394) and the loop ends."""
    e = SearchQAEnv(split="test", max_turns=1, retriever=env.retriever)
    e.reset(seed=0)
    e.step("<search> Kubae </search>")
    obs, r, term, trunc, info = e.step("<search> Kubae again </search>")
    assert trunc and r == 0.0 and obs == "\n\n<information></information>\n\n" and info["search_count"] == 2


# ---- item 4: substring match ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prediction, golds, expected",
    [
        ("x", ["the"], 1.0),  # normalises to '': '' in 'x' is True
        ("anything", [""], 1.0),
        ("the city of Kubae", ["kubae"], 1.0),
        ("Kuba", ["Kubae"], 0.0),
        (None, ["the"], 0.0),  # no answer extracted: compute_score_subem returns 0
    ],
)
def test_substring_match_is_subem_check(prediction, golds, expected):
    """qa_em.py L49-59 (``subem_check``): ``normalize_answer(golden) in normalize_answer(prediction)`` for
    each gold answer, with no special case for an empty normalised gold; L132-133: no answer scores 0."""
    assert substring_match(prediction, golds) == expected
