"""ALFWorld's tool (the ``tools`` protocol, :mod:`stratagym.envs.tools`): ``act(command)``; the
admissible commands stay in the observation's ``info`` as under the tag protocol."""

from __future__ import annotations

from stratagym.envs.tools import ToolSet

__all__ = ["TOOLS", "act"]


def act(command: str) -> str:
    """Do one thing in the household and return what you see.

    Args:
        command: A text command such as "go to countertop 1", "take apple 1 from countertop 1", "look".
    """
    return command


TOOLS = ToolSet(act)
