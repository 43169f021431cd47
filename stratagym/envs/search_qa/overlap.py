"""Train/test overlap of a QA dataset: which evaluation questions training could have answered from memory.

A search agent's score should measure searching and reading. A test question whose gold answer is also a
train answer, whose supporting passages were all supporting passages of train questions, or that is a
near-copy of a train question can be answered from what training showed (Lewis et al. 2021, "Question
and Answer Test-Train Overlap in Open-Domain Question Answering Datasets": 60-70 % of NQ / TriviaQA /
WebQuestions test answers are train answers). So each evaluation question gets three flags against the
train split of the same dataset:

* **answer**: one of its gold answers, normalised like exact match (SQuAD: lowercase, no punctuation, no
  articles, collapsed spaces), equals a normalised gold answer of some train question (answers that
  normalise to ``""`` never match);
* **passages**: it names supporting passages and every one of them supports some train question.
  Passages are compared by ``metadata.supporting_doc_ids`` where the question has them, else by title
  (``metadata.supporting_titles``, or HotpotQA / 2Wiki's ``supporting_facts`` titles); a question without
  any, or whose train split names none of that kind, is *unknown* (not counted in the share);
* **question**: a near-duplicate of a train question: the token sets of the two questions, normalised like
  answers and split on spaces, have Jaccard similarity ``|a & b| / |a | b| >= 0.8`` (an empty question is
  nobody's duplicate). Computed exactly, without comparing every pair: with tokens ordered rarest first,
  two sets with Jaccard >= t share a token in their prefixes of ``n - ceil(t n) + 1`` tokens (the prefix
  filter of all-pairs similarity joins), so only pairs sharing a rare token are scored, in sparse matrix
  products (10k x 80k questions in seconds).

A question **overlaps** when any of the three holds. ``stratagym envs audit`` prints the shares per
evaluation split, and the env puts the flag in each episode's final ``info["overlap"]`` so an eval reports
EM on the overlapping and the non-overlapping parts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from stratagym.envs.search_qa.data import BUNDLED_SPLITS, QAExample, _resolve_qa_path, load_qa
from stratagym.errors import ConfigError
from stratagym.metrics import normalize_answer
from stratagym.provenance import TrainingDataMissing, data_digests, split_files

__all__ = ["NEAR_DUPLICATE_JACCARD", "OverlapFlags", "SplitAudit", "overlap_flags", "audit_dataset",
           "train_source", "eval_splits", "episode_overlap", "training_examples", "training_overlap"]

#: Token-set Jaccard similarity at or above which two questions are near-duplicates.
NEAR_DUPLICATE_JACCARD = 0.8
_PARQUET_OR_JSON = (".jsonl", ".parquet", ".json")


@dataclass(frozen=True)
class OverlapFlags:
    """Per evaluation question (in the order given): the three overlap flags against a train split."""

    ids: tuple[str, ...]
    answer: np.ndarray  # bool
    passages: np.ndarray  # bool; False where unknown
    passages_known: np.ndarray  # bool: the question and the train split name supporting passages of one kind
    question: np.ndarray  # bool

    @property
    def any(self) -> np.ndarray:
        """Overlaps in at least one way."""
        return self.answer | self.passages | self.question

    def by_id(self) -> dict[str, bool]:
        return dict(zip(self.ids, self.any.tolist()))


@dataclass(frozen=True)
class SplitAudit:
    """Counts of one evaluation split (what ``stratagym envs audit`` prints)."""

    split: str
    n: int
    answer: int
    passages: int
    passages_known: int
    question: int
    any: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def of(cls, split: str, flags: OverlapFlags) -> "SplitAudit":
        return cls(split=split, n=len(flags.ids), answer=int(flags.answer.sum()), passages=int(flags.passages.sum()),
                   passages_known=int(flags.passages_known.sum()), question=int(flags.question.sum()),
                   any=int(flags.any.sum()))


# --------------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------------


def overlap_flags(eval_examples: Sequence[QAExample], train_examples: Sequence[QAExample], *,
                  threshold: float = NEAR_DUPLICATE_JACCARD) -> OverlapFlags:
    """The answer / passage / near-duplicate-question flags of ``eval_examples`` against ``train_examples``."""
    if not 0.0 < float(threshold) <= 1.0:
        raise ConfigError(f"the near-duplicate threshold must be in (0, 1], got {threshold}")
    train_answers = {a for ex in train_examples for a in (normalize_answer(x) for x in ex.golden_answers) if a}
    answer = np.array([any(normalize_answer(a) in train_answers for a in ex.golden_answers) for ex in eval_examples],
                      dtype=bool)

    train_keys: dict[str, set[str]] = {"id": set(), "title": set()}
    for ex in train_examples:
        kind, keys = _passage_keys(ex)
        if kind:
            train_keys[kind].update(keys)
    passages = np.zeros(len(eval_examples), dtype=bool)
    known = np.zeros(len(eval_examples), dtype=bool)
    for i, ex in enumerate(eval_examples):
        kind, keys = _passage_keys(ex)
        if kind and train_keys[kind]:
            known[i] = True
            passages[i] = all(k in train_keys[kind] for k in keys)

    question = near_duplicates([ex.question for ex in eval_examples], [ex.question for ex in train_examples],
                               threshold=threshold)
    return OverlapFlags(tuple(ex.id for ex in eval_examples), answer, passages, known, question)


def _passage_keys(ex: QAExample) -> tuple[str, list[str]]:
    """``("id" | "title", keys)`` of a question's supporting passages, or ``("", [])`` when it names none."""
    meta = ex.metadata or {}
    ids = meta.get("supporting_doc_ids")
    if isinstance(ids, (list, tuple)) and ids:
        return "id", [str(i) for i in ids]
    titles = meta.get("supporting_titles")
    if not (isinstance(titles, (list, tuple)) and titles):
        facts = meta.get("supporting_facts")  # HotpotQA / 2Wiki: {"title": [...], "sent_id": [...]} or [[title, sent], ...]
        if isinstance(facts, dict):
            titles = facts.get("title")
        elif isinstance(facts, (list, tuple)):
            titles = [f[0] for f in facts if isinstance(f, (list, tuple)) and f]
    if isinstance(titles, (list, tuple)) and titles:
        return "title", sorted({str(t) for t in titles})
    return "", []


