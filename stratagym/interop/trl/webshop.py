"""WebShop for TRL's ``environment_factory``: one tool, ``act(command)`` (see :mod:`stratagym.interop.trl.tools`)."""

from __future__ import annotations

from stratagym.interop.trl.tools import TRLToolEnv

__all__ = ["WebShopTRLEnv"]


class WebShopTRLEnv(TRLToolEnv):
    """``GRPOTrainer(environment_factory=WebShopTRLEnv)``; dataset rows carry ``task_id`` (and ``seed``)."""

    env_id = "stratagym/WebShop-v0"

    def act(self, command: str) -> str:
        """Act on the shop page and return the next page.

        Args:
            command: "search[words]" on the search page, or "click[button]" for a button, product or option shown.
        """
        return self._act(command)
