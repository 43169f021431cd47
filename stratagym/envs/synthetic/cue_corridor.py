"""CueCorridor: a long-horizon maze where one state is reached through different histories.

Structure (what HGPO is about: context inconsistency). An episode crosses ``segments`` halls (default 3).
In each hall:

1. ``Hall 2: two levers, lever A and lever B.``  -- ``pull lever A`` / ``pull lever B``. The two
   levers light different lamp colours; which lever lights which is drawn per episode and hall from
   the reset seed (either lever is fine, and the colour cannot be known before pulling). Group rollouts
   share a seed, so within a group the lever pulled decides the cue: trajectories that pulled
   different levers reach the same fork with different cues;
2. ``Hall 2: a green lamp lights up.``  -- the **cue** (green or amber); ``walk forward``;
3. ``corridor`` identical observations ``Hall 2: a dark corridor.`` -- ``walk forward``;
4. ``Hall 2: a fork with doors left and right.`` -- ``go left`` / ``go right``. Green means left, amber
   means right (the same rule in every task). The wrong door ends the episode with reward 0; the right
   door leads to the next hall, and past the last hall the episode is won (reward 1).

The fork observation is the same whatever lamp was lit, so GiGPO's anchor groups (level 0: the current
observation) mix steps whose right action differs; HGPO's level-k groups (the last k+1 observations)
separate them once k >= ``corridor + 1`` (the cue distance; 2 by default). A policy can solve the task
only if it remembers at least the last ``corridor + 1`` observations. The same holds for each hall's
lever room, reached after different earlier halls.

Optimal policy: any lever, walk, then the door the cue names; success 1. The oracle agent plays it.
A uniform policy succeeds with probability ``0.5 ** segments``.

``valued=True`` (registered as ``stratagym/ValueCorridor-v0``) adds what HGPO's argument rests on and
the plain corridor lacks: the histories that meet at the fork have *different values*. The lamps are
``gold`` and ``grey``; every fork pays and the episode goes on to the next hall whatever door is taken:

=========  ==========  ===========
lamp       best door   other door
=========  ==========  ===========
gold       1.0 (left)  0.8 (right)
grey       0.2 (right) 0.0 (left)
=========  ==========  ===========

(each divided by ``segments``, so the episode return is in [0, 1]). The gap between contexts (0.8)
is four times the gap between actions within a context (0.2), so a baseline pooled over both lamps
(GiGPO's anchor group: the same fork observation) sits between the contexts, and under a uniform
policy it gives the worse door after gold a positive advantage and the better door after grey a
negative one; a context-matched baseline (HGPO's level >= ``cue_distance``) ranks them right. Which
lamp a lever lights is drawn per episode, so the lever choice is worth nothing in expectation.
``won`` means the best door at every fork (the optimal policy: success 1, return 0.6 in expectation);
a uniform policy succeeds with probability ``0.5 ** segments``. ``info["best_doors"]`` counts the
forks where the best door was taken.
"""

from __future__ import annotations

from typing import Any

from stratagym.envs.core import StepResult
from stratagym.envs.synthetic._base import IntOption, SyntheticEnv, canonical

COLOURS = ("green", "amber")
EXIT_OF = {"green": "left", "amber": "right"}
VALUED_COLOURS = ("gold", "grey")
VALUED_EXIT_OF = {"gold": "left", "grey": "right"}
#: valued mode: (best door, other door) payoff of a fork after each lamp, before dividing by segments
PAYOFF = {"gold": (1.0, 0.8), "grey": (0.2, 0.0)}
WINGS = ("north", "south", "east", "west", "upper", "lower", "inner", "outer", "old", "new", "stone", "glass")