def near_duplicates(questions: Sequence[str], train_questions: Sequence[str], *,
                    threshold: float = NEAR_DUPLICATE_JACCARD, weighting: str = "idf") -> np.ndarray:
    """``flags[i]``: ``questions[i]`` has token-set Jaccard >= ``threshold`` with some train question.

    ``weighting="idf"`` (default) weighs each token by ``ln(1 + N / df)`` (``N`` questions, ``df`` of them
    holding the token) in both the intersection and the union; ``"none"`` is plain Jaccard. Exact (no
    hashing approximation): candidate pairs come from the prefix filter (tokens rarest first; a set's prefix
    is every token from which on the remaining weight is still >= ``threshold`` times its total: two sets
    above the threshold share their first common token in both prefixes), then a length filter, then the
    exact intersection of each candidate pair, all in sparse matrix products.
    """
    import scipy.sparse as sp

    if weighting not in ("idf", "none"):
        raise ConfigError(f"weighting must be 'idf' or 'none', got {weighting!r}")
    t = float(threshold)
    if len(questions) == 0 or len(train_questions) == 0:
        return np.zeros(len(questions), dtype=bool)
    sets_q = [set(normalize_answer(q).split()) for q in questions]
    sets_t = [set(normalize_answer(q).split()) for q in train_questions]
    df: dict[str, int] = {}
    for s in (*sets_q, *sets_t):
        for w in s:
            df[w] = df.get(w, 0) + 1
    vocab = sorted(df, key=lambda w: (df[w], w))  # rank 0 = rarest
    order = {w: r for r, w in enumerate(vocab)}
    n_all = len(sets_q) + len(sets_t)
    weight = (np.log1p(n_all / np.array([df[w] for w in vocab], dtype=np.float64)) if weighting == "idf"
              else np.ones(len(vocab)))

    def matrices(sets: list[set[str]]) -> tuple[Any, Any, np.ndarray]:
        sizes = np.array([len(s) for s in sets], dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(sizes)])
        cols = np.fromiter((c for s in sets for c in sorted(order[w] for w in s)), dtype=np.int64, count=int(indptr[-1]))
        w = weight[cols]
        row = np.repeat(np.arange(len(sets)), sizes)
        total = np.bincount(row, weights=w, minlength=len(sets))
        before = np.cumsum(w) - w - np.concatenate([[0.0], np.cumsum(w)])[indptr[:-1]][row]  # weight before each token
        in_prefix = total[row] - before >= t * total[row] * (1 - 1e-9)  # the weight from this token on
        full = sp.csr_matrix((w, cols, indptr), shape=(len(sets), len(vocab)))
        prefix = sp.csr_matrix((np.ones(int(in_prefix.sum())), (row[in_prefix], cols[in_prefix])), shape=full.shape)
        return full, prefix, total

    full_q, prefix_q, w_q = matrices(sets_q)
    full_t, prefix_t, w_t = matrices(sets_t)
    bin_q = full_q.copy()
    bin_q.data[:] = 1.0
    flags = np.zeros(len(questions), dtype=bool)
    step = 4096  # eval rows per product: bounds the candidate list's memory
    for start in range(0, len(questions), step):
        cand = (prefix_q[start:start + step] @ prefix_t.T).tocoo()
        ci, cj = cand.row.astype(np.int64) + start, cand.col.astype(np.int64)
        wa, wb = w_q[ci], w_t[cj]
        ok = (t * wa <= wb * (1 + 1e-9)) & (t * wb <= wa * (1 + 1e-9))  # length filter: J <= min/max
        ci, cj, wa, wb = ci[ok], cj[ok], wa[ok], wb[ok]
        if len(ci) == 0:
            continue
        inter = np.asarray(bin_q[ci].multiply(full_t[cj]).sum(axis=1)).ravel()
        union = wa + wb - inter
        hit = inter >= t * union * (1 - 1e-9)
        flags[ci[hit]] = True
    return flags


