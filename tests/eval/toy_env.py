"""A tiny env with known answers for eval tests: pick the right one of four letters.

Tasks ``t0..t{n-1}`` (split ``test``) or ``s0..`` (split ``train``); task i's answer is ``"abcd"[i % 4]``,
its ``task_type`` is ``even``/``odd``. Actions ``search`` (counted as a search tool call, at most once
useful) and ``choose <letter>``. The oracle searches on odd tasks, then answers right: success 1.0;
uniform random over the admissible actions wins with a known probability. ``step_delay`` slows steps
(for kill-and-resume tests).
"""

from __future__ import annotations

import time

import stratagym  # noqa: F401
from stratagym.envs.core import ConfigError, StepResult, TextEnv
from stratagym.envs.registry import EnvSpec, register_env

TOY_ID = "stratagym_test/Toy-v0"
LETTERS = "abcd"


class ToyEnv(TextEnv):
    def __init__(self, *, n_tasks: int = 40, split: str = "test", oracle_info: bool = False, step_delay: float = 0.0, **kw):
        super().__init__(max_steps=kw.pop("max_steps", 4), **kw)
        if split not in ("train", "test"):
            raise ConfigError(f"unknown split {split!r}; use train or test")
        self.split = split
        self.prefix = "t" if split == "test" else "s"
        self.n_tasks = n_tasks
        self.oracle_info = oracle_info
        self.step_delay = step_delay
        self._searched = False

    def task_ids(self):
        return [f"{self.prefix}{i}" for i in range(self.n_tasks)]

    def _answer(self, task_id: str) -> str:
        return LETTERS[int(task_id[1:]) % 4]

    def _extra(self, task_id: str) -> dict:
        extra = {"task_type": "even" if int(task_id[1:]) % 2 == 0 else "odd", "split": self.split}
        if self.oracle_info:
            needs_search = int(task_id[1:]) % 2 == 1 and not self._searched
            extra["oracle_action"] = "search" if needs_search else f"choose {self._answer(task_id)}"
        return extra

    def _reset_task(self, task_id):
        self._searched = False
        return f"Task {task_id}: choose a letter.", self._extra(task_id)

    def admissible_actions(self):
        return ["search"] + [f"choose {c}" for c in LETTERS]

    def _step(self, action):
        if self.step_delay:
            time.sleep(self.step_delay)
        action = action.strip().lower()
        tid = self.task_id
        if action == "search":
            self._searched = True
            return StepResult(f"The answer to {tid} is hidden.", tool="search", info=self._extra(tid))
        if action.startswith("choose ") and action[7:] in LETTERS:
            won = action[7:] == self._answer(tid)
            return StepResult("Right." if won else "Wrong.", reward=float(won), terminated=True, won=won,
                              score=float(won), info=self._extra(tid))
        return StepResult("Invalid action.", action_valid=False, info=self._extra(tid))


class ToyOracle:
    env_kwargs = {"oracle_info": True}

    def __init__(self, env, *, seed: int = 0):
        self.env = env

    def act(self, observations, infos, episodes):
        return [info["oracle_action"] for info in infos]


def register() -> None:
    register_env(EnvSpec(
        id=TOY_ID,
        entry_point="toy_env:ToyEnv",
        description="test toy env",
        agents={"oracle": "toy_env:ToyOracle"},
        record_info_keys=("task_type", "split"),
    ))


register()
