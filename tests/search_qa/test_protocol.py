"""The Search-R1 turn parser and formatters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.envs.search_qa.protocol import (
    STOP_STRINGS,
    format_passages,
    format_prompt,
    information_block,
    parse_action,
    question_from_prompt,
)


@pytest.mark.parametrize(
    "text, kind, payload",
    [
        ("<think>hmm</think><search> capital of  France </search>", "search", "capital of  France"),
        ("<search>a</search> then <search>b</search>", "search", "a"),  # first search, as Search-R1 stops there
        ("<answer> Paris </answer>", "answer", "Paris"),
        ("<answer>x</answer> no, <answer>Paris</answer>", "answer", "x"),  # the turn is cut at its first </answer>
        ("<answer></answer>", "answer", ""),
        ("<search>   </search>", "search", ""),  # Search-R1 posts the empty query
        ("multi\nline <search>a\nb</search>", "search", "a\nb"),  # stripped, not collapsed, as Search-R1
    ],
)
def test_parse_valid(text, kind, payload):
    action = parse_action(text)
    assert (action.kind, action.text) == (kind, payload)


@pytest.mark.parametrize(
    "text, kind, payload",
    [
        ("<think>stop string stripped</think><search> who rules Kubae", "search", "who rules Kubae"),
        ("<think>x</think><answer> Kubae", "answer", "Kubae"),
    ],
)
def test_parse_unclosed_tags_only_when_asked(text, kind, payload):
    assert parse_action(text).kind == "invalid"  # Search-R1 needs the closing tag
    action = parse_action(text, accept_unclosed_tags=True)
    assert (action.kind, action.text) == (kind, payload)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("I think the answer is Paris.", "no complete"),
        ("", "no complete"),
        ("<ANSWER>Paris</ANSWER>", "no complete"),
        ("<search>" + "x" * 600 + "</search>", "too long"),
        ("<think>only thinking</think>", "no complete"),
    ],
)
def test_parse_invalid(text, reason):
    action = parse_action(text, max_query_chars=512)
    assert action.kind == "invalid"
    assert reason in action.problem


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/searchnswt ab\n")) | st.characters(), max_size=200))
def test_parse_never_raises(text):
    action = parse_action(text, max_query_chars=512)
    assert action.kind in {"search", "answer", "invalid"}
    if action.kind == "search":
        assert len(action.text) <= 512 and action.text == action.text.strip()
    assert text.startswith(action.response)


def test_formatting_matches_search_r1():
    assert STOP_STRINGS == ("</search>", "</answer>")
    body = format_passages(['"Kubae"\nKubae is a city.', '"Festival"\nA fair.\nSecond line.'])
    assert body == 'Doc 1(Title: "Kubae") Kubae is a city.\nDoc 2(Title: "Festival") A fair.\nSecond line.\n'
    assert information_block(body) == f"\n\n<information>{body.strip()}</information>\n\n"
    prompt = format_prompt("Who rules Kubae")
    assert prompt.endswith("Question: Who rules Kubae?\n")
    assert question_from_prompt(prompt) == "Who rules Kubae?"


_TAG_PIECES = ["<search>", "</search>", "<answer>", "</answer>", "<search", "answer>", "</", "<", ">", "q", " ", "\n"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_TAG_PIECES), max_size=12).map("".join) | st.text(max_size=30))
def test_action_finder_is_the_search_r1_pattern(text):
    """The str.find scan returns what Search-R1's pattern (``<(search|answer)>(.*?)</\\1>``, DOTALL,
    first match) returns, on tag soups: unclosed, mismatched, nested and repeated tags."""
    from stratagym.envs.search_qa.protocol import _ACTION, _first_action

    m = _ACTION.search(text)
    assert _first_action(text) == ((m.group(1), m.group(2)) if m else (None, ""))


@pytest.mark.parametrize("text, expected", [
    ("<answer>a<search>q</search>", ("search", "q")),  # the unclosed answer is skipped
    ("<search>a<search>b</search>", ("search", "a<search>b")),  # lazy: up to the first closing tag
    ("<search>x</answer><answer>y</answer>", ("answer", "y")),
    ("<search></search>", ("search", "")),
    ("</search><search>", (None, "")),
])
def test_action_finder_known_answers(text, expected):
    from stratagym.envs.search_qa.protocol import _first_action

    assert _first_action(text) == expected
