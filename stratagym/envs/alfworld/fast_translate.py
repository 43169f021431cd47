"""Faster drop-ins for the generic loops of fast-downward's Python translator, same output.

A reset into a game the process has never seen is dominated by one PDDL -> SAS translation
(``fast_downward.pddl2sas``). Stock, on bundled games (one thread, ~190-240 ms a translation): the
Datalog model (relaxed reachability, ``build_model.compute_model``) ~40%, grounding the reachable
actions ~15%, translating them to SAS operators ~15%, variable reordering ~6%, writing the SAS text
~5%, the rest (parsing, normalising, the Datalog program, fact groups) ~10%. Little in there is a
function of the domain alone: the Datalog rules are built from the domain's schemas *and* the problem's
goal and constants, and the rest is per-problem work -- except how each Datalog rule is split into joins,
which depends on the rule alone and recurs in every problem of a domain. So this module makes the
per-problem loops cheaper and reuses the splits, each giving exactly the stock result:

* :func:`split_rules` records how fast-downward splits each rule once per process and replays it with
  the fresh predicate names drawn now (same rules, same names, same order);
* :func:`compute_model` evaluates the same Datalog program with the same algorithm as
  ``build_model.compute_model`` -- a FIFO queue of derived atoms, each popped atom matched against the
  rule conditions by fast-downward's own ``Unifier`` in the same order, join/product/project rules
  fired in the same order -- but each (rule, condition) runs a small function on argument tuples,
  generated and compiled once per rule *shape* per process and closed over the rule's tables; the atoms
  come out in the same order, so the model list and everything built from it is the same.
  :func:`explore` turns only the model atoms the grounding reads into ``Atom`` objects.
* :func:`instantiate` grounds each action schema with one compiled function that looks literals up as
  ``(predicate, args)`` keys, building only the atoms that go into the ground action.
* :func:`find_invariants`: invariant synthesis is off in both of textworld's translations
  (``invariant_generation_max_candidates = 0``), so the balance checker the stock code still builds is
  skipped (nothing reads it). With no candidate, its time limit is never consulted: no output can
  depend on timing. :func:`sort_groups` sorts the fact groups by the atoms' keys (same order).
* :func:`translate_strips_operators`: with no invariants every fact is its own binary variable
  (:func:`binary_encoding`, checked); the SAS operator of an action without conditional effects is then
  built directly (the generic DNF machinery reduces to a few rules, listed there); others, and any other
  encoding, go through the stock code.
* variable order: :func:`weight_graph_from_ops` (edge counts summed per pair),
  :func:`sccs_adjacency_list` (the same iterative Tarjan on local variables),
  :func:`calculate_topological_pseudo_sort` (SCC membership in a set, not a list),
  :func:`apply_to_operators`;
* the SAS text: :func:`operator_output`, :func:`variables_output`, :func:`init_output` write each
  section at once instead of a ``print`` per line.

``tests/alfworld/test_fast_translate.py`` checks the SAS text (and the parsed task) is byte-identical to
the stock translator's in both translation modes on a sample of bundled games, on problems with init
facts removed, in interpreters with different hash seeds, and on all 180 bundled games with
``STRATAGYM_ALFWORLD_ALL_GAMES=1``; the helpers are compared with the stock ones on random inputs;
``benchmarks/alfworld_translate.py`` times the stages.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any, Callable

__all__ = ["binary_encoding", "compute_model", "explore", "instantiate", "operator_output", "translate_strips_operators"]


_CODE: dict[str, Any] = {}  # generated source -> compiled code (a function of the rule's shape only)
_SHAPES: dict[tuple, tuple] = {}  # a (rule, condition) shape -> (maker of its function, values of the shape)


_literal_key = operator.attrgetter("key")
_first = operator.itemgetter(0)


class _ArgsView:
    """What fast-downward's rule generators read of an atom (``.args``), without building an Atom."""

    __slots__ = ("args",)

    def __init__(self, args: tuple) -> None:
        self.args = args


def _writes(cond_args: tuple) -> list[tuple[int, int]]:
    """(effect slot, atom position) for each variable of a condition, in the order the stock code writes."""
    return [(var_no, pos) for pos, var_no in enumerate(cond_args) if isinstance(var_no, int)]


def _effect_exprs(template: tuple, *sources: tuple[str, list[tuple[int, int]]]) -> list[str]:
    """Python expressions for each effect argument: the last write wins, as in the stock ``fire``."""
    exprs = {}
    for name, writes in sources:
        for slot, pos in writes:
            exprs[slot] = f"{name}[{pos}]"
    return [exprs.get(i, f"T[{i}]") for i in range(len(template))]


def _tuple_expr(exprs: list[str]) -> str:
    return "(" + "".join(e + ", " for e in exprs) + ")"


