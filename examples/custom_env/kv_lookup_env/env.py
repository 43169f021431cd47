"""KVLookup: a two-hop lookup task, small enough to read in one sitting.

Each task asks for the value of a chain of two keys ("What is the colour of the owner of ship K?").
Actions: ``search[key]`` returns the record stored under ``key`` (a tool call counted as ``search``),
``answer[text]`` ends the episode with reward 1 if the text is the right value. Anything else is an
invalid step. The optimal policy searches twice and answers: search_count 2, reward 1.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from stratagym.envs.core import StepResult, TextEnv

ACTION = re.compile(r"^\s*(search|answer)\[(.*)\]\s*$", re.DOTALL)

OWNERS = ["Ilse", "Moro", "Quen", "Tavi", "Yara", "Bren"]
COLOURS = ["amber", "teal", "crimson", "ochre", "violet", "slate"]
SHIPS = ["Kestrel", "Marlin", "Osprey", "Heron", "Tern", "Petrel"]


class KVLookupEnv(TextEnv):
    """Find the favourite colour of a ship's owner by looking both facts up."""

    max_action_chars = 512

    def __init__(self, *, max_steps: int = 6, context_k: int = 2, render_mode: str | None = None):
        super().__init__(max_steps=max_steps, context_k=context_k, render_mode=render_mode)
        # A fixed, deterministic registry: ship -> owner, owner -> colour.
        self.records = {f"ship {s}": f"owned by {OWNERS[(i * 5 + 1) % 6]}" for i, s in enumerate(SHIPS)}
        self.records.update({f"person {o}": f"favourite colour {COLOURS[(i * 5 + 2) % 6]}" for i, o in enumerate(OWNERS)})
        self._ids = [f"kv-{s.lower()}" for s in SHIPS]
        self._ship = ""

    def task_ids(self) -> Sequence[str]:
        return self._ids

    def answer_for(self, task_id: str) -> str:
        ship = SHIPS[self._ids.index(task_id)]
        owner = self.records[f"ship {ship}"].removeprefix("owned by ")
        return self.records[f"person {owner}"].removeprefix("favourite colour ")

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._ship = SHIPS[self._ids.index(task_id)]
        question = (
            f"What is the favourite colour of the owner of the ship {self._ship}? "
            "Use search[ship NAME] or search[person NAME], then answer[colour]."
        )
        return question, {}

    def admissible_actions(self) -> list[str] | None:
        return [f"search[{key}]" for key in sorted(self.records)] + [f"answer[{c}]" for c in COLOURS]

    def _step(self, action: str) -> StepResult:
        match = ACTION.match(action)
        if match is None:
            return StepResult("Invalid action. Use search[key] or answer[text].", action_valid=False)
        verb, arg = match.group(1), match.group(2).strip()
        if verb == "search":
            record = self.records.get(arg)
            if record is None:
                return StepResult(f"No record for {arg!r}.", action_valid=False)
            return StepResult(f"{arg}: {record}", tool="search")
        won = arg.lower() == self.answer_for(self.task_id or "")
        return StepResult(
            "Correct." if won else "Wrong.",
            reward=float(won),
            terminated=True,
            won=won,
            score=float(won),
            info={"answer": arg},  # kept in eval records: the spec's record_info_keys names it
        )
