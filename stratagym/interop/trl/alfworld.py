"""ALFWorld for TRL's ``environment_factory``: one tool, ``act(command)`` (see :mod:`stratagym.interop.trl.tools`)."""

from __future__ import annotations

from stratagym.interop.trl.tools import TRLToolEnv

__all__ = ["ALFWorldTRLEnv"]


class ALFWorldTRLEnv(TRLToolEnv):
    """``GRPOTrainer(environment_factory=ALFWorldTRLEnv)``; dataset rows carry ``task_id`` (and ``seed``)."""

    env_id = "stratagym/ALFWorld-v0"

    def act(self, command: str) -> str:
        """Do one thing in the household and return what you see.

        Args:
            command: A text command such as "go to countertop 1", "take apple 1 from countertop 1", "look".
        """
        return self._act(command)