def _compile(rule: Any, cond_index: int, push_ns: dict, join_cls: type, product_cls: type) -> Callable[[tuple], None]:
    """One function doing ``rule.update_index`` then ``rule.fire`` for an atom matching condition ``cond_index``.

    The code depends only on the rule's shape (its kind, the arguments of its conditions and effect): it is
    built and compiled once per shape into a maker, which closes it over this rule's own tables.
    """
    kind = "join" if isinstance(rule, join_cls) else "product" if isinstance(rule, product_cls) else "project"
    template = tuple(rule.effect.args)
    shape = (kind, cond_index, tuple(tuple(c.args) for c in rule.conditions), template,
             tuple(rule.common_var_positions[cond_index]) if kind == "join" else None)
    entry = _SHAPES.get(shape)
    if entry is None:
        entry = _SHAPES[shape] = _make_maker(rule, cond_index, kind, template)
    make, shape_values = entry
    ns = dict(push_ns, T=template, P=rule.effect.predicate, **shape_values)
    if kind == "join":
        index = rule.__dict__.setdefault("_fast_index", ({}, {}))  # atoms_by_key, for argument tuples
        ns["MINE"], ns["OTHER"] = index[cond_index], index[1 - cond_index]
    elif kind == "product":
        lists = getattr(rule, "_fast_lists", None)
        if lists is None:
            lists = rule._fast_lists = [[] for _ in rule.conditions]
            rule._fast_empty = [len(rule.conditions)]
        ns["LISTS"], ns["MYLIST"], ns["EMPTY"] = lists, lists[cond_index], rule._fast_empty
    # a closure over this rule's tables: nothing refers back to the function, so the model's tuples, sets
    # and indexes are freed by reference counting when the translation is done
    return make(**ns)


def _make_maker(rule: Any, cond_index: int, kind: str, template: tuple) -> tuple[Callable, dict]:
    """(maker, the values that depend on the shape only) for one shape of (rule, condition)."""
    cond = rule.conditions[cond_index]
    values: dict = {"ARITY": len(cond.args), "product": itertools.product, "slow": _unsupported}
    mine = _writes(cond.args)
    lines = ["def f(a):", "    if len(a) != ARITY: return slow(a)"]
    names = ["T", "P", "seen", "seen_add", "queue_append", "cnt"]
    if kind == "join":
        other = rule.conditions[1 - cond_index]
        key = _tuple_expr([f"a[{p}]" for p in rule.common_var_positions[cond_index]])
        names += ["MINE", "OTHER"]
        exprs = _effect_exprs(template, ("a", mine), ("o", _writes(other.args)))
        lines += [
            f"    k = {key}",
            "    l = MINE.get(k)",
            "    if l is None: MINE[k] = [a]",
            "    else: l.append(a)",
            "    others = OTHER.get(k)",
            "    if not others: return",
            "    for o in others:",
            f"        e = (P, {_tuple_expr(exprs)})",
            "        cnt[0] += 1",
            "        if e not in seen:",
            "            seen_add(e)",
            "            queue_append(e)",
        ]
    elif kind == "product":
        names += ["LISTS", "MYLIST", "EMPTY"]
        others = [pos for pos in range(len(rule.conditions)) if pos != cond_index]
        values["FACTORS_POS"] = others
        values["OTHER_WRITES"] = [_writes(rule.conditions[pos].args) for pos in others]
        values["MINE_WRITES"] = mine
        lines += [
            "    if not MYLIST: EMPTY[0] -= 1",
            "    MYLIST.append(a)",
            "    if EMPTY[0]: return",
            "    base = list(T)",
            "    for slot, pos in MINE_WRITES: base[slot] = a[pos]",
            "    for combo in product(*[LISTS[p] for p in FACTORS_POS]):",
            "        for atom, writes in zip(combo, OTHER_WRITES):",
            "            for slot, pos in writes: base[slot] = atom[pos]",
            "        e = (P, tuple(base))",
            "        cnt[0] += 1",
            "        if e not in seen:",
            "            seen_add(e)",
            "            queue_append(e)",
        ]
    else:  # project
        exprs = _effect_exprs(template, ("a", mine))
        lines += [
            f"    e = (P, {_tuple_expr(exprs)})",
            "    cnt[0] += 1",
            "    if e not in seen:",
            "        seen_add(e)",
            "        queue_append(e)",
        ]
    params = sorted(names + list(values))
    source = "\n".join([f"def make({', '.join(params)}):"] + ["    " + line for line in lines] + ["    return f"])
    scope: dict = {}
    exec(compile(source, "<fast_translate rule>", "exec"), scope)  # noqa: S102 -- from the rule's integer positions only
    return scope["make"], values


