"""SearchQA's tools (the ``tools`` protocol, :mod:`stratagym.envs.tools`): ``search(query)`` and
``answer(text)``. Each function writes the Search-R1 turn it stands for; the env itself runs a call
straight through its own search and answer steps (``SearchQAEnv._call_tool``), so text inside an
argument is never re-read as tags."""

from __future__ import annotations

from stratagym.envs.search_qa.protocol import parse_turn
from stratagym.envs.tools import ToolCall, ToolSet

__all__ = ["TOOLS", "search", "answer"]


def search(query: str) -> str:
    """Search the knowledge base and return the top passages.

    Args:
        query: What to look for, in a few words.
    """
    return f"<search> {query} </search>"


def answer(text: str) -> str:
    """Give the final answer to the question; this ends the episode.

    Args:
        text: The answer, as short as possible (a name, a date, a number).
    """
    return f"<answer> {text} </answer>"


def from_action(action: str) -> ToolCall | None:
    """A Search-R1 turn (the oracle's) as the call it stands for, read as the env reads tags."""
    kind, text, _ = parse_turn(action)
    if kind == "search":
        return ToolCall("search", {"query": text})
    if kind == "answer":
        return ToolCall("answer", {"text": text})
    return None


TOOLS = ToolSet(search, answer, from_action=from_action)
