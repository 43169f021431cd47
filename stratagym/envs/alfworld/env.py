"""``stratagym/ALFWorld-v0``: ALFWorld's text household tasks on the real TextWorld-PDDL engine.

Each episode is one ALFWorld game (real ALFWorld data when present, else the bundled generated
games; see :mod:`stratagym.envs.alfworld.games`). The first observation is ALFWorld's intro (room
overview + "Your task is to: ..."), each step's observation is the engine's feedback, exactly as
ALFWorld prints them. ``info`` carries, besides the standard keys:

* ``admissible_actions`` -- ALFWorld's admissible commands, "help" included as stock ALFWorld lists it
  (``hide_help=True`` leaves it out, as stratagym did before 2026-11-23);
* ``task_type`` -- one of the six ALFWorld task types (success per type = mean ``won`` per type);
* ``split`` -- train / in_distribution / out_of_distribution;
* ``expert_action`` -- only when built with ``expert="planner"``, ``"handcoded"`` or ``"searcher"``: that expert's
  next command (the scripted expert agents ask for it through ``env_kwargs``);
* ``expert_reason`` -- only with ``expert="searcher"``, while it gives a command: why (what the task needs, what is
  still to be found, the steps left), the think text of ``demos.reasons`` demonstrations.

Actions are matched like TextWorld matches them, after collapsing whitespace and lower-casing; text
that is not one of the game's commands is a normal, *invalid* step whose observation is the
engine's "Nothing happens.". The reward is 1 on the step that wins (then the episode terminates);
episodes are truncated after ``max_steps`` (50, as in ALFWorld evaluations). A step after the episode
ended gets stratagym's "The episode is over" observation with reward 0 and ``action_valid=False``
(stock ALFWorld repeats its last state); ``reset()`` is the way on.

``env.data_source`` says where the games came from (``"bundled"`` or the data folder); eval records keep
it, and the leaderboard shows it.
"""

from __future__ import annotations

from typing import Any, Sequence


from stratagym.envs.alfworld.engine import AlfredEngine, EngineState
from stratagym.envs.alfworld.games import GameSet, resolve_games
from stratagym.envs.core import StepResult, TextEnv
from stratagym.envs.fingerprint import hash_files

__all__ = ["ALFWorldEnv", "normalize_command"]


def normalize_command(text: str) -> str:
    """Collapse whitespace and lower-case: ``"Go to  Cabinet 1\\n"`` -> ``"go to cabinet 1"``."""
    return " ".join(text.split()).lower()




class ALFWorldEnv(TextEnv):
    """ALFWorld (TextWorld engine) as a stratagym text env.

    Parameters
    ----------
    split:
        ``"train"``, ``"in_distribution"`` (``valid_seen``) or ``"out_of_distribution"`` (``valid_unseen``).
    data_path:
        None: real ALFWorld data if ``$ALFWORLD_DATA/json_2.1.1`` exists, else the bundled games;
        ``"bundled"``; or a folder (ALFWorld data root, ``json_2.1.1`` folder, or folder of games).
    task_types:
        Restrict to these task types (names or ALFWorld ids 1-6).
    expert:
        ``"planner"``, ``"handcoded"`` or ``"searcher"`` puts that expert's next command in ``info["expert_action"]``.
    fast:
        Use the memoised template parses (:mod:`~stratagym.envs.alfworld.speedups`); same transcripts.
    disk_cache:
        Keep each game's PDDL -> SAS translation on disk, so a new process (a training run, a vector-env
        or Ray worker) meeting a game translated before skips it (:mod:`~stratagym.envs.alfworld.disk_cache`;
        same transcripts). None: ``$STRATAGYM_ALFWORLD_DISK_CACHE`` (default on; ``0`` switches it off).
    hide_help:
        Leave "help" out of ``info["admissible_actions"]`` (stock ALFWorld lists it; default False).
    """

    #: the tools protocol (``protocol="tools"``): one tool, ``act(command)``
    tool_set = "stratagym.envs.alfworld.tools:TOOLS"
    max_observation_chars = 16_384  # ALFWorld's longest texts (intro, help) are ~1-2k characters
    max_action_chars = 4096

    def __init__(
        self,
        *,
        split: str = "train",
        data_path: str | None = None,
        task_types: Sequence[str | int] | str | int | None = None,
        expert: str | None = None,
        fast: bool = True,
        disk_cache: bool | None = None,
        hide_help: bool = False,
        max_steps: int = 50,
        context_k: int = 4,
        render_mode: str | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        super().__init__(max_steps=max_steps, context_k=context_k, render_mode=render_mode, protocol=protocol, tool_parser=tool_parser)
        self.games: GameSet = resolve_games(split, data_path, task_types)
        self.split = self.games.split
        #: where the games come from: "bundled" (generated) or the ALFWorld data folder (records keep it)
        self.data_source = self.games.source
        self.hide_help = bool(hide_help)
        self.expert = expert
        self._ids = tuple(e.task_id for e in self.games.entries)
        self._by_id = self.games.by_id()
        self._engine = AlfredEngine(expert=expert, fast=fast, disk_cache=disk_cache)
        self._state: EngineState | None = None
        self._task_type = ""

    # ---- TextEnv API ----------------------------------------------------------------------------
    def task_ids(self) -> Sequence[str]:
        return self._ids

    def has_task(self, task_id: str) -> bool:
        return task_id in self._by_id

    def protocol_data(self) -> dict[str, Any]:
        """The split's game files by content (not where they live: bundled or real data alike), for the
        protocol fingerprint."""
        return {"games": hash_files(e.game_file for e in self.games.entries)}

    def task_type(self, task_id: str) -> str:
        return self._by_id[task_id].task_type

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        entry = self._by_id[task_id]
        seed = int(self.np_random.integers(2**31))
        self._state = self._engine.load(entry.game_file, seed=seed)
        self._task_type = entry.task_type
        return self._state.feedback, self._extra(self._state)

    def _step(self, action: str) -> StepResult:
        assert self._state is not None
        command = normalize_command(action)
        state = self._engine.step(command)
        self._state = state
        won = state.won
        return StepResult(
            observation=state.feedback,
            reward=1.0 if won else 0.0,
            terminated=won,
            action_valid=state.accepted,
            won=won,
            score=1.0 if won else 0.0,
            info=self._extra(state),
        )

    def admissible_actions(self) -> list[str] | None:
        if self._state is None:
            return None
        commands = list(self._state.admissible_commands)
        return [c for c in commands if c != "help"] if self.hide_help else commands

    def invalid_action_result(self, problem: str) -> StepResult:
        # Unusable text (wrong type, too long) reads like any other command the game does not know.
        state = self._state
        return StepResult(observation="Nothing happens.", action_valid=False,
                          info=self._extra(state) if state is not None else {})

    # ---- helpers --------------------------------------------------------------------------------
    def _extra(self, state: EngineState) -> dict[str, Any]:
        extra: dict[str, Any] = {"task_type": self._task_type, "split": self.split}
        if self.expert is not None:
            extra["expert_action"] = state.expert_plan[0] if state.expert_plan else "look"
            if state.expert_reason:
                extra["expert_reason"] = state.expert_reason
        return extra

    def close(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()
        super().close()
