"""``stratagym/GEM-v0``: any GEM env (``gem.make(gem_id)``) as a stratagym env (issue 30 item 4, other way).

GEM owns the transitions and rewards; stratagym's :class:`TextEnv` base owns step counting, the state
hash and HGPO context hashes (from the observations), so GiGPO and HGPO work on GEM's envs. What GEM
gives and what stratagym fills from it:

* **Tasks.** A GEM env has no task ids: an instance is defined by its reset seed. Task ``seed-k`` is
  ``reset(seed=k)`` (``tasks``: how many, or the list of seeds); G copies of one task start identically.
  For a stratagym env under GEM (``gem_id="stratagym/..."``, see :mod:`stratagym.interop.gem.export`) the
  tasks are that env's own.
* **Observations.** GEM's game envs put the board in ``info["suffix"]`` (and sometimes a ``prefix``),
  which GEM's ObservationWrapper adds around the text (gem/wrappers/observation_wrapper.py:132-135); the
  observation here is ``prefix + text + suffix`` the same way (a newline before the suffix; none added
  when there is no suffix), for the current turn only (stratagym's policies keep their own history).
* **action_valid.** GEM has no validity flag. Its game envs answer text they cannot parse with exactly
  ``LanguageGameReward.format_error_reward`` (-0.1, gem/utils/constants.py), so a step with that reward
  is reported invalid (``invalid_reward``; None: every step valid). A parsed but inadmissible move
  (GEM's ``invalid_action_reward``, 0.0) cannot be told from an ordinary step and counts as valid.
* **won / score.** ``won``: the episode terminated with a reward of at least ``success_reward`` (GEM's
  ``LanguageGameReward.success_reward``, 1.0); ``score``: the last reward clipped to [0, 1] when the
  episode ends (GuessTheNumber's partial credit at the turn limit), else 0.
* **Tools.** A step GEM's ToolEnvWrapper marks ``use_tool`` counts as a call of its ``tool_type``.
* Not carried: GEM's wrappers (pass an env id, not a wrapped env), its vector envs (stratagym's pools
  play the envs), non-text observations (a ConfigError at reset), and ``admissible_actions`` (GEM
  lists none; ``random_action`` asks GEM's ``sample_random_action``).

GEM's envs use the process-global random generators; each GEMTextEnv keeps its own copy of them
(:class:`~stratagym.interop.gem.compat.PrivateGlobalRandom`: ``random`` around every call into GEM,
``numpy.random`` around construction and reset, where GEM reseeds it), so episodes do not depend on
batch-mates and GEM never reseeds the caller's generators. A third-party GEM env that draws from the global
``numpy.random`` inside ``step`` would still share that stream with its batch-mates. An exception inside GEM's ``step`` (agent text it did not
expect) ends the episode as an invalid, truncated step with the reason; it never propagates.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from stratagym.envs.core import INFO_KEYS, ConfigError, StepResult, TextEnv
from stratagym.interop.gem.compat import GEM_EXTRA_HINT, PrivateGlobalRandom, import_gem

__all__ = ["GEMTextEnv", "DEFAULT_GEM_ID"]

DEFAULT_GEM_ID = "game:GuessTheNumber-v0-easy"
_STANDARD = frozenset(INFO_KEYS) | {"admissible_actions"}
_SCALARS = (str, int, float, bool, type(None))
#: terminal colours, control characters and rules of asterisks (nltk's errors have all three)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]|\*{4,}")


class GEMTextEnv(TextEnv):
    """A stratagym env whose transitions come from ``gem.make(gem_id, **gem_kwargs)`` (module docstring)."""

    max_observation_chars = 1 << 20

    def __init__(
        self,
        *,
        gem_id: str = DEFAULT_GEM_ID,
        gem_kwargs: Mapping[str, Any] | None = None,
        tasks: int | Sequence[int] = 1000,
        invalid_reward: float | str | None = "format_error",
        success_reward: float | None = None,
        max_steps: int = 50,
        context_k: int = 4,
        render_mode: str | None = None,
        max_action_chars: int | None = None,
    ):
        super().__init__(max_steps=max_steps, context_k=context_k, render_mode=render_mode, max_action_chars=max_action_chars)
        gem = import_gem()
        from gem.utils.constants import LanguageGameReward

        from stratagym.interop.gem.export import StrataGemEnv, register_all  # optional: export imports gem (gem-llm)

        if not isinstance(gem_id, str) or not gem_id:
            raise ConfigError(f"gem_id must be a GEM env id such as {DEFAULT_GEM_ID!r}, got {gem_id!r}")
        if gem_kwargs is not None and not isinstance(gem_kwargs, Mapping):
            raise ConfigError(f"gem_kwargs must be a dict of gem.make keyword arguments, got {type(gem_kwargs).__name__}")
        if invalid_reward == "format_error":
            invalid_reward = LanguageGameReward.format_error_reward
        if invalid_reward is not None and (isinstance(invalid_reward, (bool, str)) or not isinstance(invalid_reward, (int, float))):
            raise ConfigError(f"invalid_reward must be a number, 'format_error' or None, got {invalid_reward!r}")
        self.invalid_reward = None if invalid_reward is None else float(invalid_reward)
        self.success_reward = float(LanguageGameReward.success_reward if success_reward is None else success_reward)
        self.gem_id = gem_id
        self._random = PrivateGlobalRandom(0)
        register_all()  # so gem_id may name a stratagym env too (a round trip through GEM's API)
        try:
            with self._random.active(numpy=True):
                self._gem = gem.make(gem_id, **dict(gem_kwargs or {}))
        except Exception as exc:
            if not (isinstance(exc, ValueError) and "not found in registry" in str(exc)):
                # GEM could not build it: missing data (Wordle and Hangman need nltk's `words` corpus, which
                # they try to download), a bad kwarg, a missing optional package; the reason names the fix
                reason = " ".join(_ANSI.sub("", str(exc)).split())[:400] or type(exc).__name__
                raise ConfigError(f"GEM could not build {gem_id!r}: {type(exc).__name__}: {reason}") from None
            raise ConfigError(f"unknown GEM env id {gem_id!r}; use one GEM registers, e.g. {DEFAULT_GEM_ID!r} or "
                              "'game:Sudoku-v0-easy' (python -c 'import gem; gem.print_envs()' lists them), or a "
                              "stratagym id such as 'stratagym/SearchStrata-v0'") from None
        self._strata = self._gem if isinstance(self._gem, StrataGemEnv) else None
        if self._strata is not None:
            self._seeds: dict[str, int] = {}
            self._task_list = tuple(self._strata.task_ids())
        else:
            seeds = list(range(int(tasks))) if isinstance(tasks, (int, np.integer)) and not isinstance(tasks, bool) else tasks
            if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds or not all(
                    isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in seeds):
                raise ConfigError(f"tasks must be a positive count or a list of non-negative GEM reset seeds, got {tasks!r}")
            self._seeds = {f"seed-{int(s)}": int(s) for s in seeds}
            self._task_list = tuple(self._seeds)
        self._reset_seed: int | None = None
        self._tool_counts: dict[str, int] = {}
        self._admissible: list[str] | None = None

    # ---- TextEnv API ------------------------------------------------------------------------------
    def task_ids(self) -> Sequence[str]:
        return self._task_list

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._reset_seed = seed  # a stratagym env under GEM gets the caller's seed (else one drawn below)
        return super().reset(seed=seed, options=options)

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        if self._strata is not None:
            seed = self._reset_seed if self._reset_seed is not None else int(self.np_random.integers(2**31 - 1))
            text, info = self._strata.reset(seed=seed, task_id=task_id)
            self._tool_counts = dict(info.get("tool_calls") or {})
            self._admissible = info.get("admissible_actions")
            return text, _extras(info)
        with self._random.active(numpy=True):  # GEM's reset reseeds numpy.random too (gem/utils/seeding.py)
            observation, info = self._gem.reset(seed=self._seeds[task_id])
        if not isinstance(observation, str):
            raise ConfigError(f"GEM env {self.gem_id!r} gives {type(observation).__name__} observations, not text; "
                              "stratagym/GEM-v0 maps text envs only")
        self._tool_counts = {}
        return _compose(observation, info), {"gem_info": _plain(info)}

    def _step(self, action: str) -> StepResult:
        if self._strata is not None:
            return self._strata_step(action)
        try:
            with self._random.active():
                observation, reward, terminated, truncated, info = self._gem.step(action)
            reward = float(reward)
        except Exception as exc:  # GEM's env failed on this text: end the episode, say why
            reason = f"{type(exc).__name__}: {exc}"[:300]
            return StepResult(observation=f"Invalid action: the GEM env failed on it ({reason}).",
                              action_valid=False, truncated=True)
        info = info if isinstance(info, dict) else {}
        if not isinstance(observation, str) or not math.isfinite(reward):
            return StepResult(observation=f"Invalid step: GEM env {self.gem_id} answered a non-text observation or a "
                              "non-finite reward.", action_valid=False, truncated=True)
        ended = bool(terminated) or bool(truncated)
        tool = None
        if info.get("use_tool") and isinstance(info.get("tool_type"), str):
            tool = info["tool_type"]
        return StepResult(
            observation=_compose(observation, info), reward=reward, terminated=bool(terminated),
            truncated=bool(truncated) and not terminated,
            action_valid=self.invalid_reward is None or reward != self.invalid_reward, tool=tool,
            won=bool(terminated) and reward >= self.success_reward,
            score=min(1.0, max(0.0, reward)) if ended else 0.0, info={"gem_info": _plain(info)},
        )

    def _strata_step(self, action: str) -> StepResult:
        """A stratagym env behind GEM: its own info (validity, won, score, tools, state hash) is kept."""
        text, reward, terminated, truncated, info = self._strata.step(action)
        counts = info.get("tool_calls") or {}
        grown = [k for k, v in counts.items() if v > self._tool_counts.get(k, 0)]
        self._tool_counts = dict(counts)
        self._admissible = info.get("admissible_actions")
        return StepResult(
            observation=text, reward=reward, terminated=terminated, truncated=truncated,
            action_valid=bool(info["action_valid"]), tool=grown[0] if grown else None, won=bool(info["won"]),
            score=float(info["score"]), info=_extras(info), state_hash=int(info["state_hash"]),
        )

    def admissible_actions(self) -> list[str] | None:
        return list(self._admissible) if self._admissible is not None else None

    def random_action(self, rng: np.random.Generator) -> str:
        """A random action from GEM's ``sample_random_action``, drawn with generators seeded from ``rng``
        (not this env's own, so sampling does not change the episode)."""
        if self._strata is not None:
            return self._strata.sample_random_action()
        with PrivateGlobalRandom(int(rng.integers(2**63))).active():
            try:
                return str(self._gem.sample_random_action())
            except NotImplementedError:
                return ""

    def close(self) -> None:
        closer = getattr(self._gem, "close", None) if hasattr(self, "_gem") else None
        if callable(closer):
            closer()
        super().close()


def _compose(observation: str, info: Mapping[str, Any]) -> str:
    """``prefix + observation + suffix`` as GEM's ObservationWrapper builds it (a newline between the text and
    the suffix), without its trailing newline when there is no suffix."""
    prefix, suffix = info.get("prefix"), info.get("suffix")
    prefix = prefix if isinstance(prefix, str) else ""
    if not isinstance(suffix, str) or not suffix:
        return prefix + observation
    return prefix + (observation if not observation or observation.endswith("\n") else observation + "\n") + suffix


def _plain(info: Mapping[str, Any]) -> dict[str, Any]:
    """GEM's info, its scalar values only (what records and JSON can hold)."""
    return {str(k): v for k, v in info.items() if isinstance(v, _SCALARS)}


def _extras(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k not in _STANDARD}


__doc__ += f"\nInstall: {GEM_EXTRA_HINT}.\n"
