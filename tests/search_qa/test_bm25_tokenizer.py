"""The lean query tokenizer gives bm25s's own token ids, so the bm25s retriever ranks exactly as before.

Reference: ``bm25s.tokenize(texts, stopwords="en", stemmer=..., return_ids=False)`` (bm25s/tokenization.py,
``tokenize``: lower-case, ``(?u)\\b\\w\\w+\\b``, stopwords dropped, stems via ``stemWords``) followed by
``BM25.get_tokens_ids`` (bm25s/__init__.py: unknown tokens dropped, duplicates kept), which is what
``BM25sRetriever.batch_search`` called before.
"""

from __future__ import annotations

import bm25s
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratagym.envs.search_qa.index import make_retriever
from stratagym.envs.search_qa.retrievers.bm25 import BM25sRetriever, QueryTokenizer, top_k_positive


@pytest.fixture(scope="module")
def retriever() -> BM25sRetriever:
    return make_retriever("bm25s")


def stock_ids(r: BM25sRetriever, query: str) -> list[int]:
    tokens = bm25s.tokenize([query], stopwords="en", stemmer=r._stemmer, return_ids=False, show_progress=False)[0]
    return r._model.get_tokens_ids(tokens)


def stock_search(r: BM25sRetriever, query: str, k: int) -> list[tuple[str, float]]:
    ids = stock_ids(r, query)
    if not ids:
        return []
    scores = r._model.get_scores_from_ids(ids)
    return [(r.corpus.ids[d], s) for d, s in top_k_positive(scores, k)]


def test_token_ids_and_rankings_match_bm25s_on_every_benchmark_query(retriever, test_questions):
    queries = [q for ex in test_questions for q in ex.oracle_queries] + [ex.question for ex in test_questions]
    for q in queries:
        assert retriever._tokenizer.ids(q) == stock_ids(retriever, q), q
    got = retriever.batch_search(queries, 5)
    for q, hits in zip(queries, got):
        assert [(h.id, h.score) for h in hits] == stock_search(retriever, q, 5)


_words = st.sampled_from(["the", "The", "river", "rivers", "flows", "Kubae", "KUBAE", "of", "a", "is", "running",
                          "born", "city", "x", "é", "café", "naïve", "ß", "42", "a1", "_", "Straße", "İstanbul"])
_text = st.one_of(
    st.text(max_size=60),
    st.lists(_words, max_size=12).map(" ".join),
    st.lists(st.one_of(_words, st.text(alphabet=" \t\n.,;'\"-()!?", max_size=3)), max_size=12).map("".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=_text)
def test_token_ids_match_bm25s_on_any_text(retriever, query):
    """Same ids for arbitrary text: Unicode case folding, stopwords, duplicates, unknown words."""
    assert retriever._tokenizer.ids(query) == stock_ids(retriever, query)


def test_word_memory_is_bounded_and_does_not_change_answers(retriever):
    tok = QueryTokenizer(retriever._model.vocab_dict, retriever._stemmer, cache_size=3)
    q = "Kubae river flows through the city of Kubae in the kingdom"
    assert tok.ids(q) == stock_ids(retriever, q)
    assert tok.ids(q) == stock_ids(retriever, q)  # second time partly from memory, partly not
    assert len(tok._ids) == 3


def test_no_stemmer_uses_the_raw_tokens(retriever):
    """Without PyStemmer the vocabulary holds raw tokens; the tokenizer then does not stem either."""
    vocab = {"rivers": 0, "flows": 1}
    tok = QueryTokenizer(vocab, None)
    assert tok.ids("The RIVERS flows, rivers!") == [0, 1, 0]
