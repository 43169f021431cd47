"""SearchStrata: a synthetic search agent whose trajectories fall into strata by search count.

Structure (what Stratified GRPO is about). Task ``q017`` asks which of ``n_candidates`` (default 4)
cities hides a thing. The question and its candidates are fixed per task; which candidate is right
(and the order in which searches rule out the others) is drawn per episode from the reset seed, so a
policy cannot memorise answers: it has to search. Group rollouts share a seed, hence an answer. Two search actions are admissible: the *relevant* query (it names the question's
topic) rules out one wrong candidate per call, the *distractor* query returns nothing useful; both count
as a search (``info["search_count"]``). ``answer[city]`` ends the episode with reward 1 if right; the
admissible answers are the candidates still left (answering a ruled-out candidate is valid, and wrong).
At most ``max_searches`` (default 3) searches.

* A trajectory's stratum is its search count k. Answering uniformly among the admissible answers (the
  candidates still left) after r relevant searches succeeds with probability ``1 / (n - r)``: 1/4, 1/3, 1/2, 1 for r = 0..3,
  so the strata have very different reward distributions, and the better strategy needs more searches.
* Within a stratum, quality still varies: relevant vs distractor queries, and answering a candidate
  that is still left vs one already ruled out.

Optimal policy: search with the relevant query ``max_searches`` times, then answer the only candidate
left (success 1). The oracle agent does exactly that.

The observation always restates the state: question, candidates left, searches used, last result.
"""

from __future__ import annotations

from typing import Any

from stratagym.envs.core import StepResult
from stratagym.envs.synthetic._base import IntOption, SyntheticEnv, canonical, parse_bracket, task_rng

CITIES = (
    "oslo", "lima", "kyiv", "quito", "hanoi", "dakar", "perth", "tunis", "sofia", "riga", "porto",
    "cusco", "accra", "bern", "doha", "male",
)
TOPICS = (
    ("festival", "lantern"), ("museum", "statue"), ("harbour", "lighthouse"), ("market", "spice"),
    ("library", "manuscript"), ("garden", "orchid"), ("bridge", "bell"), ("station", "clock"),
    ("theatre", "mask"), ("stadium", "trophy"), ("temple", "drum"), ("castle", "crown"),
)
DISTRACTOR = "weather forecast"


def city_questions(n_tasks: int, n_candidates: int, data_seed: int) -> dict[str, dict[str, Any]]:
    """The task table of the search envs (also :mod:`.search_archives`): task ``q017`` asks which of
    ``n_candidates`` cities keeps a thing of a topic; its ``query`` is the relevant search."""
    tasks: dict[str, dict[str, Any]] = {}
    for i in range(n_tasks):
        rng = task_rng(data_seed, i)
        topic, thing = TOPICS[i % len(TOPICS)]
        cands = [CITIES[j] for j in rng.choice(len(CITIES), size=n_candidates, replace=False)]
        tid = f"q{i:03d}"
        tasks[tid] = {
            "question": f"Question {tid}: which city keeps the {thing} of the {topic}?",
            "topic": topic,
            "query": f"{thing} {topic}",
            "candidates": cands,
        }
    return tasks