class _Unsupported(Exception):
    """An atom whose arity differs from its rule condition's: the stock evaluator runs instead."""


def _unsupported(_args: tuple) -> None:
    raise _Unsupported


def explore(task: Any, stock_compute_model: Callable[[Any], list]) -> tuple:
    """``instantiate.explore(task)``: the same ground actions, atoms and parameters, in the same order.

    ``instantiate.instantiate`` reads only three kinds of model atoms: those of actions and axioms
    (predicate objects), ``@goal-reachable``, and atoms of fluent predicates (effects of actions, axiom
    heads). The rest (auxiliary join atoms, types, static facts) -- most of the model -- never becomes
    an ``Atom`` object; what is kept keeps its order, so every list and set built from it is the same.
    """
    from fast_downward.translate import instantiate, pddl_to_prolog, timers

    prog = pddl_to_prolog.translate(task)
    keep = {eff.literal.predicate for action in task.actions for eff in action.effects}
    keep.update(axiom.name for axiom in task.axioms)
    keep.add("@goal-reachable")
    model = compute_model(prog, stock_compute_model, keep=keep)
    with timers.timing("Completing instantiation"):
        return instantiate.instantiate(task, model)


def compute_model(prog: Any, stock: Callable[[Any], list], keep: "set | None" = None) -> list:
    """``build_model.compute_model(prog)``, same atoms in the same order (``stock`` runs on odd programs).

    With ``keep``, atoms whose predicate is a string not in ``keep`` are left out of the result.
    """
    from fast_downward.translate import build_model, pddl, timers

    with timers.timing("Preparing model"):
        rules = build_model.convert_rules(prog)
        unifier = build_model.Unifier(rules)
        fact_atoms = [fact.atom for fact in prog.facts]
        if all(isinstance(a, pddl.Literal) for a in fact_atoms):
            # the same order: the sort compares only with Literal.__lt__, i.e. ``a.key < b.key``
            fact_atoms.sort(key=_literal_key)
        else:
            fact_atoms.sort()
    queue: list[tuple] = [(a.predicate, a.args) for a in fact_atoms]
    seen = set(queue)
    cnt = [len(queue)]
    push_ns = {"seen": seen, "seen_add": seen.add, "queue_append": queue.append, "cnt": cnt}
    compiled: dict[tuple[int, int], Callable] = {}
    for rule in rules:
        for i in range(len(rule.conditions)):
            compiled[id(rule), i] = _compile(rule, i, push_ns, build_model.JoinRule, build_model.ProductRule)

    # predicate -> the functions to run for it, when no condition on it has a constant (the common case);
    # otherwise fast-downward's own generator tree picks them per atom
    static: dict[Any, list] = {}
    trees: dict[Any, Any] = {}
    for pred, gen in unifier.predicate_to_rule_generator.items():
        if isinstance(gen, build_model.LeafGenerator):
            static[pred] = [compiled[id(r), i] for r, i in gen.matches]
        else:
            trees[pred] = gen
    print("Generated %d rules." % len(rules))
    relevant = auxiliary = 0
    try:
        with timers.timing("Computing model"):
            pos = 0
            empty: list = []
            while pos < len(queue):
                pred, args = queue[pos]
                pos += 1
                if isinstance(pred, str) and "$" in pred:
                    auxiliary += 1
                else:
                    relevant += 1
                fns = static.get(pred)
                if fns is None:
                    gen = trees.get(pred)
                    if gen is None:
                        fns = empty
                    else:
                        matches: list = []
                        gen.generate(_ArgsView(args), matches)
                        fns = [compiled[id(r), i] for r, i in matches]
                for fn in fns:
                    fn(args)
    except _Unsupported:  # an atom of another arity than its rule condition's: zip semantics, run the stock code
        return stock(prog)
    print("%d relevant atoms" % relevant)
    print("%d auxiliary atoms" % auxiliary)
    print("%d final queue length" % len(queue))
    print("%d total queue pushes" % cnt[0])
    n_facts = len(fact_atoms)
    atom = pddl.Atom
    derived = itertools.islice(queue, n_facts, None)
    if keep is None:
        return fact_atoms + [atom(pred, args) for pred, args in derived]
    return ([a for a in fact_atoms if not isinstance(a.predicate, str) or a.predicate in keep]
            + [atom(pred, args) for pred, args in derived if not isinstance(pred, str) or pred in keep])


