"""The searching expert: ALFWorld's planner, held to what the agent has seen (issue 48 item 5).

The planner expert reads the hidden game state and walks straight to the goal's object, so a model cloned
from it learns to go somewhere and take whatever is there: it cannot know where things are. The searching
expert demonstrates what an agent that sees only the text can do:

1. **Explore.** Until it has seen as many instances of each object type the task needs as the task takes
   (one mug, two pencils, a desklamp), it visits receptacles and opens each closed one it arrives at. It
   visits first the kinds of receptacle where the train games hold that kind of object most often
   (:func:`location_prior`: tomatoes per fridge, per countertop, ...; what a person knows of kitchens),
   then in the order the first observation lists them. Nothing hidden decides where it goes or when it
   stops. The types are the ones the task sentence names (read from the plan, which names the same ones).
2. **Act.** Then it follows the planner's plan from the current state, with one rewrite: when the plan's
   next object to take or use is one the agent has not seen (the planner may prefer ``mug 1`` in an
   unopened cabinet to the ``mug 2`` the agent saw on the counter; ``go to`` costs the same anywhere), it
   goes to where it saw an instance of that type, unused by the plan and not yet placed, and takes or uses
   that one. The goals are over types (``put some mug on ...``), so the rewritten plan still wins.

Should exploring run out of receptacles, or a rewritten command not be admissible, it falls back to the
planner's own command and counts it in :attr:`SearchingExpert.privileged`, so demonstrations can be checked
for commands an agent could not have justified.

Each command comes with a **reason** (:attr:`SearchingExpert.reason`), the demonstrations' think text under
``demos.reasons``: what the task needs, what is still to be found, and once everything is found, the steps
left (``Left: take mug 2 from countertop 1, put mug 2 in/on shelf 1.``), a list that shrinks as the episode
goes. It is SearchQA's planning-oracle lesson (a think text that states what is still to be done taught the
third hop) carried over; the reason only states what the expert knows from the transcript.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Mapping, Sequence

from stratagym.envs.alfworld import paths

__all__ = ["SearchingExpert", "location_prior", "needed_objects"]

#: "take mug 2 from countertop 1" / "use desklamp 1": the objects a plan picks up or switches on
_TAKE_OR_USE = re.compile(r"^(?:take (\S+ \d+) from .+|use (\S+ \d+))$")
_INSTANCE = re.compile(r"\b([a-z]+) (\d+)\b")


def _target(command: str) -> str | None:
    """The object ``command`` takes or uses, or None."""
    m = _TAKE_OR_USE.match(command)
    return (m.group(1) or m.group(2)) if m else None


def _type(instance: str) -> str:
    return instance.rsplit(" ", 1)[0]


def needed_objects(plan: Sequence[str]) -> Counter[str]:
    """How many instances of each object type ``plan`` takes or uses (pick-two: 2 of one type)."""
    return Counter(_type(t) for t in map(_target, plan) if t is not None)


@functools.lru_cache(maxsize=4)
def location_prior(games: str | Path | None = None) -> dict[str, dict[str, float]]:
    """object type -> receptacle type -> how many objects of that type one receptacle of that type holds, on
    average over the train games (``games``: a compact games file; default the bundled ``train.jsonl``).

    Per receptacle, not per type: a kitchen has 13 cabinets and one fridge, and a tomato is likelier in the
    fridge than in any one cabinet. Names are the text game's (``tomato``, ``sinkbasin``).
    """
    path = Path(games) if games is not None else paths.bundled_dir() / "train.jsonl"
    held: dict[str, Counter[str]] = defaultdict(Counter)
    receptacles: Counter[str] = Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            game = json.loads(line)
            receptacles.update(kind.lower() for _, kind, _ in game["receptacles"])
            for _, kind, where in game["objects"]:
                parts = where.split("|")
                held[kind.lower()][(parts[-1] if parts[-1].isalpha() else parts[0]).lower()] += 1
    return {obj: {r: n / receptacles[r] for r, n in counts.items() if receptacles[r]} for obj, counts in held.items()}


class SearchingExpert:
    """One episode's searching expert; ``planner()`` returns an optimal plan from the engine's current state,
    ``prior`` ranks where to look (:func:`location_prior`; None: the listed order alone)."""

    def __init__(self, planner: Callable[[], list[str]], prior: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._planner = planner
        self._prior = prior or {}
        self.privileged = 0  # commands taken from the planner that the agent's observations do not justify
        self.reason = ""  # why the last command returned: the think text of reasoned demonstrations

    def reset(self, feedback: str, admissible: Sequence[str], plan: Sequence[str] | None = None) -> str:
        """Start an episode from its first observation; ``plan`` (the stored walkthrough) saves a planner call."""
        self.privileged = 0
        reachable = [c[6:] for c in admissible if c.startswith("go to ")]
        listed = _listed_receptacles(feedback)
        self._order = listed + [r for r in reachable if r not in listed]  # the listed order, then the rest
        self._receptacles = set(self._order)
        first_plan = list(plan) if plan else self._planner()
        self._needed = needed_objects(first_plan)
        self._seen: dict[str, str | None] = {}  # object instance -> receptacle it was last seen at (None: held)
        self._placed: set[str] = set()
        self._visited: set[str] = set()
        self._location: str | None = None
        self._plan: list[str] | None = first_plan  # the planner's plan while the agent follows it (as the planner expert)
        return self._next(admissible)

    def step(self, command: str, accepted: bool, feedback: str, admissible: Sequence[str]) -> str:
        """Observe the result of ``command`` and return the next command."""
        if accepted:
            # a suffix of an optimal plan is optimal: keep it while the agent follows it, replan otherwise
            self._plan = self._plan[1:] if self._plan and command == self._plan[0] else None
            if command.startswith("go to "):
                self._location = command[6:]
                self._visited.add(self._location)
            elif command.startswith("put "):
                self._placed.add(_INSTANCE.search(command[4:]).group(0))
            self._observe(feedback)
        return self._next(admissible)

    # ---- internals ------------------------------------------------------------------------------
    def _observe(self, feedback: str) -> None:
        for m in _INSTANCE.finditer(feedback):
            name = m.group(0)
            if name not in self._receptacles:
                self._seen[name] = self._location

    def _available(self, kind: str) -> list[str]:
        return [o for o in self._seen if _type(o) == kind and o not in self._placed]

    def _missing(self) -> list[str]:
        """The object types the task needs more of than the agent has seen (placed ones count as found)."""
        return [kind for kind, n in self._needed.items()
                if len(self._available(kind)) + sum(_type(o) == kind for o in self._placed) < n]

    def _next(self, admissible: Sequence[str]) -> str:
        missing = self._missing()
        return self._explore(admissible, missing) if missing else self._act(admissible)

    def _explore(self, admissible: Sequence[str], missing: list[str]) -> str:
        still = f"{_needs_sentence(self._needed)} Still to find: {self._missing_phrase(missing)}."
        here = self._location
        if here is not None and f"open {here}" in admissible:
            self.reason = f"{still} The {here} is closed: I open it."
            return f"open {here}"
        candidates = [r for r in self._order if r not in self._visited and f"go to {r}" in admissible]
        if candidates:
            def likelihood(receptacle: str) -> float:
                return max(self._prior.get(kind, {}).get(_type(receptacle), 0.0) for kind in missing)
            where = max(candidates, key=likelihood)  # max keeps the first of equals: the listed order
            self.reason = f"{still} I look in {where}."
            return f"go to {where}"
        self.reason = f"{still} Every place is searched: I follow the plan."
        return self._privileged(self._planner())

    def _missing_phrase(self, missing: list[str]) -> str:
        """``a mug`` / ``another pencil`` (pick two, one found) / ``two pencils``, joined with ``and``."""
        parts = []
        for kind in missing:
            found = len(self._available(kind)) + sum(_type(o) == kind for o in self._placed)
            parts.append(_count_phrase(kind, self._needed[kind] - found, ordinal=found > 0))
        return " and ".join(parts)

    def _left(self, plan: Sequence[str]) -> list[str]:
        """The plan's remaining steps that do something (walking and opening left out), each unseen object
        replaced by the seen instance that stands in for it and taken from where that one was seen."""
        in_use = {t for t in map(_target, plan) if t is not None}
        stand_ins: dict[str, str] = {}
        for target in (t for t in map(_target, plan) if t is not None):
            if target not in self._seen and target not in stand_ins:
                spare = [o for o in self._available(_type(target)) if o not in in_use and o not in stand_ins.values()]
                if spare:
                    stand_ins[target] = spare[0]
        steps = []
        for command in plan:
            if command.startswith(("go to ", "open ", "close ")):
                continue
            target = _target(command)
            if target in stand_ins and command.startswith("take ") and self._seen.get(stand_ins[target]):
                command = f"take {stand_ins[target]} from {self._seen[stand_ins[target]]}"
            steps.append(_INSTANCE.sub(lambda m: stand_ins.get(m.group(0), m.group(0)), command))
        return steps

    def _act(self, admissible: Sequence[str]) -> str:
        if not self._plan or self._plan[0] not in admissible:
            self._plan = self._planner()
        plan = self._plan
        left = self._left(plan)
        self.reason = (f"{_needs_sentence(self._needed)} All found. Left: {', '.join(left)}." if left
                       else f"{_needs_sentence(self._needed)} All found.")
        for command in plan:
            target = _target(command)
            if target is None:
                if command.startswith(("go to ", "open ")):
                    continue  # on the way to the next object
                break  # the plan does something with what it holds first
            if target in self._seen:
                break
            in_use = {t for t in map(_target, plan) if t is not None}
            stand_in = next((o for o in self._available(_type(target)) if o not in in_use), None)
            if stand_in is None:
                return self._privileged(plan)
            where = self._seen[stand_in]
            if where is not None and where != self._location:
                wanted = f"go to {where}"
            elif command.startswith("use "):
                wanted = f"use {stand_in}"
            else:
                wanted = f"take {stand_in} from {where}"
            return wanted if wanted in admissible else self._privileged(plan)
        return plan[0] if plan else "look"

    def _privileged(self, plan: Sequence[str]) -> str:
        self.privileged += 1
        return plan[0] if plan else "look"


_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}
_ORDINALS = {1: "another", 2: "two more", 3: "three more"}


def _count_phrase(kind: str, n: int, *, ordinal: bool = False) -> str:
    """``a mug``, ``an apple``, ``two pencils``; with ``ordinal`` (some already found) ``another pencil``."""
    if ordinal:
        return f"{_ORDINALS.get(n, f'{n} more')} {kind}{'s' if n > 1 else ''}"
    if n == 1:
        return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
    return f"{_NUMBERS.get(n, str(n))} {kind}s"


def _needs_sentence(needed: Counter[str]) -> str:
    """``The task needs a mug.`` / ``... two pencils.`` / ``... an alarmclock and a desklamp.``"""
    if not needed:  # a plan that takes and uses nothing (none of the six task types)
        return "The task needs no object."
    return "The task needs " + " and ".join(_count_phrase(k, n) for k, n in needed.items()) + "."


def _listed_receptacles(feedback: str) -> list[str]:
    """The receptacles of "Looking quickly around you, you see a bed 1, a drawer 11, ..." in listed order."""
    m = re.search(r"you see (.+?)\.\s*(?:\n|$)", feedback)
    return [f"{k} {n}" for k, n in _INSTANCE.findall(m.group(1))] if m else []
