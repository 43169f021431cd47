"""SearchQA's observations and ``info`` pinned byte for byte across episodes of valid, invalid and junk turns.

Why: the env's step has fast paths (precomputed passage text and hashes, a parser fast path, a lean
``info``) that must not change a single byte of what an agent or a trainer sees. The transcript in
``data/env_transcript.json`` was recorded before those fast paths existed; every value (types too:
``true`` is not ``1``, ``1.0`` is not ``1``) must stay equal.

Regenerate only for an intended behaviour change: ``python -m tests.search_qa.test_env_transcript``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stratagym.envs.core import stable_hash
from stratagym.envs.search_qa.env import SearchQAEnv
from stratagym.envs.search_qa.protocol import PassageText, format_passages, information_block
from stratagym.envs.search_qa.retrievers.base import Hit, Retriever

GOLDEN = Path(__file__).parent / "data" / "env_transcript.json"


class _Fixed(Retriever):
    """Passages with awkward contents: non-ASCII, combining marks, no title line, empty text, control
    and Unicode whitespace, trailing blanks -- what precomputed text and hashes must get right."""

    backend = "fixed"
    CONTENTS = (
        '"Cafe\u0301 Ölm"\nThe cafe\u0301  opened\tin 1901.\u2003Owner:\u00a0Ann.',
        "no title line at all",
        '"Title only"\n',
        '"  Spaced  title "\n  text with\r\nCRLF and trailing blanks   ',
        '"\u0301combining first"\n\u0301 and \u3000 ideographic space\u2028line sep',
    )

    def batch_search(self, queries, k=3):
        out = []
        for q in queries:
            if "broken" in q:
                raise RuntimeError("index shard 3\nis   unreadable")
            start = len(q) % len(self.CONTENTS)
            picked = [self.CONTENTS[(start + i) % len(self.CONTENTS)] for i in range(k)]
            out.append([Hit(f"d{i}", c, 1.0 / (i + 1)) for i, c in enumerate(picked)])
        return out


def _record(env: SearchQAEnv, reset_options: dict[str, Any], actions: list[Any]) -> list[dict[str, Any]]:
    obs, info = env.reset(options=reset_options)
    rows = [{"obs": obs, "info": info, "types": {k: type(v).__name__ for k, v in info.items()}}]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        rows.append({"action": repr(action)[:200], "obs": obs, "reward": reward, "terminated": terminated,
                     "truncated": truncated, "info": info, "types": {k: type(v).__name__ for k, v in info.items()}})
    return rows


def transcript() -> dict[str, Any]:
    """Episodes on the bundled test split (bm25s) and on awkward passages, as JSON-able rows."""
    out: dict[str, Any] = {}
    env = SearchQAEnv(split="test")
    ex0, ex1, ex2 = env.examples[0], env.examples[1], env.examples[2]
    out["bm25s_valid_invalid_junk"] = _record(env, {"task_id": ex0.id}, [
        f"<think>first hop</think>\n<search> {ex0.oracle_queries[0]} </search>",
        "I am not sure what to do.",
        "<search>  Kubae\x07 cafe\u0301\u00a0river\t</search> trailing words",
        "<search>Kubae</answer>",
        f"<search> {ex0.oracle_queries[-1]} </search>",  # the final turn: counts, retrieves nothing
    ])
    out["bm25s_answer_then_over"] = _record(env, {"task_id": ex1.id}, [
        "<SEARCH>Kubae</SEARCH>",
        "<search></search>",
        "<search> zzzqqq xxyyzz </search>",
        f"<answer>{ex1.golden_answers[0]}</answer><search>more</search>",
        "<answer>after the end</answer>",
    ])
    out["bm25s_junk_actions"] = _record(env, {"task_index": 2}, [
        12345,
        None,
        b"<search> \xff\xfe bytes </search>",
        "x" * 20_000,
        f"<answer> wrong </answer> then <answer> {ex2.golden_answers[0].upper()}. </answer>",
    ])
    env.close()
    opts = SearchQAEnv(split="test", max_query_chars=10, accept_unclosed_tags=True, context_k=2, max_turns=2)
    out["options_unclosed_long_query"] = _record(opts, {"task_index": 3}, [
        "<search> a query much longer than ten </search>",
        "<think>cut by a stop string</think><search> Kubae",
        "<answer> unclosed answer",
    ])
    opts.close()
    fixed = SearchQAEnv(split="test", retriever=_Fixed(), topk=4, context_k=0)
    out["awkward_passages"] = _record(fixed, {"task_index": 4}, [
        "<search>a</search>",
        "<search>ab</search>",
        "<search> please be broken </search>",
        "<search>abcd</search>",
        "<answer> </answer>",
    ])
    fixed.close()
    return out


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=True, indent=1)


def test_transcript_is_unchanged():
    assert GOLDEN.exists(), "run python -m tests.search_qa.test_env_transcript to record it"
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    actual = json.loads(_canonical(transcript()))  # tuples become lists, as in the file
    for name, rows in expected.items():
        assert len(actual[name]) == len(rows), name
        for i, (want, got) in enumerate(zip(rows, actual[name])):
            assert _canonical(got) == _canonical(want), f"{name}, row {i}"
    assert set(actual) == set(expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40) | st.sampled_from(["", "\n", "a\n", "\n\u0301", " \t\n ", "\u0301\n\u0301"]),
                min_size=1, max_size=4))
def test_state_hash_is_the_hash_of_the_observation(contents):
    """Whatever the passages hold, a search step's state hash is ``stable_hash`` of its observation
    (the env may compute it from precomputed per-passage pieces; this is the contract)."""

    class Given(Retriever):
        backend = "given"

        def batch_search(self, queries, k=3):
            return [[Hit(str(i), c, 1.0) for i, c in enumerate(contents)] for _ in queries]

    env = _ENV.get("env") or _ENV.setdefault("env", SearchQAEnv(split="test", topk=4))
    env.retriever = Given()
    env.reset(options={"task_index": 0})
    for _ in range(4):  # 3rd time: from the table of formatted passages; 4th: the whole result, kept
        obs, *_, info = env.step("<search> q </search>")
        assert info["state_hash"] == stable_hash(obs)
        assert info["context_hashes"][0] == info["state_hash"]
    assert obs == information_block(format_passages(contents))
    table = PassageText()
    table.remember(contents)
    assert table.block(contents) == (obs, stable_hash(obs))  # built from the pieces


def test_whole_results_are_kept_bounded_and_exact():
    """A result met again is served whole; the store is bounded and ``clear(blocks_only=True)`` keeps
    the passages' pieces. Every answer equals the plain formatting and hash."""
    results = [["t1\nalpha", "t2\nbeta"], ["t2\nbeta", "t1\nalpha"], ["t3\ngamma  delta\n"]]

    def plain(contents):
        obs = information_block(format_passages(contents))
        return obs, stable_hash(obs)

    table = PassageText(max_blocks=2)
    for contents in results:
        table.remember(contents)
    for _ in range(3):
        for contents in results:
            assert table.block(contents) == plain(contents)
            assert len(table._blocks) <= 2  # the store starts over when full
    table.block(results[0])  # kept whole from the second time it is met (C) or once its passages are known
    first = table.block(results[0])
    assert table.block(list(results[0])) is first  # served whole: the same object
    table.clear(blocks_only=True)
    assert not table._blocks and len(table) == 3
    assert table.block(results[0]) == plain(results[0]) and table.block(results[0]) is not first


_ENV: dict[str, SearchQAEnv] = {}


if __name__ == "__main__":
    from stratagym.atomic import atomic_write

    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(GOLDEN, _canonical(transcript()) + "\n")
    print(f"wrote {GOLDEN}")