def operator_output(op: Any, stream: Any) -> None:
    """``SASOperator.output``: the same text, written at once."""
    parts = ["begin_operator\n", str(op.name[1:-1]), "\n", str(len(op.prevail)), "\n"]
    for var, val in op.prevail:
        parts.append(f"{var} {val}\n")
    parts.append(f"{len(op.pre_post)}\n")
    for var, pre, post, cond in op.pre_post:
        parts.append(f"{len(cond)} ")
        for cvar, cval in cond:
            parts.append(f"{cvar} {cval} ")
        parts.append(f"{var} {pre} {post}\n")
    parts.append(f"{op.cost}\nend_operator\n")
    stream.write("".join(parts))


def binary_encoding(strips_to_sas: dict, ranges: list, mutex_dict: dict, mutex_ranges: list,
                    implied_facts: Any) -> bool:
    """Whether the task's encoding is the one ALFWorld's translations get: every fact its own binary variable.

    With invariant synthesis off (``invariant_generation_max_candidates = 0``, textworld's setting in both
    modes) every fact group and every mutex group is a single atom: ``strips_to_sas`` maps each reachable
    atom to one ``(var, 0)`` of a 2-valued variable, ``mutex_dict`` maps the same atoms the same way (in
    another numbering), and no implied preconditions exist. :func:`translate_strips_operators` relies on it.
    """
    def singletons(dictionary: dict, rngs: list) -> bool:
        return (len(dictionary) == len(rngs) and all(r == 2 for r in rngs)
                and all(len(pairs) == 1 and pairs[0][1] == 0 for pairs in dictionary.values()))

    from fast_downward.translate import pddl

    return (singletons(strips_to_sas, ranges) and singletons(mutex_dict, mutex_ranges)
            and strips_to_sas.keys() == mutex_dict.keys() and not any(implied_facts.values())
            and all(type(atom) is pddl.Atom for atom in strips_to_sas))


def translate_strips_operators(actions: list, strips_to_sas: dict, ranges: list, mutex_dict: dict,
                               mutex_ranges: list, implied_facts: Any, stock_operator: Callable, translate_mod: Any) -> list:
    """``translate.translate_strips_operators``: the same SAS operators, for the binary encoding.

    Under :func:`binary_encoding` (checked by the caller) the stock steps reduce to this, per operator
    whose effects are all unconditional (others go through ``stock_operator``):

    * precondition (``translate_strips_conditions``): the mutex check and the translation see the same
      atoms with the same one-value variables, so both fail exactly when an atom is required true and
      false; otherwise one condition: var -> 0 for each positive atom (first-occurrence order), then
      var -> 1 for each negated atom not already there (atoms without a variable are static: skipped);
    * add effects set their variable to 0; delete effects set it to 1 (``<none of those>``) unless the
      variable is also added (the add wins: its unconditional add makes the "no add triggers" condition
      unsatisfiable); an effect whose value is the precondition's is dropped and its variable stays a
      prevail condition, otherwise the variable's pair moves from the prevail list to ``pre_post``;
    * ``prune_stupid_effect_conditions`` counts a simplification for every variable with a kept delete and
      for every kept add given more than once (the counter is only printed, into the captured translator log);
    * an operator without effects left is dropped; prevail and pre_post sorted and de-duplicated as
      ``SASOperator.__init__`` does.
    """
    from fast_downward.translate import sas_tasks

    sas_operator = sas_tasks.SASOperator
    new_op = sas_operator.__new__
    # looked up by (predicate, args): what Atom equality compares, the keys being plain atoms (checked)
    var_of = {(atom.predicate, atom.args): pairs[0][0] for atom, pairs in strips_to_sas.items()}
    get = var_of.get
    result: list = []
    append = result.append
    simplified = 0
    for action in actions:
        adds = action.add_effects
        dels = action.del_effects
        if any(map(_first, adds)) or any(map(_first, dels)):  # a conditional effect
            result.extend(stock_operator(action, strips_to_sas, ranges, mutex_dict, mutex_ranges, implied_facts))
            continue
        condition: dict = {}
        negatives = []
        for fact in action.precondition:
            if fact.negated:
                negatives.append(fact)
            else:
                var = get((fact.predicate, fact.args))
                if var is not None:
                    condition[var] = 0
        impossible = False
        for fact in negatives:
            var = get((fact.predicate, fact.args))
            if var is not None:
                value = condition.get(var)
                if value is None:
                    condition[var] = 1
                elif value == 0:
                    impossible = True
                    break
        if impossible:
            continue
        pre_post = set()
        n_adds: dict = {}
        for _, fact in adds:
            var = var_of[fact.predicate, fact.args]
            n_adds[var] = n_adds.get(var, 0) + 1
        touched = []
        for var, count in n_adds.items():
            pre = condition.get(var, -1)
            if pre != 0:
                if count > 1:
                    simplified += 1
                pre_post.add((var, pre, 0, ()))
                touched.append(var)
        deleted: set = set()
        for _, fact in dels:
            var = var_of[fact.predicate, fact.args]
            if var in n_adds or var in deleted:
                continue
            deleted.add(var)
            pre = condition.get(var, -1)
            if pre != 1:
                simplified += 1
                pre_post.add((var, pre, 1, ()))
                touched.append(var)
        if not pre_post:
            continue
        for var in touched:
            condition.pop(var, None)
        op = new_op(sas_operator)
        op.name = action.name
        op.prevail = sorted(condition.items())
        op.pre_post = [(var, pre, post, []) for var, pre, post, _ in sorted(pre_post)]
        op.cost = action.cost
        append(op)
    translate_mod.simplified_effect_condition_counter += simplified
    return result


