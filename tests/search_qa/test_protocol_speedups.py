"""The Search-R1 parser's C twins and a whole SearchQA transcript with and without the C speed-ups.

Why: ``parse_turn`` decides what every turn means; its C twin (``stratagym.envs._speedups``) must agree
with the Python reference on any text -- tags at the edges, nested and mismatched tags, unclosed tags,
every PEP 393 string kind, lone surrogates, Unicode whitespace around the content -- and the env must
produce byte-identical observations and infos (hashes included) whichever path runs.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.envs import hashing, speedups
from stratagym.envs.search_qa import protocol
from stratagym.envs.search_qa.env import PASSAGE_TABLE, SearchQAEnv

from tests.core.test_speedups import ANY_CHAR, outcome
from tests.search_qa.test_env_transcript import transcript

C = speedups._import()
pytestmark = pytest.mark.skipif(C is None, reason="the C speed-ups are not built (tests/core/test_speedups.py)")

FRAGMENTS = ["<search>", "</search>", "<answer>", "</answer>", "<search", "</answer", "<SEARCH>", "<", ">", "/",
             "search", "answer", "<think>", "</think>", " ", "\n", "\t", "\x0b", "\x1c", "\x85", "\xa0", "\u2003",
             "\u3000", "q", "é", "漢", "😀", "\ud800", "\udc00", "\x00"]
TURN = st.lists(st.sampled_from(FRAGMENTS) | st.text(ANY_CHAR, max_size=4), max_size=24).map("".join)
MAX_QUERY = st.none() | st.integers(-2, 12) | st.sampled_from([1 << 70, 2.5, float("nan"), True, False])
ACCEPT = st.booleans() | st.sampled_from([0, 1, "", "yes", None])


@settings(max_examples=1500, deadline=None)
@given(TURN, MAX_QUERY, ACCEPT)
def test_parse_turn_equals_python(text, max_query_chars, accept):
    want = outcome(protocol._parse_turn_py, text, max_query_chars=max_query_chars, accept_unclosed_tags=accept)
    assert outcome(C.parse_turn, text, max_query_chars, accept) == want
    assert outcome(protocol.parse_turn, text, max_query_chars=max_query_chars, accept_unclosed_tags=accept) == want


@settings(max_examples=800, deadline=None)
@given(TURN)
def test_pieces_equal_python(text):
    assert C.cut_response(text) == protocol.cut_response(text)
    assert C.first_action(text) == protocol._first_action(text)
    assert C.close_unclosed_tag(text) == protocol.close_unclosed_tag(text)


PASSAGE = st.lists(st.sampled_from(["\n", " ", "  ", "\t", "\u3000", "\xa0", "Title", "é", "e\u0301", "漢", "😀",
                                    "\ud800", "(", ")", "\x1c"]) | st.text(ANY_CHAR, max_size=6), max_size=14).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(PASSAGE, min_size=1, max_size=6), st.integers(0, 6), st.booleans())
def test_assemble_block_equals_python(contents, known, as_tuple):
    """Passages in the table (the first ``known`` of them; ``_add`` puts them in) are joined exactly as
    the Python loop joins them, which is ``information_block(format_passages(...))`` and its hash."""
    table = protocol.PassageText()
    for content in contents[:known]:
        table._add(content)
    seq = tuple(contents) if as_tuple else contents
    got, want = C.assemble_block(table._pieces, seq), table._assemble(seq)
    assert got == want
    if want is not None:
        observation = protocol.information_block(protocol.format_passages(contents))
        assert want == (observation, protocol.stable_hash(observation))


def test_assemble_block_edges():
    table = protocol.PassageText()
    many = [f"t{i}\nbody {i}" for i in range(64)]
    table.remember(many)
    assert C.assemble_block(table._pieces, many) == table._assemble(many)  # "Doc 10" .. "Doc 64"
    for odd in ([], many + ["x"], iter(many[:2]), "ab"):
        assert C.assemble_block(table._pieces, odd) is NotImplemented
    table._pieces["bad"] = ("a", "a", "not bytes")
    assert C.assemble_block(table._pieces, ["bad"]) is NotImplemented
    assert C.assemble_block(table._pieces, [many[0], "never met"]) is None
    assert outcome(C.assemble_block, {}, [["unhashable"]]) == outcome(protocol.PassageText()._assemble, [["unhashable"]])



def _same_str(a: str, b: str) -> bool:
    """Equal, and built the same way: a str's PEP 393 kind follows its widest character, and a string of
    a wider kind than its characters need compares unequal to its canonical twin (its size tells)."""
    return a == b and sys.getsizeof(a) == sys.getsizeof(b) and a.isascii() == b.isascii()


@settings(max_examples=1500, deadline=None)
@given(st.lists(PASSAGE, min_size=1, max_size=12), st.booleans())
def test_format_block_equals_python(contents, as_tuple):
    """``_speedups.format_block`` writes ``information_block(format_passages(contents))`` straight from the
    contents and hashes it: the same text (and string kind) and the same ``stable_hash``."""
    seq = tuple(contents) if as_tuple else contents
    observation = protocol.information_block(protocol.format_passages(contents))
    got = C.format_block(seq)
    assert got == (observation, hashing._stable_hash_py(observation))
    assert _same_str(got[0], observation)
    assert protocol.format_block(contents) == got  # the Python reference


def test_format_block_known_answers_and_edges():
    cases = {
        ("t1\nalpha", "t2\nbeta"): "Doc 1(Title: t1) alpha\nDoc 2(Title: t2) beta",
        ("no newline",): "Doc 1(Title: no newline)",  # partition: all title, no text; ") " stripped to ")"
        ("t\n  \t\n",): "Doc 1(Title: t)",  # an all-whitespace text goes with the space after ")"
        ("t\nx  \n", "u\n"): "Doc 1(Title: t) x  \n\nDoc 2(Title: u)",  # inner whitespace stays
        ("",): "Doc 1(Title: )",
        ("t\na\nb",): "Doc 1(Title: t) a\nb",  # only the first newline splits
        ("é\nx\u3000",): "Doc 1(Title: é) x",  # the widest character stripped: a Latin-1 string, not UCS-2
        ("x\n😀 \u3000",): "Doc 1(Title: x) 😀",
    }
    for contents, body in cases.items():
        observation = f"\n\n<information>{body}</information>\n\n"
        got = C.format_block(list(contents))
        assert got == (observation, hashing._stable_hash_py(observation)) and _same_str(got[0], observation)
    many = [f"t{i}\nbody {i}" for i in range(64)]
    assert C.format_block(many) == protocol.format_block(many)  # "Doc 10" .. "Doc 64"

    class Sub(str):
        pass

    for odd in ([], many + ["x"], iter(many[:2]), "ab", ["a", 1], [Sub("t\nx")], [b"t\nx"], None, {"a": 1}):
        assert C.format_block(odd) is NotImplemented


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["t1\nalpha", "t2\nbeta é", "t3\n  ", "t4", "t5\nx\u3000"]),
                         min_size=0, max_size=4), max_size=12), st.integers(1, 3))
def test_passage_table_blocks_are_the_same_with_and_without_the_speedups(results, max_blocks):
    """``PassageText.block`` answers the same whichever path runs (C: formatted from the contents, kept
    whole from the second meeting; Python: joined from the passage table), however the results recur."""
    before = speedups.ENABLED
    try:
        answers = {}
        for flag in (True, False):
            speedups.use(flag)
            table = protocol.PassageText(max_entries=4, max_blocks=max_blocks)
            answers[flag] = [table.block(contents) for contents in results + results[::-1] + results]
    finally:
        speedups.use(before)
    assert answers[True] == answers[False] == [protocol.format_block(c) for c in results + results[::-1] + results]


def test_assemble_block_survives_keys_that_change_the_list_or_the_table():
    """A content's __eq__ runs Python code in the middle of the lookups: the C held neither the list's items
    nor the pieces found so far (a crash: the emptied list's items were read, a replaced piece was used
    after it was freed). It now holds both and hands a list that shrank to the Python loop."""

    class ClearsTheList:
        def __hash__(self):
            return hash("a")

        def __eq__(self, other):
            contents.clear()
            return True

    contents = [ClearsTheList(), "a", "a"]
    assert C.assemble_block({"a": ("A", "A", b"a")}, contents) is NotImplemented

    shown = "".join(["A"] * 50) + chr(0xE9)  # built at run time: the table holds the only reference
    pieces = {"a": (shown, shown, shown.encode()), "b": ("B", "B", b"b")}
    del shown
    calls = []

    class ReplacesAPiece:
        def __hash__(self):
            return hash("b")

        def __eq__(self, other):
            calls.append(other)
            if len(calls) == 1:
                pieces["a"] = ("new", "new", b"new")  # frees the piece already found for "a"
                [bytes(200) for _ in range(200)]  # and reuses its memory
            return True

    text, digest = C.assemble_block(pieces, ["a", ReplacesAPiece()])
    old = "A" * 50 + "\u00e9"
    assert text == f"\n\n<information>Doc 1{old}Doc 2B</information>\n\n"
    assert digest == hashing._digest_py(b"<information>Doc 1" + old.encode() + b" Doc 2b</information>")


KNOWN = [
    ("<search> q </search>", ("search", "q", "<search> q </search>")),
    ("<answer>a</answer><search>q</search>", ("answer", "a", "<answer>a</answer><search>q</search>")),
    ("<search>x</answer>", ("invalid", protocol._NO_ACTION, "<search>x</answer>")),
    ("<answer> a </answer> and <answer>\u3000b\xa0</answer>", ("answer", "a", "<answer> a </answer>")),
    ("<answer> a </answer><answer>\u3000b\xa0</answer></search>", ("answer", "b", "<answer> a </answer><answer>\u3000b\xa0</answer></search>")),
    ("<answer>1</answer><answer>2</answer></search>", ("answer", "2", "<answer>1</answer><answer>2</answer></search>")),
    ("<search><answer>x</answer></search>", ("search", "<answer>x</answer>", "<search><answer>x</answer></search>")),
    ("", ("invalid", protocol._NO_ACTION, "")),
    ("<search></search>", ("search", "", "<search></search>")),
    ("\ud800<search>\ud800 😀 </search>tail", ("search", "\ud800 😀", "\ud800<search>\ud800 😀 </search>")),
]


def test_known_answers():
    for text, want in KNOWN:
        assert C.parse_turn(text, None, False) == protocol._parse_turn_py(text) == want, text
    assert C.parse_turn("<search> abcdef </search>", 3, False)[1] == "the search query is too long (6 > 3 characters)"
    assert C.parse_turn("think <search> q", None, True) == ("search", "q", "think <search> q</search>")
    assert C.parse_turn("<search> q <answer> a", None, True) == ("answer", "a", "<search> q <answer> a</answer>")
    assert C.parse_turn("<search> q", None, False)[0] == "invalid"


def test_huge_turns_and_tags_at_the_edges():
    body = "漢" * 50_000 + "\ud800" + "x" * 50_000
    for text in (f"<search>{body}</search>", f"{body}<answer>{body}</answer>", "<search>" * 10_000 + "</answer>",
                 "<answer>" * 5_000 + "</answer>" * 5_000, f"<search>{body}", f"{body}</search>",
                 "</search>" + "<search>q</search>" * 1000):
        for mq in (None, 10, 1 << 20):
            for accept in (False, True):
                assert C.parse_turn(text, mq, accept) == protocol._parse_turn_py(
                    text, max_query_chars=mq, accept_unclosed_tags=accept)


def test_str_subclasses_take_the_python_path():
    class Sub(str):
        def find(self, *args: Any) -> int:  # a subclass may change what the parser sees
            return -1

    text = Sub("<search> q </search>")
    assert protocol.parse_turn(text) == protocol._parse_turn_py(text)
    assert outcome(C.parse_turn, text, None, False)[0] == "raises"  # the twin takes exact str only


def _episodes(use_c: bool) -> dict[str, Any]:
    speedups.use(use_c)
    PASSAGE_TABLE.clear()
    return transcript()


def test_episodes_are_identical_with_and_without_the_speedups():
    before = speedups.ENABLED
    try:
        runs = {flag: _episodes(flag) for flag in (True, False, True)}  # True twice: the table warm the second time
    finally:
        speedups.use(before)
    ref = runs[False]
    for got in runs.values():
        assert repr(got) == repr(ref)  # values, key order, types (1 vs 1.0 vs True), hashes
        for name in ref:
            assert [list(row["info"]) for row in got[name]] == [list(row["info"]) for row in ref[name]]


def test_random_episodes_are_identical_with_and_without_the_speedups():
    import numpy as np

    before = speedups.ENABLED
    out = {}
    try:
        for flag in (True, False):
            speedups.use(flag)
            env = SearchQAEnv(split="test", context_k=3, max_turns=3)
            rng, rows = np.random.default_rng(7), []
            for episode in range(25):
                obs, info = env.reset(seed=episode)
                rows.append((obs, info))
                done = False
                while not done:
                    action = env.random_action(rng, info)
                    obs, reward, terminated, truncated, info = env.step(action)
                    rows.append((action, obs, reward, terminated, truncated, info))
                    done = terminated or truncated
            env.close()
            out[flag] = repr(rows)
    finally:
        speedups.use(before)
    assert out[True] == out[False]
