"""The optional C speed-ups (``stratagym.envs._speedups``) against their pure-Python references.

Why: every twin must give exactly what the Python function gives, on any input, or a rollout would
differ depending on whether a compiler was present at install time. Hypothesis drives arbitrary
inputs (all PEP 393 string kinds, lone surrogates, controls, odd argument types); known answers pin
the BLAKE2b. A separate test fails when a compiler exists but the extension does not import, so a
broken build cannot hide behind the silent fallback. The Search-R1 parser's twins are tested in
``tests/search_qa/test_protocol_speedups.py``.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.envs import core, hashing, speedups
from stratagym.envs.core import HASH_MASK, ContextTracker, StepResult, TextEnv, combine_hashes

C = speedups._import()
needs_c = pytest.mark.skipif(C is None, reason="the C speed-ups are not built (test_extension_is_built says why)")

#: Any code point, lone surrogates included (hypothesis leaves category Cs out by default).
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
#: One character of each PEP 393 kind and the characters the hot paths treat specially.
AWKWARD = ["a", " ", "\n", "\t", "\x00", "\x07", "\x0b", "\x1f", "\x7f", "\x85", "\x9f", "\xa0", "é", "\u2003",
           "漢", "\u3000", "\ud800", "\udfff", "😀", "\U0010ffff", "?"]
TEXT = st.text(ANY_CHAR, max_size=60) | st.lists(st.sampled_from(AWKWARD), max_size=40).map("".join)


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What a call gives: ("ok", value, its type) or ("raises", the exception type)."""
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - comparing which error both sides raise
        return ("raises", type(exc))
    return ("ok", value, type(value))


def _have_compiler() -> bool:
    """A C compiler and Python's headers: what building the extension needs."""
    cc = (sysconfig.get_config_var("CC") or "").split()
    found = any(shutil.which(name) for name in ([cc[0]] if cc else []) + ["gcc", "cc", "clang"])
    include = sysconfig.get_paths().get("include") or ""
    return found and Path(include, "Python.h").is_file()


def test_extension_is_built_where_a_compiler_exists():
    if not _have_compiler():
        pytest.skip("no C compiler or Python.h here: the pure-Python fallback is expected")
    assert speedups.available(), (
        "a C compiler is present but stratagym.envs._speedups does not import: the optional build failed "
        "(see pip's output) -- rebuild with `pip install -e .`"
    )
    if not speedups.DISABLED_BY_ENV:
        assert speedups.ENABLED and hashing._digest is C.digest8


def _selection(env: dict[str, str]) -> str:
    code = ("from stratagym.envs import core, hashing, speedups\nfrom stratagym.envs.search_qa import protocol as p\n"
            "print(speedups.ENABLED, hashing._digest is hashing._digest_py, p._parse_turn_c is None, "
            "core._make_info is None, core._sanitize_str is None, hashing._stable_hash_c is None, "
            "core.ContextTracker.push_hash is core.ContextTracker._push_hash_py)")
    full_env = {k: v for k, v in os.environ.items() if k != "STRATAGYM_NO_SPEEDUPS"} | env
    done = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_environment_variable_forces_the_python_path():
    assert _selection({"STRATAGYM_NO_SPEEDUPS": "1"}) == ["False"] + ["True"] * 6


@needs_c
def test_speedups_are_used_by_default_and_with_zero():
    for env in ({}, {"STRATAGYM_NO_SPEEDUPS": "0"}, {"STRATAGYM_NO_SPEEDUPS": ""}):
        assert _selection(env) == ["True"] + ["False"] * 6


@needs_c
def test_use_switches_and_refuses_when_not_built(monkeypatch):
    before = speedups.ENABLED
    try:
        speedups.use(False)
        assert hashing._digest is hashing._digest_py and core._make_info is None
        speedups.use(True)
        assert hashing._digest is C.digest8 and core.ContextTracker.push_hash is core.ContextTracker._push_hash_c
    finally:
        speedups.use(before)
    monkeypatch.setattr(speedups, "_import", lambda: None)
    with pytest.raises(core.ConfigError, match="pip install -e"):
        speedups.use(True)


