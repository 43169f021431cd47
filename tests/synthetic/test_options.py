"""One validation path for the synthetic envs: each declares its numeric options and the rules between
them (``SyntheticEnv.options`` / ``constraints``), checked by ``SyntheticEnv.check_options`` before the env
builds anything; a bad value is a ConfigError naming the option and its bounds, never a crash."""

from __future__ import annotations

import inspect
import math

import pytest

from stratagym.envs.core import ConfigError
from stratagym.objects import load_object
from stratagym.envs.synthetic import ENV_SPECS
from stratagym.envs.synthetic._base import IntOption, RealOption, SyntheticEnv

CLASSES = sorted({load_object(s.entry_point) for s in ENV_SPECS}, key=lambda c: c.__name__)
#: TextEnv's own options, checked by TextEnv
_COMMON = {"max_steps", "context_k"}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_numeric_option_is_declared(cls):
    """A numeric constructor keyword cannot bypass the one path: each is declared in ``options``."""
    assert issubclass(cls, SyntheticEnv) and cls.options
    params = inspect.signature(cls.__init__).parameters.values()
    numeric = {p.name for p in params if type(p.default) in (int, float) and p.name not in _COMMON}
    assert numeric == set(cls.options)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_bad_values_name_the_option_and_its_bounds(cls):
    for name, rule in cls.options.items():
        bad: list = [True, "3", None, math.nan]
        if isinstance(rule, IntOption):
            bad += [2.5, rule.minimum - 1] + ([rule.maximum + 1] if rule.maximum is not None else [])
            bounds = f">= {rule.minimum}" if rule.maximum is None else f"in [{rule.minimum}, {rule.maximum}]"
            expected = f"{name} must be an integer {bounds}, got "
        else:
            assert isinstance(rule, RealOption)
            bad += [rule.low - 0.5, rule.high + 0.5, math.inf]
            expected = f"{name} must be a number in [{rule.low:g}, {rule.high:g}], got "
        for value in bad:
            with pytest.raises(ConfigError) as info:
                cls(**{name: value})
            assert str(info.value) == expected + repr(value)


def test_int_options_accept_integral_numbers_as_before():
    assert IntOption(1).check("n", 3.0) == 3 and type(IntOption(1).check("n", 3.0)) is int
    assert IntOption(0, 5).check("n", 5) == 5
    assert RealOption(0.0, 1.0).check("x", 1) == 1.0


@pytest.mark.parametrize(("entry", "kwargs", "message"), [
    ("search_strata:SearchStrataEnv", {"n_candidates": 3, "max_searches": 3},
     "max_searches=3 exceeds the 2 wrong candidates; lower it"),
    ("search_archives:SearchArchivesEnv", {"full_searches": 2, "summary_searches": 2},
     "full_searches and summary_searches must differ (they define the strata)"),
    ("difficulty:DifficultyMixEnv", {"n_easy": 0, "n_hard": 0}, "DifficultyMix needs at least one task: set n_easy or n_hard > 0"),
    ("difficulty_shared:DifficultySharedEnv", {"n_easy": 0, "n_hard": 0},
     "DifficultyShared needs at least one task: set n_easy or n_hard > 0"),
])
def test_rules_between_options(entry, kwargs, message):
    cls = load_object(f"stratagym.envs.synthetic.{entry}")
    with pytest.raises(ConfigError) as info:
        cls(**kwargs)
    assert str(info.value) == message
