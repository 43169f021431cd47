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
from typing import Sequence

__all__ = [
    "STOP_STRINGS",
    "PROMPT_TEMPLATE",
    "INVALID_ACTION_MESSAGE",
    "Action",
    "parse_action",
    "cut_response",
    "close_unclosed_tag",
    "format_prompt",
    "format_passages",
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
        if stop in text:
            return text.split(stop, 1)[0] + stop
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
    if accept_unclosed_tags:
        text = close_unclosed_tag(text)
    response = cut_response(text)
    m = _ACTION.search(response)
    if m is None:
        return Action("invalid", problem="the turn has no complete <search>...</search> or <answer>...</answer>",
                      response=response)
    if m.group(1) == "answer":
        answers = _ANSWER.findall(response)
        return Action("answer", answers[-1].strip(), response=response)
    query = m.group(2).strip()
    if max_query_chars is not None and len(query) > max_query_chars:
        return Action("invalid", problem=f"the search query is too long ({len(query)} > {max_query_chars} characters)",
                      response=response)
    return Action("search", query, response=response)


def format_prompt(question: str, template: str = PROMPT_TEMPLATE) -> str:
    """The first observation of an episode: the template with the question filled in."""
    question = question.strip()
    if question and question[-1] != "?":
        question += "?"
    return template.format(question=question)


def format_passages(contents: Sequence[str]) -> str:
    """Search-R1's ``_passages2string``: ``Doc i(Title: <first line>) <rest>`` per passage."""
    out = []
    for i, content in enumerate(contents):
        title, _, text = content.partition("\n")
        out.append(f"Doc {i + 1}(Title: {title}) {text}\n")
    return "".join(out)


def information_block(body: str) -> str:
    """The observation after a search, exactly as Search-R1 appends it to the context."""
    return f"\n\n<information>{body.strip()}</information>\n\n"


def question_from_prompt(prompt: str) -> str:
    """Recover the raw question from a Search-R1 prompt (its parquet files store only the prompt)."""
    head, sep, tail = prompt.rpartition("Question:")
    return tail.strip() if sep else prompt.strip()
