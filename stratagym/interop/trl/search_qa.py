"""SearchQA for TRL's ``environment_factory``: tools ``search(query)`` and ``answer(text)`` (see
:mod:`stratagym.interop.trl.tools`); each becomes the env's own action text, Search-R1's tags."""

from __future__ import annotations

from stratagym.interop.trl.tools import TRLToolEnv

__all__ = ["SearchQATRLEnv"]


class SearchQATRLEnv(TRLToolEnv):
    """``GRPOTrainer(environment_factory=SearchQATRLEnv)``; dataset rows carry ``task_id`` (and ``seed``)."""

    env_id = "stratagym/SearchQA-v0"

    def search(self, query: str) -> str:
        """Search the knowledge base and return the top passages.

        Args:
            query: What to look for, in a few words.
        """
        return self._act(f"<search> {query} </search>")

    def answer(self, text: str) -> str:
        """Give the final answer to the question; this ends the episode.

        Args:
            text: The answer, as short as possible (a name, a date, a number).
        """
        return self._act(f"<answer> {text} </answer>")
