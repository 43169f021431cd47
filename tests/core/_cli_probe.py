"""A command module an env spec names in ``EnvSpec.cli`` (tests/core/test_cli_from_spec.py)."""

import typer


def register(app: typer.Typer, groups: dict) -> None:
    @app.command("probe-hello")
    def hello() -> None:
        print("hello from the probe family")
