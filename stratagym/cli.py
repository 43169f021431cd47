"""The ``stratagym`` command.

Sub-commands live next to the code they drive: each module in :data:`CLI_PLUGINS` exposes
``register(app, groups)`` and adds its commands to the root app or to one of the shared groups
(``serve``, ``index``, ...). Plug-in modules keep their heavy imports inside the command functions so
``stratagym --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Optional

import typer
from rich.console import Console

import stratagym
from stratagym.display import esc, print_table
from stratagym.envs.hints import env_kwarg_message, unknown_env_message
from stratagym.envs.registry import list_envs

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="stratagym: text envs that report trajectory structure, group-relative RL algorithms, trainer, eval, leaderboard.",
)
envs_app = typer.Typer(no_args_is_help=True, help="List and check the registered environments.")
serve_app = typer.Typer(no_args_is_help=True, help="Run servers (retrieval, WebShop site) on 127.0.0.1.")
app.add_typer(envs_app, name="envs")
app.add_typer(serve_app, name="serve")

#: Shared command groups plug-ins may add to.
GROUPS: dict[str, typer.Typer] = {"envs": envs_app, "serve": serve_app}

#: Modules that add commands other than an env family's (an env family names its commands' module in
#: its ``EnvSpec.cli``, so a new family needs no line here); a module that does not exist is skipped.
CLI_PLUGINS = (
    "stratagym.interop.mcp.cli",
    "stratagym.agents.gateway.cli",
    "stratagym.agents.cli",
    "stratagym.training.cli",
    "stratagym.training.sft_cli",
    "stratagym.bench.cli",
    "stratagym.leaderboard.cli",
    "stratagym.studies.cli",
)

console = Console()


@envs_app.command("list")
def envs_list(available: bool = typer.Option(False, "--available", help="Only envs whose extras are installed.")) -> None:
    """Print every registered env: id, description, metadata keys and availability."""
    rows = [
        [spec.id, spec.description, ", ".join(spec.metadata_keys), ", ".join(sorted(set(spec.agents) | {"random"})),
         spec.availability()]
        for spec in stratagym.list_envs(available_only=available)
    ]
    # plug-in descriptions are third-party text: print_table shows them literally (no markup), whole when piped
    print_table(console, "stratagym environments", ["id", "description", "metadata keys", "agents", "availability"], rows)


@envs_app.command("check")
def envs_check(env_id: Optional[str] = typer.Argument(None, help="One env id; default: every available env.")) -> None:
    """Run gymnasium's env checker on registered envs."""
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    ids = [env_id] if env_id else [s.id for s in stratagym.list_envs(available_only=True)]
    failed = 0
    for eid in ids:
        env = gym.make(eid)
        try:
            check_env(env.unwrapped, skip_render_check=True)
            console.print(f"[green]ok[/green]   {esc(eid)}")
        except Exception as exc:  # report every env, then fail
            failed += 1
            console.print(f"[red]FAIL[/red] {esc(eid)}: {esc(exc)}")
        finally:
            env.close()
    raise typer.Exit(1 if failed else 0)


@app.command("demo")
def demo(
    episodes: int = typer.Option(8, help="Episodes per env and agent."),
    seed: int = typer.Option(0, help="Seed for task choice and random agents."),
) -> None:
    """Play every available env with its scripted agents and print a results table.

    When the benchmark command is installed (``stratagym bench``), ``make demo`` runs it instead.
    """
    from stratagym.demo import run_scripted_demo  # lazy: the demo loads torch; `stratagym --help` stays fast

    run_scripted_demo(episodes=episodes, seed=seed, console=console)


def plugin_modules() -> list[str]:
    """The modules whose ``register(app, groups)`` add commands: every registered env family's
    ``EnvSpec.cli`` (built-in or from a ``stratagym.envs`` entry point), then :data:`CLI_PLUGINS`."""
    return list(dict.fromkeys([*(s.cli for s in list_envs() if s.cli), *CLI_PLUGINS]))


def _load_plugins() -> None:
    for name in plugin_modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # that part of stratagym is not there
            raise
        module.register(app, GROUPS)


#: Exceptions that mean "what the user asked for cannot be done": :class:`stratagym.errors.UserError` (the
#: base of every stratagym user error, whatever the layer) and gymnasium's unknown-env errors (module,
#: class; looked up only when gymnasium is imported, which a raised one always is). Printed as one
#: message with exit code 2, never a traceback, whichever command raised them.
USER_ERRORS = (
    ("stratagym.errors", "UserError"),
    ("gymnasium.error", "NamespaceNotFound"),
    ("gymnasium.error", "NameNotFound"),
    ("gymnasium.error", "VersionNotFound"),
    ("gymnasium.error", "DeprecatedEnv"),
)


def user_error_message(exc: BaseException) -> str | None:
    """The message to print for ``exc`` if it is a user error (see :data:`USER_ERRORS`), else None.

    Unknown env ids get the close matches among registered envs; an unknown env keyword argument gets
    the list of valid ones (gymnasium re-raises the constructor's TypeError naming the env id).
    """
    kwarg = env_kwarg_message(exc)
    if kwarg is not None:
        return kwarg
    if isinstance(exc, (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)) and exc.filename:
        # a path the user gave that cannot be used as asked (an output folder that is a file, ...)
        return f"{exc.strerror}: {str(exc.filename)!r}; check the path or choose another"
    for module, name in USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            if module == "gymnasium.error":
                return unknown_env_message(str(exc))
            return str(exc).strip('"') or type(exc).__name__
    return None


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point of the ``stratagym`` console script.

    Every command runs inside one error boundary: a user error (:data:`USER_ERRORS`) prints
    ``error: <message>`` on stderr and exits with code 2; anything else is a bug and keeps its traceback.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # no kernels fetched from the Hub (why: stratagym/hub_kernels.py, which covers the package's own model
    # loads); the variable also reaches loads inside other libraries this command runs. USE_HUB_KERNELS=1 opts in.
    os.environ.setdefault("USE_HUB_KERNELS", "0")
    _load_plugins()
    try:
        app(args=argv if argv is not None else sys.argv[1:], prog_name="stratagym")
    except Exception as exc:
        message = user_error_message(exc)
        if message is None:
            raise
        sys.stderr.write("error: " + message.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
        sys.stderr.flush()
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