class SearchStrataEnv(SyntheticEnv):
    """Search-count strata with different reward distributions (see the module docstring)."""

    options = {"n_tasks": IntOption(1), "n_candidates": IntOption(2, len(CITIES)), "max_searches": IntOption(0),
               "data_seed": IntOption(0)}
    constraints = (lambda o: (f"max_searches={o['max_searches']} exceeds the {o['n_candidates'] - 1} wrong candidates; "
                              "lower it") if o["max_searches"] > o["n_candidates"] - 1 else None,)

    def __init__(
        self,
        *,
        n_tasks: int = 32,
        n_candidates: int = 4,
        max_searches: int = 3,
        data_seed: int = 0,
        max_steps: int | None = None,
        context_k: int = 4,
        oracle_info: bool = False,
        render_mode: str | None = None,
        protocol: str = "tags",
        tool_parser: str = "hermes",
    ):
        o = self.check_options(locals())
        n_tasks, n_candidates, max_searches, data_seed = o["n_tasks"], o["n_candidates"], o["max_searches"], o["data_seed"]
        super().__init__(
            max_steps=max_steps or max_searches + 2, context_k=context_k, oracle_info=oracle_info,
            render_mode=render_mode, protocol=protocol, tool_parser=tool_parser,
        )
        self.n_candidates = n_candidates
        self.max_searches = max_searches
        self._tasks = city_questions(n_tasks, n_candidates, data_seed)
        self._set_tasks(list(self._tasks))
        self._t: dict[str, Any] = {}
        self._answer = ""
        self._elimination: list[str] = []
        self._left: list[str] = []
        self._searches = 0
        self._relevant = 0
        self._last = ""

    # ---- state ------------------------------------------------------------------------------------
    def _obs(self) -> str:
        return (
            f"{self._t['question']} Candidates left: {', '.join(self._left)}. "
            f"Searches used: {self._searches} of {self.max_searches}. Last result: {self._last}"
        )

    def admissible_actions(self) -> list[str] | None:
        if not self._t:
            return None
        acts = []
        if self._searches < self.max_searches:
            acts += [f"search[{self._t['query']}]", f"search[{DISTRACTOR}]"]
        # answers listed: the candidates still left (answering a ruled-out one is valid, and wrong)
        acts += [f"answer[{c}]" for c in self._left]
        return acts

    def oracle_action(self) -> str:
        if self._searches < self.max_searches:
            return f"search[{self._t['query']}]"
        return f"answer[{self._answer}]"

    def _info_extra(self) -> dict[str, Any]:
        return self._extra(n_left=len(self._left), relevant_searches=self._relevant)

    # ---- TextEnv API ------------------------------------------------------------------------------
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._t = self._tasks[task_id]
        cands = self._t["candidates"]
        self._answer = cands[int(self.np_random.integers(len(cands)))]
        wrong = [c for c in cands if c != self._answer]
        self._elimination = [wrong[j] for j in self.np_random.permutation(len(wrong))]
        self._left = list(cands)
        self._searches = 0
        self._relevant = 0
        self._last = "none yet."
        return self._obs(), self._info_extra()

    def _invalid(self, message: str) -> StepResult:
        self._last = message
        return StepResult(observation=self._obs(), action_valid=False, info=self._info_extra())

    def _step(self, action: str) -> StepResult:
        parsed = parse_bracket(action)
        if parsed is None:
            return self._invalid("could not parse the action; use search[query] or answer[city].")
        verb, arg = parsed
        if verb == "search":
            if self._searches >= self.max_searches:
                return self._invalid("no searches left; answer now.")
            if not arg:
                return self._invalid("empty search query.")
            self._searches += 1
            words = set(canonical(arg).split())
            if self._t["topic"] in words:
                self._relevant += 1
                gone = self._elimination[self._relevant - 1] if self._relevant <= len(self._elimination) else None
                if gone is not None and gone in self._left:
                    self._left.remove(gone)
                    self._last = "one wrong candidate was ruled out."
                else:
                    self._last = "nothing new."
            else:
                self._last = "nothing about the question."
            return StepResult(observation=self._obs(), tool="search", info=self._info_extra())
        if verb == "answer":
            city = canonical(arg)
            if city not in self._t["candidates"]:
                return self._invalid(f"{arg[:40]!r} is not a candidate.")
            won = city == self._answer
            self._last = "correct." if won else "wrong."
            return StepResult(
                observation=f"You answered {city}: {'correct' if won else 'wrong'}.",
                reward=float(won), terminated=True, won=won, score=float(won),
                info={**self._info_extra(), "answer": self._answer},
            )
        return self._invalid(f"unknown action {verb!r}; use search[query] or answer[city].")