def test_a_build_from_other_sources_is_refused(monkeypatch):
    """A .so left from older sources (a pull without a reinstall) must not be half-used: the fallback
    runs, with a warning that names the rebuild."""
    import stratagym.envs as envs_package

    stale = type(sys)("stratagym.envs._speedups")
    stale.API = speedups.API - 1
    monkeypatch.setitem(sys.modules, "stratagym.envs._speedups", stale)
    monkeypatch.setattr(envs_package, "_speedups", stale, raising=False)
    with pytest.warns(RuntimeWarning, match="make setup"):
        assert speedups._import() is None
    with pytest.warns(RuntimeWarning, match="pip install -e"):
        assert not speedups.available()


@needs_c
def test_the_build_matches_this_code():
    assert C.API == speedups.API


# ---- BLAKE2b ---------------------------------------------------------------------------------------


@needs_c
def test_digest_known_answers():
    # BLAKE2b-64 of the empty string and of "abc" (hashlib's values), and a pinned stable_hash.
    assert C.digest8(b"") == int.from_bytes(bytes.fromhex("e4a6a0577479b2b4"), "little") & HASH_MASK
    assert C.digest8(b"abc") == int.from_bytes(bytes.fromhex("d8bb14d833d59559"), "little") & HASH_MASK
    for n in (0, 1, 20, 127, 128, 129, 255, 256, 257, 1000, 100_000):
        data = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
        assert C.digest8(data) == hashing._digest_py(data), n


@needs_c
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=700))
def test_digest_equals_hashlib(data):
    assert C.digest8(data) == hashing._digest_py(data)
    assert C.digest8(bytearray(data)) == C.digest8(memoryview(data)) == hashing._digest_py(data)


@needs_c
def test_digest_rejects_what_hashlib_rejects():
    for bad in ("text", 5, None, [1]):
        assert outcome(C.digest8, bad)[0] == outcome(hashing._digest_py, bad)[0] == "raises"


_SPACE_RUNS = st.lists(st.sampled_from([" ", "  ", "\n", "\t", "\x1c", "\x1f", "\x85", "\xa0", "\u2003", "\u3000",
                                         "a", "bc", "e\u0301", "\u00e9", "\u212b", "\ud800", "😀", "\x00"]),
                       max_size=80).map("".join)


@needs_c
@settings(max_examples=800, deadline=None)
@given(TEXT | _SPACE_RUNS | st.text(st.sampled_from("ab \n\t"), min_size=100, max_size=400))
def test_stable_hash_equals_python(text):
    assert C.stable_hash(text) == hashing._stable_hash_py(text) == core.stable_hash(text)


