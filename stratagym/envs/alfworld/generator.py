"""Offline generator of ALFWorld-format games (``game.tw-pddl`` + ``traj_data.json``).

The ALFRED game data cannot be downloaded here, but the alfworld package ships everything a game is
made of: the PDDL domain and text grammar, the goal library (goal PDDL and task sentences per task
type), the ALFRED object/receptacle constants (what can hold what, what can be heated...) and the
room layouts of all 120 AI2-THOR floor plans (which receptacles each room has, and where). This
module samples a room and a task from those, writes the PDDL problem the way ALFWorld's own games are
written (ALFRED-mangled ids such as ``Apple_bar__minus_01_dot_65_bar_...``, one location per
receptacle, the agent in a free spot, ``canContain`` facts from ALFRED's table, the goal from
``gdict[task]["pddl"]``) and checks with the real engine that the planner's walkthrough wins.

A game is kept in a compact :class:`GameRecord` (the sampled scene, not the PDDL text); the full
``game.tw-pddl`` is rebuilt from it deterministically by :func:`problem_pddl` / :func:`game_json`.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from stratagym.envs.alfworld.engine import AlfredEngine
from stratagym.envs.alfworld.runtime import load_engine_modules, logic_files
from stratagym.errors import ConfigError

__all__ = [
    "TASK_TYPES",
    "ROOM_FLOOR_PLANS",
    "UNSEEN_FLOOR_PLANS",
    "GameRecord",
    "generate_games",
    "problem_pddl",
    "game_json",
    "traj_data",
    "write_game_folder",
    "mangle",
    "combo",
]

#: The six ALFWorld task types, in ALFWorld's numbering (alfred_tw_env.TASK_TYPES 1..6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

ROOM_FLOOR_PLANS: dict[str, tuple[int, ...]] = {
    "Kitchen": tuple(range(1, 31)),
    "LivingRoom": tuple(range(201, 231)),
    "Bedroom": tuple(range(301, 331)),
    "Bathroom": tuple(range(401, 431)),
}

#: Floor plans held out of train and in-distribution games (ALFRED's valid_unseen rooms 10/219/308/424
#: plus one more of each room type), used by the out-of-distribution split.
UNSEEN_FLOOR_PLANS: tuple[int, ...] = (10, 16, 219, 224, 308, 315, 424, 426)

#: Rooms where ALFRED samples each task type (alfworld.gen.constants.GOALS_VALID).
_GOAL_ROOMS = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
}

#: The appliance each state-change task needs, and the receptacle type that provides it.
_APPLIANCE = {
    "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
    "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
    "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
}

_TOGGLE = "DeskLamp"
_TOGGLE_HOLDERS = ("Desk", "SideTable", "Dresser")
#: How many instances a receptacle type gets when a room lists it but its layout gives no position.
_EXTRA_COUNTS = {"StoveBurner": 4}
_MANGLE = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def mangle(alfred_id: str) -> str:
    """ALFRED id -> PDDL name, as ALFRED's PlannedGameState.fix_pddl_str_chars does it."""
    return "".join(_MANGLE.get(c, c) for c in alfred_id)


# --------------------------------------------------------------------------------------------------
# ALFRED knowledge (from the installed alfworld package)
# --------------------------------------------------------------------------------------------------


class _Knowledge:
    """The constants the generator needs, read from alfworld once."""

    def __init__(self) -> None:
        mods = load_engine_modules()
        c = mods.constants
        self.gdict = mods.goal_library.gdict
        self.static_receptacles = sorted(set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES))
        self.movable_receptacles = set(c.MOVABLE_RECEPTACLES)
        self.can_contain = {r: set(objs) for r, objs in c.VAL_RECEPTACLE_OBJECTS.items()}
        self.action_objects = {k: set(v) for k, v in c.VAL_ACTION_OBJECTS.items()}
        self.openable = set(c.OPENABLE_CLASS_LIST)
        pickupable: set[str] = set()
        for objs in self.can_contain.values():
            pickupable |= {o for o in objs if "Sliced" not in o}
        self.pickupable = pickupable
        self.otypes = sorted((set(c.OBJECTS) | set(c.MOVABLE_RECEPTACLES)) - set(self.static_receptacles))
        self.layouts = Path(mods.alfworld.__file__).resolve().parent / "gen" / "layouts"

    def room(self, floor_plan: int) -> tuple[list[str], dict[str, list[float]]]:
        objects = json.loads((self.layouts / f"FloorPlan{floor_plan}-objects.json").read_text())
        openable = json.loads((self.layouts / f"FloorPlan{floor_plan}-openable.json").read_text())
        return objects, openable


