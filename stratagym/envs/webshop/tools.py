"""WebShop's tool (the ``tools`` protocol, :mod:`stratagym.envs.tools`): ``act(command)`` with
WebShop's own commands; the clickable elements stay in ``info["admissible_actions"]``."""

from __future__ import annotations

from stratagym.envs.tools import ToolSet

__all__ = ["TOOLS", "act"]


def act(command: str) -> str:
    """Act on the shop page and return the next page.

    Args:
        command: "search[words]" on the search page, or "click[button]" for a button, product or option shown.
    """
    return command


TOOLS = ToolSet(act)
