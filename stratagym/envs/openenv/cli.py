"""``stratagym serve env ENV_ID``: a registered env as an OpenEnv server (heavy imports inside the command).

Errors the user can fix (unknown env id, missing extra, bad ``-E`` kwargs or limits) raise ``ConfigError``,
which :func:`stratagym.cli.main` prints without a traceback (exit code 2).
"""

from __future__ import annotations

import json
from typing import Any

import typer

from stratagym.errors import ConfigError


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    groups["serve"].command("env")(serve_env)


def parse_env_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``-E key=value`` pairs as env kwargs; a value that parses as JSON is that value, else the string."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-E expects key=value (e.g. -E split=test -E max_steps=10), got {pair!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        kwargs[key.strip()] = value
    return kwargs


def serve_env(
    env_id: str = typer.Argument(..., help="A registered env id (`stratagym envs list`), e.g. stratagym/SearchQA-v0."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (127.0.0.1 keeps the server local)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port (0: a free one)."),
    max_concurrent_envs: int = typer.Option(8, "--max-concurrent-envs", help="Most WebSocket sessions (one env each) at once."),
    idle_timeout: float = typer.Option(600.0, "--idle-timeout", help="Seconds after which an idle session is closed (0: never)."),
    env_kwarg: list[str] = typer.Option([], "-E", "--env-kwarg", help="key=value passed to gymnasium.make (repeatable; JSON values)."),
) -> None:
    """Serve ENV_ID as an OpenEnv server (openenv-core's create_app) until interrupted.

    Clients: openenv-core's EnvClient / GenericEnvClient over WebSocket (/ws), one episode stream per
    session; reset takes seed and task_id; observations carry text, info and admissible_actions.
    """
    try:
        import uvicorn

        from stratagym.envs.openenv.server import create_server_app
    except ImportError as exc:
        raise ConfigError(f"serving OpenEnv needs openenv-core: pip install 'stratagym[openenv]' ({exc})") from None
    from rich.console import Console

    from stratagym.display import esc

    console = Console(stderr=True)
    app = create_server_app(env_id, parse_env_kwargs(env_kwarg), max_concurrent_envs=max_concurrent_envs,
                            idle_timeout_s=None if idle_timeout == 0 else idle_timeout)
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning[/yellow]: binding {esc(host)} exposes the env server beyond this machine")
    console.print(f"OpenEnv server for {esc(env_id)} on http://{esc(host)}:{port} "
                  f"(WebSocket sessions at /ws, at most {max_concurrent_envs}; Ctrl-C stops)")
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
