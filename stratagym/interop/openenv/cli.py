"""``stratagym serve env ENV_ID`` (a registered env as an OpenEnv server) and ``stratagym envs check-openenv
URL`` (stratagym's env checks and a soak against any OpenEnv server). Heavy imports stay inside the commands.

Errors the user can fix (unknown env id, missing extra, bad ``-E`` kwargs or limits) raise ``ConfigError``,
which :func:`stratagym.cli.main` prints without a traceback (exit code 2).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import typer

from stratagym.display import esc
from stratagym.errors import ConfigError


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    groups["serve"].command("env")(serve_env)
    register_check(groups)


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

        from stratagym.interop.openenv.server import create_server_app  # optional: openenv-core (the openenv extra)
    except ImportError as exc:
        raise ConfigError(f"serving OpenEnv needs openenv-core: pip install 'stratagym[openenv]' ({exc})") from None
    from rich.console import Console

    console = Console(stderr=True)
    app = create_server_app(env_id, parse_env_kwargs(env_kwarg), max_concurrent_envs=max_concurrent_envs,
                            idle_timeout_s=None if idle_timeout == 0 else idle_timeout)
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning[/yellow]: binding {esc(host)} exposes the env server beyond this machine")
    console.print(f"OpenEnv server for {esc(env_id)} on http://{esc(host)}:{port} "
                  f"(WebSocket sessions at /ws, at most {max_concurrent_envs}; Ctrl-C stops)")
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def register_check(groups: dict[str, typer.Typer]) -> None:
    groups["envs"].command("check-openenv")(check_openenv)


def check_openenv(
    url: str = typer.Argument(..., help="Base URL of a running OpenEnv server, e.g. http://127.0.0.1:8000."),
    task: list[str] = typer.Option([], "--task", help="A task: a task id, or a JSON object of reset kwargs "
                                   "(repeatable; default: the server's default reset)."),
    soak_episodes: int = typer.Option(0, "--soak", help="Also play this many episodes and watch the server's resources."),
    sessions: int = typer.Option(4, "--sessions", min=1, help="Concurrent sessions in the soak."),
    server_pid: Optional[int] = typer.Option(None, "--server-pid", help="The server's process id on this machine "
                                             "(the soak samples its memory, threads and open files)."),
    message_timeout: float = typer.Option(30.0, "--message-timeout", help="Seconds to wait for each answer."),
) -> None:
    """Contract, fuzz and determinism checks (and a soak) against any OpenEnv server, through stratagym/OpenEnv-v0."""
    from rich.console import Console

    from stratagym.interop.openenv.check import check_server, soak  # lazy: ~6-9 ms; `stratagym --help` stays fast

    console = Console()
    tasks = [_task(t) for t in task] or None
    failed = print_check_results(console, check_server(url, tasks, message_timeout_s=message_timeout))
    if soak_episodes > 0:
        if server_pid is not None and not os.path.isdir(f"/proc/{server_pid}"):
            raise ConfigError(f"--server-pid {server_pid}: no such process on this machine")
        report = soak(url, tasks, episodes=soak_episodes, sessions=sessions, server_pid=server_pid,
                      message_timeout_s=message_timeout)
        failed += print_soak_report(console, report, sessions, peak_label="server peak",
                                    change_label="server before -> after", unsampled="not sampled (no --server-pid)")
    raise typer.Exit(1 if failed else 0)


def print_check_results(console: Any, results: Any) -> int:
    """Print each check as ok/FAIL with its (escaped) detail; returns how many failed. Shared by the
    ``check-openenv`` and ``check-gem`` commands."""
    failed = 0
    for result in results:
        failed += not result.ok
        mark = "[green]ok[/green]  " if result.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {result.name}: {esc(result.detail)}")
    return failed


def print_soak_report(console: Any, report: Any, sessions: int, *, peak_label: str, change_label: str,
                      unsampled: str = "") -> int:
    """Print a soak's counts, the sampled process's peak and change (``peak_label``, ``change_label`` name that
    process), failed episodes and leaks; returns 1 for leaks plus 1 for failed episodes."""
    peak = ", ".join(f"{k} {v:.0f}" for k, v in report.peak.items() if k != "done") or unsampled
    console.print(f"soak: {report.resets} resets, {report.steps} steps, {report.failures} failed episodes in "
                  f"{report.seconds:.1f} s over {sessions} sessions; {peak_label}: {peak}")
    if len(report.samples) >= 2:
        first, last = report.samples[0], report.samples[-1]
        console.print(f"{change_label}: " + ", ".join(f"{k} {first[k]:.0f} -> {last[k]:.0f}" for k in first if k != "done"))
    for error in report.errors:
        console.print(f"  [red]episode failed[/red]: {esc(error)}")
    for leak in report.leaks:
        console.print(f"[red]LEAK[/red] {esc(leak)}")
    return bool(report.leaks) + bool(report.failures)


def _task(text: str) -> Any:
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"--task {text!r} is not a JSON object: {exc}") from None
        return value
    return text
