"""What the ``stratagym`` command's plug-ins share: a command group several of them add to, and the
repeated ``key=value`` options.

Each plug-in's ``register(app, groups)`` (see :mod:`stratagym.cli`) lives in its own layer (an env
family, the agents, the trainer, the leaderboard), so the pieces they share sit here, in the base layer,
which every layer may import. Importing this module costs nothing beyond typer, which the command loads
anyway; YAML is read only when an option is parsed.
"""

from __future__ import annotations

from typing import Any, Iterable

import typer

__all__ = ["command_group", "parse_key_values"]


def command_group(app: typer.Typer, groups: dict[str, typer.Typer], name: str, help: str) -> typer.Typer:
    """The command group ``name`` (``stratagym <name> ...``): the one a plug-in registered before, or a
    new one added to ``app`` and to ``groups``, so that plug-ins loaded later add their commands to it.
    ``help`` is the group's help text when this call creates it."""
    group = groups.get(name)
    if group is None:
        group = typer.Typer(no_args_is_help=True, help=help)
        app.add_typer(group, name=name)
        groups[name] = group
    return group


def parse_key_values(items: Iterable[str], flag: str, *, form: str = "key=value",
                     keep_text: bool = False) -> dict[str, Any]:
    """The values of a repeatable ``flag`` (``["k=v", ...]``) as a dict, each value read as YAML (``3`` ->
    int, ``true`` -> bool, ``[1, 2]`` -> list, ``a`` -> str); a later key replaces an earlier one.

    An item without ``=`` or without a key is a usage error that shows ``form`` (the expected shape,
    e.g. ``section.key=value``). A value that is not valid YAML is a usage error too, or with
    ``keep_text`` the text as given (for options whose values are often free text, such as an env's
    query)."""
    import yaml  # ~20 ms: loaded when an option is parsed, not for `stratagym --help`

    out: dict[str, Any] = {}
    for text in items:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{flag} expects {form}, got {text!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            if not keep_text:
                raise typer.BadParameter(f"{flag} {text!r}: the value is not valid YAML ({exc})") from None
            out[key.strip()] = value
    return out
