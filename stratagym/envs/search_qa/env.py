"""``stratagym/SearchQA-v0``: multi-turn retrieval QA with the Search-R1 tag protocol.

An episode is one question. The first observation is Search-R1's prompt with the question. Each turn
the agent writes free text that must contain either ``<search> query </search>`` -- the env answers
with the top-k passages in an ``<information>`` block -- or ``<answer> text </answer>``, which ends the
episode with reward = exact match (SQuAD normalisation) against the gold answers. Turns are parsed as
Search-R1's rollout parses them (:func:`~stratagym.envs.search_qa.protocol.parse_action`).

``max_turns`` means what it means in Search-R1's scripts: the number of search rounds. After
``max_turns`` turns the agent gets one more, final turn, in which a search is still a valid action but
retrieves nothing (Search-R1 runs that turn with ``do_search=False``); an episode that has not answered
by then is truncated with reward 0. So ``max_turns=4`` allows 5 model turns, 4 of them searches.

Structure reported for group-relative RL (beyond the standard keys): ``search_count`` / ``tool_calls``
count valid searches (the Stratified GRPO stratum); the GiGPO/HGPO anchor state is the prompt (so the
question) at reset, then the ``<information>`` block a search returned.
"""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

from stratagym.envs.core import ConfigError, StepResult, TextEnv, stable_hash
from stratagym.envs.search_qa.data import BUNDLED_CORPUS, QAExample, _resolve_qa_path, bundled_corpus, file_fingerprint, load_qa
from stratagym.envs.search_qa.index import MANIFEST_NAME, make_retriever
from stratagym.envs.search_qa.overlap import episode_overlap
from stratagym.envs.search_qa.protocol import (
    INVALID_ACTION_MESSAGE,
    PROMPT_TEMPLATE,
    STOP_STRINGS,
    PassageText,
    format_prompt,
    information_block,
    parse_turn,
)
from stratagym.envs.search_qa.retrievers.base import Hit, Retriever
from stratagym.metrics import exact_match, f1, substring_match

__all__ = ["SearchQAEnv", "RETRIEVAL_ABLATIONS"]

_WORD = re.compile(r"[A-Za-z0-9]+")
#: The first observation under the tools protocol: the question, and what the two tools are for.
TOOLS_INSTRUCTION = (
    "Answer the given question. Reason first if you like; call the search tool to look up passages in the "
    "knowledge base (as often as you need), then call the answer tool with a short answer. Question: "
)
#: One table of formatted passages per process: every env shares the retriever, so they meet the same passages.
PASSAGE_TABLE = PassageText()
_INVALID_HASH = stable_hash(INVALID_ACTION_MESSAGE)
_CONTENTS = attrgetter("contents")  # a hit's passage text, read in C


def _hop_set(hops: int | Sequence[int]) -> tuple[int, ...]:
    """``hops`` as a sorted tuple of positive ints; a ConfigError names the expected form."""
    values = [hops] if isinstance(hops, (int, str)) else list(hops)
    try:
        out = tuple(sorted({int(h) for h in values}))
    except (TypeError, ValueError):
        out = ()
    if not out or any(h < 1 for h in out) or any(isinstance(h, bool) for h in values):
        raise ConfigError(f"hops must be a hop count >= 1 or a list of them (e.g. 3 or [2, 3]), got {hops!r}")
    return out


def _with_hops(examples: Sequence[QAExample], hops: tuple[int, ...], where: str) -> list[QAExample]:
    """The examples whose ``metadata.hops`` is in ``hops``; refused where a question has no hop count."""
    missing = sum(ex.hops is None for ex in examples)
    if missing:
        raise ConfigError(f"hops={list(hops)} filters questions by their metadata.hops, but {missing} of the "
                          f"{len(examples)} questions in {where} have none; drop the hops option for this dataset")
    kept = [ex for ex in examples if ex.hops in hops]
    if not kept:
        found = sorted({ex.hops for ex in examples})
        raise ConfigError(f"no question in {where} has hops in {list(hops)}; its questions have {found}")
    return kept


