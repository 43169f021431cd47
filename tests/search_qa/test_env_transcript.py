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
    for _ in range(3):  # the third time the passages come from the env's table of formatted passages
        obs, *_, info = env.step("<search> q </search>")
        assert info["state_hash"] == stable_hash(obs)
        assert info["context_hashes"][0] == info["state_hash"]
    assert obs == information_block(format_passages(contents))
    table = PassageText()
    table.remember(contents)
    assert table.block(contents) == (obs, stable_hash(obs))  # built from the pieces


_ENV: dict[str, SearchQAEnv] = {}


if __name__ == "__main__":
    from stratagym.atomic import atomic_write

    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(GOLDEN, _canonical(transcript()) + "\n")
    print(f"wrote {GOLDEN}")
