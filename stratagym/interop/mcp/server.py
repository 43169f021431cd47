"""An env's tools as an MCP server (``fastmcp``), so an MCP client (an agent framework, a desktop assistant)
can play an episode of any env that has a tools protocol.

What the server offers:

* the env's own tools (SearchQA ``search`` / ``answer``, ALFWorld and WebShop ``act``...), each listed with
  the JSON Schema the env declares (``ToolSet.schemas()``, the schemas the chat template renders), so an MCP
  client sees exactly what a model under ``protocol: tools`` sees;
* ``reset(seed, task_id)``, which starts an episode and returns its first observation.

A call to an env tool is one env step, through the env's own rules of a turn (``resolve_turn``): arguments
that fail the schema are an invalid turn with the reason in the observation, not an MCP error, exactly as
for a model. The result's text is the env's observation; its structured content carries ``reward``,
``terminated``, ``truncated`` and the JSON-safe part of ``info`` (``tool_schemas`` left out). A call before
``reset`` or after the episode ended is an MCP tool error naming the fix.

One server holds one env (one episode at a time), as a stdio MCP server serves one client: start one per
concurrent agent. MCP's newer protocol revisions make each request its own connection, so per-connection
episodes could not be told apart without an argument the env's schemas do not have. The HTTP server binds
127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Mapping, Optional

from stratagym.envs.registry import tool_set_for
from stratagym.envs.tools import ArgumentChecker, format_call
from stratagym.errors import ConfigError
from stratagym.serving import LoopbackServer, serve_in_thread

__all__ = ["EpisodeHost", "create_mcp_server", "serve_mcp_in_thread", "RESET_SCHEMA"]

#: The ``reset`` tool's arguments (written once here; the env tools' schemas come from their ToolSet).
RESET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "seed": {"type": "integer", "description": "The episode's seed (the same seed and task give the same start)."},
        "task_id": {"type": "string", "description": "The task to play (the env's task id); a seeded choice when omitted."},
    },
}


def _jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` without ``tool_schemas``, with every value JSON-safe (numpy scalars and the like as text)."""
    return json.loads(json.dumps({k: v for k, v in info.items() if k != "tool_schemas"}, default=str))


class EpisodeHost:
    """One env and its current episode, stepped by the MCP tools from any thread (a lock serialises them)."""

    def __init__(self, env_id: str, env_kwargs: Optional[Mapping[str, Any]] = None):
        import gymnasium as gym

        kwargs = dict(env_kwargs or {})
        if kwargs.get("protocol", "tools") != "tools":
            raise ConfigError("an MCP server plays the env's tools protocol; drop protocol or set protocol=tools")
        if kwargs.get("tool_parser", "hermes") != "hermes":
            raise ConfigError("an MCP server passes structured calls to the env; drop tool_parser (hermes is used)")
        kwargs.update(protocol="tools", tool_parser="hermes")

        self.schemas: list[dict[str, Any]] = tool_set_for(env_id).schemas()  # an env without tools: ConfigError
        self.env_id = env_id
        self.env = gym.make(env_id, **kwargs)
        if any(s["function"]["name"] == "reset" for s in self.schemas):
            raise ConfigError(f"{env_id} has a tool named 'reset', which the MCP server uses to start episodes")
        self._lock = threading.Lock()
        self._live = False

    def reset(self, arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start an episode from the ``reset`` tool's arguments (checked against :data:`RESET_SCHEMA`): its
        first observation and a JSON-safe ``info``. Bad arguments or an unknown task: ConfigError."""
        problem = ArgumentChecker("reset", RESET_SCHEMA).problem(arguments)
        if problem:
            raise ConfigError(problem)
        options = {"task_id": arguments["task_id"]} if arguments.get("task_id") is not None else None
        with self._lock:
            try:
                obs, info = self.env.reset(seed=int(arguments.get("seed") or 0), options=options)
            except ValueError as exc:  # an unknown task id: the env's message names the valid ones
                raise ConfigError(str(exc)) from None
            self._live = True
            return obs, {"info": _jsonable(info)}

    def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """One env step for a call to the env tool ``name``: the observation and the step's structured result."""
        with self._lock:
            if not self._live:
                raise ConfigError("no episode is running: call reset first (after an episode ends, reset starts the next)")
            obs, reward, terminated, truncated, info = self.env.step(format_call(name, arguments))
            self._live = not (terminated or truncated)
            return obs, {"reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated),
                         "info": _jsonable(info)}

    def close(self) -> None:
        self.env.close()


def create_mcp_server(env_id: str, env_kwargs: Optional[Mapping[str, Any]] = None, *, name: Optional[str] = None) -> Any:
    """A ``fastmcp.FastMCP`` server whose tools are ``env_id``'s tools plus ``reset`` (see the module
    docstring). ``server.episode_host`` is the :class:`EpisodeHost` behind it (close it when done)."""
    try:
        from fastmcp import FastMCP
        from fastmcp.tools.base import Tool, ToolResult
        from pydantic import PrivateAttr
    except ImportError as exc:
        raise ConfigError(f"an MCP server needs fastmcp: pip install 'stratagym[mcp]' ({exc})") from None
    import anyio

    host = EpisodeHost(env_id, env_kwargs)

    class _HostTool(Tool):
        """A tool whose listed schema is the env's and whose call runs ``_run_sync`` in a worker thread
        (no argument validation here: the env's rules of a turn judge the arguments)."""

        _run_sync: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]] = PrivateAttr()

        async def run(self, arguments: dict[str, Any]) -> Any:
            try:
                text, structured = await anyio.to_thread.run_sync(self._run_sync, dict(arguments or {}))
            except ConfigError as exc:
                return ToolResult(content=str(exc), is_error=True)
            return ToolResult(content=text, structured_content=structured)

    def tool(tool_name: str, description: str, parameters: dict[str, Any], run: Callable[[dict[str, Any]], Any]) -> Any:
        t = _HostTool(name=tool_name, description=description, parameters=parameters)
        t._run_sync = run
        return t

    server = FastMCP(name or f"stratagym {env_id}")
    server.add_tool(tool("reset", "Start an episode of " + env_id + " and return its first observation.", RESET_SCHEMA,
                         host.reset))
    for schema in host.schemas:
        fn = schema["function"]
        server.add_tool(tool(fn["name"], fn.get("description", ""), fn["parameters"],
                             lambda a, n=fn["name"]: host.call(n, a)))
    server.episode_host = host
    return server


def serve_mcp_in_thread(mcp: Any, host: str = "127.0.0.1", port: int = 0, *, timeout: float = 30.0) -> LoopbackServer:
    """Serve ``mcp`` (from :func:`create_mcp_server`) over streamable HTTP at ``http://host:port/mcp`` from a
    daemon thread; ``port=0`` picks a free port. Returns once it listens; ``stop()`` also closes its envs."""
    return serve_in_thread(mcp.http_app(), host, port, name="mcp-server", timeout=timeout, path="/mcp",
                           on_stop=mcp.episode_host.close)