class SearchQAEnv(TextEnv):
    """Retrieval QA over a passage corpus (default: the bundled invented-world benchmark with bm25s).

    Keyword arguments (all optional; ``gym.make("stratagym/SearchQA-v0", **kwargs)``):

    * ``dataset`` -- ``"bundled"``, a FlashRAG ``.jsonl`` / Search-R1 ``.parquet`` file or a directory of splits;
    * ``split`` -- ``"train"`` (default), ``"test"`` or ``"test_unseen"`` (a second invented world with its
      own corpus, picked automatically) for the bundled data;
    * ``retriever`` -- ``"bm25s"`` (default), ``"pyserini"``, ``"dense"``, ``"remote"`` or a :class:`Retriever`;
    * ``corpus`` / ``index`` -- the passages (default bundled) and a prebuilt index directory;
    * ``retrieval_urls`` -- Search-R1-compatible servers (round robin, retries with backoff);
    * ``dense_model`` / ``faiss_kind`` -- encoder path and ``flat`` / ``ivf`` / ``hnsw`` for the dense backend;
    * ``hops`` (``None``: every question) -- keep only questions with these hop counts (an int or a list),
      from the examples' ``metadata.hops``: a curriculum over hops trains on the longest chains alone;
    * ``retrieval_ablation`` (``None``) -- the search-dependence eval: every search returns nothing
      (``no_retrieval``), ``topk`` random passages (``random_passage``), or the hits for the *next*
      question's gold query at this hop (``shuffled_gold``); the search still counts. Not Search-R1's: an
      eval-only probe of whether a model reads what it retrieves (docs/eval.md);
    * ``topk`` (3), ``max_turns`` (4 search rounds + 1 final turn, Search-R1's meaning), ``context_k`` (4);
    * ``max_query_chars`` (``None``: no limit, as Search-R1) -- longer queries become invalid turns;
    * ``accept_unclosed_tags`` (``False``, as Search-R1) -- treat a turn that ends inside an unclosed
      ``<search>``/``<answer>`` as closed (for generators that strip the stop string);
    * ``prompt_template`` -- with a ``{question}`` field (Search-R1's by default);
    * ``protocol`` -- ``"tags"`` (Search-R1's, default) or ``"tools"``: the tools ``search(query)`` and
      ``answer(text)`` called as ``<tool_call>`` JSON (:mod:`stratagym.envs.tools`), read by the
      ``tool_parser`` named (``"hermes"``); the same searches, answers, rewards and hashes.
    """

    tool_set = "stratagym.envs.search_qa.tools:TOOLS"

    metadata = {**TextEnv.metadata, "stop_strings": STOP_STRINGS}
    max_observation_chars = 1 << 20
    max_action_chars = 16_384
    #: Agents should stop generating after either closing tag.
    stop_strings: tuple[str, ...] = STOP_STRINGS

    def __init__(
        self,
        *,
        dataset: str = "bundled",
        split: str = "train",
        retriever: str | Retriever | None = None,
        corpus: str | None = None,
        index: str | None = None,
        retrieval_urls: str | Sequence[str] | None = None,
        dense_model: str | None = None,
        faiss_kind: str = "flat",
        topk: int = 3,
        max_turns: int = 4,
        max_query_chars: int | None = None,
        accept_unclosed_tags: bool = False,
        context_k: int = 4,
        prompt_template: str = PROMPT_TEMPLATE,
        retrieval_timeout: float = 30.0,
        retrieval_retries: int = 3,
        render_mode: str | None = None,
        max_action_chars: int | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
        hops: int | Sequence[int] | None = None,
        retrieval_ablation: str | None = None,
    ):
        if int(max_turns) < 0:
            raise ConfigError(f"max_turns (search rounds) must be >= 0, got {max_turns}")
        # Search-R1: max_turns rounds that may search, then one final turn (``run_llm_loop``).
        super().__init__(max_steps=int(max_turns) + 1, context_k=context_k, render_mode=render_mode,
                         max_action_chars=max_action_chars, protocol=protocol, tool_parser=tool_parser)
        if topk < 1:
            raise ConfigError(f"topk must be >= 1, got {topk}")
        if max_query_chars is not None and max_query_chars < 1:
            raise ConfigError(f"max_query_chars must be >= 1 or None, got {max_query_chars}")
        if "{question}" not in prompt_template:
            raise ConfigError("prompt_template must contain a '{question}' field")
        self.dataset, self.split = str(dataset), str(split)
        self.topk, self.max_turns = int(topk), int(max_turns)
        self.max_query_chars = None if max_query_chars is None else int(max_query_chars)
        self.accept_unclosed_tags = bool(accept_unclosed_tags)
        self.prompt_template = prompt_template
        self._examples = load_qa(dataset, split)
        self.hops = None if hops is None else _hop_set(hops)
        if self.hops is not None:
            self._examples = _with_hops(self._examples, self.hops, f"{dataset!s} {split}")
        self._by_id = {ex.id: ex for ex in self._examples}
        self._ids = tuple(ex.id for ex in self._examples)
        if corpus is None and self.dataset == "bundled" and bundled_corpus(self.split) != BUNDLED_CORPUS:
            # a bundled split over its own world (test_unseen): its corpus, so the split name is enough; an
            # ``index`` built from another corpus is refused by the fingerprint check in load_index
            corpus = str(bundled_corpus(self.split))
        self.corpus = corpus
        self.index = index
        self.retriever = make_retriever(
            retriever, corpus=corpus, index=index, urls=retrieval_urls, dense_model=dense_model,
            faiss_kind=faiss_kind, timeout=retrieval_timeout, retries=retrieval_retries,
        )
        # Shared in-process retrievers belong to the process; a client built for this env belongs to it.
        self._owns_retriever = getattr(self.retriever, "backend", "") == "remote" and not isinstance(retriever, Retriever)
        # which questions training could have answered from memory (answer, passages or a near-duplicate
        # question shared with the train split): the final info's ``overlap``; None for a train split or
        # a dataset without one
        self._overlap = episode_overlap(self.dataset, self.split)
        self._example: QAExample | None = None
        self.retrieval_ablation = _ablation(retrieval_ablation, self.retriever, len(self._examples))
        # shuffled_gold: each question reads the next question's gold passages (the split's order, before a
        # hops filter, so the pairing does not depend on which hop counts are kept)
        every = load_qa(dataset, split)
        self._partner = {ex.id: every[(i + 1) % len(every)] for i, ex in enumerate(every)}
        self._searches = 0

    # ---- tasks ----------------------------------------------------------------------------------
    def task_ids(self) -> Sequence[str]:
        return self._ids

    def has_task(self, task_id: str) -> bool:
        return task_id in self._by_id

    def example(self, task_id: str) -> QAExample:
        """The question, gold answers and metadata of a task (scripted agents and eval use this)."""
        return self._by_id[task_id]

    @property
    def examples(self) -> tuple[QAExample, ...]:
        return tuple(self._examples)

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        ex = self._by_id[task_id]
        self._example = ex
        self._searches = 0
        return format_prompt(ex.question, self.prompt_template), self._task_info(ex)

    @staticmethod
    def _task_info(ex: QAExample) -> dict[str, Any]:
        info: dict[str, Any] = {"split": ex.split, "data_source": ex.data_source}
        if ex.hops is not None:
            info["hops"] = ex.hops
        return info

    # ---- steps ----------------------------------------------------------------------------------
    def _step(self, action: str) -> StepResult:
        kind, text, _ = parse_turn(action, max_query_chars=self.max_query_chars,
                                   accept_unclosed_tags=self.accept_unclosed_tags)
        if kind == "search":
            return self._search(text)
        if kind == "answer":
            return self._answer(text)
        return self._invalid(text)

    def invalid_action_result(self, problem: str) -> StepResult:
        return self._invalid(problem)

    def tools_observation(self, observation: str) -> str:
        """The question with an instruction to use the tools instead of Search-R1's tags."""
        question = self._example.question if self._example is not None else observation
        return TOOLS_INSTRUCTION + question.strip()

    def _call_tool(self, call: Any) -> StepResult:
        """A checked call runs the search or answer step itself (never through tag text, so an argument
        holding ``</search>`` is searched as written); queries obey ``max_query_chars`` as tags do."""
        if call.name == "answer":
            return self._answer(str(call.arguments["text"]).strip())
        query = str(call.arguments["query"]).strip()
        if self.max_query_chars is not None and len(query) > self.max_query_chars:
            return self._tool_invalid(f"the search query is too long ({len(query)} > {self.max_query_chars} characters)")
        return self._search(query)

    def _last_turn(self) -> bool:
        return self._step_index + 1 >= self.max_steps

    def _final_scores(self, answer: str | None) -> dict[str, Any]:
        gold = list(self._example.golden_answers) if self._example else []
        scores = {
            "answer": answer,
            "em": exact_match(answer, gold),
            "f1": f1(answer, gold),
            "substring_em": substring_match(answer, gold),
            "golden_answers": gold,
        }
        if self._overlap is not None and self._example is not None:
            scores["overlap"] = self._overlap.get(self._example.id, False)
        return scores

    def _invalid(self, problem: str) -> StepResult:
        info: dict[str, Any] = {"invalid_reason": problem}
        if self._last_turn():
            info.update(self._final_scores(None))
        return StepResult(observation=INVALID_ACTION_MESSAGE, action_valid=False, info=info, state_hash=_INVALID_HASH)

    def _search(self, query: str) -> StepResult:
        info: dict[str, Any] = {"query": query}
        if self._last_turn():
            # Search-R1's final turn (do_search=False): the search counts, nothing is retrieved, and the
            # episode ends unanswered.
            info.update(self._final_scores(None))
            observation, state_hash = PASSAGE_TABLE.block(())
            return StepResult(observation=observation, tool="search", state_text=observation, info=info,
                              state_hash=state_hash)
        try:
            hits = self._retrieve(query)
            observation, state_hash = PASSAGE_TABLE.block(tuple(map(_CONTENTS, hits)))
        except Exception as exc:  # server down, backend crash: an observation, never a crashed rollout
            observation, state_hash = _retrieval_failed(exc, info), None
        # The search was well-formed, so it is a valid action and counts as a search even if the
        # retriever failed: the agent's decision is what the stratum records.
        return StepResult(observation=observation, tool="search", state_text=observation, info=info,
                          state_hash=state_hash)

    def _retrieve(self, query: str) -> list[Any]:
        """The passages a search returns: the retriever's top-k, or under ``retrieval_ablation`` what the
        ablation puts in their place (the search-dependence eval, docs/eval.md): nothing, ``topk`` random
        passages of the corpus (drawn per question and search, so every agent meets the same ones), or the
        top-k for the next question's gold query at this hop."""
        k, self._searches = self._searches, self._searches + 1
        if self.retrieval_ablation is None:
            return self.retriever.batch_search([query], self.topk)[0]
        if self.retrieval_ablation == "no_retrieval":
            return []
        task = self._example.id if self._example is not None else ""
        if self.retrieval_ablation == "random_passage":
            corpus = self.retriever.corpus
            rng = np.random.default_rng(stable_hash(f"random_passage/{task}/{k}") & 0x7FFFFFFFFFFFFFFF)
            picks = rng.choice(len(corpus), size=min(self.topk, len(corpus)), replace=False)
            return [Hit(*corpus.doc(int(i)), 0.0) for i in picks]
        partner = self._partner[task]
        gold = partner.oracle_queries or [partner.question]
        return self.retriever.batch_search([gold[min(k, len(gold) - 1)]], self.topk)[0]

    def _answer(self, answer: str) -> StepResult:
        scores = self._final_scores(answer)
        em = scores["em"]
        return StepResult(observation=f"\n\n<answer>{answer}</answer>\n\n", reward=em, terminated=True,
                          won=em == 1.0, score=em, info=scores)

    # ---- helpers for agents -----------------------------------------------------------------------
    def random_action(self, rng: np.random.Generator, info: dict[str, Any] | None = None) -> str:
        """A random but meaningful turn: mostly a search with words of the question, sometimes an
        answer guess, occasionally text with no tag (an invalid turn).

        The question is ``info["task_id"]``'s when given (one agent acting for a batch of envs), else
        this env's current one.
        """
        ex = self._by_id.get(str(info.get("task_id"))) if info else None
        ex = ex or self._example
        words = _WORD.findall(ex.question if ex else "") or ["unknown"]
        u = float(rng.random())
        if u < 0.6:
            n = int(rng.integers(1, min(4, len(words)) + 1))
            picks = [words[int(i)] for i in rng.choice(len(words), size=n, replace=False)]
            return f"<think>I need more information.</think>\n<search> {' '.join(picks)} </search>"
        if u < 0.9:
            return f"<think>I will guess.</think>\n<answer> {words[int(rng.integers(len(words)))]} </answer>"
        return "I am not sure what to do."

    def protocol_data(self) -> dict[str, Any]:
        """The questions file, corpus and index by content, and the retriever's settings (its public
        scalar attributes: BM25's k1/b/stemmer, the dense model...; absolute paths left out), for the
        protocol fingerprint. A remote retriever's corpus is the server's: unknown here (``None``)."""
        import os

        r = self.retriever
        corpus = getattr(r, "corpus", None)
        settings = {k: v for k, v in sorted(vars(r).items()) if not k.startswith("_") and isinstance(v, (str, int, float, bool))
                    and not (isinstance(v, str) and os.path.isabs(v))}
        manifest = None if self.index is None else os.path.join(str(self.index), MANIFEST_NAME)
        libraries = {"bm25s": ["bm25s", "PyStemmer"], "pyserini": ["pyserini"], "dense": ["faiss-cpu", "transformers", "torch"]}
        return {
            "questions": file_fingerprint(_resolve_qa_path(self.dataset, self.split)),
            "corpus": getattr(corpus, "fingerprint", None),
            "index": "built in process" if manifest is None else (file_fingerprint(manifest) if os.path.isfile(manifest) else None),
            "retriever": {"backend": getattr(r, "backend", type(r).__name__), **settings},
            "libraries": libraries.get(str(getattr(r, "backend", "")), []),
        }

    def close(self) -> None:
        if self._owns_retriever:
            self.retriever.close()
        super().close()


