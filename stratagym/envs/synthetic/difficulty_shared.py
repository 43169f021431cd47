"""DifficultyShared: easy and hard one-step tasks that share every feature, so their gradients compete.

What HA-DW's argument needs (and ``DifficultyMix`` lacks): in ``DifficultyMix`` every task has its own
name, so a hard task's parameters are its own and AdamW's per-parameter step sizes largely cancel any
per-task rescaling of advantages. Here no task is identifiable: every vault reads the same apart from
its keys, and a key is known only by its metal, so easy and hard tasks train the *same* parameters and
the update is a sum in which easy prompts (many successes) outweigh hard ones (rare successes) --
the imbalance HA-DW reweights.

* Easy tasks (``t00..t15``): 2 keys, one ``brass`` (opens it) and one ``iron``.
* Hard tasks (``t16..t31``): 10 keys: one ``copper`` (opens it), 4 ``brass`` decoys, and one each of
  ``iron``, ``tin``, ``zinc``, ``lead``, ``nickel``.

The observation is ``A vault with 2 keys: key 1 brass, key 2 iron. One key opens it.``; actions are
``use key 1 (brass)`` ... (key numbers are shuffled per episode from the reset seed, so only metals
carry information). One valid action ends the episode, reward 1 if the key opens the vault.

So the easy tasks teach "prefer brass", which on hard tasks points at the decoys: easy and hard
gradients push the shared ``brass`` score in opposite directions, and hard tasks need their rare
successes (copper) to win that tug of war. Optimal policy: brass on easy, copper on hard (success 1; a
linear scorer can represent it: copper > brass > others). Uniform policy: easy 1/2, hard 1/10.
``info["difficulty"]``, ``info["n_options"]``, ``info["prior_success"]`` as in ``DifficultyMix``, plus
``info["metal"]`` (the metal used, on the final step).
"""

from __future__ import annotations

from typing import Any

from stratagym.envs.core import StepResult
from stratagym.envs.synthetic._base import IntOption, SyntheticEnv, canonical

EASY_KEYS = ("brass", "iron")
HARD_KEYS = ("copper", "brass", "brass", "brass", "brass", "iron", "tin", "zinc", "lead", "nickel")
OPENS = {"easy": "brass", "hard": "copper"}


class DifficultySharedEnv(SyntheticEnv):
    """Easy and hard tasks on shared features (see the module docstring)."""

    options = {"n_easy": IntOption(0), "n_hard": IntOption(0)}
    constraints = (lambda o: "DifficultyShared needs at least one task: set n_easy or n_hard > 0"
                   if o["n_easy"] + o["n_hard"] == 0 else None,)

    def __init__(
        self,
        *,
        n_easy: int = 16,
        n_hard: int = 16,
        max_steps: int = 3,
        context_k: int = 4,
        oracle_info: bool = False,
        render_mode: str | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        o = self.check_options(locals())
        n_easy, n_hard = o["n_easy"], o["n_hard"]
        super().__init__(max_steps=max_steps, context_k=context_k, oracle_info=oracle_info, render_mode=render_mode, protocol=protocol, tool_parser=tool_parser)
        self._difficulty = {f"t{i:02d}": ("hard" if i >= n_easy else "easy") for i in range(n_easy + n_hard)}
        self._set_tasks(list(self._difficulty))
        self._level = ""
        self._keys: list[str] = []  # metal of key 1..n this episode

    def task_difficulty(self, task_id: str) -> str:
        """``"easy"`` or ``"hard"``: the known difficulty of a task (for per-difficulty curves)."""
        return self._difficulty[task_id]

    def _text(self) -> str:
        keys = ", ".join(f"key {i + 1} {m}" for i, m in enumerate(self._keys))
        return f"A vault with {len(self._keys)} keys: {keys}. One key opens it."

    def admissible_actions(self) -> list[str] | None:
        return [f"use key {i + 1} ({m})" for i, m in enumerate(self._keys)] if self._keys else None

    def oracle_action(self) -> str:
        return f"use key {self._keys.index(OPENS[self._level]) + 1} ({OPENS[self._level]})"

    def _info_extra(self, **extra: Any) -> dict[str, Any]:
        return self._extra(difficulty=self._level, n_options=len(self._keys), prior_success=1.0 / len(self._keys),
                           **extra)

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._level = self._difficulty[task_id]
        keys = EASY_KEYS if self._level == "easy" else HARD_KEYS
        self._keys = [keys[j] for j in self.np_random.permutation(len(keys))]
        return self._text(), self._info_extra()

    def _invalid(self, message: str) -> StepResult:
        return StepResult(observation=f"{message} {self._text()}", action_valid=False, state_text=self._text(),
                          info=self._info_extra())

    def _step(self, action: str) -> StepResult:
        words = canonical(action).replace("(", " ").replace(")", " ").split()
        if len(words) < 3 or words[:2] != ["use", "key"] or not words[2].isdigit():
            return self._invalid("Invalid action: write 'use key N' with one of the listed keys.")
        n = int(words[2])
        if not 1 <= n <= len(self._keys):
            return self._invalid(f"Invalid action: there is no key {words[2][:6]}.")
        metal = self._keys[n - 1]
        won = metal == OPENS[self._level]
        return StepResult(
            observation="The vault opens." if won else "The vault stays shut.",
            reward=float(won), terminated=True, won=won, score=float(won), info=self._info_extra(metal=metal),
        )
