"""The Search-R1 text protocol: prompt, action parsing, and how retrieved passages are shown.

An agent turn is free text. It either searches (``<search> query </search>``) or answers
(``<answer> text </answer>``), usually after reasoning in ``<think> ... </think>``. Generation should
stop at :data:`STOP_STRINGS`; backends that strip the stop string leave an unclosed tag at the end of
the text, which :func:`parse_action` accepts only with ``accept_unclosed_tags=True`` (Search-R1 does not;
stratagym's own generators put the stop string back).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from stratagym.envs import hashing, speedups
from stratagym.envs.hashing import normalize_text, stable_hash

__all__ = [
    "STOP_STRINGS",
    "PROMPT_TEMPLATE",
    "INVALID_ACTION_MESSAGE",
    "Action",
    "parse_action",
    "parse_turn",
    "PassageText",
    "cut_response",
    "close_unclosed_tag",
    "format_prompt",
    "format_passages",
    "format_block",
    "information_block",
    "question_from_prompt",
]

#: Generation stop strings (the closing tags of the two tool calls).
STOP_STRINGS: tuple[str, ...] = ("</search>", "</answer>")

#: Search-R1's prompt (``make_prefix`` in its data scripts), with ``{question}`` filled in.
PROMPT_TEMPLATE = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
    "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine "
    "by <search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)

#: Search-R1's corrective message after a turn that neither searched nor answered properly.
INVALID_ACTION_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
    "Let me try again.\n"
)

#: Search-R1's action pattern (``postprocess_predictions``): the first complete ``<search>..</search>`` or
#: ``<answer>..</answer>``, the closing tag naming the same tag as the opening one, case-sensitive.
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
#: Search-R1's answer pattern (``extract_solution`` in ``qa_em.py``): the scored answer is the last match.
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPEN_TAG = re.compile(r"<(search|answer)>")


@dataclass(frozen=True)
class Action:
    """A parsed turn: ``kind`` is ``"search"``, ``"answer"`` or ``"invalid"``; ``problem`` says why invalid.

    ``response`` is the turn as Search-R1 keeps it in the context: cut after the first ``</search>`` (or,
    without one, after the first ``</answer>``).
    """

    kind: str
    text: str = ""
    problem: str = ""
    response: str = ""


def cut_response(text: str) -> str:
    """Search-R1's ``_postprocess_responses``: keep the text up to and including the first ``</search>``;
    without one, up to the first ``</answer>``; without either, all of it.

    ``</search>`` is looked for first, wherever it is: ``"<answer>a</answer><search>q</search>"`` is
    kept whole (and then acts as the answer ``a``, the first complete tag pair).
    """
    for stop in ("</search>", "</answer>"):  # this order: Search-R1 looks for </search> first
        cut = text.find(stop)
        if cut >= 0:
            return text[: cut + len(stop)]
    return text


def close_unclosed_tag(text: str) -> str:
    """``text`` with a closing tag appended when it ends inside an unclosed ``<search>`` / ``<answer>``
    and holds no closing tag at all (a backend stripped the stop string). Not Search-R1 behaviour: only
    ``SearchQAEnv(accept_unclosed_tags=True)`` applies it."""
    if any(stop in text for stop in STOP_STRINGS):
        return text
    opens = list(_OPEN_TAG.finditer(text))
    return text + f"</{opens[-1].group(1)}>" if opens else text


def parse_action(text: str, *, max_query_chars: int | None = None, accept_unclosed_tags: bool = False) -> Action:
    """Parse one agent turn exactly as Search-R1's rollout does (``search_r1/llm_agent/generation.py``).

    1. The turn is cut after its first ``</search>``, else after its first ``</answer>`` (:func:`cut_response`).
    2. The action is the first complete, case-sensitive ``<search>q</search>`` or ``<answer>a</answer>``
       whose closing tag matches its opening one; ``<search>x</answer>`` is no action at all.
    3. A search's query is the tag content with surrounding whitespace stripped (it may be empty, as in
       Search-R1). An answer's text is the *last* ``<answer>..</answer>`` of the cut turn, stripped, which
       is what Search-R1's ``extract_solution`` scores.
    4. Anything else is invalid.

    Two options that Search-R1 does not have, both off by default: ``max_query_chars`` makes longer
    queries invalid; ``accept_unclosed_tags`` treats a turn ending inside an unclosed tag (and holding no
    closing tag) as closed, for generators that strip the stop string.
    """
    kind, value, response = parse_turn(text, max_query_chars=max_query_chars, accept_unclosed_tags=accept_unclosed_tags)
    if kind == "invalid":
        return Action("invalid", problem=value, response=response)
    return Action(kind, value, response=response)


_NO_ACTION = "the turn has no complete <search>...</search> or <answer>...</answer>"


def parse_turn(text: str, *, max_query_chars: int | None = None, accept_unclosed_tags: bool = False) -> tuple[str, str, str]:
    """:func:`parse_action` as a plain ``(kind, text or problem, response)`` tuple, for the env's step.

    Why a second entry point: building the frozen :class:`Action` costs about as much as parsing a
    short turn. Same rules, same results (``parse_action`` is this plus the dataclass). A plain ``str``
    goes to the C twin (``_speedups.parse_turn``) when the speed-ups are built.
    """
    if _parse_turn_c is not None and type(text) is str:
        return _parse_turn_c(text, max_query_chars, accept_unclosed_tags)
    return _parse_turn_py(text, max_query_chars=max_query_chars, accept_unclosed_tags=accept_unclosed_tags)


_parse_turn_c = None  # _speedups.parse_turn once bound (_bind_speedups)


def _parse_turn_py(text: str, *, max_query_chars: int | None = None, accept_unclosed_tags: bool = False) -> tuple[str, str, str]:
    """:func:`parse_turn` in Python: the reference of its C twin, and the path for str subclasses."""
    if accept_unclosed_tags:
        text = close_unclosed_tag(text)
    response = cut_response(text)
    kind, query = _first_action(response)
    if kind is None:
        return "invalid", _NO_ACTION, response
    if kind == "answer":
        return "answer", _ANSWER.findall(response)[-1].strip(), response
    query = query.strip()
    if max_query_chars is not None and len(query) > max_query_chars:
        return "invalid", f"the search query is too long ({len(query)} > {max_query_chars} characters)", response
    return "search", query, response


def _first_action(text: str) -> tuple[str | None, str]:
    """``_ACTION.search(text)``'s (tag, content), or (None, "") without a match, found with ``str.find``.

    The same leftmost-first match: the earliest ``<search>``/``<answer>`` that a closing tag of the same
    name follows, and its content up to the first such closing tag (the lazy ``.*?``); an opening tag
    with no closing after it is skipped. Why not the regex: a step that runs right after a retrieval
    finds the regex engine's code evicted from the cache (a hypothesis test checks the equivalence).
    """
    start = 0
    while True:
        search, answer = text.find("<search>", start), text.find("<answer>", start)
        if search < 0 and answer < 0:
            return None, ""
        if answer < 0 or 0 <= search < answer:
            at, tag, close = search, "search", "</search>"
        else:
            at, tag, close = answer, "answer", "</answer>"
        end = text.find(close, at + 8)
        if end >= 0:
            return tag, text[at + 8:end]
        start = at + 1


def format_prompt(question: str, template: str = PROMPT_TEMPLATE) -> str:
    """The first observation of an episode: the template with the question filled in."""
    question = question.strip()
    if question and question[-1] != "?":
        question += "?"
    return template.format(question=question)


def format_passages(contents: Sequence[str]) -> str:
    """Search-R1's ``_passages2string``: ``Doc i(Title: <first line>) <rest>`` per passage."""
    parts = []
    for i, content in enumerate(contents):
        title, _, text = content.partition("\n")
        parts += (_DOC[i] if i < len(_DOC) else f"Doc {i + 1}", "(Title: ", title, ") ", text, "\n")
    return "".join(parts)