_KNOWLEDGE: _Knowledge | None = None


def _knowledge() -> _Knowledge:
    global _KNOWLEDGE
    if _KNOWLEDGE is None:
        _KNOWLEDGE = _Knowledge()
    return _KNOWLEDGE


def room_type(floor_plan: int) -> str:
    for name, plans in ROOM_FLOOR_PLANS.items():
        if floor_plan in plans:
            return name
    raise ConfigError(f"unknown floor plan {floor_plan}; AI2-THOR floor plans are 1-30, 201-230, 301-330, 401-430")


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


@dataclass
class GameRecord:
    """One generated game, compactly: enough to rebuild ``game.tw-pddl`` and ``traj_data.json``.

    ``receptacles``: ``[alfred_id, rtype, location]``; ``objects``: ``[alfred_id, otype, receptacle
    alfred_id]``; locations are ALFRED ``loc|x|z|rotation|horizon`` strings. ``key`` is the game's
    folder under the split (``<task>-<Obj>-None-<Recep>-<scene>/trial_...``), also its ``task_id``.
    """

    key: str
    task_type: str
    floor_plan: int
    pddl_params: dict[str, Any]
    task_desc: str
    agent_location: str
    receptacles: list[list[str]]
    objects: list[list[str]]
    walkthrough: list[str] = field(default_factory=list)
    seed: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GameRecord":
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"corrupt ALFWorld game record ({exc}); regenerate with scripts/make_alfworld_data.py") from exc


def combo(record: GameRecord) -> tuple[str, str, str]:
    """(task type, object, receptacle-or-toggle): what out-of-distribution games must not share with train."""
    p = record.pddl_params
    return record.task_type, p["object_target"], p["parent_target"] or p["toggle_target"]


# --------------------------------------------------------------------------------------------------
# PDDL
# --------------------------------------------------------------------------------------------------


def problem_digest(record: GameRecord) -> str:
    """SHA-256 of the game's PDDL problem: two records with the same digest are the same game."""
    return hashlib.sha256(problem_pddl(record).encode()).hexdigest()


def problem_pddl(record: GameRecord) -> str:
    """The PDDL problem of ``record``, written like ALFWorld's ``game.tw-pddl`` problems."""
    k = _knowledge()
    receps = [(mangle(rid), rtype, mangle(loc)) for rid, rtype, loc in record.receptacles]
    recep_loc = {rid: loc for rid, _, loc in receps}
    objs = [(mangle(oid), otype, mangle(parent)) for oid, otype, parent in record.objects]
    agent_loc = mangle(record.agent_location)
    locations = sorted({loc for _, _, loc in receps} | {agent_loc})

    lines = [f"(define (problem plan_{record.key.rsplit('/', 1)[-1]})", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"{name} - object" for name, _, _ in sorted(objs)]
    lines += [f"{t}Type - otype" for t in k.otypes]
    lines += [f"{t}Type - rtype" for t in k.static_receptacles]
    lines += [f"{name} - receptacle" for name, _, _ in sorted(receps)]
    lines += [f"{loc} - location" for loc in locations]
    lines += [")", "(:init", "(= (total-cost) 0)", f"(atLocation agent1 {agent_loc})"]
    for name, rtype, loc in sorted(receps):
        lines.append(f"(receptacleType {name} {rtype}Type)")
        lines.append(f"(receptacleAtLocation {name} {loc})")
        if rtype in k.openable:
            lines.append(f"(openable {name})")
    scene_otypes = sorted({otype for _, otype, _ in objs})
    for rtype in sorted({rtype for _, rtype, _ in receps}):
        for otype in scene_otypes:
            if otype in k.can_contain.get(rtype, ()):
                lines.append(f"(canContain {rtype}Type {otype}Type)")
    for name, otype, parent in sorted(objs):
        lines.append(f"(objectType {name} {otype}Type)")
        lines.append(f"(inReceptacle {name} {parent})")
        lines.append(f"(objectAtLocation {name} {recep_loc[parent]})")
        if otype in k.pickupable:
            lines.append(f"(pickupable {name})")
        if otype in k.movable_receptacles:
            lines.append(f"(isReceptacleObject {name})")
        for prop, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                           ("Toggleable", "toggleable"), ("Sliceable", "sliceable")):
            if otype in k.action_objects[prop]:
                lines.append(f"({pred} {name})")
    lines.append(")")
    p = record.pddl_params
    goal = k.gdict[record.task_type]["pddl"].replace("#", "-")
    goal = goal.format(obj=p["object_target"], recep=p["parent_target"], toggle=p["toggle_target"],
                       mrecep=p["mrecep_target"])
    return "\n".join(lines) + "\n" + goal.strip() + "\n"