class CueCorridorEnv(SyntheticEnv):
    """Same junction, different histories; the exit depends on the cue (see the module docstring)."""

    options = {"n_tasks": IntOption(1), "segments": IntOption(1), "corridor": IntOption(0), "data_seed": IntOption(0)}

    def __init__(
        self,
        *,
        n_tasks: int = 8,
        segments: int = 3,
        corridor: int = 1,
        data_seed: int = 0,
        max_steps: int | None = None,
        context_k: int = 4,
        valued: bool = False,
        oracle_info: bool = False,
        render_mode: str | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        o = self.check_options(locals())
        n_tasks, self.segments, self.corridor = o["n_tasks"], o["segments"], o["corridor"]
        self.valued = bool(valued)
        self.colours = VALUED_COLOURS if self.valued else COLOURS
        self.exit_of = VALUED_EXIT_OF if self.valued else EXIT_OF
        steps_needed = self.segments * (self.corridor + 3)
        super().__init__(
            max_steps=max_steps or steps_needed + 4, context_k=context_k, oracle_info=oracle_info,
            render_mode=render_mode, protocol=protocol, tool_parser=tool_parser,
        )
        self._tasks: dict[str, dict[str, Any]] = {}
        for i in range(n_tasks):
            tid = f"maze{i:02d}"
            self._tasks[tid] = {"wing": WINGS[i % len(WINGS)]}
        self._set_tasks(list(self._tasks))
        self._t: dict[str, Any] = {}
        self._hall = 0
        self._phase = "levers"  # levers -> lamp -> corridor (pos) -> fork
        self._pos = 0
        self._cue = ""
        self._lever_a: list[str] = []  # lamp colour lever A lights in each hall (this episode)
        self._best = 0  # forks where the best door was taken (valued mode)
        self._fork: tuple[str | None, bool | None] = (None, None)  # (lamp, best door?) of a fork just taken

    @property
    def cue_distance(self) -> int:
        """Steps between the cue observation and the fork: HGPO needs context level >= this."""
        return self.corridor + 1

    # ---- state ------------------------------------------------------------------------------------
    def _obs(self) -> str:
        h = f"Hall {self._hall + 1}:"
        if self._phase == "levers":
            intro = f"You enter the {self._t['wing']} wing. " if self._hall == 0 else ""
            return f"{intro}{h} two levers, lever A and lever B."
        if self._phase == "lamp":
            return f"{h} a {self._cue} lamp lights up."
        if self._phase == "corridor":
            return f"{h} a dark corridor."
        return f"{h} a fork with doors left and right."

    def admissible_actions(self) -> list[str] | None:
        if not self._t:
            return None
        if self._phase == "levers":
            return ["pull lever A", "pull lever B"]
        if self._phase in ("lamp", "corridor"):
            return ["walk forward"]
        return ["go left", "go right"]

    def oracle_action(self) -> str:
        if self._phase == "levers":
            return "pull lever A"
        if self._phase in ("lamp", "corridor"):
            return "walk forward"
        return f"go {self.exit_of[self._cue]}"

    def _info_extra(self) -> dict[str, Any]:
        extra = {"best_doors": self._best, "fork_cue": self._fork[0], "fork_best": self._fork[1]} if self.valued else {}
        return self._extra(hall=self._hall, phase=self._phase, cue=self._cue or None, **extra)

    # ---- TextEnv API ------------------------------------------------------------------------------
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._t = self._tasks[task_id]
        self._hall, self._phase, self._pos, self._cue = 0, "levers", 0, ""
        self._lever_a = [self.colours[int(b)] for b in self.np_random.integers(2, size=self.segments)]
        self._best, self._fork = 0, (None, None)
        return self._obs(), self._info_extra()

    def _invalid(self, message: str) -> StepResult:
        hint = " or ".join(self.admissible_actions() or [])
        # the hint goes in the observation, the hashed state stays the plain state text
        return StepResult(
            observation=f"{message} Try: {hint}. {self._obs()}", action_valid=False, state_text=self._obs(),
            info=self._info_extra(),
        )

    def _step(self, action: str) -> StepResult:
        self._fork = (None, None)
        act = canonical(action)
        if act not in {canonical(a) for a in self.admissible_actions() or []}:
            return self._invalid(f"Invalid action {action[:40]!r}.")
        reward = 0.0
        if self._phase == "levers":
            a = self._lever_a[self._hall]
            self._cue = a if act.endswith(" a") else self.colours[1 - self.colours.index(a)]
            self._phase = "lamp"
        elif self._phase == "lamp" or self._phase == "corridor":
            if self._phase == "lamp":
                self._pos = 0
            if self._pos < self.corridor:
                self._phase, self._pos = "corridor", self._pos + 1
            else:
                self._phase = "fork"
        elif self.valued:
            best = act == f"go {self.exit_of[self._cue]}"
            self._best += int(best)
            self._fork = (self._cue, best)
            reward = PAYOFF[self._cue][0 if best else 1] / self.segments
            if self._hall + 1 >= self.segments:
                won = self._best == self.segments
                return StepResult(
                    observation="You step outside into daylight.", reward=reward, terminated=True, won=won,
                    score=float(won), info=self._info_extra(),
                )
            self._hall, self._phase, self._cue = self._hall + 1, "levers", ""
        else:
            if act != f"go {EXIT_OF[self._cue]}":
                return StepResult(
                    observation=f"Hall {self._hall + 1}: the door slams shut behind you. You are lost.",
                    terminated=True, info=self._info_extra(),
                )
            if self._hall + 1 >= self.segments:
                return StepResult(
                    observation="You step outside into daylight. You made it.",
                    reward=1.0, terminated=True, won=True, score=1.0, info=self._info_extra(),
                )
            self._hall, self._phase, self._cue = self._hall + 1, "levers", ""
        return StepResult(observation=self._obs(), reward=reward, info=self._info_extra())