def _passage_line(content: str) -> str:
    """One passage as :func:`format_passages` shows it after ``Doc i``: the first line is the title."""
    title, _, text = content.partition("\n")
    return f"(Title: {title}) {text}\n"


class PassageText:
    """Each passage's formatted text and its share of the observation's state hash, computed once.

    Why: a search step formats its passages, then normalises and hashes the whole ``<information>``
    block; passages recur (a group's rollouts, popular documents), so both are kept per passage
    contents, from the second time a passage is met (the first time costs what the plain path costs:
    a passage met once is only remembered as seen). Up to ``max_entries`` distinct passages; the
    table starts over when full. A whole result whose passages were all met before is kept too (up to
    ``max_blocks``), so a top-k list met again (a GRPO group's repeated query) is one lookup.

    With the C speed-ups the passage table is not used (see :meth:`block`): a result not kept whole is
    formatted and hashed straight from its contents, and kept whole from the second time it is met;
    :meth:`remember` then only fills the table the Python path would use.

    :meth:`block` returns exactly ``information_block(format_passages(contents))`` and
    ``stable_hash`` of it, built from the pieces. That is exact because every piece boundary in the
    block sits before an ASCII character that starts a new unit (``Doc``, ``(``, ``\\n``, ``<``):
    whitespace-splitting never joins across it and NFC never composes across it, so normalising the
    block equals joining the normalised pieces (``tests/search_qa/test_env_transcript.py`` checks it on
    arbitrary text).
    """

    def __init__(self, max_entries: int = 1 << 16, max_blocks: int = 1 << 12):
        self.max_entries, self.max_blocks = int(max_entries), int(max_blocks)
        # contents -> (line after "Doc i", the same without trailing whitespace, its normalised UTF-8)
        self._pieces: dict[str, tuple[str, str, bytes]] = {}
        self._seen: set[str] = set()  # met once, not formatted yet
        # Whole results (the tuple of contents) -> (observation, hash): the rollouts of a GRPO group ask
        # the same questions, so the same top-k list recurs; one tuple lookup then replaces the join.
        self._blocks: dict[tuple[str, ...], tuple[str, int]] = {}
        self._seen_blocks: set[tuple[str, ...]] = set()  # results met once (the C path's admission)

    def __len__(self) -> int:
        return len(self._pieces)

    def clear(self, *, blocks_only: bool = False) -> None:
        """Forget everything (``blocks_only``: only the whole results, keeping the passages' pieces)."""
        self._blocks.clear()
        self._seen_blocks.clear()
        if not blocks_only:
            self._pieces.clear()
            self._seen.clear()

    def remember(self, contents: Sequence[str]) -> None:
        """Format these passages now (e.g. a corpus's most retrieved ones, or a benchmark's warm-up)."""
        for content in contents:
            if content not in self._pieces:
                self._add(content)

    def _first_time(self, contents: Sequence[str]) -> tuple[str, int]:
        """The plain path, for a result with a passage not in the table; passages met before join it."""
        seen, pieces = self._seen, self._pieces
        for content in contents:
            if content in seen:
                self._add(content)
                seen.discard(content)
            elif content not in pieces:
                if len(seen) >= self.max_entries:
                    seen.clear()
                seen.add(content)
        observation = information_block(format_passages(contents))
        return observation, stable_hash(observation)

    def _add(self, content: str) -> tuple[str, str, bytes]:
        shown = _passage_line(content)
        piece = (shown, shown.rstrip(), normalize_text(shown).encode("utf-8", "surrogatepass"))
        if len(self._pieces) >= self.max_entries:
            self._pieces.clear()
        self._pieces[content] = piece
        return piece

    def _assemble(self, contents: Sequence[str]) -> tuple[str, int] | None:
        """The observation and hash joined from the table's pieces, or None when a passage is not in it
        (1 to 64 passages). The reference of ``_speedups.assemble_block``, which joins the text in one
        allocation and streams the hash from the pieces."""
        get, shown, normal = self._pieces.get, [], []
        for i, content in enumerate(contents):
            piece = get(content)
            if piece is None:
                return None
            shown += (_DOC[i], piece[0])
            normal += (_DOC_BYTES[i], piece[2])
        # information_block strips the body: it starts with "Doc", so only the last line's tail goes.
        shown[-1] = piece[1]
        shown.append("</information>\n\n")
        normal.append(b"</information>")
        return "\n\n<information>" + "".join(shown), _digest(b"".join(normal))

    def block(self, contents: Sequence[str]) -> tuple[str, int]:
        """The observation for these passages and its ``stable_hash``.

        With the C speed-ups, a result not kept whole is formatted and hashed straight from the
        contents (``_speedups.format_block``, the twin of :func:`format_block`) and the passage table is
        not used: writing ~600 characters and hashing them in C costs less than looking the passages up
        in (and adding them to) a table that a retrieval has evicted from the caches. The result is kept
        whole from the second time it is met.
        """
        key = tuple(contents)
        known = self._blocks.get(key)
        if known is not None:
            return known
        if _format_block is not None:
            result = _format_block(key)
            if result is not NotImplemented:
                seen = self._seen_blocks
                if key in seen:
                    seen.discard(key)
                    if len(self._blocks) >= self.max_blocks:
                        self._blocks.clear()
                    self._blocks[key] = result
                else:
                    if len(seen) >= self.max_blocks:
                        seen.clear()
                    seen.add(key)
                return result
        n = len(contents)
        if n == 0:
            return _EMPTY_BLOCK
        if n > len(_DOC):
            observation = information_block(format_passages(contents))
            return observation, stable_hash(observation)
        result = NotImplemented if _assemble_block is None else _assemble_block(self._pieces, contents)
        if result is NotImplemented:
            result = self._assemble(contents)
        if result is None:
            return self._first_time(contents)
        if len(self._blocks) >= self.max_blocks:
            self._blocks.clear()
        self._blocks[key] = result  # only results whose passages were all met before: no one-off results
        return result


