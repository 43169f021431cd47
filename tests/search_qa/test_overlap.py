"""Train/test overlap: the audit (answers, supporting passages, near-duplicate questions), its CLI, the
env's per-episode ``overlap`` flag and EM on the overlapping and non-overlapping parts of an eval."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from stratagym import cli
from stratagym.envs.core import ConfigError
from stratagym.envs.search_qa.data import load_qa
from stratagym.envs.search_qa.overlap import audit_dataset, near_duplicates, overlap_flags, train_source
from stratagym.metrics import normalize_answer


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def tiny_dataset(tmp_path):
    """A FlashRAG-style folder whose overlaps are known by hand (see each question's comment)."""
    d = tmp_path / "tiny"
    d.mkdir()
    _write(d / "train.jsonl", [
        {"id": "tr0", "question": "Who wrote Hamlet?", "golden_answers": ["The Shakespeare!"],
         "metadata": {"supporting_doc_ids": ["d1", "d2"]}},
        {"id": "tr1", "question": "p q r s", "golden_answers": ["Paris"],
         "metadata": {"supporting_facts": {"title": ["France", "Paris"], "sent_id": [0, 1]}}},
        {"id": "tr2", "question": "which river flows through lyon", "golden_answers": ["Rhone"]},
    ])
    _write(d / "test.jsonl", [
        # answer: "shakespeare" after normalisation; passages: d1 in train, d3 not; question: exact duplicate
        {"id": "te0", "question": "who wrote hamlet", "golden_answers": ["Marlowe", "shakespeare"],
         "metadata": {"supporting_doc_ids": ["d1", "d3"]}},
        # answer no; passages: both titles support tr1 (HotpotQA-style facts as [title, sent] pairs); question:
        # plain Jaccard {p,q,r,s} vs {p,q,r,s,t} = 4/5 = 0.8
        {"id": "te1", "question": "p q r s t", "golden_answers": ["Lyon"],
         "metadata": {"supporting_facts": [["Paris", 0], ["France", 2]]}},
        # nothing; no supporting passages named (unknown, not counted)
        {"id": "te2", "question": "which river flows through paris", "golden_answers": ["Seine"]},
        # answer "the" normalises to "" and matches nothing; passages: d2 and d1 all in train
        {"id": "te3", "question": "zzz", "golden_answers": ["the"], "metadata": {"supporting_doc_ids": ["d2", "d1"]}},
    ])
    return d


def test_flags_known_by_hand(tiny_dataset):
    ev, tr = load_qa(tiny_dataset, "test"), load_qa(tiny_dataset, "train")
    f = overlap_flags(ev, tr)
    assert f.ids == ("te0", "te1", "te2", "te3")
    assert f.answer.tolist() == [True, False, False, False]
    assert f.passages.tolist() == [False, True, False, True]
    assert f.passages_known.tolist() == [True, True, False, True]
    # IDF-weighted (N = 7 questions): te0 equals tr0; te1 shares p, q, r, s (df 2, weight ln 4.5 = 1.504
    # each) with tr1 but adds t (df 1, ln 8 = 2.079): 6.016 / 8.095 = 0.74 < 0.8; te2 differs from tr2 in
    # its rarest token
    assert f.question.tolist() == [True, False, False, False]
    assert f.any.tolist() == [True, True, False, True]
    assert f.by_id() == {"te0": True, "te1": True, "te2": False, "te3": True}
    # plain Jaccard: te1 is exactly at 0.8 (4 of 5 tokens), in at 0.8 and out just above
    qs, ts = [q.question for q in ev], [q.question for q in tr]
    assert near_duplicates(qs, ts, weighting="none").tolist() == [True, True, False, False]
    assert near_duplicates(qs, ts, threshold=0.81, weighting="none").tolist() == [True, False, False, False]
    # plain Jaccard of te2 and tr2: {which, river, flows, through} of 6 tokens = 4/6
    assert near_duplicates(qs, ts, threshold=4 / 6, weighting="none").tolist() == [True, True, True, False]


def test_near_duplicates_equal_brute_force():
    rng = random.Random(0)
    words = [f"w{i}" for i in range(12)]
    qs = [" ".join(rng.sample(words, rng.randint(0, 6))) for _ in range(200)]
    ts = [" ".join(rng.sample(words, rng.randint(0, 6))) for _ in range(200)]
    sets_q = [set(normalize_answer(q).split()) for q in qs]
    sets_t = [set(normalize_answer(q).split()) for q in ts]
    df: dict[str, int] = {}
    for s in sets_q + sets_t:
        for w in s:
            df[w] = df.get(w, 0) + 1
    n = len(qs) + len(ts)
    for weighting in ("idf", "none"):
        weight = (lambda w: math.log1p(n / df[w])) if weighting == "idf" else (lambda w: 1.0)

        def jac(a: set[str], b: set[str]) -> float:
            return sum(map(weight, a & b)) / sum(map(weight, a | b)) if a else 0.0

        for t in (0.5, 0.6, 0.8, 1.0):
            want = np.array([any(jac(a, b) >= t - 1e-12 for b in sets_t) for a in sets_q])
            got = near_duplicates(qs, ts, threshold=t, weighting=weighting)
            assert got.tolist() == want.tolist(), (weighting, t)
            assert 0 < got.sum() < len(qs)


def test_bundled_audit_reproduces_the_known_overlap():
    """Issue 28's figures: 446 of 500 test answers are train answers, 453 test questions have all their
    supporting passages among train's; the unseen world shares only 28 year answers and nothing else."""
    by = {a.split: a for a in audit_dataset("bundled")}
    assert set(by) == {"test", "test_unseen"}
    t, u = by["test"], by["test_unseen"]
    assert (t.n, t.answer, t.passages, t.passages_known, t.question, t.any) == (500, 446, 453, 500, 0, 490)
    assert (u.n, u.answer, u.passages, u.passages_known, u.question, u.any) == (500, 28, 0, 500, 0, 28)
    overlapping = overlap_flags(load_qa("bundled", "test_unseen"), load_qa("bundled", "train"))
    answers = [q.golden_answers for q, hit in zip(load_qa("bundled", "test_unseen"), overlapping.answer) if hit]
    assert all(len(a) == 1 and a[0].isdigit() for a in answers)  # birth and invention years only
    # plain Jaccard calls 179 test questions near-duplicates: templates about other people of one first name
    test_q = [q.question for q in load_qa("bundled", "test")]
    train_q = [q.question for q in load_qa("bundled", "train")]
    assert int(near_duplicates(test_q, train_q, weighting="none").sum()) == 179


def test_train_source_and_bad_input(tiny_dataset, tmp_path):
    assert train_source("bundled", "test_unseen") == ("bundled", "train")
    assert train_source("bundled", "train") is None
    assert train_source(tiny_dataset / "test.jsonl", "test") == (str(tiny_dataset / "train.jsonl"), "train")
    lone = tmp_path / "lone"
    lone.mkdir()
    _write(lone / "dev.jsonl", [{"id": "x", "question": "q", "golden_answers": ["a"]}])
    assert train_source(lone / "dev.jsonl", "dev") is None
    with pytest.raises(ConfigError, match="no 'train' split"):
        audit_dataset(lone / "dev.jsonl")
    with pytest.raises(ConfigError, match="no split 'nope'"):
        audit_dataset("bundled", ["nope"])
    with pytest.raises(ConfigError, match="threshold"):
        overlap_flags([], [], threshold=0)


def test_search_r1_parquet_audit(tmp_path):
    """Search-R1 parquet: questions from the prompt, answers from reward_model; no passages named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stratagym.envs.search_qa.protocol import format_prompt

    def rows(split, items):
        return [{"data_source": "nq", "prompt": [{"role": "user", "content": format_prompt(q)}],
                 "reward_model": {"ground_truth": {"target": a}}, "extra_info": {"split": split, "index": i}}
                for i, (q, a) in enumerate(items)]

    pq.write_table(pa.Table.from_pylist(rows("train", [("who wrote hamlet", ["Shakespeare"]),
                                                       ("capital of france", ["Paris"])])), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows("test", [("Who wrote Hamlet?", ["William Shakespeare"]),
                                                      ("largest city of france", ["paris"])])), tmp_path / "test.parquet")
    (a,) = audit_dataset(tmp_path)
    assert (a.split, a.n, a.answer, a.passages_known, a.question, a.any) == ("test", 2, 1, 0, 1, 2)


def run_main(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(list(args))
    out = capsys.readouterr()
    return info.value.code, out.err + out.out


def test_audit_cli(capsys, tiny_dataset):
    code, text = run_main(capsys, "envs", "audit")
    assert code == 0
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.startswith("test")}
    assert "446/500 (89.2%)" in lines["test"] and "453/500 (90.6%)" in lines["test"] and "490/500" in lines["test"]
    assert "28/500 (5.6%)" in lines["test_unseen"]
    code, text = run_main(capsys, "envs", "audit", str(tiny_dataset), "--json")
    assert code == 0
    (row,) = json.loads(text)
    assert row == {"split": "test", "n": 4, "answer": 1, "passages": 2, "passages_known": 3, "question": 1, "any": 3}
    code, text = run_main(capsys, "envs", "audit", "bundled", "--split", "nope")
    assert code == 2 and "no split 'nope'" in text and "test_unseen" in text and "Traceback" not in text
    code, text = run_main(capsys, "envs", "audit", str(tiny_dataset / "missing.jsonl"))
    assert code == 2 and "does not exist" in text


def test_env_flags_each_episode_and_eval_splits_em():
    """The oracle on all 500 test questions: 490 overlap (EM 1 on both parts); no-search on test_unseen."""
    from stratagym.eval.harness import EvalConfig, evaluate

    rec = evaluate(EvalConfig(agent="scripted:oracle", env_id="stratagym/SearchQA-v0", split="test", batch_size=64),
                   out=None, progress=False)
    m = rec["metrics"]
    assert m["overlap"]["value"] == pytest.approx(0.98) and m["overlap"]["n"] == 500
    assert (m["em/overlap"]["value"], m["em/overlap"]["n"]) == (1.0, 490)
    assert (m["em/no_overlap"]["value"], m["em/no_overlap"]["n"]) == (1.0, 10)
    flags = {e["task_id"]: e["extra"]["overlap"] for e in rec["episodes"]}
    assert flags == overlap_flags(load_qa("bundled", "test"), load_qa("bundled", "train")).by_id()
    # train episodes carry no flag (nothing to overlap with but themselves)
    import gymnasium as gym

    env = gym.make("stratagym/SearchQA-v0", split="train")
    env.reset(seed=0)
    *_, info = env.step("<answer> x </answer>")
    assert "overlap" not in info and "em" in info
    env.close()


def test_aggregate_splits_the_primary_metric_by_overlap():
    """EM 2/3 on the overlapping episodes and 0/1 on the rest, computed by hand."""
    from stratagym.eval.aggregate import aggregate

    def row(i, em, ov):
        return {"task_id": f"t{i}", "seed": 0, "total_reward": em, "won": em == 1, "score": em, "turns": 1,
                "search_count": 0, "valid_actions": 1, "truncated": False, "extra": {"em": em, "overlap": ov}}

    agg = aggregate([row(0, 1.0, True), row(1, 0.0, True), row(2, 1.0, True), row(3, 0.0, False)],
                    env_id="stratagym/SearchQA-v0")
    m = agg.metrics
    assert (m["em/overlap"].value, m["em/overlap"].n) == (pytest.approx(2 / 3), 3)
    assert (m["em/no_overlap"].value, m["em/no_overlap"].n) == (0.0, 1)
    assert m["overlap"].value == 0.75 and m["em"].value == 0.5
    # without the flag on every episode there is no split
    agg = aggregate([row(0, 1.0, True), {**row(1, 0.0, True), "extra": {"em": 0.0}}], env_id="stratagym/SearchQA-v0")
    assert "em/overlap" not in agg.metrics and "em/no_overlap" not in agg.metrics
