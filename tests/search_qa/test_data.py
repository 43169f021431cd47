"""Loaders (bundled, FlashRAG jsonl, Search-R1 parquet, corpora) and the bundled benchmark's shape."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from stratagym.envs.core import ConfigError
from stratagym.envs.search_qa.data import BUNDLED_DIR, load_corpus, load_qa
from stratagym.envs.search_qa.protocol import format_prompt
from tests.helpers import load_script

REPO = Path(__file__).resolve().parents[2]


def test_bundled_benchmark_shape(test_questions):
    train = load_qa("bundled", "train")
    corpus = load_corpus("bundled")
    assert len(test_questions) == 500 and len(train) == 2500
    assert 2000 <= len(corpus) <= 5000
    assert not {q.question for q in test_questions} & {q.question for q in train}
    hops = Counter(q.hops for q in test_questions)
    assert set(hops) == {1, 2, 3} and min(hops.values()) >= 100
    ids = set(corpus.ids)
    titles = dict(zip(corpus.ids, corpus.titles()))
    for q in test_questions:
        meta = q.metadata
        assert len(meta["supporting_doc_ids"]) == len(meta["oracle_queries"]) == q.hops
        assert all(d in ids for d in meta["supporting_doc_ids"])
        assert [titles[d] for d in meta["supporting_doc_ids"]] == meta["supporting_titles"]
        # the final answer is stated in the last gold passage
        last = corpus.contents[corpus.ids.index(meta["supporting_doc_ids"][-1])]
        assert any(a in last for a in q.golden_answers)
    assert all(c.startswith('"') and "\n" in c for c in corpus.contents)


def test_generator_is_deterministic_and_matches_committed_data(tmp_path):
    mod = load_script(REPO / "scripts" / "make_search_qa_data.py", "make_search_qa_data")
    mod.generate(tmp_path)
    for name in ("corpus.jsonl", "train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_bytes() == (BUNDLED_DIR / name).read_bytes(), name


def test_flashrag_jsonl(tmp_path):
    path = tmp_path / "nq" / "test.jsonl"
    path.parent.mkdir()
    rows = [{"id": "test_0", "question": "who wrote hamlet", "golden_answers": ["Shakespeare"]},
            {"id": "test_1", "question": "capital of france?", "golden_answers": ["Paris", "paris city"],
             "metadata": {"hops": 1}}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    for source in (path, path.parent):
        qs = load_qa(source, "test")
        assert [q.id for q in qs] == ["test_0", "test_1"]
        assert qs[1].golden_answers == ("Paris", "paris city") and qs[1].hops == 1
        assert qs[0].data_source == "nq"


def test_search_r1_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{
        "data_source": "hotpotqa",
        "prompt": [{"role": "user", "content": format_prompt("Who founded the Guild of X")}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": ["Ann Lee"]}},
        "extra_info": {"split": "test", "index": 7},
    }]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test.parquet")
    (q,) = load_qa(tmp_path, "test")
    assert q.question == "Who founded the Guild of X?"
    assert q.golden_answers == ("Ann Lee",)
    assert q.id == "hotpotqa-test-7" and q.data_source == "hotpotqa"


@pytest.mark.parametrize("name", ["nq", "hotpotqa", "RUC-NLPIR/FlashRAG_datasets"])
def test_hub_names_fail_fast_with_instructions(name):
    with pytest.raises(ConfigError) as exc:
        load_qa(name, "test")
    assert "huggingface-cli download" in str(exc.value) and "pass the path" in str(exc.value)


def test_bad_files_are_config_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "question": "q"}\n')
    with pytest.raises(ConfigError, match="golden_answers"):
        load_qa(bad)
    bad.write_text("not json\n")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_qa(bad)
    with pytest.raises(ConfigError, match="no split"):
        load_qa("bundled", "dev")
    with pytest.raises(ConfigError, match="does not exist"):
        load_corpus(tmp_path / "missing.jsonl")


def test_corpus_title_text_rows(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": "a", "title": "T", "text": "body"}) + "\n")
    c = load_corpus(p)
    assert c.contents == ['"T"\nbody'] and c.titles() == ["T"]