def _literals(condition: Any, conditions_mod: Any) -> "list | None":
    """The literals a (normalised) condition instantiates, in order; None for a shape handled by the stock code."""
    if isinstance(condition, conditions_mod.Truth):
        return []
    if isinstance(condition, conditions_mod.Literal):
        return [condition]
    if type(condition) is conditions_mod.Conjunction and all(isinstance(p, conditions_mod.Literal) for p in condition.parts):
        return list(condition.parts)
    return None


def _compile_action(action: Any, conditions_mod: Any, effects_mod: Any, ns: dict) -> "Callable | None":
    """A function of the action atom's arguments doing ``Action.instantiate``'s work, or None (stock code).

    Literals are looked up as ``(predicate, args)`` keys in sets of the fluent and the initial facts (what
    ``Atom.__eq__`` compares: all are ``Atom`` objects), so only the atoms that go into the ground action
    are built. Handled: preconditions and effect conditions that are a literal, ``Truth`` or a conjunction
    of literals, effects without their own parameters, the cost 1 of a task without the min-cost metric.
    """
    pre = _literals(action.precondition, conditions_mod)
    if pre is None:
        return None
    effects = []
    for eff in action.effects:
        if type(eff) is not effects_mod.Effect or eff.parameters:
            return None
        cond = _literals(eff.condition, conditions_mod)
        if cond is None or not isinstance(eff.literal, conditions_mod.Literal):
            return None
        effects.append((cond, eff.literal))
    params = [p.name for p in action.parameters]
    index = {name: i for i, name in enumerate(params)}
    if len(index) != len(params):
        return None
    consts: list = []

    def key(lit: Any) -> str:
        parts = []
        for arg in lit.args:
            if arg in index:
                parts.append(f"a[{index[arg]}]")
            else:
                consts.append(arg)
                parts.append(f"K[{len(consts) - 1}]")
        consts.append(lit.predicate)
        return f"(K[{len(consts) - 1}], {_tuple_expr(parts)})"

    def condition(lit: Any, indent: str, into: str, otherwise: str) -> list[str]:
        """Lines that add a condition literal's fluent atom to ``into``, or run ``otherwise`` when the
        literal is statically false (a static fact it denies, or lacks); a statically true one adds nothing."""
        atom, false_if = ("NEG", "k in INIT") if lit.negated else ("ATOM", "k not in INIT")
        return [f"{indent}k = {key(lit)}", f"{indent}if k in FLUENT: {into}.append({atom}(*k))",
                f"{indent}elif {false_if}: {otherwise}"]

    lines = ["def f(a):", f"    if len(a) != {len(params)}: return SLOW", "    pre = []"]
    for lit in pre:
        lines += condition(lit, "    ", "pre", "return None")
    lines.append("    adds, dels = [], []")
    for cond, lit in effects:
        lines += ["    while True:", "        c = []"]
        for clit in cond:
            lines += condition(clit, "        ", "c", "break")
        lines.append(f"        k = {key(lit)}")
        if lit.negated:
            lines += ["        if k in FLUENT: dels.append((c, k))", "        elif k in INIT: raise IMPOSSIBLE()"]
        else:
            lines += ["        if k in FLUENT: adds.append((c, ATOM(*k)))", "        elif k not in INIT: raise IMPOSSIBLE()"]
        lines.append("        break")
    n_ext = action.num_external_parameters
    # PropositionalAction(name, pre, effects, 1): the add effects, then each delete effect (as its positive
    # atom) that is not also an add effect with the same condition
    lines += ["    if not adds and not dels: return None",
              "    p = NEW(PROP)",
              f"    p.name = NAME % ' '.join(a[:{n_ext}])",
              "    p.precondition = pre",
              "    p.add_effects = adds",
              "    p.del_effects = [e for e in [(c, ATOM(*k)) for c, k in dels] if e not in adds]",
              "    p.cost = 1",
              "    return p"]
    fns: dict = dict(ns, K=tuple(consts), NAME="(" + action.name.replace("%", "%%") + " %s)")
    source = "\n".join(lines)
    code = _CODE.get(source)
    if code is None:  # a function of the action schema's shape: compiled once per process
        code = _CODE[source] = compile(source, "<fast_translate action>", "exec")
    exec(code, fns)  # noqa: S102 -- built from the action's own terms
    return fns.pop("f")