# --------------------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------------------


def train_source(dataset: str | os.PathLike, split: str, train_split: str = "train") -> tuple[str, str] | None:
    """``(source, split)`` to load the train questions of ``dataset`` with, or None when it has none apart
    from ``split`` itself: the bundled data and a directory of splits have ``train`` beside the eval split;
    a single file ``.../test.jsonl`` has one when a ``train`` file of a known format lies beside it."""
    if split == train_split:
        return None
    if str(dataset) == "bundled":
        return ("bundled", train_split)
    path = Path(dataset).expanduser()
    if path.is_dir():
        return (str(path), train_split) if any((path / f"{train_split}{e}").exists() for e in _PARQUET_OR_JSON) else None
    if path.is_file():
        for ext in _PARQUET_OR_JSON:
            sibling = path.with_name(f"{train_split}{ext}")
            if sibling.exists() and sibling.resolve() != path.resolve():
                return (str(sibling), train_split)
    return None


def eval_splits(dataset: str | os.PathLike, train_split: str = "train") -> list[str]:
    """The evaluation splits an audit covers by default: every split of the dataset but ``train_split``.

    The bundled data: ``test`` and ``test_unseen``; a directory: every ``*.jsonl`` / ``*.parquet`` /
    ``*.json`` file's stem; a single file: that file's stem."""
    if str(dataset) == "bundled":
        return [s for s in BUNDLED_SPLITS if s != train_split]
    path = Path(dataset).expanduser()
    if path.is_dir():
        return sorted({p.stem for e in _PARQUET_OR_JSON for p in path.glob(f"*{e}")} - {train_split})
    return [path.stem]


def audit_dataset(dataset: str | os.PathLike = "bundled", splits: Sequence[str] | None = None, *,
                  train_split: str = "train", threshold: float = NEAR_DUPLICATE_JACCARD,
                  training_sets: Sequence[Mapping[str, Any]] | None = None) -> list[SplitAudit]:
    """Overlap counts of each evaluation split of ``dataset`` against its train split, or, given
    ``training_sets`` (a checkpoint's provenance, :mod:`stratagym.provenance`), against exactly the
    questions those sets trained on.

    Raises :class:`ConfigError` (with the fix) when the dataset has no train split to compare with.
    """
    splits = list(splits) if splits else eval_splits(dataset, train_split)
    if not splits:
        raise ConfigError(f"{dataset} has no evaluation split besides {train_split!r}; pass --split NAME")
    out = []
    trained = training_examples(training_sets) if training_sets else None
    for split in splits:
        _resolve_qa_path(dataset, split)  # a missing file or split: its own message
        if trained is not None:
            flags = overlap_flags(load_qa(dataset, split), trained, threshold=threshold)
            out.append(SplitAudit.of(split, flags))
            continue
        src = train_source(dataset, split, train_split)
        if src is None:
            raise ConfigError(
                f"cannot audit split {split!r} of {dataset}: no {train_split!r} split to compare it with "
                f"(looked for {train_split}.jsonl / .parquet beside it). Pass a directory holding both, or "
                "--train-split NAME")
        out.append(SplitAudit.of(split, _cached_flags(str(dataset), split, *src, float(threshold))))
    return out