# Single-spaced ASCII with the odd run, tab or control character: the C takes 16 bytes at a time where
# nothing collapses and the byte loop elsewhere, so runs, newlines and rare characters are drawn at every
# offset of a 16-byte chunk (the padding shifts them), after a clean stretch and at the very start and end.
_MOSTLY_PLAIN = st.tuples(
    st.integers(0, 31),
    st.lists(st.sampled_from(["word", "a", "(Title:", "Doc 1", "xyzzy12345678901"]) |
             st.sampled_from([" ", " ", " ", "\n"]) |
             st.sampled_from(["  ", " \n", "\n\n", "\t", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x00", "\x07", "\x7f", "!"]),
             max_size=120),
    st.sampled_from(["", " ", "\n", "  ", "\t"]),
).map(lambda t: "x" * t[0] + "".join(t[1]) + t[2])


@needs_c
@settings(max_examples=1500, deadline=None)
@given(_MOSTLY_PLAIN | _MOSTLY_PLAIN.map(lambda s: " " + s) | _MOSTLY_PLAIN.map(lambda s: "\n" + s))
def test_stable_hash_of_mostly_plain_ascii_equals_python(text):
    assert C.stable_hash(text) == hashing._stable_hash_py(text)


@needs_c
def test_stable_hash_known_answers():
    assert C.stable_hash("") == hashing._digest_py(b"")
    assert C.stable_hash("  You are in the   middle of a room.\n") == hashing._digest_py(b"You are in the middle of a room.")
    assert C.stable_hash("e\u0301") == C.stable_hash("\u00e9") == hashing._digest_py("\u00e9".encode())
    for n in (126, 127, 128, 129, 255, 256, 257, 100_000):  # block boundaries of the streamed hash
        for text in ("x" * n, " " + "y" * n + " ", "\u00e9" * n, "😀" * (n // 4), ("ab cd\nef " * n)[:n],
                     "w " * (n // 2) + "  " + "z\n" * (n // 2)):
            assert C.stable_hash(text) == hashing._stable_hash_py(text), (n, text[:3])

    class Sub(str):
        pass

    assert core.stable_hash(Sub(" a ")) == hashing._stable_hash_py("a")
    assert outcome(C.stable_hash, b"bytes")[0] == "raises"


# ---- the context tracker ---------------------------------------------------------------------------


def _trackers(k: int) -> tuple[ContextTracker, ContextTracker]:
    py, c = ContextTracker(k), ContextTracker(k)
    py.push_hash = py._push_hash_py.__get__(py)  # type: ignore[method-assign]
    c.push_hash = c._push_hash_c.__get__(c)  # type: ignore[method-assign]
    return py, c


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.lists(st.integers(0, HASH_MASK) | st.sampled_from([0, 1, HASH_MASK, (1 << 64) - 1]),
                                   min_size=1, max_size=12))
def test_ctx_push_equals_python(k, hashes):
    py, c = _trackers(k)
    for i, h in enumerate(hashes):
        assert py.push_hash(h) == c.push_hash(h) == h
        assert c.context_hashes() == py.context_hashes() and c.state_hash == py.state_hash
        window = hashes[: i + 1]
        assert c.context_hashes() == [combine_hashes(window[len(window) - 1 - j:]) for j in range(len(c._levels))]
    py.reset(), c.reset()
    assert c.context_hashes() == py.context_hashes() == []


@needs_c
def test_ctx_push_odd_values_behave_as_in_python():
    for h in (True, -1, 1 << 64, 2.5, "x", None):
        py, c = _trackers(2)
        py.push_hash(7), c.push_hash(7)
        got, want = outcome(c.push_hash, h), outcome(py.push_hash, h)
        assert got == want
        if want[0] == "ok":
            assert c.context_hashes() == py.context_hashes()
            assert c.push_hash(9) == py.push_hash(9) and c.context_hashes() == py.context_hashes()
    for h in (-1, 1 << 64):  # both raise OverflowError, as int.to_bytes does
        assert outcome(C.ctx_push, [], h, 4) == ("raises", OverflowError)


@needs_c
def test_switching_mid_episode_keeps_the_levels():
    """``speedups.use`` may switch between pushes: the Python path rebuilds its byte cache."""
    ref, mixed = _trackers(3)
    for i, h in enumerate([5, 6, 7, 8, 9, 10]):
        ref.push_hash(h)
        (mixed._push_hash_c if i % 2 else mixed._push_hash_py)(h)
        assert mixed.context_hashes() == ref.context_hashes()


# ---- sanitize_action -------------------------------------------------------------------------------

MAX_CHARS = st.integers(-3, 80) | st.sampled_from([0, 16_384, 1 << 70, -(1 << 70)])


@needs_c
@settings(max_examples=600, deadline=None)
@given(TEXT, MAX_CHARS)
def test_sanitize_equals_python(text, max_chars):
    assert outcome(C.sanitize_str, text, max_chars) == outcome(core._sanitize_action_py, text, max_chars)
    assert outcome(core.sanitize_action, text, max_chars) == outcome(core._sanitize_action_py, text, max_chars)


@needs_c
def test_sanitize_known_answers():
    assert C.sanitize_str("a\x00b\tc\n\x7f\x85\x9fd\ud800é😀", 100) == ("ab\tc\nd?é😀", None)
    assert C.sanitize_str("\ud83d\ude00", 10) == ("??", None)  # a surrogate pair in a str is two lone ones
    assert C.sanitize_str("abc", 2) == ("", "the action is too long (3 characters; at most 2)")
    assert C.sanitize_str("", 0) == ("", None)
    text = "plain ascii"
    assert C.sanitize_str(text, 100)[0] is text  # nothing to change: the same object
    big = ("x\x01" * 300_000) + "漢"
    assert C.sanitize_str(big, 1 << 20) == core._sanitize_action_py(big, 1 << 20)


def test_sanitize_other_types_take_the_python_path():
    for action in (None, b"<search> \xff </search>", bytearray(b"ok"), 12, ["x"]):
        assert outcome(core.sanitize_action, action, 50) == outcome(core._sanitize_action_py, action, 50)

    class Sub(str):
        pass

    assert core.sanitize_action(Sub("a\x01b"), 10) == core._sanitize_action_py(Sub("a\x01b"), 10)
    assert core.sanitize_action("abc", 2.5) == core._sanitize_action_py("abc", 2.5)


# ---- the info dict ---------------------------------------------------------------------------------


class _Tiny(TextEnv):
    def task_ids(self):
        return ("t0", "t1")

    def _reset_task(self, task_id):
        return f"start {task_id}", {}

    def _step(self, action):
        return StepResult(observation=action, tool="search" if "s" in action else None, info={"echo": action})


SCALAR = st.one_of(st.booleans(), st.integers(-2, 3), st.none(), st.sampled_from(["", "x", "0.5", "nan"]),
                   st.floats(allow_nan=True))


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["search", "open", "", "é"]), st.integers(0, 9) | st.sampled_from([True, 2.0])),
       st.lists(st.integers(0, HASH_MASK), max_size=5), SCALAR, SCALAR, SCALAR,
       st.dictionaries(st.sampled_from(["query", "f1", "é", "admissible_actions", "step", "won"]), SCALAR))
def test_make_info_equals_python(tools, levels, action_valid, won, score, extra):
    env = _Tiny()
    env.reset(seed=0)
    env._tool_calls = Counter(tools)
    env._context._levels = list(levels)
    env._step_index = len(levels)
    kwargs = dict(action_valid=action_valid, won=won, score=score, extra=extra)
    want = outcome(env._info_py, **kwargs)
    got = outcome(env._info, **kwargs)
    if want[0] == "raises":
        assert got == want
        return
    # repr: NaN scores are equal as text, not as floats; key order and value types count too
    assert got[0] == "ok" and repr(list(got[1].items())) == repr(list(want[1].items()))
    assert [type(v) for v in got[1].values()] == [type(v) for v in want[1].values()]
    if _clash_free(extra):
        direct = C.make_info(env._task_id, env._step_index, action_valid, env._tool_calls, env._context._levels,
                             won, score, extra)
        assert repr(list(direct.items())) == repr(list(want[1].items()))



@needs_c
def test_make_info_holds_the_state_hash_it_stores():
    """The C read levels[0] as a borrowed reference and then allocated the dict: a collection there runs
    finalizers, and one that empties the level list freed the object before the dict stored it (a crash
    or a wrong value later). float(score) sets the stage: a fresh levels[0] (the list its only owner) and
    cyclic garbage whose finalizer clears the list, and a GC threshold of 1, so that the 3.11 GC collects on
    the info dict's allocation (the dict free list emptied first)."""
    levels, keep, when = [1 << 70], [], []
    stage = ["before"]

    class Cycle:
        def __del__(self):
            when.append(stage[0])
            levels.clear()

    class Score:
        def __float__(self):
            levels[0] = int("9" * 30)
            gc.collect()
            keep.extend([{} for _ in range(200)])  # empty the dict free list: the info dict is a GC allocation
            cycle = Cycle()
            cycle.me = cycle
            del cycle
            gc.set_threshold(1, 1000, 1000)  # the next GC allocation collects (the count is past 1 already)
            stage[0] = "in make_info"
            return 1.0

    old = gc.get_threshold()
    try:
        info = C.make_info("t", 1, True, {}, levels, False, Score(), {})
        stage[0] = "after"
    finally:
        gc.set_threshold(*old)
    [int("7" * 30) + i for i in range(1000)]  # reuse freed memory
    assert info["context_hashes"] == [1 << 70]
    if when != ["in make_info"]:
        pytest.skip(f"this Python's GC collected elsewhere ({when}): the path is not exercised")
    assert info["state_hash"] == int("9" * 30) and levels == []


def _clash_free(extra: dict[str, Any]) -> bool:
    return core._INFO_KEY_SET.isdisjoint(extra)


def test_info_through_steps_equals_python():
    env = _Tiny()
    obs, info = env.reset(seed=1)
    assert list(info.items()) == list(env._info_py(action_valid=True, won=False, score=0.0, extra={}).items())
    for action in ("s1", "x", "s2", "s3"):
        *_, info = env.step(action)
        ref = env._info_py(action_valid=True, won=False, score=0.0, extra={"echo": action})
        assert list(info.items()) == list(ref.items())
        assert info["tool_calls"] is not env._tool_calls and info["context_hashes"] is not env._context._levels