_SLOW = object()


def instantiate(task: Any, model: list, stock: Callable) -> tuple:
    """``instantiate.instantiate(task, model)``: the same ground actions and axioms, in the same order.

    Actions go through :func:`_compile_action` (one function per action schema), others -- axioms,
    actions of shapes it does not handle, tasks with the min-cost metric -- through the stock code.
    """
    from fast_downward.translate import instantiate as inst_mod
    from fast_downward.translate import pddl
    from fast_downward.translate.pddl import conditions as conditions_mod
    from fast_downward.translate.pddl import effects as effects_mod

    if task.use_min_cost_metric:
        return stock(task, model)
    relaxed_reachable = False
    fluent_facts = inst_mod.get_fluent_facts(task, model)
    init_facts = set()
    init_assignments = {}
    for element in task.init:
        if isinstance(element, pddl.Assign):
            init_assignments[element.fluent] = element.expression
        else:
            init_facts.add(element)
    type_to_objects = inst_mod.get_objects_by_type(task.objects, task.types)
    ns = {"FLUENT": {(f.predicate, f.args) for f in fluent_facts if type(f) is pddl.Atom},
          "INIT": {(f.predicate, f.args) for f in init_facts if type(f) is pddl.Atom},
          "ATOM": pddl.Atom, "NEG": pddl.NegatedAtom, "PROP": pddl.PropositionalAction, "NEW": object.__new__,
          "IMPOSSIBLE": conditions_mod.Impossible, "SLOW": _SLOW}
    if len(ns["FLUENT"]) != len(fluent_facts) or len(ns["INIT"]) != len(init_facts):
        return stock(task, model)  # not only Atom objects: the stock comparisons
    compiled: dict = {}
    action_cls, axiom_cls = pddl.Action, pddl.Axiom
    instantiated_actions = []
    instantiated_axioms = []
    reachable_action_parameters: dict = inst_mod.defaultdict(list)
    for atom in model:
        predicate = atom.predicate
        if isinstance(predicate, action_cls):
            parameters = predicate.parameters
            reachable_action_parameters[predicate].append(atom.args[:len(parameters)])
            fn = compiled.get(predicate)
            if fn is None:
                fn = compiled[predicate] = _compile_action(predicate, conditions_mod, effects_mod, ns) or False
            inst_action = fn(atom.args) if fn else _SLOW
            if inst_action is _SLOW:
                variable_mapping = {par.name: arg for par, arg in zip(parameters, atom.args)}
                inst_action = predicate.instantiate(variable_mapping, init_facts, init_assignments, fluent_facts,
                                                    type_to_objects, task.use_min_cost_metric)
            if inst_action:
                instantiated_actions.append(inst_action)
        elif isinstance(predicate, axiom_cls):
            variable_mapping = {par.name: arg for par, arg in zip(predicate.parameters, atom.args)}
            inst_axiom = predicate.instantiate(variable_mapping, init_facts, fluent_facts)
            if inst_axiom:
                instantiated_axioms.append(inst_axiom)
        elif predicate == "@goal-reachable":
            relaxed_reachable = True
    return (relaxed_reachable, fluent_facts, instantiated_actions,
            sorted(instantiated_axioms), reachable_action_parameters)


def weight_graph_from_ops(graph: Any, operators: list) -> None:
    """``variable_order.CausalGraph.weight_graph_from_ops``: the same weights and predecessors.

    The edge counts are summed per (source, target) pair in a flat dict first (first-seen order, so the
    nested dicts also get their keys in the stock order), then added to the graph once per pair.
    """
    counts: dict = {}
    get = counts.get
    for op in operators:
        pre_post = op.pre_post
        sources = [var for var, _ in op.prevail]
        sources += [var for var, pre, _, _ in pre_post if pre != -1]
        for target, _, _, cond in pre_post:
            for source in (sources + [var for var, _ in cond]) if cond else sources:
                if source != target:
                    key = (source, target)
                    counts[key] = get(key, 0) + 1
    weighted, predecessors = graph.weighted_graph, graph.predecessor_graph
    for (source, target), n in counts.items():
        weighted[source][target] += n
        predecessors[target].add(source)