#: The search-dependence eval's ablations (``retrieval_ablation``): what a search returns instead of its hits.
RETRIEVAL_ABLATIONS = ("no_retrieval", "random_passage", "shuffled_gold")


def _ablation(value: str | None, retriever: Retriever, n_questions: int) -> str | None:
    """``retrieval_ablation`` checked: one of :data:`RETRIEVAL_ABLATIONS` (or None), with what it needs."""
    if value is None:
        return None
    if value not in RETRIEVAL_ABLATIONS:
        raise ConfigError(f"retrieval_ablation must be one of {', '.join(RETRIEVAL_ABLATIONS)} (or unset), got {value!r}")
    if value == "random_passage" and getattr(retriever, "corpus", None) is None:
        raise ConfigError("retrieval_ablation: random_passage draws from the corpus in this process; a remote "
                          "retriever has none here: pass corpus=... with a local retriever")
    if value == "shuffled_gold" and n_questions < 2:
        raise ConfigError("retrieval_ablation: shuffled_gold needs at least 2 questions to shuffle gold passages across")
    return value


def _retrieval_failed(exc: Exception, info: dict[str, Any]) -> str:
    """The observation of a search whose retriever raised; the message goes into ``info`` too."""
    message = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    info["retrieval_error"] = message
    return information_block(f"Retrieval failed: {message}")