#: "Doc i" prefixes (the block's text) and their normalised bytes (the hashed text: "<information>"
#: glued to the first, a space before the others).
_DOC = tuple(f"Doc {i}" for i in range(1, 65))
_DOC_BYTES = (b"<information>Doc 1",) + tuple(f" Doc {i}".encode() for i in range(2, 65))


def format_block(contents: Sequence[str]) -> tuple[str, int]:
    """``information_block(format_passages(contents))`` and its :func:`~stratagym.envs.core.stable_hash`:
    the reference of ``_speedups.format_block`` (which takes a list or tuple of 1 to 64 exact ``str``)."""
    observation = information_block(format_passages(contents))
    return observation, stable_hash(observation)


def information_block(body: str) -> str:
    """The observation after a search, exactly as Search-R1 appends it to the context."""
    return f"\n\n<information>{body.strip()}</information>\n\n"


def question_from_prompt(prompt: str) -> str:
    """Recover the raw question from a Search-R1 prompt (its parquet files store only the prompt)."""
    head, sep, tail = prompt.rpartition("Question:")
    return tail.strip() if sep else prompt.strip()


def _bind_speedups(module: Any) -> None:
    """Point this module's hot-path names at the C twins in ``module``, or at the Python references
    (``_digest`` follows the hashing module's, bound first)."""
    global _parse_turn_c, _digest, _assemble_block, _format_block
    _parse_turn_c = None if module is None else module.parse_turn
    _assemble_block = None if module is None else module.assemble_block
    _format_block = None if module is None else module.format_block
    _digest = hashing._digest


_digest = hashing._digest
_assemble_block = _format_block = None
speedups.bind(_bind_speedups)


def _empty_block() -> tuple[str, int]:
    block = information_block("")
    return block, stable_hash(block)


_EMPTY_BLOCK = _empty_block()