def sccs_adjacency_list(graph: Any) -> list:
    """``sccs.get_sccs_adjacency_list``: the same iterative Tarjan, step for step, on local variables."""
    indices: dict = {}
    lowlinks: dict = {}
    stack_indices: dict = {}
    stack: list = []
    sccs: list = []
    current = 0
    for vertex in range(len(graph)):
        if vertex in indices:
            continue
        iter_stack = [(vertex, None, None, 0)]
        pop, push = iter_stack.pop, iter_stack.append
        while iter_stack:
            v, w, succ_index, state = pop()
            if state == 0:  # BEGIN
                current += 1
                indices[v] = lowlinks[v] = current
                stack_indices[v] = len(stack)
                stack.append(v)
                push((v, None, 0, 1))
            elif state == 1:  # CONTINUE
                successors = graph[v]
                if succ_index == len(successors):
                    if lowlinks[v] == indices[v]:
                        k = stack_indices[v]
                        scc = stack[k:]
                        del stack[k:]
                        for n in scc:
                            del stack_indices[n]
                        sccs.append(scc)
                else:
                    w = successors[succ_index]
                    if w not in indices:
                        push((v, w, succ_index, 2))
                        push((w, None, None, 0))
                    else:
                        if w in stack_indices:
                            lowlinks[v] = min(lowlinks[v], indices[w])
                        push((v, None, succ_index + 1, 1))
            else:  # RETURN
                lowlinks[v] = min(lowlinks[v], lowlinks[w])
                push((v, None, succ_index + 1, 1))
    sccs.reverse()
    return sccs


def apply_to_operators(order: Any, operators: list) -> None:
    """``variable_order.VariableOrder._apply_to_operators``: the same renumbering, in comprehensions."""
    new_var = order.new_var
    new_ops = []
    for op in operators:
        pre_post = [(new_var[eff_var], pre, post, [(new_var[var], val) for var, val in cond if var in new_var])
                    for eff_var, pre, post, cond in op.pre_post if eff_var in new_var]
        if pre_post:
            op.pre_post = pre_post
            op.prevail = [(new_var[var], val) for var, val in op.prevail if var in new_var]
            new_ops.append(op)
    print("%s of %s operators necessary." % (len(new_ops), len(operators)))
    operators[:] = new_ops


def calculate_topological_pseudo_sort(graph: Any, sccs: list, max_dag_cls: type) -> None:
    """``CausalGraph.calculate_topological_pseudo_sort``: the same order; SCC membership tested in a set.

    (The stock code tests ``target in scc`` on the component's list: quadratic in the size of the large
    component the binary encoding of an ALFWorld game has.)
    """
    weighted, goal_map, ordering = graph.weighted_graph, graph.goal_map, graph.ordering
    for scc in sccs:
        if len(scc) > 1:
            members = set(scc)
            subgraph: dict = {}
            for var in scc:
                subgraph_edges = subgraph.setdefault(var, [])
                for target, cost in sorted(weighted[var].items()):
                    if target in members:
                        if target in goal_map:
                            subgraph_edges.append((target, 100000 + cost))
                        subgraph_edges.append((target, cost))
            ordering.extend(max_dag_cls(_ListDefault(subgraph), scc).get_result())
        else:
            ordering.append(scc[0])


class _ListDefault(dict):
    """The ``defaultdict(list)`` the stock code hands to ``MaxDAG`` (which only reads it)."""

    def __missing__(self, key: Any) -> list:
        value = self[key] = []
        return value


def find_invariants(task: Any, reachable_action_params: Any, stock: Callable) -> Any:
    """``invariant_finder.find_invariants``; with ``invariant_generation_max_candidates = 0`` (textworld's
    setting in both its translations) there is no candidate to check, so none is checked: the stock code
    would still build its ``BalanceChecker`` (a pass over every action and its reachable parameters,
    whose result nothing reads). No invariant, no time limit reached: the result cannot depend on timing.
    """
    from fast_downward.translate import options

    if options.invariant_generation_max_candidates == 0:
        print("0 initial candidates")
        return iter(())
    return stock(task, reachable_action_params)


def sort_groups(groups: list, stock: Callable) -> list:
    """``fact_groups.sort_groups``: the same order, comparing the atoms' sort keys instead of the atoms.

    For plain atoms with string predicates ``a == b`` holds exactly when ``a.key == b.key`` and ``a < b``
    is ``a.key < b.key``, so lists of atoms and lists of their keys compare alike.
    """
    from fast_downward.translate import pddl

    atom_cls = pddl.Atom
    if not all(type(a) is atom_cls and type(a.predicate) is str for group in groups for a in group):
        return stock(groups)
    inner = [sorted(group, key=_literal_key) for group in groups]
    return sorted(inner, key=lambda group: [a.key for a in group])


