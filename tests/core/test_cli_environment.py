"""The environment the ``stratagym`` entry point sets before any command runs."""

from __future__ import annotations

import os

import pytest

from stratagym.cli import main


def test_hub_kernels_are_off_unless_the_user_turns_them_on(monkeypatch):
    # transformers >= 5 kernelizes models with kernels fetched from the Hub unless USE_HUB_KERNELS says no
    monkeypatch.delenv("USE_HUB_KERNELS", raising=False)
    with pytest.raises(SystemExit):
        main(["--help"])
    assert os.environ["USE_HUB_KERNELS"] == "0"
    from transformers.integrations.hub_kernels import _kernels_enabled

    assert not _kernels_enabled()
    monkeypatch.setenv("USE_HUB_KERNELS", "1")  # an explicit choice is kept
    with pytest.raises(SystemExit):
        main(["--help"])
    assert os.environ["USE_HUB_KERNELS"] == "1" and _kernels_enabled()