def training_examples(training_sets: Sequence[Mapping[str, Any]]) -> list[QAExample]:
    """The questions a model trained on: for each training set (``dataset`` from its ``data_kwargs``,
    ``"bundled"`` where it names none; its ``split``; its ``task_ids``), the examples with those ids.

    Data that is not on this machine is :class:`~stratagym.provenance.TrainingDataMissing`; a set whose split
    file no longer hashes to its recorded ``data_sha256``, or that names ids the split lacks, is a
    :class:`ConfigError`: overlap against other questions than the trained ones would be wrong without a sign."""
    out: list[QAExample] = []
    seen: set[tuple[str, str]] = set()
    for ts in training_sets:
        dataset = str((ts.get("data_kwargs") or {}).get("dataset", "bundled"))
        split = str(ts.get("split") or "train")  # None: the env's default split, which is train
        if dataset != "bundled" and not split_files(dataset, split):
            raise TrainingDataMissing(f"the training data {dataset} (split {split!r}) is not on this machine; build it "
                                      "(generated worlds: python scripts/make_search_qa_worlds.py)")
        path = _resolve_qa_path(dataset, split)
        recorded = (ts.get("data_sha256") or {}).get("dataset")
        if recorded and data_digests({"dataset": dataset}, split).get("dataset") != recorded:
            raise ConfigError(f"the training set {split!r} of {dataset} changed since the checkpoint trained on it "
                              f"({path} no longer hashes to its provenance's data_sha256); regenerate the data as "
                              "it was (e.g. scripts/make_search_qa_worlds.py) before measuring overlap")
        by_id = {ex.id: ex for ex in load_qa(dataset, split)}
        missing = [t for t in ts["task_ids"] if t not in by_id]
        if missing:
            raise ConfigError(f"the provenance names {len(missing)} task(s) that split {split!r} of {dataset} lacks "
                              f"(first: {missing[0]!r}); point the checkpoint's provenance at the data it trained on")
        for t in ts["task_ids"]:
            if (str(path), t) not in seen:
                seen.add((str(path), t))
                out.append(by_id[t])
    return out


def training_overlap(env_kwargs: Mapping[str, Any], split: str,
                     training_sets: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """``task_id -> overlaps`` for an eval split, against the questions of a checkpoint's training sets
    (the eval harness's hook for SearchQA, registered as the env's ``training_overlap``)."""
    dataset = str(env_kwargs.get("dataset", "bundled"))
    return overlap_flags(load_qa(dataset, split), training_examples(training_sets)).by_id()


def episode_overlap(dataset: str, split: str, *, train_split: str = "train") -> dict[str, bool] | None:
    """``task_id -> overlaps`` for an env's split (None for a train split or a dataset without one)."""
    src = train_source(dataset, split, train_split)
    if src is None:
        return None
    return _cached_flags(str(dataset), split, *src, NEAR_DUPLICATE_JACCARD).by_id()


def _cached_flags(dataset: str, split: str, train_dataset: str, train_split: str, threshold: float) -> OverlapFlags:
    """Flags computed once per process per (files, modification times, threshold): every env of a vector
    env and every eval of a split share them."""
    ev_path, tr_path = _resolve_qa_path(dataset, split), _resolve_qa_path(train_dataset, train_split)
    if ev_path.resolve() == tr_path.resolve():
        raise ConfigError(f"split {split!r} and the train split are the same file {ev_path}; "
                          "nothing to audit (pass the eval split's own file)")
    ev_st, tr_st = ev_path.stat(), tr_path.stat()
    return _flags_for(dataset, split, ev_st.st_mtime_ns, train_dataset, train_split, tr_st.st_mtime_ns, threshold)


@lru_cache(maxsize=8)
def _flags_for(dataset: str, split: str, _ev_mtime: int, train_dataset: str, train_split: str, _tr_mtime: int,
               threshold: float) -> OverlapFlags:
    return overlap_flags(load_qa(dataset, split), load_qa(train_dataset, train_split), threshold=threshold)