def game_json(record: GameRecord, domain: str, grammar: str) -> dict[str, Any]:
    """The ``game.tw-pddl`` content: domain, grammar with the task sentence, problem, walkthrough."""
    if "UNKNOWN GOAL" not in grammar:
        raise ConfigError("the ALFWorld grammar has no 'UNKNOWN GOAL' placeholder; use alfworld's alfred.twl2")
    return {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", record.task_desc),
        "pddl_problem": problem_pddl(record),
        "solvable": True,
        "walkthrough": list(record.walkthrough) or None,
    }


def traj_data(record: GameRecord) -> dict[str, Any]:
    """A ``traj_data.json`` with the fields ALFWorld's loaders and hand-coded expert read."""
    return {
        "task_type": record.task_type,
        "task_id": record.key.rsplit("/", 1)[-1],
        "pddl_params": dict(record.pddl_params),
        "scene": {"floor_plan": f"FloorPlan{record.floor_plan}", "scene_num": record.floor_plan},
        "turk_annotations": {"anns": [{"task_desc": record.task_desc, "high_descs": [], "assignment_id": "generated"}]},
        "stratagym": {"generator": "stratagym.envs.alfworld.generator", "seed": record.seed},
    }


def write_game_folder(record: GameRecord, split_dir: Path, domain: str, grammar: str) -> Path:
    """Write ``<split_dir>/<key>/{game.tw-pddl,traj_data.json}``; returns the game file path."""
    folder = Path(split_dir) / record.key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "traj_data.json").write_text(json.dumps(traj_data(record), indent=1))
    game_file = folder / "game.tw-pddl"
    game_file.write_text(json.dumps(game_json(record, domain, grammar)))
    return game_file


# --------------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------------


def _fmt(v: float) -> str:
    return f"{'+' if v >= 0 else '-'}{abs(v):05.2f}"


def _scene_receptacles(floor_plan: int, rng: random.Random) -> list[list[str]]:
    """The static receptacles of a floor plan: layout positions where known, invented ones otherwise."""
    k = _knowledge()
    objects, openable = k.room(floor_plan)
    receps: list[list[str]] = []
    used_locs: set[str] = set()

    def location(x: float, z: float, rot: int, horizon: int) -> str:
        gx, gz = int(round(x / 0.25)), int(round(z / 0.25))
        loc = f"loc|{gx}|{gz}|{rot}|{horizon}"
        while loc in used_locs:  # one location per receptacle, as in ALFWorld's games
            gx += 1
            loc = f"loc|{gx}|{gz}|{rot}|{horizon}"
        used_locs.add(loc)
        return loc

    present: set[str] = set()
    for rid, point in sorted(openable.items()):
        parts = rid.split("|")
        rtype = parts[4] if len(parts) > 4 else parts[0]
        if rtype not in k.static_receptacles:
            continue
        receps.append([rid, rtype, location(point[0], point[1], int(point[2]), int(point[3]))])
        present.add(rtype)
    for rtype in sorted(set(objects) & set(k.static_receptacles) - present):
        for _ in range(_EXTRA_COUNTS.get(rtype, 1)):
            x, y, z = rng.uniform(-3, 3), rng.uniform(0, 1.5), rng.uniform(-3, 3)
            base = "Sink" if rtype == "SinkBasin" else "Bathtub" if rtype == "BathtubBasin" else rtype
            rid = f"{base}|{_fmt(x)}|{_fmt(y)}|{_fmt(z)}" + (f"|{rtype}" if base != rtype else "")
            receps.append([rid, rtype, location(x, z, rng.choice((0, 90, 180, 270)), rng.choice((0, 30, 60)))])
    return receps


