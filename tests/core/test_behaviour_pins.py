"""An env's behaviour cannot change without a bump of its ``behaviour_version`` (issue 32): pinned
scripted transcripts per env family (tests/core/behaviour_transcripts.py) against the pins file."""

from __future__ import annotations

import json

import pytest

from tests.core.behaviour_transcripts import PINNED, PINS, UNPINNED, current, pin_problem


def test_every_builtin_env_is_pinned_or_says_why_not():
    import stratagym  # noqa: F401
    from stratagym.envs.registry import list_envs

    builtin = {s.id for s in list_envs() if s.source == "stratagym" and isinstance(s.entry_point, str)
               and s.entry_point.startswith("stratagym.envs.")}  # not the envs tests register on built-in classes
    assert builtin - set(UNPINNED) - set(PINNED) == set(), "pin the new env in tests/core/behaviour_transcripts.py (PINNED)"
    assert set(PINNED) <= builtin
    assert set(json.loads(PINS.read_text())) == set(PINNED)


@pytest.mark.parametrize("env_id", sorted(PINNED))
def test_transcripts_match_the_pinned_behaviour_version(env_id):
    pins = json.loads(PINS.read_text())
    assert pin_problem(env_id, pins.get(env_id), current(env_id)) is None


def test_a_changed_transcript_without_a_version_bump_is_named():
    pinned = {"behaviour_version": 1, "transcripts": "sha256:aa"}
    msg = pin_problem("stratagym/X-v0", pinned, {"behaviour_version": 1, "transcripts": "sha256:bb"})
    assert msg is not None and "bump behaviour_version" in msg
    # a bump without new pins is named too (the pins file must follow), and agreement passes
    assert "pinned" in pin_problem("stratagym/X-v0", pinned, {"behaviour_version": 2, "transcripts": "sha256:bb"})
    assert pin_problem("stratagym/X-v0", pinned, dict(pinned)) is None
    assert "no pin" in pin_problem("stratagym/X-v0", None, dict(pinned))
