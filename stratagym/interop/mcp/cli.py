"""``stratagym serve mcp ENV_ID``: an env's tools as an MCP server over streamable HTTP
(:mod:`stratagym.interop.mcp.server`). Heavy imports stay inside the command; errors the user can fix (unknown
env, an env without tools, ``-E protocol=tags``, fastmcp missing) are ``ConfigError`` lines, exit 2."""

from __future__ import annotations

import typer

from stratagym.display import esc
from stratagym.errors import ConfigError
from stratagym.interop.openenv.cli import parse_env_kwargs


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add ``serve mcp`` to the shared ``serve`` group."""
    groups["serve"].command("mcp")(serve_mcp)


def serve_mcp(
    env_id: str = typer.Argument(..., help="A registered env with a tools protocol, e.g. stratagym/SearchQA-v0."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (127.0.0.1 keeps the server local)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port (0: a free one)."),
    env_kwarg: list[str] = typer.Option([], "-E", "--env-kwarg", help="key=value passed to gymnasium.make (repeatable; JSON values)."),
) -> None:
    """Serve ENV_ID's tools (and reset) as an MCP server at http://HOST:PORT/mcp until interrupted.

    One env, one episode at a time: start one server per concurrent agent. A call is one env step; bad
    arguments are invalid turns, as for a model under protocol=tools.
    """
    from rich.console import Console

    from stratagym.interop.mcp.server import create_mcp_server  # lazy: ~3-5 ms; `stratagym --help` stays fast

    try:
        import uvicorn
    except ImportError as exc:
        raise ConfigError(f"serving MCP needs uvicorn and fastmcp: pip install 'stratagym[mcp]' ({exc})") from None
    console = Console(stderr=True)
    mcp = create_mcp_server(env_id, parse_env_kwargs(env_kwarg))
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning[/yellow]: binding {esc(host)} exposes the MCP server beyond this machine")
    names = ", ".join(s["function"]["name"] for s in mcp.episode_host.schemas)
    console.print(f"MCP server for {esc(env_id)} at http://{esc(host)}:{port}/mcp (tools: reset, {esc(names)}; Ctrl-C stops)")
    try:
        uvicorn.run(mcp.http_app(), host=host, port=port, log_level="warning", access_log=False)
    finally:
        mcp.episode_host.close()