def _candidate_targets(task_type: str, floor_plan: int, receps: list[list[str]]) -> list[tuple[str, str, str]]:
    """(object, parent receptacle type, toggle) triples that make a solvable ``task_type`` in this room."""
    k = _knowledge()
    objects, _ = k.room(floor_plan)
    rtypes = {r[1] for r in receps}
    room_objs = sorted({o for o in objects if o in k.pickupable})
    out: list[tuple[str, str, str]] = []
    if task_type == "look_at_obj_in_light":
        if _TOGGLE not in objects or not rtypes & set(_TOGGLE_HOLDERS):
            return []
        return [(o, "", _TOGGLE) for o in room_objs if any(o in k.can_contain.get(r, ()) for r in rtypes)]
    appliance = _APPLIANCE.get(task_type)
    if appliance is not None and appliance[1] not in rtypes:
        return []
    for obj in room_objs:
        if appliance is not None and obj not in k.action_objects[appliance[0]]:
            continue
        for rtype in sorted(rtypes):
            if obj not in k.can_contain.get(rtype, ()):
                continue
            if appliance is not None and rtype == appliance[1]:
                continue
            # the object must start somewhere other than the target receptacle type
            if not any(obj in k.can_contain.get(r, ()) for r in rtypes - {rtype}):
                continue
            out.append((obj, rtype, ""))
    return out


