"""bm25s and dense (tiny encoder + faiss) retrievers, index build/load with manifests."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stratagym.envs.core import ConfigError
from stratagym.envs.search_qa.data import load_corpus
from stratagym.envs.search_qa.index import build_index, load_index, make_retriever, read_manifest


def _oracle_pairs(questions):
    return [(q_, d) for q in questions for q_, d in zip(q.oracle_queries, q.metadata["supporting_doc_ids"])]


def test_bm25s_finds_every_gold_passage_on_the_bundled_test_split(test_questions):
    r = make_retriever("bm25s")  # default: bundled corpus, shared per process
    pairs = _oracle_pairs(test_questions)
    results = r.batch_search([q for q, _ in pairs], k=3)
    assert all(gold in [h.id for h in hits] for (_, gold), hits in zip(pairs, results))
    assert all(hits[0].score >= hits[-1].score for hits in results)
    # single and batched search agree
    assert [h.id for h in r.search(pairs[0][0], 3)] == [h.id for h in results[0]]


def test_bm25s_edge_queries():
    r = make_retriever("bm25s")
    out = r.batch_search(["", "the a an", "zzqxv", "🙂 <search>", "Kubae " * 300], k=5)
    assert out[0] == out[1] == out[2] == []  # nothing matches: no padding with score-0 passages
    assert len(out[4]) == 5 and r.batch_search([], 3) == []
    assert len(r.search("Kubae river", k=10_000)) <= len(r)


def test_bm25s_index_roundtrip_and_manifest(tmp_path, small_corpus_path, small_questions):
    out = build_index(small_corpus_path, tmp_path / "idx", "bm25s")
    m = read_manifest(out)
    assert m["backend"] == "bm25s" and m["corpus"]["num_docs"] == len(load_corpus(small_corpus_path))
    assert m["corpus"]["fingerprint"].startswith("sha256:")
    loaded = load_index(out)
    fresh = make_retriever("bm25s", corpus=small_corpus_path, shared=False)
    queries = [q for q, _ in _oracle_pairs(small_questions)]
    assert [[h.id for h in hs] for hs in loaded.batch_search(queries, 3)] == \
           [[h.id for h in hs] for hs in fresh.batch_search(queries, 3)]
    assert not list(tmp_path.glob(".idx.*")), "staging folders must not be left behind"
    # rebuilding in place replaces the index atomically
    build_index(small_corpus_path, out, "bm25s", k1=1.2)
    assert read_manifest(out)["params"]["k1"] == 1.2


def test_mismatched_index_is_a_clear_error(tmp_path, small_corpus_path):
    out = build_index(small_corpus_path, tmp_path / "idx", "bm25s")
    with pytest.raises(ConfigError, match="corpus mismatch"):
        load_index(out, corpus="bundled")
    with pytest.raises(ConfigError, match="built with backend 'bm25s', not 'dense'"):
        load_index(out, backend="dense")
    with pytest.raises(ConfigError, match="not a stratagym index"):
        load_index(tmp_path)
    (out / "manifest.json").write_text("{broken")
    with pytest.raises(ConfigError, match="corrupt"):
        load_index(out)
    with pytest.raises(ConfigError, match="unknown retrieval backend"):
        make_retriever("elastic")


def test_changed_corpus_file_is_detected(tmp_path, small_corpus_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(small_corpus_path.read_bytes())
    out = build_index(corpus, tmp_path / "idx", "bm25s")
    with corpus.open("a") as fh:
        fh.write(json.dumps({"id": "new", "contents": '"New"\nnew passage'}) + "\n")
    with pytest.raises(ConfigError, match="corpus mismatch"):
        load_index(out)


# ---- dense ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dense(small_corpus_path, tiny_encoder):
    from stratagym.envs.search_qa.retrievers.dense import DenseRetriever, E5Encoder

    return DenseRetriever(load_corpus(small_corpus_path), E5Encoder(tiny_encoder))


def test_encoder_is_e5_style(tiny_dense):
    enc = tiny_dense.encoder
    v = enc.encode(["Kubae is a city.", "x"], is_query=True)
    assert v.dtype == np.float32 and v.shape == (2, enc.dim)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    # the prefix matters: "query: t" and "passage: t" are different inputs
    assert not np.allclose(enc.encode(["t"], is_query=True), enc.encode(["t"], is_query=False))
    # batching (sorted by length, padded) gives the same vectors as one at a time
    texts = ["short", "a much longer text about the Pezeisor River and Kubae", "mid length text"]
    batched = enc.encode(texts, is_query=False)
    single = np.stack([enc.encode([t], is_query=False)[0] for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_flat_index_equals_brute_force(tiny_dense, small_questions):
    corpus = tiny_dense.corpus
    queries = [q.question for q in small_questions[:10]]
    P = tiny_dense.encoder.encode(corpus.contents, is_query=False)
    Q = tiny_dense.encoder.encode(queries, is_query=True)
    sims = Q @ P.T
    got = tiny_dense.batch_search(queries, 3)
    for row, hits in zip(sims, got):
        np.testing.assert_allclose([h.score for h in hits], np.sort(row)[::-1][:3], rtol=1e-4, atol=1e-5)
        pos = {d: i for i, d in enumerate(corpus.ids)}
        np.testing.assert_allclose([row[pos[h.id]] for h in hits], [h.score for h in hits], rtol=1e-4, atol=1e-5)


def test_ivf_with_all_cells_probed_and_hnsw_agree_with_flat(tiny_dense, small_questions):
    from stratagym.envs.search_qa.retrievers.dense import DenseRetriever

    queries = [q.question for q in small_questions]
    flat = [[h.id for h in hs] for hs in tiny_dense.batch_search(queries, 3)]
    ivf = DenseRetriever(tiny_dense.corpus, tiny_dense.encoder, kind="ivf", index_params={"nlist": 8})
    ivf.set_search_params(nprobe=8)
    assert [[h.id for h in hs] for hs in ivf.batch_search(queries, 3)] == flat
    hnsw = DenseRetriever(tiny_dense.corpus, tiny_dense.encoder, kind="hnsw")
    hnsw.set_search_params(ef_search=256)
    got = [[h.id for h in hs] for hs in hnsw.batch_search(queries, 3)]
    recall = np.mean([len(set(a) & set(b)) / 3 for a, b in zip(got, flat)])
    assert recall >= 0.9


def test_dense_index_roundtrip_and_model_checks(tmp_path, small_corpus_path, tiny_encoder, tiny_dense):
    out = build_index(small_corpus_path, tmp_path / "dense", "dense", model=str(tiny_encoder), faiss_kind="flat")
    m = read_manifest(out)
    assert m["model"]["model"] == str(tiny_encoder) and m["model"]["query_prefix"] == "query: "
    loaded = load_index(out)
    q = ["Who founded the Guild of Pytrous?"]
    assert [h.id for h in loaded.batch_search(q, 3)[0]] == [h.id for h in tiny_dense.batch_search(q, 3)[0]]
    with pytest.raises(ConfigError, match="built with encoder"):
        load_index(out, model="intfloat/e5-base-v2")


def test_unavailable_model_name_fails_with_instructions():
    from stratagym.envs.search_qa.retrievers.dense import E5Encoder

    with pytest.raises(ConfigError) as exc:
        E5Encoder("intfloat/e5-base-v2-not-downloaded")
    assert "huggingface-cli download" in str(exc.value)


@pytest.mark.parametrize("k", [1, 3, 32, 50])
def test_top_k_positive_matches_a_full_sort(k):
    from stratagym.envs.search_qa.retrievers.bm25 import top_k_positive

    rng = np.random.default_rng(k)
    for _ in range(20):
        n = int(rng.integers(1, 300))
        scores = np.zeros(n, np.float32)
        hit = rng.random(n) < 0.3
        scores[hit] = np.round(rng.random(hit.sum()) * 4, 0) + 0.5 * (rng.random(hit.sum()) < 0.5)  # many ties
        expected = sorted(((i, float(s)) for i, s in enumerate(scores) if s > 0), key=lambda t: (-t[1], t[0]))[:k]
        kept = scores.copy()
        assert top_k_positive(scores, k) == expected
        assert np.array_equal(scores, kept)  # the default leaves the caller's vector alone
        assert top_k_positive(scores, k, overwrite=True) == expected  # marks picks in place: same answer


def test_corpus_hash_is_stamped_per_machine_and_redone_when_the_file_changes(tmp_path, small_corpus_path, monkeypatch):
    """A second process loading the index does not re-read the corpus while its size, mtime and inode are
    unchanged (the stamp); an edit that changes them is hashed again and refused; ``verify_corpus="full"``
    rehashes even when the metadata was kept, which the stamp alone cannot see."""
    import os

    from stratagym.envs.search_qa import data

    monkeypatch.setenv("STRATAGYM_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(small_corpus_path.read_bytes())
    out = build_index(corpus, tmp_path / "idx", "bm25s")
    load_index(out)  # hashes and writes the stamp
    assert len(list((tmp_path / "cache" / "corpus-stamps").glob("*.json"))) == 1

    def no_reading(*args):  # a fresh process: nothing cached in memory, and the file must not be read
        raise AssertionError("the corpus was hashed again")

    data._file_fingerprint_cached.cache_clear()
    monkeypatch.setattr(data, "_file_fingerprint_cached", no_reading)
    assert load_index(out).search("x", 1) is not None  # served from the stamp
    with pytest.raises(AssertionError, match="hashed again"):
        load_index(out, verify_corpus="full")
    monkeypatch.undo()
    monkeypatch.setenv("STRATAGYM_CACHE", str(tmp_path / "cache"))

    # same size, same mtime, other bytes: invisible to the stamp, caught by a full check
    st = corpus.stat()
    raw = corpus.read_bytes()
    i = raw.index(b"contents") + 12
    corpus.write_bytes(raw[:i] + (b"Q" if raw[i:i + 1] != b"Q" else b"R") + raw[i + 1:])
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    if corpus.stat().st_ino == st.st_ino:  # rewritten in place: the stamp still matches
        load_index(out)
    with pytest.raises(ConfigError, match="corpus mismatch"):
        load_index(out, verify_corpus="full")
    # an append changes the size: hashed again, refused
    with corpus.open("a") as fh:
        fh.write(json.dumps({"id": "new", "contents": '"New"\nnew passage'}) + "\n")
    with pytest.raises(ConfigError, match="corpus mismatch"):
        load_index(out)
    with pytest.raises(ConfigError, match="verify must be"):
        load_index(out, verify_corpus="quick")
