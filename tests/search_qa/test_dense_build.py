"""Wiki-scale dense indexes: the memory-mapped corpus, sharded resumable encoding, the streaming merge into
every faiss kind, and importing an index written the way Search-R1 writes it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stratagym.envs.core import ConfigError
from stratagym.envs.search_qa.data import MappedCorpus, load_corpus
from stratagym.envs.search_qa.index import build_index, load_index, read_manifest


class Interrupt(Exception):
    pass


# ---- memory-mapped corpus -------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.booleans(), _text, _text, st.booleans()), min_size=1, max_size=12),
       trailing_newline=st.booleans())
def test_mapped_corpus_reads_what_load_corpus_reads(tmp_path_factory, rows, trailing_newline):
    """Any mix of contents / title+text rows, unicode, blank lines, no final newline: passage i is the same."""
    lines = []
    for i, (contents_row, a, b, blank_after) in enumerate(rows):
        row = {"id": f"d{i}", "contents": f'"{a}"\n{b}'} if contents_row else {"title": a, "text": b}
        lines.append(json.dumps(row, ensure_ascii=bool(i % 2)))
        if blank_after:
            lines.append("  ")
    path = tmp_path_factory.mktemp("mc") / "c.jsonl"
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    ref = load_corpus(path)
    mc = MappedCorpus.open(path, path.with_suffix(".offsets.npy"))
    assert len(mc) == len(ref)
    assert [mc.doc(i) for i in range(len(mc))] == [ref.doc(i) for i in range(len(ref))]
    assert list(mc.ids) == ref.ids and mc.contents[:] == ref.contents
    assert mc.texts(1, len(mc) + 5) == ref.contents[1:]
    assert mc.fingerprint == ref.fingerprint
    # the saved offsets are reused, memory-mapped
    again = MappedCorpus.open(path, path.with_suffix(".offsets.npy"))
    assert isinstance(again.offsets, np.memmap) and [again.doc(i) for i in range(len(again))] == [ref.doc(i) for i in range(len(ref))]


# ---- sharded, resumable build ---------------------------------------------------------------------


def _vectors(index_dir: Path) -> np.ndarray:
    import faiss

    idx = faiss.read_index(str(index_dir / "faiss.index"))
    return idx.reconstruct_n(0, idx.ntotal)


def test_interrupted_build_resumes_from_the_last_complete_shard(tmp_path, small_corpus_path, tiny_encoder):
    n = len(load_corpus(small_corpus_path))
    n_shards = -(-n // 100)
    kw = dict(model=str(tiny_encoder), shard_size=100)
    reference = build_index(small_corpus_path, tmp_path / "ref", "dense", **kw)
    assert not (tmp_path / "ref.shards").exists(), "shards are removed once the index is in place"
    assert read_manifest(reference)["build"]["shards_encoded"] == n_shards

    out = tmp_path / "idx"

    def stop_after_two(k, path):
        if k == 1:
            raise Interrupt

    with pytest.raises(Interrupt):
        build_index(small_corpus_path, out, "dense", on_shard=stop_after_two, **kw)
    assert not out.exists(), "an interrupted build leaves no index that looks complete"
    assert sorted(p.name for p in (tmp_path / "idx.shards").glob("emb-*.npy")) == ["emb-00000.npy", "emb-00001.npy"]
    assert json.loads((tmp_path / "idx.shards" / "progress.json").read_text())["shards_complete"] == 2

    encoded = []
    build_index(small_corpus_path, out, "dense", on_shard=lambda k, p: encoded.append(k), **kw)
    assert encoded == list(range(2, n_shards)), "only the missing shards are encoded again"
    m = read_manifest(out)
    assert m["build"]["shards_reused"] == 2 and m["corpus"]["num_docs"] == n
    np.testing.assert_array_equal(_vectors(out), _vectors(reference))
    q = ["Who founded the Guild of Pytrous?", "Kubae river"]
    assert [[h.id for h in hs] for hs in load_index(out).batch_search(q, 5)] == \
           [[h.id for h in hs] for hs in load_index(reference).batch_search(q, 5)]


def test_sigkill_mid_encoding_then_resume(tmp_path, small_corpus_path, tiny_encoder):
    """A real ``kill -9`` (no exception handlers, no ``finally``) right after shard 2 is written: the rerun
    encodes only shards 3.. and the index equals one built without interruption."""
    import os
    import subprocess
    import sys

    out, kw = tmp_path / "idx", dict(model=str(tiny_encoder), shard_size=100)
    code = ("import os, signal, sys\n"
            "from stratagym.envs.search_qa.index import build_index\n"
            "def hook(k, p):\n"
            "    if k == 2: os.kill(os.getpid(), signal.SIGKILL)\n"
            f"build_index({str(small_corpus_path)!r}, {str(out)!r}, 'dense', on_shard=hook, progress=True, **{kw!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    n_shards = -(-len(load_corpus(small_corpus_path)) // 100)
    assert f"encoding {n_shards} shards" in proc.stderr and not out.exists()
    encoded = []
    build_index(small_corpus_path, out, "dense", on_shard=lambda k, p: encoded.append(k), **kw)
    assert encoded == list(range(3, n_shards))
    ref = build_index(small_corpus_path, tmp_path / "ref", "dense", **kw)
    np.testing.assert_array_equal(_vectors(out), _vectors(ref))


def test_shards_of_another_build_are_refused_not_mixed(tmp_path, small_corpus_path, tiny_encoder):
    work = tmp_path / "work"
    with pytest.raises(Interrupt):
        build_index(small_corpus_path, tmp_path / "idx", "dense", model=str(tiny_encoder), shard_size=100,
                    work_dir=work, on_shard=lambda k, p: (_ for _ in ()).throw(Interrupt()))
    with pytest.raises(ConfigError, match=r"another build \(different shard_size\).*--restart"):
        build_index(small_corpus_path, tmp_path / "idx", "dense", model=str(tiny_encoder), shard_size=150, work_dir=work)
    with pytest.raises(ConfigError, match="different encoder"):
        build_index(small_corpus_path, tmp_path / "idx", "dense", model=str(tiny_encoder), shard_size=100,
                    work_dir=work, passage_prefix="")
    out = build_index(small_corpus_path, tmp_path / "idx", "dense", model=str(tiny_encoder), shard_size=150,
                      work_dir=work, restart=True, keep_shards=True)
    assert read_manifest(out)["build"]["shards_reused"] == 0
    assert len(list(work.glob("emb-*.npy"))) == -(-len(load_corpus(small_corpus_path)) // 150)


def test_a_damaged_shard_is_encoded_again(tmp_path, small_corpus_path, tiny_encoder):
    work = tmp_path / "work"
    kw = dict(model=str(tiny_encoder), shard_size=100, work_dir=work, keep_shards=True)
    ref = build_index(small_corpus_path, tmp_path / "a", "dense", **kw)
    np.save(work / "emb-00003.npy", np.zeros((7, 3), np.float32))  # wrong shape: not a complete shard
    encoded = []
    out = build_index(small_corpus_path, tmp_path / "b", "dense", on_shard=lambda k, p: encoded.append(k), **kw)
    assert encoded == [3]
    np.testing.assert_array_equal(_vectors(out), _vectors(ref))


def test_every_faiss_kind_from_shards(tmp_path, small_corpus_path, tiny_encoder, small_questions):
    """Merged from memory-mapped shards: flat is exact, IVF with every cell probed equals flat, IVF-PQ and
    HNSW approximate it; all load back through the manifest with the mapped corpus."""
    work = tmp_path / "work"
    queries = [q.question for q in small_questions]
    common = dict(model=str(tiny_encoder), shard_size=128, work_dir=work, keep_shards=True)
    flat = load_index(build_index(small_corpus_path, tmp_path / "flat", "dense", **common))
    assert isinstance(flat.corpus, MappedCorpus)
    ref = [[h.id for h in hs] for hs in flat.batch_search(queries, 10)]
    ivf = load_index(build_index(small_corpus_path, tmp_path / "ivf", "dense", faiss_kind="ivf",
                                 faiss_params={"nlist": 8}, **common))
    ivf.set_search_params(nprobe=8)
    assert [[h.id for h in hs] for hs in ivf.batch_search(queries, 10)] == ref
    pq = load_index(build_index(small_corpus_path, tmp_path / "pq", "dense", faiss_kind="ivfpq",
                                faiss_params={"nlist": 4, "pq_m": 16, "nbits": 6}, **common))
    pq.set_search_params(nprobe=4)
    assert type(pq.index).__name__ == "IndexIVFPQ"
    # IVF-PQ scores are inner products with the quantized vectors: known answer from the decoded codes
    import faiss

    raw = faiss.read_index(str(tmp_path / "pq" / "faiss.index"))
    raw.make_direct_map()
    decoded = raw.reconstruct_n(0, raw.ntotal)
    assert np.mean(np.sum(decoded * _vectors(tmp_path / "flat"), axis=1)) >= 0.9  # codes close to the vectors
    sims = pq.encoder.encode(queries, is_query=True) @ decoded.T
    for row, hits in zip(sims, pq.batch_search(queries, 10)):
        np.testing.assert_allclose([h.score for h in hits], np.sort(row)[::-1][:10], rtol=1e-3, atol=1e-4)
    hnsw = load_index(build_index(small_corpus_path, tmp_path / "hnsw", "dense", faiss_kind="hnsw",
                                  faiss_params={"m": 16}, **common))
    hnsw.set_search_params(ef_search=256)
    recall = np.mean([len(set(r) & {h.id for h in hs}) / 10 for r, hs in zip(ref, hnsw.batch_search(queries, 10))])
    assert recall >= 0.9
    with pytest.raises(ConfigError, match="pq_m dividing"):
        build_index(small_corpus_path, tmp_path / "bad", "dense", faiss_kind="ivfpq", faiss_params={"pq_m": 7}, **common)


# ---- Search-R1 import -----------------------------------------------------------------------------


def _search_r1_encode(model_dir: Path, texts: list[str], prefix: str) -> np.ndarray:
    """Encode as Search-R1 does, written here independently of stratagym's E5Encoder: e5 prefix,
    mean pooling over the attention mask, L2 normalisation, float32. (Search-R1
    search_r1/search/index_builder.py: ``pooling`` mean branch, l. 44-46, and ``encode_all``, which
    prefixes ``passage: `` for e5 and calls ``torch.nn.functional.normalize``; read at commit
    6abd81b of the MasterWMQ0121/Search-R1 fork of PeterGriffinJin/Search-R1.)"""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        batch = tok([prefix + t for t in texts], padding=True, truncation=True, max_length=256, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        hidden = hidden.masked_fill(~batch["attention_mask"][..., None].bool(), 0.0)
        emb = hidden.sum(1) / batch["attention_mask"].sum(1)[..., None]
        return torch.nn.functional.normalize(emb, dim=-1).numpy().astype(np.float32)


@pytest.fixture(scope="module")
def search_r1_files(tmp_path_factory, tiny_encoder):
    """A wiki-18 style corpus and an e5_Flat.index written as Search-R1's index_builder.py writes them:
    rows ``{"id", "contents": '"Title"\\ntext'}`` in index order, and
    ``faiss.index_factory(dim, "Flat", faiss.METRIC_INNER_PRODUCT)`` + ``add`` + ``write_index`` to
    ``{save_dir}/e5_Flat.index`` (``Index_Builder.build_dense_index``, same file)."""
    import faiss

    d = tmp_path_factory.mktemp("search_r1")
    rng = np.random.default_rng(0)
    words = "river city guild founded north lake mountain king trade old harbour bridge".split()
    titles = [f"Place {i}" for i in range(120)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(5, 12)))) for _ in titles]
    contents = [f'"{t}"\n{x}' for t, x in zip(titles, texts)]
    corpus = d / "wiki-18.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": c}) + "\n" for i, c in enumerate(contents)))
    emb = _search_r1_encode(tiny_encoder, contents, "passage: ")
    index = faiss.index_factory(emb.shape[1], "Flat", faiss.METRIC_INNER_PRODUCT)
    index.add(emb)
    faiss.write_index(index, str(d / "e5_Flat.index"))
    return d / "e5_Flat.index", corpus, contents


def test_import_search_r1_index_searches_like_brute_force(tmp_path, search_r1_files, tiny_encoder):
    from stratagym import cli

    if "index" not in cli.GROUPS:
        cli._load_plugins()
    index_file, corpus, contents = search_r1_files
    out = tmp_path / "imported"
    res = CliRunner().invoke(cli.app, ["index", "import-search-r1", "--index", str(index_file), "--corpus", str(corpus),
                                       "--model", str(tiny_encoder), "--out", str(out)])
    assert res.exit_code == 0, res.output
    m = read_manifest(out)
    assert m["params"]["faiss"] == "flat" and m["params"]["faiss_file"] == str(index_file.resolve())
    assert m["params"]["metric"] == "inner_product" and m["corpus"]["num_docs"] == len(contents)
    assert not (out / "faiss.index").exists(), "the Search-R1 file is referenced, not copied"
    r = load_index(out)
    assert isinstance(r.corpus, MappedCorpus)
    queries = ["harbour bridge king", "old north river"]
    expected = _search_r1_encode(tiny_encoder, queries, "query: ") @ _search_r1_encode(tiny_encoder, contents, "passage: ").T
    for row, hits in zip(expected, r.batch_search(queries, 5)):
        np.testing.assert_allclose([h.score for h in hits], np.sort(row)[::-1][:5], rtol=1e-4, atol=1e-5)
        assert [h.contents for h in hits] == [contents[int(h.id)] for h in hits]
        assert {int(h.id) for h in hits} <= set(np.argsort(-row)[:6].tolist())  # ties at the cut aside


def test_import_search_r1_bad_inputs(tmp_path, search_r1_files, tiny_encoder, capsys):
    import faiss

    from stratagym.envs.search_qa.dense_build import import_search_r1

    index_file, corpus, contents = search_r1_files
    longer = tmp_path / "longer.jsonl"
    longer.write_text(corpus.read_text() + json.dumps({"id": "x", "contents": '"X"\nx'}) + "\n")
    with pytest.raises(ConfigError, match=r"holds 120 vectors but .* has 121 passages; pass the corpus file"):
        import_search_r1(index_file, longer, tiny_encoder, tmp_path / "a")
    small = faiss.index_factory(32, "Flat", faiss.METRIC_INNER_PRODUCT)
    small.add(np.random.default_rng(0).standard_normal((len(contents), 32)).astype(np.float32))
    faiss.write_index(small, str(tmp_path / "d32.index"))
    with pytest.raises(ConfigError, match="dimension 32 but encoder .* gives 64; pass --model"):
        import_search_r1(tmp_path / "d32.index", corpus, tiny_encoder, tmp_path / "b")
    with pytest.raises(ConfigError, match="does not exist; pass --index"):
        import_search_r1(tmp_path / "missing.index", corpus, tiny_encoder, tmp_path / "c")
    with pytest.raises(ConfigError, match="does not exist; pass --corpus"):
        import_search_r1(index_file, tmp_path / "missing.jsonl", tiny_encoder, tmp_path / "c")
    (tmp_path / "junk.index").write_bytes(b"not an index")
    with pytest.raises(ConfigError, match="not a faiss index"):
        import_search_r1(tmp_path / "junk.index", corpus, tiny_encoder, tmp_path / "c")
    assert not any(p.name.startswith((".a.", ".b.", ".c.")) for p in tmp_path.iterdir()), "no staging left behind"
    # the index file changing after the import is caught at load
    copy = tmp_path / "copy.index"
    copy.write_bytes(index_file.read_bytes())
    out = import_search_r1(copy, corpus, tiny_encoder, tmp_path / "ok")
    faiss.write_index(small, str(copy))
    with pytest.raises(ConfigError, match="changed since it was imported"):
        load_index(out)
    from stratagym import cli

    if "index" not in cli.GROUPS:
        cli._load_plugins()
    with pytest.raises(SystemExit) as info:  # through the console script's error boundary, as a user runs it
        cli.main(["index", "import-search-r1", "--index", str(tmp_path / "missing.index"),
                  "--corpus", str(corpus), "--model", str(tiny_encoder), "--out", str(tmp_path / "z")])
    out = capsys.readouterr()
    text = out.err + out.out
    assert info.value.code == 2 and "does not exist; pass --index" in text and "Traceback" not in text
