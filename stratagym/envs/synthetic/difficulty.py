"""DifficultyMix: one-step tasks with binary rewards and a known mix of easy and hard prompts.

Structure (what HA-DW is about). Task ``t05`` is a vault with a list of codes; ``code NN`` opens it
(reward 1) or not (reward 0), and the episode ends after that one action (an invalid action is a normal step; up to ``max_steps``
= 3 turns). Easy tasks offer
``easy_options`` codes (default 2: a uniform policy succeeds 1 time in 2), hard tasks ``hard_options``
codes (default 10: 1 time in 10). ``info["difficulty"]`` is ``"easy"`` / ``"hard"`` and
``info["prior_success"]`` the uniform policy's success rate, so a study can split its curves by
difficulty. Group-relative advantages see a hard task's rare success against a group mean near 0, an
easy task's failure against a mean near 1: the bias HA-DW reweights using the running difficulty anchor.

Optimal policy: the task's code (success 1 on every task); the oracle agent plays it.
"""

from __future__ import annotations

from typing import Any

from stratagym.envs.core import StepResult
from stratagym.envs.synthetic._base import IntOption, SyntheticEnv, canonical, task_rng

VAULTS = (
    "amber", "basalt", "cedar", "dune", "ember", "fjord", "granite", "heron", "iris", "juniper", "kestrel",
    "lotus", "marble", "nectar", "onyx", "pepper", "quartz", "raven", "saffron", "tundra", "umber",
    "violet", "willow", "yarrow", "zinc",
)


class DifficultyMixEnv(SyntheticEnv):
    """Easy and hard one-step binary tasks (see the module docstring)."""

    # codes are two-digit (10..99): at most 90 per task
    options = {"n_easy": IntOption(0), "n_hard": IntOption(0), "easy_options": IntOption(1, 90),
               "hard_options": IntOption(1, 90), "data_seed": IntOption(0)}
    constraints = (lambda o: "DifficultyMix needs at least one task: set n_easy or n_hard > 0"
                   if o["n_easy"] + o["n_hard"] == 0 else None,)

    def __init__(
        self,
        *,
        n_easy: int = 16,
        n_hard: int = 16,
        easy_options: int = 2,
        hard_options: int = 10,
        data_seed: int = 0,
        max_steps: int = 3,
        context_k: int = 4,
        oracle_info: bool = False,
        render_mode: str | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        o = self.check_options(locals())
        n_easy, n_hard, easy_options, hard_options = o["n_easy"], o["n_hard"], o["easy_options"], o["hard_options"]
        data_seed = o["data_seed"]
        super().__init__(max_steps=max_steps, context_k=context_k, oracle_info=oracle_info, render_mode=render_mode, protocol=protocol, tool_parser=tool_parser)
        self._tasks: dict[str, dict[str, Any]] = {}
        for i in range(n_easy + n_hard):
            hard = i >= n_easy
            n = hard_options if hard else easy_options
            rng = task_rng(data_seed, i)
            codes = [f"{c}" for c in sorted(10 + rng.choice(90, size=n, replace=False))]
            answer = codes[int(rng.integers(n))]
            tid = f"t{i:02d}"
            name = f"{VAULTS[i % len(VAULTS)]}-{i:02d}"
            self._tasks[tid] = {
                "difficulty": "hard" if hard else "easy",
                "codes": codes,
                "answer": answer,
                "text": f"Vault {name}: choose the code that opens it. Codes: {', '.join(codes)}.",
            }
        self._set_tasks(list(self._tasks))
        self._t: dict[str, Any] = {}

    def admissible_actions(self) -> list[str] | None:
        return [f"code {c}" for c in self._t["codes"]] if self._t else None

    def oracle_action(self) -> str:
        return f"code {self._t['answer']}"

    def task_difficulty(self, task_id: str) -> str:
        """``"easy"`` or ``"hard"``: the known difficulty of a task (for per-difficulty curves)."""
        return str(self._tasks[task_id]["difficulty"])

    def _info_extra(self) -> dict[str, Any]:
        return self._extra(
            difficulty=self._t["difficulty"], n_options=len(self._t["codes"]),
            prior_success=1.0 / len(self._t["codes"]),
        )

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._t = self._tasks[task_id]
        return self._t["text"], self._info_extra()

    def _invalid(self, message: str) -> StepResult:
        return StepResult(observation=f"{message} {self._t['text']}", action_valid=False, info=self._info_extra())

    def _step(self, action: str) -> StepResult:
        words = canonical(action).split()
        if len(words) != 2 or words[0] != "code":
            return self._invalid("Invalid action: write 'code NN' with one of the listed codes.")
        if words[1] not in self._t["codes"]:
            return self._invalid(f"Invalid action: {words[1][:20]!r} is not one of the listed codes.")
        won = words[1] == self._t["answer"]
        return StepResult(
            observation="The vault opens." if won else "The vault stays shut.",
            reward=float(won), terminated=True, won=won, score=float(won), info=self._info_extra(),
        )
