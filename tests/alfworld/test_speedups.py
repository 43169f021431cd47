"""The memoised engine says exactly what the stock engine says, command for command."""

from __future__ import annotations

import random

import pytest

from stratagym.envs.alfworld import speedups
from stratagym.envs.alfworld.engine import AlfredEngine
from stratagym.envs.alfworld.generator import TASK_TYPES


def transcript(game_file, fast: bool, n_steps: int, seed: int):
    """Feedback, admissible commands and won flag after the reset and after each command.

    Commands: mostly admissible (chosen by a seeded RNG from what the engine offers), with some text
    the game does not know mixed in, so both the derivation and the "Nothing happens." path run.
    """
    engine = AlfredEngine(fast=fast)
    try:
        state = engine.load(game_file)
        rng = random.Random(seed)
        out = [("<reset>", state.feedback, state.admissible_commands, state.won)]
        for _ in range(n_steps):
            if rng.random() < 0.15:
                command = rng.choice(["jump", "go to the moon", "take everything", "examine", ""])
            else:
                command = rng.choice(state.admissible_commands)
            state = engine.step(command)
            out.append((command, state.feedback, state.admissible_commands, state.won))
        # and the same engine again after a reset (the SAS translation now comes from the cache)
        state = engine.reset()
        out.append(("<reset>", state.feedback, state.admissible_commands, state.won))
        return out
    finally:
        engine.close()


def _check(train_games, task_id, n_steps, seed):
    game_file = train_games.by_id()[task_id].game_file
    stock = transcript(game_file, False, n_steps, seed)
    fast = transcript(game_file, True, n_steps, seed)
    assert len(stock) == n_steps + 2
    assert fast == stock


_FAST_CHECK = ("pick_clean_then_place_in_recep", "look_at_obj_in_light")


@pytest.mark.parametrize("task_type", [
    pytest.param(t, marks=() if t in _FAST_CHECK else pytest.mark.slow) for t in TASK_TYPES
])
def test_fast_engine_transcript_identical_to_stock(train_games, one_game_per_type, task_type):
    _check(train_games, one_game_per_type[task_type], n_steps=15, seed=len(task_type))


def test_caches_are_used_and_inactive_outside_the_engine(train_games, one_game_per_type):
    speedups.install()
    assert not speedups.is_active()
    before = speedups.cache_info()
    game_file = train_games.by_id()[one_game_per_type["pick_and_place_simple"]].game_file
    engine = AlfredEngine(fast=True)
    try:
        state = engine.load(game_file)
        engine.step(state.admissible_commands[0])
        engine.reset()
    finally:
        engine.close()
    after = speedups.cache_info()
    assert after["parse_hits"] > before["parse_hits"]
    assert after["sas_hits"] > before["sas_hits"]  # reset re-used the translation made by load
    assert not speedups.is_active()
    with speedups.active(False):
        assert not speedups.is_active()
        with speedups.active(True):
            assert speedups.is_active()
        assert not speedups.is_active()


# ---- resets into other games, domain-shared grammar, deferred replanning translation --------------


def _session(games, fast: bool, plan: list[tuple[str, int]], expert=None):
    """One engine loading several games in turn (some again), as an env resetting into new tasks does.

    ``plan``: (game key, number of commands). Records what the agent sees and, with an expert, the
    expert's suggestion after the load and every command.
    """
    engine = AlfredEngine(fast=fast, expert=expert)
    out = []
    try:
        for n, (key, n_steps) in enumerate(plan):
            state = engine.load(games[key], seed=n)
            out.append(("<load>", key, state.feedback, state.admissible_commands, state.won, state.expert_plan))
            rng = random.Random(n)
            for _ in range(n_steps):
                # leave the expert's plan now and then, so the planner has to replan
                if expert and state.expert_plan and rng.random() < 0.6:
                    command = state.expert_plan[0]
                else:
                    command = rng.choice(state.admissible_commands)
                state = engine.step(command)
                out.append((command, state.feedback, state.admissible_commands, state.won, state.expert_plan))
        return out
    finally:
        engine.close()


def _three_games(train_games, one_game_per_type):
    by_id = train_games.by_id()
    keys = ("pick_and_place_simple", "look_at_obj_in_light", "pick_cool_then_place_in_recep")
    return {k: by_id[one_game_per_type[k]].game_file for k in keys}


def test_resets_across_games_identical_to_stock(train_games, one_game_per_type):
    """Loading A, B, A, C, B in one engine (cold loads, then the per-game caches) says what stock says.

    A second fast engine replaying the plan starts with every cache warm (caches are per process).
    """
    games = _three_games(train_games, one_game_per_type)
    plan = [("pick_and_place_simple", 4), ("look_at_obj_in_light", 3), ("pick_and_place_simple", 3),
            ("pick_cool_then_place_in_recep", 4), ("look_at_obj_in_light", 2)]
    speedups.clear_caches()
    stock = _session(games, False, plan)
    fast_cold = _session(games, True, plan)
    before = speedups.cache_info()
    fast_warm = _session(games, True, plan)
    after = speedups.cache_info()
    assert fast_cold == stock
    assert fast_warm == stock
    assert after["sas_misses"] == before["sas_misses"]  # the second engine translated nothing
    assert after["logic_misses"] == before["logic_misses"]
    assert before["logic_from_template"] >= 3  # each game's grammar came from the one domain parse
    assert before["templates_parsed"] == 1


