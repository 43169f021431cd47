"""Answer metrics for open-domain QA, as Search-R1, FlashRAG and the SQuAD script compute them.

Every metric takes a prediction and one gold answer or a list of them, and returns the best score over
the list as a float in [0, 1]. ``None`` or an empty list of answers scores 0. The QA env's reward and the
eval harness both call these functions, so training reward and reported figures cannot drift apart.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, Sequence, Union

__all__ = ["normalize_answer", "exact_match", "f1", "substring_match", "Answers"]

Answers = Union[str, Sequence[str], None]

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop articles (a/an/the), collapse whitespace."""
    if text is None:
        return ""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(answers: Answers) -> list[str]:
    if answers is None:
        return []
    if isinstance(answers, str):
        return [answers]
    return [str(a) for a in answers if a is not None]


def exact_match(prediction: str | None, answers: Answers) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in _as_list(answers)))


def substring_match(prediction: str | None, answers: Answers) -> float:
    """1.0 if any normalised gold answer occurs inside the normalised prediction: Search-R1's ``subem_check``.

    Exactly Search-R1's rule, including its edge case: a gold answer that normalises to ``""`` (say
    ``"the"``) is contained in every prediction, so ``substring_match("x", ["the"]) == 1.0``. Reported
    figures must be comparable with Search-R1's, so the edge case is kept rather than "fixed". A missing
    prediction (``None``: the episode never answered) scores 0, as Search-R1 scores a missing answer.
    """
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(a) in pred for a in _as_list(answers)))


def _f1_one(pred_tokens: list[str], gold: str) -> float:
    gold_norm = normalize_answer(gold)
    pred_norm = " ".join(pred_tokens)
    # FlashRAG / HotpotQA rule: yes/no/noanswer only score when they match exactly.
    special = ("yes", "no", "noanswer")
    if (pred_norm in special or gold_norm in special) and pred_norm != gold_norm:
        return 0.0
    gold_tokens = gold_norm.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str | None, answers: Answers) -> float:
    """Token-level F1 between the normalised prediction and the best gold answer (SQuAD)."""
    if prediction is None:
        return 0.0
    pred_tokens = normalize_answer(prediction).split()
    golds: Iterable[str] = _as_list(answers)
    return max((_f1_one(pred_tokens, g) for g in golds), default=0.0)
