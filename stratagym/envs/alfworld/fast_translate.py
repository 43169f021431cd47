"""Faster drop-ins for the two hottest generic loops of fast-downward's Python translator, same output.

A reset into a game the process has never seen is dominated by one PDDL -> SAS translation
(``fast_downward.pddl2sas``). Profiled per stage on bundled games (one thread, ~240 ms a translation):
the Datalog model computation (relaxed reachability, ``build_model.compute_model``) ~95 ms, grounding
the reachable actions ~50 ms, translating them to SAS operators ~45 ms, variable reordering ~15 ms,
writing the SAS text ~12 ms, the rest (parsing, normalising, the Datalog program, fact groups) ~25 ms.
Nothing in there is a function of the domain alone worth caching: the Datalog rules are built from the
domain's schemas *and* the problem's goal and constants (~8 ms in all), invariant synthesis is off
(``invariant_generation_max_candidates = 0`` in both of textworld's translations), and the rest is
per-problem work.

This module makes two of those loops cheaper without changing their results:

* :func:`compute_model` evaluates the same Datalog program with the same algorithm as
  ``build_model.compute_model`` -- a FIFO queue of derived atoms, each popped atom matched against the
  rule conditions by fast-downward's own ``Unifier`` in the same order, join/product/project rules
  fired in the same order -- but each (rule, condition) is compiled once into a small Python function
  that works on argument tuples (the generic version re-reads the rule's variable positions with
  ``zip``/``isinstance`` for every atom and builds an ``Atom`` object for every derived fact,
  auxiliary ones included). The atoms come out in the same order, so the model list -- and everything
  built from it (ground actions, their order, the SAS text) -- is the same.
* :func:`operator_output` writes one SAS operator as one string instead of ~20 ``print`` calls.

* :func:`explore` turns only the model atoms the grounding reads into ``Atom`` objects.

``tests/alfworld/test_fast_translate.py`` checks the SAS text is byte-identical to the stock
translator's on a sample of bundled games and on problems with init facts removed, and on all 180
bundled games with ``STRATAGYM_ALFWORLD_ALL_GAMES=1``; ``benchmarks/alfworld_translate.py`` times the
stages.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

__all__ = ["compute_model", "explore", "operator_output"]


_CODE: dict[str, Any] = {}  # generated source -> compiled code (a function of the rule's shape only)


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
    """One function doing ``rule.update_index`` then ``rule.fire`` for an atom matching condition ``cond_index``."""
    cond = rule.conditions[cond_index]
    arity = len(cond.args)
    template = tuple(rule.effect.args)
    ns = dict(push_ns, T=template, P=rule.effect.predicate, ARITY=arity, product=itertools.product)
    mine = _writes(cond.args)
    lines = ["def f(a):", "    if len(a) != ARITY: return slow(a)"]
    if isinstance(rule, join_cls):
        other_index = 1 - cond_index
        other = rule.conditions[other_index]
        key_mine = rule.common_var_positions[cond_index]
        key = _tuple_expr([f"a[{p}]" for p in key_mine])
        index = rule.__dict__.setdefault("_fast_index", ({}, {}))  # atoms_by_key, for argument tuples
        ns["MINE"], ns["OTHER"] = index[cond_index], index[other_index]
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
    elif isinstance(rule, product_cls):
        lists = getattr(rule, "_fast_lists", None)
        if lists is None:
            lists = rule._fast_lists = [[] for _ in rule.conditions]
            rule._fast_empty = [len(rule.conditions)]
        ns["LISTS"], ns["MYLIST"], ns["EMPTY"] = lists, lists[cond_index], rule._fast_empty
        others = [pos for pos in range(len(rule.conditions)) if pos != cond_index]
        ns["FACTORS_POS"] = others
        ns["OTHER_WRITES"] = [_writes(rule.conditions[pos].args) for pos in others]
        ns["MINE_WRITES"] = mine
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
    ns["slow"] = _unsupported
    source = "\n".join(lines)
    code = _CODE.get(source)
    if code is None:  # the same few dozen shapes recur in every problem of a domain: compile each once
        code = _CODE[source] = compile(source, "<fast_translate rule>", "exec")
    exec(code, ns)  # noqa: S102 -- code built from the rule's integer positions only
    # popped, so the function and its globals do not form a cycle: the model's tuples, sets and indexes
    # the namespace holds are freed by reference counting when the translation is done
    return ns.pop("f")


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
        fact_atoms = sorted(fact.atom for fact in prog.facts)
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