def variables_output(variables: Any, stream: Any) -> None:
    """``SASVariables.output``: the same text, written at once."""
    parts = [f"{len(variables.ranges)}\n"]
    for var, (rang, axiom_layer, values) in enumerate(zip(variables.ranges, variables.axiom_layers,
                                                          variables.value_names)):
        assert rang == len(values), (rang, values)
        parts.append(f"begin_variable\nvar{var}\n{axiom_layer!s}\n{rang!s}\n")
        parts.extend(f"{value!s}\n" for value in values)
        parts.append("end_variable\n")
    stream.write("".join(parts))


def init_output(init: Any, stream: Any) -> None:
    """``SASInit.output``: the same text, written at once."""
    stream.write("begin_state\n" + "".join(f"{val!s}\n" for val in init.values) + "end_state\n")


_SPLITS: dict = {}  # a rule's content -> how fast-downward split it (see split_rules)
_SPLITS_MAX = 4096


class _RecordingNames:
    """Hands out the program's fresh predicate names (``p$N``) and records which ones a split drew."""

    __slots__ = ("names", "source")

    def __init__(self, source: Any) -> None:
        self.source, self.names = source, []

    def __iter__(self) -> "_RecordingNames":
        return self

    def __next__(self) -> str:
        name = next(self.source)
        self.names.append(name)
        return name


def split_rules(prog: Any, stock_split_rule: Callable) -> None:
    """``PrologProgram.split_rules``: the same rules, each rule's split computed once per process.

    ``split_rules.split_rule`` (connected components, then fast-downward's greedy join order) is a
    function of the rule's content -- its conditions' classes, predicates and arguments in order, its
    effect's arguments -- and of the fresh names (``p$0``, ``p$1``, ...) it draws, in order, from the
    program's counter. The same schemas give the same rules in every problem of a domain, so a split is
    recorded with its names as placeholders and replayed with the names drawn now, as many as the stock
    split draws (the last join's name is drawn and then replaced by the rule's own effect, as in
    ``greedy_join``). The rule's own effect atom keeps its predicate (an action or axiom object of this
    task). Rules with a condition on such an object (the effect rules of actions: one condition, no
    split) and rules the stock split returns in another form run the stock code.
    """
    new_rules: list = []
    for rule in prog.rules:
        new_rules += _split_rule(rule, prog, stock_split_rule)
    prog.rules = new_rules


def _split_rule(rule: Any, prog: Any, stock_split_rule: Callable) -> list:
    from fast_downward.translate import pddl, pddl_to_prolog

    effect = rule.effect
    conditions = rule.conditions
    atom_classes = (pddl.Atom, pddl.NegatedAtom)
    if (type(effect) not in atom_classes or any(type(c) not in atom_classes or type(c.predicate) is not str
                                                for c in conditions)):
        return stock_split_rule(rule, prog.new_name)
    effect_key = effect.predicate if type(effect.predicate) is str else None
    key = (type(effect), effect_key, effect.args, tuple((type(c), c.predicate, c.args) for c in conditions))
    recipe = _SPLITS.get(key)
    if recipe is None:
        names = _RecordingNames(prog.new_name)
        result = stock_split_rule(rule, names)
        recipe = _recipe(result, effect, names.names)
        if recipe is not None and len(_SPLITS) < _SPLITS_MAX:
            _SPLITS[key] = recipe
        return result
    n_names, rules = recipe
    drawn = [next(prog.new_name) for _ in range(n_names)]
    out = []
    for (eff_cls, eff_pred, eff_args), conds, rule_type in rules:
        new = pddl_to_prolog.Rule(
            [cls(drawn[pred] if type(pred) is int else pred, args) for cls, pred, args in conds],
            effect if eff_cls is None else eff_cls(drawn[eff_pred] if type(eff_pred) is int else eff_pred, eff_args))
        if rule_type is not _NO_TYPE:
            new.type = rule_type
        out.append(new)
    return out


_NO_TYPE = object()


def _recipe(result: list, effect: Any, names: list) -> "tuple | None":
    """(names drawn, per rule: effect, conditions, type) with drawn names as their index; None: not replayable."""
    from fast_downward.translate import pddl_to_prolog

    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        return None
    rules = []
    for rule in result:
        if type(rule) is not pddl_to_prolog.Rule or set(vars(rule)) - {"conditions", "effect", "type"}:
            return None
        parts = []
        for atom in rule.conditions:
            if type(atom.predicate) is not str:
                return None
            parts.append((type(atom), index.get(atom.predicate, atom.predicate), atom.args))
        eff = rule.effect
        if eff is effect:
            eff_part = (None, None, None)  # the rule's own effect atom, as in the stock split
        elif type(eff.predicate) is str:
            eff_part = (type(eff), index.get(eff.predicate, eff.predicate), eff.args)
        else:
            return None
        rules.append((eff_part, parts, getattr(rule, "type", _NO_TYPE)))
    return len(names), rules
