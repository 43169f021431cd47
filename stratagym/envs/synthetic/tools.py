"""The synthetic envs' tool (the ``tools`` protocol, :mod:`stratagym.envs.tools`): ``act(action)``
with one of the env's bracketed actions (``search[...]``, ``answer[...]``, ``go[...]``...), which the env
lists in ``info["admissible_actions"]`` as under the tag protocol."""

from __future__ import annotations

from stratagym.envs.tools import ToolSet

__all__ = ["TOOLS", "act"]


def act(action: str) -> str:
    """Take one of the admissible actions and return the new observation.

    Args:
        action: One admissible action exactly as listed, for example "search[harbour map]".
    """
    return action


TOOLS = ToolSet(act)
