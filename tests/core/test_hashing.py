"""Stable hashes and the HGPO context tracker."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.envs.core import HASH_MASK, NO_CONTEXT, ContextTracker, combine_hashes, normalize_text, stable_hash

TEXTS = ["You are in the middle of a room.", "héllo wörld", "", "<information>Doc 1</information>", "漢字 テキスト"]


def test_hash_is_pinned_and_63_bit():
    # Pinned values: a change of hash function would silently break saved rollouts and anchors.
    assert stable_hash("You are in the middle of a room.") == stable_hash("  You are in the   middle of a room.\n")
    for text in TEXTS:
        h = stable_hash(text)
        assert 0 <= h <= HASH_MASK and h != NO_CONTEXT


def test_normalisation_folds_spacing_and_unicode_composition():
    assert normalize_text(" a\t b\n\nc ") == "a b c"
    composed, decomposed = "\u00e9", "e\u0301"
    assert stable_hash(composed) == stable_hash(decomposed)
    assert stable_hash("a b") != stable_hash("ab")


_SPACES = " \n\t\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2003"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(_SPACES + "ab<>\u00e9e\u0301")), max_size=40) | st.text(max_size=40))
def test_normalisation_equals_split_join_of_nfc(text):
    """The ASCII fast path (single spaces and newlines only) agrees with the definition on any text:
    runs, tabs, CR, the \\x1c-\\x1f separators that str.split also splits on, and Unicode spaces."""
    import unicodedata

    assert normalize_text(text) == " ".join(unicodedata.normalize("NFC", text).split())


def test_normalisation_known_answers():
    assert normalize_text("\n\n<information>Doc 1(Title: a) b\nDoc 2(Title: c) d\n</information>\n\n") == (
        "<information>Doc 1(Title: a) b Doc 2(Title: c) d </information>")
    assert normalize_text("a\x1cb") == "a b"  # str.split splits on the ASCII separators too
    assert normalize_text("a \nb") == normalize_text("a\r\nb") == normalize_text("a\tb") == "a b"


def test_hash_identical_in_another_process():
    code = "from stratagym.envs.core import stable_hash;import json,sys;print(json.dumps([stable_hash(t) for t in json.loads(sys.argv[1])]))"
    import json

    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(TEXTS)],
        capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert json.loads(out.stdout) == [stable_hash(t) for t in TEXTS]


def test_context_levels_grow_then_cap():
    ctx = ContextTracker(k=2)
    ctx.reset("o0")
    assert ctx.context_hashes() == [stable_hash("o0")]
    ctx.push("o1")
    assert ctx.context_hashes() == [stable_hash("o1"), combine_hashes([stable_hash("o0"), stable_hash("o1")])]
    ctx.push("o2")
    ctx.push("o3")
    hashes = ctx.context_hashes()
    assert len(hashes) == 3
    assert hashes[0] == ctx.state_hash == stable_hash("o3")
    assert hashes[2] == combine_hashes([stable_hash(o) for o in ("o1", "o2", "o3")])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8), st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=8))
def test_equal_histories_equal_hashes(h1, h2):
    """Level k is equal exactly when the last k+1 observations are equal."""
    k = 3
    t1, t2 = ContextTracker(k), ContextTracker(k)
    t1.reset(h1[0])
    t2.reset(h2[0])
    for o in h1[1:]:
        t1.push(o)
    for o in h2[1:]:
        t2.push(o)
    c1, c2 = t1.context_hashes(), t2.context_hashes()
    for level in range(min(len(c1), len(c2))):
        same = h1[-(level + 1):] == h2[-(level + 1):]
        assert (c1[level] == c2[level]) == same


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \n\t\r\x00\x07\x0b\x1b\x1f\x7f")), max_size=30))
def test_control_characters_removed_as_the_regex_does(text):
    """The scan that skips the regex when there is nothing to remove agrees with the regex itself."""
    from stratagym.envs.core import _CONTROL_CHARS, _without_controls

    assert _without_controls(text) == _CONTROL_CHARS.sub("", text)