def _sample_game(task_type: str, floor_plan: int, rng: random.Random, exclude: set[tuple[str, str, str]],
                 key_prefix: str) -> GameRecord | None:
    k = _knowledge()
    receps = _scene_receptacles(floor_plan, rng)
    candidates = [c for c in _candidate_targets(task_type, floor_plan, receps)
                  if (task_type, c[0], c[1] or c[2]) not in exclude]
    if not candidates:
        return None
    obj, parent, toggle = rng.choice(candidates)
    objects_in_room, _ = k.room(floor_plan)
    by_type: dict[str, list[list[str]]] = {}
    for r in receps:
        by_type.setdefault(r[1], []).append(r)

    def holders(otype: str, avoid: str = "") -> list[list[str]]:
        return [r for r in receps if otype in k.can_contain.get(r[1], ()) and r[1] != avoid]

    placed: list[list[str]] = []
    counter = [0]

    def place(otype: str, count: int, avoid: str = "") -> None:
        options = holders(otype, avoid)
        for _ in range(count):
            counter[0] += 1
            x, y, z = rng.uniform(-3, 3), rng.uniform(0, 2), rng.uniform(-3, 3)
            oid = f"{otype}|{_fmt(x)}|{_fmt(y)}|{_fmt(z)}"
            placed.append([oid, otype, rng.choice(options)[0]])

    n_target = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 3)
    place(obj, n_target, avoid=parent)
    if toggle:
        lamp_holders = [r for r in receps if r[1] in _TOGGLE_HOLDERS]
        counter[0] += 1
        placed.append([f"{toggle}|{_fmt(rng.uniform(-3, 3))}|+00.80|{_fmt(rng.uniform(-3, 3))}", toggle,
                       rng.choice(lamp_holders)[0]])
    distractors = sorted({o for o in objects_in_room if o in k.pickupable and o != obj and holders(o)})
    rng.shuffle(distractors)
    for otype in distractors[: rng.randint(min(5, len(distractors)), min(12, len(distractors)))]:
        place(otype, rng.randint(1, 2))

    free = {r[2] for r in receps}
    while True:
        agent_loc = f"loc|{rng.randint(-12, 12)}|{rng.randint(-12, 12)}|{rng.choice((0, 90, 180, 270))}|30"
        if agent_loc not in free:
            break
    template = rng.choice(k.gdict[task_type]["templates"])
    desc = template.format(obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
    params = {"object_target": obj, "parent_target": parent, "toggle_target": toggle, "mrecep_target": "",
              "object_sliced": False}
    folder = f"{task_type}-{obj}-None-{parent or toggle}-{floor_plan}"
    return GameRecord(key=f"{folder}/{key_prefix}", task_type=task_type, floor_plan=floor_plan, pddl_params=params,
                      task_desc=desc, agent_location=agent_loc, receptacles=receps, objects=placed)


def floor_plans_for(task_type: str, *, unseen: bool | None = None) -> list[int]:
    """Floor plans where ALFRED samples ``task_type``; ``unseen`` True/False keeps only held-out/seen ones."""
    plans = [p for room in _GOAL_ROOMS[task_type] for p in ROOM_FLOOR_PLANS[room]]
    if unseen is True:
        plans = [p for p in plans if p in UNSEEN_FLOOR_PLANS]
    elif unseen is False:
        plans = [p for p in plans if p not in UNSEEN_FLOOR_PLANS]
    return plans


def generate_games(
    task_type: str,
    n: int,
    seed: int | str = 0,
    *,
    floor_plans: Sequence[int] | None = None,
    exclude_combos: Iterable[tuple[str, str, str]] = (),
    exclude_problems: Iterable[str] = (),
    verify: bool = True,
    tag: str = "G",
    max_tries: int = 50,
) -> list[GameRecord]:
    """Generate ``n`` games of ``task_type``, deterministic in ``seed``.

    ``floor_plans`` limits the rooms (default: every room ALFRED uses for the task, including held-out
    ones). ``exclude_combos`` lists (task, object, receptacle) triples not to use (out-of-distribution
    splits exclude train's); ``exclude_problems`` lists :func:`problem_digest` values whose games are
    skipped (new train games leave the evaluation splits' games out). With ``verify`` every game is loaded in the real engine and the planner's
    walkthrough must win it; the walkthrough is stored in the record.
    """
    if task_type not in TASK_TYPES:
        raise ConfigError(f"unknown ALFWorld task type {task_type!r}; choose one of {', '.join(TASK_TYPES)}")
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    plans = list(floor_plans) if floor_plans is not None else floor_plans_for(task_type)
    plans = [p for p in plans if room_type(p) in _GOAL_ROOMS[task_type]]
    if not plans:
        raise ConfigError(f"no floor plan supports {task_type}; it needs a {' or '.join(_GOAL_ROOMS[task_type])}")
    exclude = set(exclude_combos)
    skip_problems = set(exclude_problems)
    verifier = _Verifier() if verify else None
    records: list[GameRecord] = []
    i = 0
    tries = 0
    while len(records) < n:
        if tries > max_tries * max(n, 1):
            raise ConfigError(f"could not generate {n} solvable {task_type} games in floor plans {plans} "
                              f"(got {len(records)}); widen the floor plans or the exclusions")
        tries += 1
        rng = random.Random(f"stratagym-alfworld:{seed}:{task_type}:{i}")
        i += 1
        floor_plan = rng.choice(plans)
        rec = _sample_game(task_type, floor_plan, rng, exclude, f"trial_{tag}{seed}_{i:05d}")
        if rec is None:
            continue
        rec.seed = f"{seed}:{task_type}:{i - 1}"
        if skip_problems and problem_digest(rec) in skip_problems:
            continue
        if verifier is not None:
            plan = verifier.solve(rec)
            if plan is None:
                continue
            rec.walkthrough = plan
        records.append(rec)
    return records


class _Verifier:
    """Plays a record's planner walkthrough through the real engine (with the parse cache)."""

    def __init__(self) -> None:
        self.domain, self.grammar = logic_files()
        self.engine = AlfredEngine(expert=None)

    def solve(self, record: GameRecord, max_steps: int = 60) -> list[str] | None:
        data = game_json(record, self.domain, self.grammar)
        data["walkthrough"] = None
        state = self.engine.load_data(data)
        if state.won:
            return None  # already solved: not a task
        plan = self.engine.plan()
        if not plan or len(plan) > max_steps:
            return None
        for action in plan:
            if action not in state.admissible_commands:
                return None
            state = self.engine.step(action)
        return plan if state.won else None