def test_planner_expert_identical_with_deferred_replan_translation(train_games, one_game_per_type):
    """The optimised translation is made only when the planner replans, and the plans match stock's.

    ``PddlState.__init__`` (textworld/envs/pddl/logic/__init__.py:171-185) translates twice and hands the
    optimised text to ``load_sas_replan``, which fast-downward's library only stores for ``replan``.
    """
    games = _three_games(train_games, one_game_per_type)
    plan = [("pick_cool_then_place_in_recep", 8), ("pick_and_place_simple", 6), ("pick_cool_then_place_in_recep", 4)]
    speedups.clear_caches()
    stock = _session(games, False, plan, expert="planner")
    fast = _session(games, True, plan, expert="planner")
    assert fast == stock
    info = speedups.cache_info()
    assert info["replan_deferred"] >= 3
    assert info["replan_loaded"] >= 1  # the agent left the plan, so the planner ran


def _fingerprint(obj):
    """A structural, comparable picture of parsed grammar objects (they define no ``__eq__``)."""
    if isinstance(obj, (list, tuple)):
        return [_fingerprint(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _fingerprint(v) for k, v in obj.items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return (type(obj).__name__, _fingerprint(vars(obj)))
    return obj


def _stock_and_fast_logic(grammar_text):
    import textworld.envs.pddl.logic as pddl_logic

    speedups.install()
    with speedups.active(False):
        stock = pddl_logic._parse_and_convert(grammar_text, rule_name="pddlStart")
    speedups.clear_caches()
    with speedups.active(True):
        fast = pddl_logic._parse_and_convert(grammar_text, rule_name="pddlStart")
    return stock, fast


def test_game_grammar_from_the_domain_parse_equals_its_own_parse(train_games):
    """Game grammars are alfred.twl2 with the task sentence in place of UNKNOWN GOAL (alfworld's
    ``add_task_to_grammar``, alfworld/agents/utils/misc.py:107-112); rebuilt from the one domain parse
    they equal the stock parse of the game's own text, rule by rule and action by action."""
    import json

    AlfredEngine(fast=True).close()  # registers the domain grammars
    for entry in train_games.entries[::17][:6]:
        text = json.loads(entry.game_file.read_text())["grammar"]
        stock, fast = _stock_and_fast_logic(text)
        assert speedups.cache_info()["logic_from_template"] == 1
        stock_actions, stock_grammar = stock
        fast_actions, fast_grammar = fast
        assert _fingerprint(fast_actions) == _fingerprint(stock_actions)
        assert _fingerprint(dict(fast_grammar._rules)) == _fingerprint(dict(stock_grammar._rules))


@pytest.mark.parametrize("sentence", ['put the "odd" apple in fridge', "put a caf\u00e9 mug in shelf", "a\\b"])
def test_unusual_task_sentence_falls_back_to_the_stock_parse(sentence):
    """A sentence that could change how the document or the JSON is read is parsed the stock way."""
    from stratagym.envs.alfworld import paths

    AlfredEngine(fast=True).close()
    template = (paths.bundled_dir() / "alfred.twl2").read_text()
    text = template.replace(speedups.GRAMMAR_PLACEHOLDER, sentence)
    try:
        stock, fast = _stock_and_fast_logic(text)
    except Exception:  # the stock parser itself rejects it: nothing to compare
        return
    assert speedups.cache_info()["logic_from_template"] == 0
    assert _fingerprint(fast[1]._rules) == _fingerprint(stock[1]._rules)


# ---- the state a load builds, taken over by the reset that follows ---------------------------------


def _state_picture(pddl_env):
    """Everything a PddlState holds, in its iteration orders, and the fast-downward library's state."""
    from fast_downward import Atom

    s = pddl_env._pddl_state
    lib = s.downward_lib
    atoms = (Atom * lib.get_state_size())()
    lib.get_state(atoms)
    return {
        "attributes": [k for k in vars(s) if not k.startswith("_stratagym")],
        "facts": [str(f) for f in s.facts],
        "facts_by_signature": [(str(k), [str(f) for f in v]) for k, v in s._facts.items()],
        "vars_by_name": [(k, str(v), v.type) for k, v in s._vars_by_name.items()],
        "vars_by_type": [(k, [str(v) for v in vs]) for k, vs in s._vars_by_type.items()],
        "var_counts": [(str(k), n) for k, n in s._var_counts.items()],
        "name2type": list(s.name2type.items()),
        "actions": list(s._actions),
        "sas": s.sas,
        "sas_replan": (type(s.sas_replan).__name__, str(s.sas_replan)),
        "operators": [(op.id, op.name, op.nb_effect_atoms) for op in s._operators.values()],
        "library_state": [a.name for a in atoms],
        "goal": lib.check_goal(),
        "types": sorted(t.name for t in s._logic.types),
    }


def _after(engine, state):
    return (state.feedback, state.admissible_commands, state.won, _state_picture(engine._pddl))


def test_reset_takes_over_the_loaded_state_exactly(train_games, one_game_per_type):
    """The reset after a load takes the state the load built (instead of building it again) and that state
    equals a fresh build: fact containers in their iteration orders, the library's state, its applicable
    operators, the text; then both play on alike. A fresh build here: the second reset of the same game
    in another engine (its donor was taken by the first). Several games, each met twice."""
    games = _three_games(train_games, one_game_per_type)
    order = ["pick_and_place_simple", "look_at_obj_in_light", "pick_and_place_simple", "pick_cool_then_place_in_recep"]
    speedups.clear_caches(games_only=True)
    taking, building = AlfredEngine(fast=True), AlfredEngine(fast=True)
    try:
        for n, key in enumerate(order):
            before = speedups.cache_info()["state_reused"]
            loaded_state = None
            with speedups.active():  # the engine's load, with a look at the state the load built
                taking._env.load(str(games[key]))
                loaded_state = taking._pddl._pddl_state
            loaded_facts = sorted(str(f) for f in loaded_state.facts)
            taking._loaded = str(games[key])
            got = taking.reset(seed=n)
            assert speedups.cache_info()["state_reused"] == before + 1
            assert taking._pddl._pddl_state is not loaded_state
            # the donor keeps facts of its own (the same), not shared with the live state
            assert sorted(str(f) for f in taking._pddl._pddl_state.facts) == loaded_facts
            assert loaded_state._facts is not taking._pddl._pddl_state._facts
            building.load(games[key], seed=n)
            reused = speedups.cache_info()["state_reused"]
            fresh = building.reset(seed=n)
            assert speedups.cache_info()["state_reused"] == reused  # built, not taken
            assert _after(taking, got) == _after(building, fresh)
            rng = random.Random(n)
            for _ in range(4):
                command = rng.choice(got.admissible_commands)
                got, fresh = taking.step(command), building.step(command)
                assert _after(taking, got) == _after(building, fresh)
            assert sorted(str(f) for f in loaded_state.facts) == loaded_facts  # steps of the live state left it alone
    finally:
        taking.close()
        building.close()


@pytest.mark.parametrize("touch", ["listed", "applied", "planned", "fact_added_and_removed", "fact_read", "another_state",
                                   "another_state_stock"])
def test_a_loaded_state_touched_before_the_reset_is_built_again(train_games, one_game_per_type, touch):
    """Whatever may have changed the loaded state or its library before the reset makes the reset build."""
    import textworld.envs.pddl.logic as pddl_logic
    from textworld.logic import Proposition, Variable

    game = _three_games(train_games, one_game_per_type)["look_at_obj_in_light"]
    engine, reference = AlfredEngine(fast=True), AlfredEngine(fast=True)
    try:
        expected = reference.load(game)
        expected = (expected.feedback, expected.admissible_commands, expected.won, _state_picture(reference._pddl))
        before = speedups.cache_info()["state_reused"]
        with speedups.active():
            engine._env.load(str(game))
            env = engine._pddl
            state = env._pddl_state
            if touch == "listed":
                state.all_applicable_actions()
            elif touch == "applied":
                state.apply(state.all_applicable_actions()[0])
            elif touch == "planned":
                state.replan(env._entity_infos)
            elif touch == "fact_added_and_removed":
                extra = Proposition("at", [Variable("nowhere_1", "object"), Variable("nowhere_2", "receptacle")])
                state.add_fact(extra)
                state.remove_fact(extra)
            elif touch == "fact_read":
                state.is_fact(Proposition("never_seen", [Variable("x_1", "object")]))
            elif touch == "another_state":
                pddl_logic.PddlState(env.downward_lib, env._game_data["pddl_problem"], env._logic)
            elif touch == "another_state_stock":
                with speedups.active(False):
                    pddl_logic.PddlState(env.downward_lib, env._game_data["pddl_problem"], env._logic)
        engine._loaded = str(game)
        got = engine.reset()
        assert speedups.cache_info()["state_reused"] == before
        assert (got.feedback, got.admissible_commands, got.won, _state_picture(engine._pddl)) == expected
    finally:
        engine.close()
        reference.close()


def test_handcoded_expert_identical_across_resets(train_games, one_game_per_type):
    """The hand-coded expert reads the state's facts (in their order): same suggestions as stock."""
    games = _three_games(train_games, one_game_per_type)
    plan = [("pick_and_place_simple", 5), ("look_at_obj_in_light", 4), ("pick_and_place_simple", 3)]
    stock = _session(games, False, plan, expert="handcoded")
    before = speedups.cache_info()["state_reused"]
    fast = _session(games, True, plan, expert="handcoded")
    assert fast == stock
    assert speedups.cache_info()["state_reused"] == before + len(plan)
