"""One ALFWorld game engine: textworld's PDDL env with alfworld's wrappers, plus the experts.

:class:`AlfredEngine` is what ALFWorld's ``AlfredTWEnv`` builds for one game slot --
``PddlEnv`` (fast-downward state + TextWorld text grammar) wrapped by ``AlfredDemangler`` (ALFRED ids
-> "apple 1") and ``AlfredInfos`` -- without textworld.gym's batching/async layer, so a gymnasium env
(or a vector-env worker process) owns exactly one engine. It also computes the experts' next action:

* ``"planner"``: fast-downward plans from the current state, as ALFWorld's
  ``AlfredExpert(expert_type="planner")`` does (its ``policy_commands``); reliable. ALFWorld replans
  after every step; here the rest of the current plan is kept while the agent follows it (the
  suffix of an optimal plan is optimal from the state it leads to) and fast-downward is only asked
  again when the agent does something else -- a replan costs 0.1-1 s in a large kitchen.
* ``"handcoded"``: alfworld's ``HandCodedTWAgent`` fed exactly as ``AlfredExpert`` feeds it, but its
  failures (timeouts, "no subgoal left") fall back to ``"look"`` instead of raising, and its calls to
  the global :mod:`random` run under a seed derived from the episode so the suggestion is reproducible.
* ``"searcher"``: the planner held to what the agent has seen (:mod:`stratagym.envs.alfworld.searcher`):
  it explores receptacles until it has seen the objects the task needs, then follows the plan on them.

``fast=True`` runs every engine call with :mod:`stratagym.envs.alfworld.speedups` active (memoised
template parses); ``fast=False`` is the stock engine. ``disk_cache`` (fast engines only) says whether a
game's PDDL -> SAS translation is read from / written to the on-disk cache shared by the machine's
processes (:mod:`stratagym.envs.alfworld.disk_cache`); None follows ``$STRATAGYM_ALFWORLD_DISK_CACHE``.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from stratagym.envs.alfworld import disk_cache as disk_cache_mod
from stratagym.envs.alfworld import paths, speedups
from stratagym.envs.alfworld.runtime import load_engine_modules, preserve_argv, release_library
from stratagym.envs.alfworld.searcher import SearchingExpert, location_prior
from stratagym.errors import ConfigError

__all__ = ["AlfredEngine", "EngineState", "EXPERTS", "NOTHING_HAPPENS"]

EXPERTS = ("planner", "handcoded", "searcher")
NOTHING_HAPPENS = "Nothing happens."


@dataclass
class EngineState:
    """What one engine call returns."""

    feedback: str
    admissible_commands: list[str]
    won: bool
    accepted: bool = True  # the command matched one of the game's valid commands
    expert_plan: list[str] = field(default_factory=list)
    expert_reason: str | None = None  # the searching expert's reason for expert_plan[0] (None for the others)


_DOMAIN_GRAMMARS_REGISTERED = False


def _register_domain_grammars(modules: Any) -> None:
    """Let games built from the known ``alfred.twl2`` files share one grammar parse (see speedups)."""
    global _DOMAIN_GRAMMARS_REGISTERED
    if _DOMAIN_GRAMMARS_REGISTERED:
        return
    for path in (paths.bundled_dir() / "alfred.twl2", Path(getattr(modules.alfworld, "ALFRED_TWL2_PATH", ""))):
        with contextlib.suppress(OSError):
            if path.is_file():
                speedups.register_grammar_template(path.read_text())
    _DOMAIN_GRAMMARS_REGISTERED = True


@contextlib.contextmanager
def _isolated_random(seed: int) -> Iterator[None]:
    """Run a block that uses the global :mod:`random` under ``seed``, leaving the global state as it was."""
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


class AlfredEngine:
    """A single ALFWorld game slot (load a game file, reset, step), optionally with an expert."""

    def __init__(self, *, expert: str | None = None, fast: bool = True, disk_cache: bool | None = None) -> None:
        if expert is not None and expert not in EXPERTS:
            raise ConfigError(f"unknown ALFWorld expert {expert!r}; use one of {EXPERTS} or None")
        self.expert = expert
        self.fast = bool(fast)
        # resolved now so a bad $STRATAGYM_ALFWORLD_DISK_CACHE is a ConfigError at construction, not at reset
        self.disk_cache = disk_cache_mod.enabled(disk_cache)
        self._m = load_engine_modules()
        if self.fast:
            _register_domain_grammars(self._m)
        tw = self._m.textworld
        infos = tw.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"],
                            facts=expert == "handcoded")
        with self._engine_call():
            env = self._m.PddlEnv(infos)
        self._pddl = env
        env = self._m.AlfredDemangler(shuffle=False)(env)
        self._env = self._m.AlfredInfos(env)
        self._loaded: str | None = None
        self._game_key = ""
        self._traj_path: str | None = None
        self._handcoded = None
        self._searcher: SearchingExpert | None = None
        self._episode_seed = 0
        self._plan: list[str] = []
        self._steps = 0
        self._closed = False

    # ---- engine calls ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _engine_call(self) -> Iterator[None]:
        if getattr(self, "_closed", False):  # its library copy may now be another engine's
            raise RuntimeError("this ALFWorld engine is closed; make a new one")
        with preserve_argv(), speedups.active(self.fast, disk_cache=self.disk_cache):
            yield

    def load(self, game_file: str | Path, *, seed: int = 0) -> EngineState:
        """Load ``game_file`` (a ``game.tw-pddl`` beside its ``traj_data.json``) and start it."""
        game_file = str(game_file)
        if self._loaded != game_file:
            with self._engine_call():
                self._env.load(game_file)
            self._loaded = game_file
            self._game_key = "/".join(Path(game_file).parts[-3:-1])  # machine-independent
            self._traj_path = str(Path(game_file).with_name("traj_data.json"))
        return self.reset(seed=seed)

    def load_data(self, data: Mapping[str, Any], *, seed: int = 0) -> EngineState:
        """Load a game from its ``game.tw-pddl`` content (used by the generator's verifier)."""
        if self.expert == "handcoded":
            raise ConfigError("the hand-coded expert reads traj_data.json beside the game file; use load(path)")
        with self._engine_call():
            self._env.load(dict(data))
        self._loaded = None
        self._game_key = str(data.get("pddl_problem", ""))[:200]
        return self.reset(seed=seed)

    def reset(self, *, seed: int = 0) -> EngineState:
        """Restart the loaded game from its initial state."""
        self._episode_seed = int(seed)
        self._steps = 0
        with self._engine_call():
            state = self._env.reset()
        plan: list[str] = []
        if self.expert == "planner":
            # A game's stored walkthrough is a plan from the initial state (the generator stores the
            # verified planner plan); it is used until the agent leaves it or it stops being admissible.
            self._plan = self._stored_walkthrough(state["admissible_commands"]) or self.plan()
            plan = list(self._plan)
        elif self.expert == "handcoded":
            plan = ["look"]
            try:
                self._handcoded = self._m.HandCodedTWAgent(max_steps=200)
                with self._expert_random():
                    self._handcoded.reset(self._traj_path)
                    self._handcoded.observe(state["feedback"])
            except Exception:  # a broken traj_data.json must not crash the env: no suggestion
                self._handcoded = None
        elif self.expert == "searcher":
            self._searcher = SearchingExpert(self.plan, location_prior())
            stored = self._stored_walkthrough(state["admissible_commands"])
            plan = [self._searcher.reset(state["feedback"], state["admissible_commands"], stored)]
        return EngineState(state["feedback"], list(state["admissible_commands"]), bool(state["won"]), True, plan,
                           self._reason(plan))

    def step(self, command: str) -> EngineState:
        """Apply ``command`` (matched exactly against the valid commands, as TextWorld does)."""
        self._steps += 1
        with self._engine_call():
            state, _, _ = self._env.step(command)
        accepted = state.get("_last_action") is not None
        plan: list[str] = []
        if self.expert == "planner":
            if not accepted:
                pass  # nothing changed: the plan stands
            elif self._plan and command == self._plan[0]:
                self._plan = self._plan[1:]
                if self._plan and self._plan[0] not in state["admissible_commands"] and not state["won"]:
                    self._plan = self.plan()
            else:
                self._plan = self.plan()
            if not self._plan and not state["won"]:  # a stored walkthrough that fell short
                self._plan = self.plan()
            plan = list(self._plan)
        elif self.expert == "handcoded":
            plan = ["look"]
            if self._handcoded is not None:
                try:
                    with self._expert_random():
                        action = self._handcoded.act(state, 0, state["won"], command)
                    if action in state["admissible_commands"]:
                        plan = [action]
                except Exception:  # HandCodedAgentTimeout / HandCodedAgentFailed: no better idea
                    plan = ["look"]
        elif self.expert == "searcher" and self._searcher is not None and not state["won"]:
            plan = [self._searcher.step(command, accepted, state["feedback"], state["admissible_commands"])]
        return EngineState(state["feedback"], list(state["admissible_commands"]), bool(state["won"]), accepted, plan,
                           self._reason(plan))

    def _reason(self, plan: list[str]) -> str | None:
        """The searching expert's reason for the command it just gave (None without one)."""
        return self._searcher.reason if self.expert == "searcher" and self._searcher is not None and plan else None

    def _stored_walkthrough(self, admissible: list[str]) -> list[str]:
        """The game's stored walkthrough (the generator stores the verified planner plan), a plan from the
        initial state, or [] when there is none or its first command is not admissible here."""
        stored = (getattr(self._pddl, "_game_data", None) or {}).get("walkthrough") or []
        return [str(c) for c in stored] if stored and stored[0] in admissible else []

    @property
    def privileged_commands(self) -> int:
        """The searching expert's commands this episode that came from the hidden state (0 for the others)."""
        return self._searcher.privileged if self._searcher is not None else 0

    def plan(self) -> list[str]:
        """An optimal command sequence from the current state to the goal (fast-downward), or []."""
        pddl = self._pddl
        with self._engine_call():
            return list(pddl._pddl_state.replan(pddl._entity_infos) or [])

    def _expert_random(self):
        digest = hashlib.blake2b(f"{self._game_key}:{self._episode_seed}:{self._steps}".encode(), digest_size=8)
        return _isolated_random(int.from_bytes(digest.digest(), "little"))

    def close(self) -> None:
        """Free the planning state held by this engine's copy of fast-downward.

        The library copy itself stays mapped: unloading it (``fast_downward.close_lib``) makes the
        interpreter crash at exit, when the C++ runtime runs destructors the library registered. It goes
        back to this process's free copies, for the next engine (see :mod:`.runtime`).
        """
        if self._closed:
            return
        self._closed = True
        lib = getattr(self._pddl, "downward_lib", None)
        if lib is not None:
            speedups.library_changed(lib)  # a state loaded into it is not handed to a later reset
            try:
                lib.cleanup()
            except Exception:  # noqa: BLE001 - a copy whose state could not be freed is not handed on
                return
            release_library(lib)
