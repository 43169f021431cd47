"""The env side of the tools protocol: which protocol an env speaks, and, under ``"tools"``, its tool set,
its parser and the ``info`` keys a policy reads.

The env contract (:mod:`stratagym.envs.core`) names no tools module: :class:`~stratagym.envs.core.TextEnv`
asks the builder registered with :func:`stratagym.envs.core.register_protocol_builder`, and this module
registers :meth:`ToolProtocol.build` when it is imported (``import stratagym.envs`` does). So the contract
sits below the tools protocol, and the protocol plugs into it.
"""

from __future__ import annotations

from typing import Any

from stratagym.envs import core
from stratagym.envs.tools.parsing import ToolParser, get_tool_parser, resolve_turn
from stratagym.envs.tools.calls import ToolTurn
from stratagym.envs.tools.toolset import ToolSet
from stratagym.errors import ConfigError
from stratagym.objects import load_object

__all__ = ["PROTOCOLS", "ToolProtocol"]

#: The protocols every env speaks: its own tags (default) and the tools.
PROTOCOLS = ("tags", "tools")


class ToolProtocol:
    """An env's tools protocol: its tool set, its parser and the ``info`` keys the policy reads
    (``protocol``, ``tool_schemas``: the same list object every step)."""

    def __init__(self, tools: ToolSet, parser: ToolParser):
        self.tools, self.parser = tools, parser
        self.info = {"protocol": "tools", "tool_schemas": tools.schemas()}

    @classmethod
    def build(cls, env: "core.TextEnv", protocol: str, parser_name: str) -> "ToolProtocol | None":
        """The protocol ``env`` was made with: None for its tags; a ConfigError for an unknown protocol or
        parser (checked under tags too, so a misspelt ``tool_parser`` never passes silently), or an env
        without a tool set."""
        if protocol not in PROTOCOLS:
            raise ConfigError(f"protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
        parser = get_tool_parser(parser_name)
        if protocol == "tags":
            return None
        if env.tool_set is None:
            raise ConfigError(f"{type(env).__name__} has no tools protocol (no tool_set); use protocol='tags'")
        return cls(load_object(env.tool_set), parser)

    def resolve(self, text: str) -> ToolTurn:
        return resolve_turn(text, self.tools, self.parser)


core.register_protocol_builder(ToolProtocol.build)
