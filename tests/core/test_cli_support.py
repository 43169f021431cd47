"""The pieces the CLI plug-ins share (``stratagym.cli_support``): one command group per name, whichever
plug-in registers first, and the ``key=value`` options of ``--set``, ``--env-arg`` and ``--policy-arg``."""

from __future__ import annotations

import pytest
import typer

from stratagym.cli_support import command_group, parse_key_values


def test_command_group_is_made_once_and_shared():
    app, groups = typer.Typer(), {}
    first = command_group(app, groups, "models", "Models.")
    assert groups == {"models": first} and first.info.help == "Models." and first.info.no_args_is_help
    assert command_group(app, groups, "models", "Other help.") is first  # a later plug-in adds to it
    assert len(app.registered_groups) == 1


def test_values_are_read_as_yaml():
    assert parse_key_values(["a=3", " b =true", "c=[1, 2]", "d=x", "a=4", "e="], "--set") == {
        "a": 4, "b": True, "c": [1, 2], "d": "x", "e": None}


@pytest.mark.parametrize("item", ["novalue", "=3", " =3"])
def test_an_item_without_a_key_names_the_flag_and_the_form(item):
    with pytest.raises(typer.BadParameter, match=r"--set expects section\.key=value, got"):
        parse_key_values([item], "--set", form="section.key=value")


def test_a_value_that_is_not_yaml_is_refused_or_kept_as_text():
    with pytest.raises(typer.BadParameter, match="not valid YAML"):
        parse_key_values(["q=[who"], "--set")
    assert parse_key_values(["q=[who", "k=a: b: c"], "--env-arg", keep_text=True) == {"q": "[who", "k": "a: b: c"}
