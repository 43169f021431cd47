"""SearchArchives: search-count strata whose reward levels differ for a reason the policy does not control.

What Stratified GRPO's argument rests on (and ``SearchStrata`` lacks): trajectories in different strata
have structurally different reward distributions *whatever the agent does inside them*, so a global
baseline mixes a between-stratum offset into every trajectory's credit and drowns the within-stratum
signal (which query, which answer). Here:

1. ``Question q017: which city keeps the spice of the market? Candidates: tunis, sofia, porto, lima. Two
   archives hold records: archive A and archive B.`` -- ``open[archive A]`` / ``open[archive B]``. Per
   episode (from the reset seed) one archive holds the *full records* and the other a *digital summary*;
   which is which cannot be known before opening, so the choice is worth nothing in expectation. Group
   rollouts share a seed, so within a group the archive opened decides the stratum.
2. The full records take **2** searches, the summary **1** (the stratum: ``search_count``, forced by the
   archive, not chosen). Each search step offers the relevant query ``search[<thing> <topic>]`` (it
   finds the record: ``Found: the records name <city>.``) and a distractor ``search[weather forecast]``
   (finds nothing).
3. Then ``answer[<city>]`` for each of the 4 candidates (the observation no longer lists them; it keeps
   what was found). Reward: 0.5 for the right city, plus 0.5 for an answer backed by the full records
   (a cited full source) -- so the 2-search stratum scores 0.5 more than the 1-search stratum *whatever
   the answer*: a right answer after 1 search earns exactly what a wrong one after 2 searches earns.

``won`` = the right city (the within-stratum decision quality). Optimal policy: either archive, the
relevant query at every search, answer the city found: success 1, return 0.75 in expectation. A uniform
policy succeeds 1 time in 4 (it does not read what it found). Under GRPO's group baseline the 0.5
offset is half the reward variance at the start and it is noise for every learnable decision (query,
answer); Stratified GRPO's per-stratum normalisation (SAN) removes it.
"""

from __future__ import annotations

from typing import Any

from stratagym.envs.core import StepResult
from stratagym.envs.synthetic._base import IntOption, RealOption, SyntheticEnv, canonical, parse_bracket
from stratagym.envs.synthetic.search_strata import CITIES, DISTRACTOR, city_questions

ARCHIVES = ("A", "B")


class SearchArchivesEnv(SyntheticEnv):
    """Forced search-count strata with a stratum reward offset (see the module docstring)."""

    options = {"n_tasks": IntOption(1), "n_candidates": IntOption(2, len(CITIES)), "full_searches": IntOption(1),
               "summary_searches": IntOption(1), "full_bonus": RealOption(0.0, 1.0), "data_seed": IntOption(0)}
    constraints = (lambda o: "full_searches and summary_searches must differ (they define the strata)"
                   if o["full_searches"] == o["summary_searches"] else None,)

    def __init__(
        self,
        *,
        n_tasks: int = 32,
        n_candidates: int = 4,
        full_searches: int = 2,
        summary_searches: int = 1,
        full_bonus: float = 0.5,
        data_seed: int = 0,
        context_k: int = 4,
        oracle_info: bool = False,
        render_mode: str | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        o = self.check_options(locals())
        n_tasks, n_candidates, data_seed = o["n_tasks"], o["n_candidates"], o["data_seed"]
        self.full_searches, self.summary_searches, self.full_bonus = o["full_searches"], o["summary_searches"], o["full_bonus"]
        super().__init__(
            max_steps=max(self.full_searches, self.summary_searches) + 4, context_k=context_k,
            oracle_info=oracle_info, render_mode=render_mode, protocol=protocol, tool_parser=tool_parser,
        )
        self._tasks = city_questions(n_tasks, n_candidates, data_seed)
        self._set_tasks(list(self._tasks))
        self._t: dict[str, Any] = {}
        self._answer = ""
        self._full = ""  # which archive holds the full records this episode
        self._opened = ""
        self._budget = 0
        self._searches = 0
        self._relevant = 0
        self._found = ""

    # ---- state ------------------------------------------------------------------------------------
    @property
    def _phase(self) -> str:
        if not self._opened:
            return "archive"
        return "search" if self._searches < self._budget else "answer"

    def _obs(self) -> str:
        q = self._t["question"]
        if not self._opened:
            return (f"{q} Candidates: {', '.join(self._t['candidates'])}. Two archives hold records: "
                    "archive A and archive B.")
        kind = "full records" if self._opened == self._full else "a digital summary"
        found = f"Found: the records name {self._found}." if self._found else "Found: nothing yet."
        return f"{q} Archive {self._opened} holds {kind}. Searches used: {self._searches} of {self._budget}. {found}"

    def admissible_actions(self) -> list[str] | None:
        if not self._t:
            return None
        phase = self._phase
        if phase == "archive":
            return [f"open[archive {a}]" for a in ARCHIVES]
        if phase == "search":
            return [f"search[{self._t['query']}]", f"search[{DISTRACTOR}]"]
        return [f"answer[{c}]" for c in self._t["candidates"]]

    def oracle_action(self) -> str:
        phase = self._phase
        if phase == "archive":
            return "open[archive A]"
        if phase == "search":
            return f"search[{self._t['query']}]"
        return f"answer[{self._answer}]"

    def _info_extra(self) -> dict[str, Any]:
        stratum = None if not self._opened else ("full" if self._opened == self._full else "summary")
        return self._extra(archive=stratum, relevant_searches=self._relevant, phase=self._phase)

    # ---- TextEnv API ------------------------------------------------------------------------------
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._t = self._tasks[task_id]
        cands = self._t["candidates"]
        self._answer = cands[int(self.np_random.integers(len(cands)))]
        self._full = ARCHIVES[int(self.np_random.integers(2))]
        self._opened, self._budget, self._searches, self._relevant, self._found = "", 0, 0, 0, ""
        return self._obs(), self._info_extra()

    def _invalid(self, message: str) -> StepResult:
        return StepResult(observation=f"{message} {self._obs()}", action_valid=False, state_text=self._obs(),
                          info=self._info_extra())

    def _step(self, action: str) -> StepResult:
        parsed = parse_bracket(action)
        phase = self._phase
        if parsed is None:
            return self._invalid("Invalid action: could not parse it; use one of the listed actions.")
        verb, arg = parsed
        if phase == "archive":
            name = canonical(arg).removeprefix("archive").strip().upper()
            if verb != "open" or name not in ARCHIVES:
                return self._invalid("Invalid action: open an archive first: open[archive A] or open[archive B].")
            self._opened = name
            self._budget = self.full_searches if name == self._full else self.summary_searches
            return StepResult(observation=self._obs(), info=self._info_extra())
        if phase == "search":
            if verb != "search" or not arg:
                return self._invalid("Invalid action: search first, e.g. search[<what you look for>].")
            self._searches += 1
            if self._t["topic"] in set(canonical(arg).split()):
                self._relevant += 1
                self._found = self._answer
            return StepResult(observation=self._obs(), tool="search", info=self._info_extra())
        city = canonical(arg)
        if verb != "answer" or city not in self._t["candidates"]:
            return self._invalid("Invalid action: answer one of the candidates, e.g. answer[<city>].")
        won = city == self._answer
        reward = 0.5 * won + (self.full_bonus if self._opened == self._full else 0.0)
        return StepResult(
            observation=f"You answered {city}: {'correct' if won else 'wrong'}.", reward=reward, terminated=True,
            won=won, score=float(won), info={**self._info_extra(), "answer": self._answer},
        )
