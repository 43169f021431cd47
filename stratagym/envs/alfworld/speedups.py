"""Make TextWorld's PDDL engine fast without changing what it says.

Profiling the stock engine on ALFWorld games shows a step spends almost all its time *re-deriving
constants*, not simulating the game:

1. every feedback and every admissible command is produced by parsing a text template with TatSu
   (``textgen._parse_and_convert``) -- the same few dozen template strings, re-parsed on every step;
2. every grammar condition and list query is parsed again by TatSu (``Rule.parse_conjunctive_query``);
3. every derivation deep-copies its context (entity infos, variable mappings) and the grammar
   rule's symbols with :func:`copy.deepcopy`, which dominates once parsing is gone;
4. every ``reset`` re-translates the same PDDL domain + problem to SAS twice (``fast_downward.pddl2sas``);
5. every game load re-parses the game's grammar file (``textworld.envs.pddl.logic._parse_and_convert``);
6. every game load translates the problem a second time with fast-downward's optimisations
   (``PddlState.sas_replan``), although only the planner (``PddlState.replan``) ever reads it;
7. every reset into a game builds the game's initial ``PddlState`` twice: ``PddlEnv.load`` builds one
   (to name the entities) and the ``reset`` that follows throws it away and builds it again -- the SAS
   text loaded into fast-downward's library, the initial facts read back (~5-15 ms each).

Loading a game the process has not seen is dominated by 4-6 (measured on the bundled games, one
thread: grammar parse ~0.19 s, translation ~0.17 s, optimised translation ~0.20 s, the rest ~15 ms).

This module memoises 1, 2, 4 and 5 (4 and 5 in bounded LRU caches keyed by the game's text, shared by
every engine in the process; 4 also on disk, shared by every process of the machine:
:mod:`.disk_cache`), replaces the generic deep copies of 3 with copies specialised to the
grammar's symbol classes, and

* shares 5 across the games of one domain: ALFWorld game grammars are the domain's ``alfred.twl2``
  with its ``UNKNOWN GOAL`` placeholder replaced by the task sentence (alfworld's
  ``add_task_to_grammar``). The domain grammar is parsed once; a game's grammar is rebuilt from it by
  putting the sentence into the grammar JSON the parser would have produced, and only that JSON goes
  through textworld's own ``ContextSensitiveGrammar.parse``. This is exact when the sentence cannot
  change how the document or the JSON is tokenised (printable ASCII without quotes or backslashes,
  checked; otherwise the stock parse runs);
* defers 6 until ``replan`` is first called on that state (fast-downward's library only stores the
  optimised SAS text in ``load_sas_replan`` and reads it in ``replan``);
* lets the reset after a load take over the state the load built (7) instead of building it again, when
  that state is still exactly what a new build would be: built with the speed-ups on (so the
  translation is the cached one and the replanning text deferred) from the same library, problem and
  game logic; the library untouched since (no other state built into it, no operator listed, applied or
  planned on -- ``PddlState`` marks these, and :func:`library_changed`); its facts neither added nor
  removed (marked) nor a container grown by a read (sizes compared). A new build would load the same SAS
  text into the library in the same state and read the same facts back into containers filled in the
  same order; the types it imports into the game logic are already there (adding one again is refused,
  changing nothing). The new state gets the donor's very containers (so sets iterate as built); the
  donor, which the env no longer holds, keeps copies (the same facts; a copied set may iterate in
  another order, which only a caller that kept the replaced state across the reset could see);
* runs what is left of 4 for a game the process has not seen (one translation) faster with the same
  output: the Datalog model, grounding, fact groups, SAS operators, variable order and SAS text via
  :mod:`.fast_translate` (active only inside that translation), and without the
  cyclic garbage collector walking the whole process's heap during that burst of allocations
  (:func:`_gc_paused`).

Behaviour is unchanged because:

* parse results are cached *per input string* and handed out as fresh copies (the derivation
  mutates symbols' ``context``), so each caller sees exactly what a new parse would give;
* parsed queries (:class:`textworld.logic.Rule`), SAS translations and parsed grammar files are
  never mutated after construction (``GameLogic`` copies the parsed actions and rules into its own
  containers; rules are deep-copied before each use), so sharing them is safe;
* a derivation context is only ever *rebound*, never mutated in place, and the values it holds
  (entity infos, variables, placeholders) are only read while deriving text, so copying the
  ``variables`` / ``mapping`` dicts shallowly yields the same text as deep-copying them.

``tests/alfworld/test_speedups.py`` and ``benchmarks/alfworld.py`` play the same commands through the
stock and the fast engine and compare transcripts (feedback, admissible commands, won) byte for byte.

The patches are installed once per process and are *inactive* unless a caller enters
:func:`active` (the env does, around each engine call), so stock and fast engines can run in one
process -- which is how the equivalence test and the benchmark compare them.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import os
import re
import sys
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterator

from stratagym.envs.alfworld import disk_cache, fast_translate

__all__ = ["active", "install", "is_active", "cache_info", "clear_caches", "set_game_cache_size", "register_grammar_template",
           "library_changed", "GRAMMAR_PLACEHOLDER"]

_STATE = threading.local()
_INSTALL_LOCK = threading.Lock()
_installed = False

_PARSE_CACHE: dict[tuple[str, str], list] = {}
_QUERY_CACHE: dict[str, Any] = {}
_GAME_CACHE_SIZE = int(os.environ.get("STRATAGYM_ALFWORLD_GAME_CACHE", "256") or 256)
_stats = {"parse_hits": 0, "parse_misses": 0, "query_hits": 0, "query_misses": 0, "sas_hits": 0, "sas_misses": 0,
          "logic_hits": 0, "logic_misses": 0, "logic_from_template": 0, "replan_deferred": 0, "replan_loaded": 0,
          "state_reused": 0}



class _GameCache:
    """The per-game results of one kind (``sas``: translations, ``logic``: parsed grammar files): an LRU
    of at most ``_GAME_CACHE_SIZE`` entries (:func:`set_game_cache_size`) that counts its hits and misses
    in ``_stats`` as ``<kind>_hits`` / ``<kind>_misses``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: "OrderedDict[tuple, Any]" = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, key: tuple) -> Any:
        """The entry of ``key`` (now the most recently used) or None; counted as a hit or a miss."""
        hit = self.entries.get(key)
        if hit is None:
            _stats[f"{self.kind}_misses"] += 1
        else:
            _stats[f"{self.kind}_hits"] += 1
            self.entries.move_to_end(key)
        return hit

    def store(self, key: tuple, value: Any) -> None:
        """Keep ``value`` for ``key``, dropping the least recently used entries past the bound."""
        self.entries[key] = value
        self.trim()

    def trim(self) -> None:
        while len(self.entries) > _GAME_CACHE_SIZE:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()


_SAS_CACHE = _GameCache("sas")
_LOGIC_CACHE = _GameCache("logic")

#: The placeholder alfworld's ``add_task_to_grammar`` replaces with the task sentence.
GRAMMAR_PLACEHOLDER = "UNKNOWN GOAL"
# A task sentence that cannot change how the twl2 document or the grammar JSON is tokenised: printable
# ASCII without '"' (would end a JSON string or a triple-quoted block) or '\\' (a JSON escape).
_SAFE_SENTENCE = re.compile(r"[ !#-\[\]-~]*")
# Domain grammars with the placeholder: text -> parsed template (actions, grammar JSON) once parsed.
_TEMPLATES: "dict[str, tuple[Any, str] | None]" = {}


def is_active() -> bool:
    return bool(getattr(_STATE, "on", False))


@contextlib.contextmanager
def active(on: bool = True, *, disk_cache: bool | None = None) -> Iterator[None]:
    """Run the block with the speed-ups on (``on=True``) or with the stock engine (``on=False``).

    ``disk_cache``: whether a translation the process has not made yet is looked up in (and written to)
    the on-disk cache (:mod:`.disk_cache`); None follows ``$STRATAGYM_ALFWORLD_DISK_CACHE`` (default on).
    """
    install()
    previous = is_active(), getattr(_STATE, "disk_cache", None)
    _STATE.on = bool(on)
    _STATE.disk_cache = disk_cache
    try:
        yield
    finally:
        _STATE.on, _STATE.disk_cache = previous


def cache_info() -> dict[str, int]:
    """Hit/miss counters and sizes of the caches (for the benchmark and tests); ``disk_*``: the on-disk cache."""
    return {**_stats, **disk_cache.stats(), "parse_entries": len(_PARSE_CACHE), "query_entries": len(_QUERY_CACHE),
            "sas_entries": len(_SAS_CACHE), "logic_entries": len(_LOGIC_CACHE),
            "templates_parsed": sum(v is not None for v in _TEMPLATES.values())}


def clear_caches(*, games_only: bool = False) -> None:
    """Empty the caches and zero the counters.

    ``games_only=True`` forgets what is specific to single games (translations, grammar files) and
    keeps what every game of a domain shares (text templates, queries, the parsed domain grammar, the
    translator's recorded rule splits):
    the state of a long-running process meeting a game for the first time (the benchmark's "cold").
    """
    _SAS_CACHE.clear()
    _LOGIC_CACHE.clear()
    if not games_only:
        _PARSE_CACHE.clear()
        _QUERY_CACHE.clear()
        fast_translate._SPLITS.clear()  # the recorded Datalog rule splits (shared by a domain's games)
        for text in _TEMPLATES:
            _TEMPLATES[text] = None
    for k in _stats:
        _stats[k] = 0
    disk_cache.reset_stats()


def set_game_cache_size(n_games: int) -> None:
    """Bound the per-game caches (translations, parsed grammars) to ``n_games`` entries each (LRU).

    About 1 MB per game; the default 256 holds the bundled games and a few hundred real ones.
    Also read from ``$STRATAGYM_ALFWORLD_GAME_CACHE`` at import.
    """
    global _GAME_CACHE_SIZE
    if int(n_games) < 1:
        raise ValueError(f"the game cache needs at least 1 entry, got {n_games}")
    _GAME_CACHE_SIZE = int(n_games)
    for cache in (_SAS_CACHE, _LOGIC_CACHE):
        cache.trim()


def register_grammar_template(text: str) -> bool:
    """Declare a domain grammar (``alfred.twl2``-style, one ``UNKNOWN GOAL``) whose games share its parse.

    Returns False (and registers nothing) when the text does not hold the placeholder exactly once.
    """
    if text.count(GRAMMAR_PLACEHOLDER) != 1:
        return False
    _TEMPLATES.setdefault(text, None)
    return True


class _DeferredSas(str):
    """Stands for the optimised SAS text of a problem until ``replan`` needs it (the text is ``""``)."""

    domain: str
    problem: str


# --------------------------------------------------------------------------------------------------
# Copies specialised to textgen's symbols
# --------------------------------------------------------------------------------------------------


def _make_cloner(textgen: Any) -> Callable[[Any], Any]:
    symbol_cls = textgen.Symbol
    child_attrs = ("expression", "symbol")  # ConditionalSymbol.expression, ListSymbol.symbol

    def clone(obj: Any) -> Any:
        cls = type(obj)
        if cls is list:
            return [clone(x) for x in obj]
        if isinstance(obj, symbol_cls):
            new = cls.__new__(cls)
            d = dict(obj.__dict__)
            for attr in child_attrs:
                child = d.get(attr)
                if isinstance(child, symbol_cls):
                    d[attr] = clone(child)
            ctx = d.get("context")
            if type(ctx) is dict and ctx:
                d["context"] = _copy_context_dict(ctx)
            new.__dict__.update(d)
            return new
        return copy.deepcopy(obj)

    return clone


def _copy_context_dict(ctx: dict) -> dict:
    out = dict(ctx)
    for key in ("variables", "mapping"):
        if type(out.get(key)) is dict:
            out[key] = dict(out[key])
    return out


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Run a burst of allocations (one translation) without the cyclic GC, then collect its young objects.

    A translation allocates a few hundred thousand small objects (atoms, tuples, dicts), so the collector
    runs hundreds of young collections and several full ones during it; a full one walks every object
    of the process (~0.1-0.26 M in a process with textworld, more with torch loaded): measured, ~25% of
    a translation's CPU time, ~40% with torch and transformers imported. Nothing the translator computes
    depends on when garbage is collected. Afterwards one young collection (a few ms, counted in the
    reset) frees what the translation left in cycles, so memory does not pile up.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


# --------------------------------------------------------------------------------------------------
# The state a game load builds, handed to the reset that follows (7)
# --------------------------------------------------------------------------------------------------

# On a PddlState: a token naming its build, present while the state is as built (no fact added or
# removed). On its fast-downward library (a CDLL: attributes live in its __dict__): the token of the last
# state built into it, removed when anything may have changed the library's state since.
_PRISTINE = "_stratagym_pristine"
# On a PddlEnv: the state its last load built, until the next reset (or load) takes it.
_DONOR = "_stratagym_donor_state"


def _fact_shape(state: Any) -> tuple[int, int, int, int]:
    """Sizes of a state's fact containers (a read through a defaultdict adds a key; this sees it)."""
    return len(state._facts), len(state._vars_by_name), len(state._vars_by_type), len(state._var_counts)


def _mark_pristine(state: Any) -> None:
    token = (object(), _fact_shape(state))
    state.__dict__[_PRISTINE] = token
    state.downward_lib.__dict__[_PRISTINE] = token[0]


def _library_touched(state: Any) -> None:
    library_changed(state.downward_lib)
    state.__dict__.pop(_PRISTINE, None)


def library_changed(downward_lib: Any) -> None:
    """Say that a fast-downward library's state was changed outside textworld's PddlState (e.g. by
    ``cleanup``): the state last built into it is no longer handed to a reset (see :func:`install`, 7)."""
    with contextlib.suppress(AttributeError, TypeError):
        downward_lib.__dict__.pop(_PRISTINE, None)


def _can_take_over(new: Any, donor: Any, downward_lib: Any, pddl_problem: str, logic: Any) -> bool:
    """Whether building ``new`` from these arguments would give exactly ``donor`` as it now is.

    A build is a function of its arguments and of nothing else when the speed-ups are on: the
    translation comes from the cache (the same objects), the replanning text is deferred, the types it
    imports into ``logic`` are there since the donor's build (adding them again is refused, changing
    nothing), the library is loaded with the same SAS text and read back. So the donor stands for a
    fresh build if it was built the same way (active, same library, problem and logic), nothing has
    touched the library since (no other state built into it, no operator applied, listed or planned
    on), and its facts are as built.
    """
    token = donor.__dict__.get(_PRISTINE)
    return (token is not None and type(new) is type(donor) and donor.downward_lib is downward_lib
            and downward_lib.__dict__.get(_PRISTINE) is token[0] and donor._logic is logic
            and donor.pddl_problem == pddl_problem and _fact_shape(donor) == token[1])


def _take_over(new: Any, donor: Any) -> None:
    """Give ``new`` the donor's build: its very containers (so every set and dict iterates as built).

    The donor keeps copies of its fact containers, as a state built separately would be separate (the
    same facts; a copied set can iterate in another order: copying sizes its table afresh).
    """
    d = dict(donor.__dict__)
    del d[_PRISTINE]
    new.__dict__.update(d)
    donor.__dict__.pop(_PRISTINE, None)
    for name in ("_facts", "_vars_by_type"):
        old = donor.__dict__[name]
        copied = type(old)(old.default_factory)
        for k, v in old.items():
            copied[k] = v.copy()
        donor.__dict__[name] = copied
    donor._vars_by_name = dict(donor._vars_by_name)
    donor._var_counts = donor._var_counts.copy()


# --------------------------------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------------------------------


def install() -> None:
    """Install the (inactive) patches into textworld and fast_downward; idempotent."""
    global _installed
    if _installed:
        return
    with _INSTALL_LOCK:
        if _installed:
            return
        import fast_downward
        import textworld.envs.pddl.logic as pddl_logic
        import textworld.envs.pddl.textgen as textgen
        import textworld.logic as tw_logic

        clone = _make_cloner(textgen)

        # 1. template parses
        stock_parse = textgen._parse_and_convert

        def parse_and_convert(*args: Any, **kwargs: Any):
            if not is_active() or kwargs.get("trace") or len(args) != 1 or set(kwargs) - {"rule_name", "trace"}:
                return stock_parse(*args, **kwargs)
            key = (args[0], kwargs.get("rule_name", ""))
            cached = _PARSE_CACHE.get(key)
            if cached is None:
                _stats["parse_misses"] += 1
                cached = stock_parse(*args, **kwargs)
                _PARSE_CACHE[key] = cached  # the cached original itself is never handed out
            else:
                _stats["parse_hits"] += 1
            return clone(cached)

        textgen._parse_and_convert = parse_and_convert

        # 2. conjunctive queries
        rule_cls = tw_logic.Rule
        stock_query = rule_cls.parse_conjunctive_query.__func__

        def parse_conjunctive_query(cls, expr: str):
            if not is_active() or cls is not rule_cls:
                return stock_query(cls, expr)
            rule = _QUERY_CACHE.get(expr)
            if rule is None:
                _stats["query_misses"] += 1
                rule = _QUERY_CACHE[expr] = stock_query(cls, expr)
            else:
                _stats["query_hits"] += 1
            return rule

        rule_cls.parse_conjunctive_query = classmethod(parse_conjunctive_query)

        # 3. deep copies inside textgen (Symbol.copy, copy_context, ContextSensitiveGrammar.replace)
        stock_deepcopy = textgen.deepcopy

        def textgen_deepcopy(obj: Any, *args: Any):
            if not is_active() or args:
                return stock_deepcopy(obj, *args)
            if type(obj) is dict:  # copy_context's "variables" / "mapping"
                return dict(obj)
            return clone(obj)

        textgen.deepcopy = textgen_deepcopy

        # 4. PDDL -> SAS translation (pure function of its arguments)
        stock_pddl2sas = fast_downward.pddl2sas

        def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
            if not is_active() or verbose:
                return stock_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
            key = (domain, problem, bool(optimize))
            hit = _SAS_CACHE.lookup(key)
            if hit is None:
                # 4c. made before by any process of the machine: read from disk (see disk_cache)
                use_disk = disk_cache.enabled(getattr(_STATE, "disk_cache", None))
                if use_disk:
                    hit = disk_cache.load(domain, problem, bool(optimize))
                if hit is None:
                    _STATE.fast_translate = True  # 4b: the faster model computation and operator output
                    try:
                        with _gc_paused():
                            hit = stock_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
                    finally:
                        _STATE.fast_translate = False
                    if use_disk:
                        disk_cache.store(domain, problem, bool(optimize), hit[1])
                _SAS_CACHE.store(key, hit)
            return hit

        fast_downward.pddl2sas = pddl2sas

        # 4b. inside that translation: its generic loops (see fast_translate), same results faster
        from fast_downward.translate import build_model, instantiate, sas_tasks

        stock_compute_model = build_model.compute_model
        stock_operator_output = sas_tasks.SASOperator.output
        stock_explore = instantiate.explore

        def while_translating(stock: Callable[..., Any], fast: Callable[..., Any]) -> Callable[..., Any]:
            """``fast`` inside a first translation (the flag set above), ``stock`` everywhere else."""
            def patched(*args: Any) -> Any:
                return fast(*args) if getattr(_STATE, "fast_translate", False) else stock(*args)
            return patched

        build_model.compute_model = while_translating(
            stock_compute_model, lambda prog: fast_translate.compute_model(prog, stock_compute_model))
        instantiate.explore = while_translating(
            stock_explore, lambda task: fast_translate.explore(task, stock_compute_model))
        sas_tasks.SASOperator.output = while_translating(stock_operator_output, fast_translate.operator_output)
        sas_tasks.SASVariables.output = while_translating(sas_tasks.SASVariables.output, fast_translate.variables_output)
        sas_tasks.SASInit.output = while_translating(sas_tasks.SASInit.output, fast_translate.init_output)
        stock_instantiate = instantiate.instantiate
        instantiate.instantiate = while_translating(
            stock_instantiate, lambda task, model: fast_translate.instantiate(task, model, stock_instantiate))

        saved_argv = sys.argv
        sys.argv = ["translate.py", "domain", "task"]  # what pddl2sas sets: the options module parses argv on import
        try:
            from fast_downward.translate import translate as fd_translate
        finally:
            sys.argv = saved_argv

        stock_strips_operators = fd_translate.translate_strips_operators

        def strips_operators(actions, strips_to_sas, ranges, mutex_dict, mutex_ranges, implied_facts):
            if fast_translate.binary_encoding(strips_to_sas, ranges, mutex_dict, mutex_ranges, implied_facts):
                return fast_translate.translate_strips_operators(
                    actions, strips_to_sas, ranges, mutex_dict, mutex_ranges, implied_facts,
                    fd_translate.translate_strips_operator, fd_translate)
            return stock_strips_operators(actions, strips_to_sas, ranges, mutex_dict, mutex_ranges, implied_facts)

        fd_translate.translate_strips_operators = while_translating(stock_strips_operators, strips_operators)

        from fast_downward.translate import sccs, variable_order

        causal_graph_cls, order_cls = variable_order.CausalGraph, variable_order.VariableOrder
        causal_graph_cls.weight_graph_from_ops = while_translating(
            causal_graph_cls.weight_graph_from_ops, fast_translate.weight_graph_from_ops)
        order_cls._apply_to_operators = while_translating(order_cls._apply_to_operators, fast_translate.apply_to_operators)
        sccs.get_sccs_adjacency_list = while_translating(sccs.get_sccs_adjacency_list, fast_translate.sccs_adjacency_list)
        causal_graph_cls.calculate_topological_pseudo_sort = while_translating(
            causal_graph_cls.calculate_topological_pseudo_sort,
            lambda graph, components: fast_translate.calculate_topological_pseudo_sort(graph, components, variable_order.MaxDAG))

        from fast_downward.translate import fact_groups, invariant_finder, pddl_to_prolog
        from fast_downward.translate import split_rules as fd_split_rules

        prolog_cls = pddl_to_prolog.PrologProgram
        prolog_cls.split_rules = while_translating(
            prolog_cls.split_rules, lambda prog: fast_translate.split_rules(prog, fd_split_rules.split_rule))

        stock_find_invariants, stock_sort_groups = invariant_finder.find_invariants, fact_groups.sort_groups
        invariant_finder.find_invariants = while_translating(
            stock_find_invariants, lambda task, params: fast_translate.find_invariants(task, params, stock_find_invariants))
        fact_groups.sort_groups = while_translating(
            stock_sort_groups, lambda groups: fast_translate.sort_groups(groups, stock_sort_groups))

        # 5. the game's grammar file (domain actions + text grammar), parsed on every game load
        stock_logic_parse = pddl_logic._parse_and_convert

        def logic_parse_and_convert(*args: Any, **kwargs: Any):
            if not is_active() or len(args) != 1 or set(kwargs) != {"rule_name"}:
                return stock_logic_parse(*args, **kwargs)
            key = (args[0], kwargs["rule_name"])
            hit = _LOGIC_CACHE.lookup(key)
            if hit is None:
                hit = from_template(args[0], kwargs["rule_name"]) if _TEMPLATES else None
                if hit is None:
                    hit = stock_logic_parse(*args, **kwargs)
                _LOGIC_CACHE.store(key, hit)
            return hit

        pddl_logic._parse_and_convert = logic_parse_and_convert

        # 5b. games of a registered domain grammar: the domain's parse + the game's task sentence
        csg_cls = textgen.ContextSensitiveGrammar
        stock_csg_parse = csg_cls.parse.__func__

        def parse_template(template: str, rule_name: str) -> "tuple[Any, str] | None":
            """Stock-parse the domain grammar once, keeping the grammar JSON the parser builds."""
            seen: list[str] = []

            def capture(cls, text: str):
                seen.append(text)
                return stock_csg_parse(cls, text)

            with _INSTALL_LOCK:  # the class attribute is swapped while the template parses
                csg_cls.parse = classmethod(capture)
                try:
                    actions, _grammar = stock_logic_parse(template, rule_name=rule_name)
                finally:
                    csg_cls.parse = classmethod(stock_csg_parse)
            if len(seen) != 1 or seen[0].count(GRAMMAR_PLACEHOLDER) != 1:
                return None
            for action in actions.values():
                if any(GRAMMAR_PLACEHOLDER in str(v) for v in vars(action).values()):
                    return None
            return actions, seen[0]

        def from_template(text: str, rule_name: str):
            for template in list(_TEMPLATES):
                head, _, tail = template.partition(GRAMMAR_PLACEHOLDER)
                if len(text) < len(head) + len(tail) or not (text.startswith(head) and text.endswith(tail)):
                    continue
                sentence = text[len(head):len(text) - len(tail)]
                if not _SAFE_SENTENCE.fullmatch(sentence):
                    return None
                parsed = _TEMPLATES.get(template)
                if parsed is None:
                    parsed = parse_template(template, rule_name)
                    if parsed is None:
                        _TEMPLATES.pop(template, None)
                        return None
                    _TEMPLATES[template] = parsed
                actions, grammar_json = parsed
                _stats["logic_from_template"] += 1
                # json.dumps writes an ASCII sentence without '"' or '\\' verbatim, so this is the JSON the
                # stock converter would have built for this game; textworld's own parser takes it from here.
                return dict(actions), csg_cls.parse(grammar_json.replace(GRAMMAR_PLACEHOLDER, sentence))
            return None

        # 6. the optimised (replanning) translation, deferred until replan needs it
        pddl_state_cls = pddl_logic.PddlState
        stock_state_init = pddl_state_cls.__init__
        stock_replan = pddl_state_cls.replan
        module_pddl2sas = fast_downward.pddl2sas  # the memoising wrapper above

        def deferring_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
            if optimize and not verbose and getattr(_STATE, "defer_replan", False):
                _stats["replan_deferred"] += 1
                marker = _DeferredSas("")
                marker.domain, marker.problem = domain, problem
                return None, marker
            return module_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)

        fast_downward.pddl2sas = deferring_pddl2sas

        def state_init(self, downward_lib, pddl_problem, logic):
            if not is_active():
                library_changed(downward_lib)  # reloaded: no state built before into it stands for it now
                return stock_state_init(self, downward_lib, pddl_problem, logic)
            donor = getattr(_STATE, "donor", None)
            if donor is not None:
                _STATE.donor = None
                if _can_take_over(self, donor, downward_lib, pddl_problem, logic):
                    _take_over(self, donor)
                    _stats["state_reused"] += 1
                    return None
            library_changed(downward_lib)  # until this build is complete
            _STATE.defer_replan = True
            try:
                stock_state_init(self, downward_lib, pddl_problem, logic)
            finally:
                _STATE.defer_replan = False
            _mark_pristine(self)
            return None

        def replan(self, infos):
            _library_touched(self)
            pending = self.__dict__.get("sas_replan")
            if isinstance(pending, _DeferredSas):
                _stats["replan_loaded"] += 1
                _, self.sas_replan = module_pddl2sas(pending.domain, pending.problem, optimize=True)
                self._replan_owner = True
            if self.__dict__.get("_replan_owner"):
                # the library keeps one replanning text; this state's goes in before every replan
                self.downward_lib.load_sas_replan(self.sas_replan.encode("utf-8"))
            return stock_replan(self, infos)

        pddl_state_cls.__init__ = state_init
        pddl_state_cls.replan = replan

        # 7. the state PddlEnv.load builds, taken over by the reset that follows instead of built again
        import textworld.envs.pddl.pddl as pddl_env

        env_cls = pddl_env.PddlEnv
        stock_env_load, stock_env_reset = env_cls.load, env_cls.reset

        def env_load(self, *args: Any, **kwargs: Any):
            self.__dict__.pop(_DONOR, None)
            result = stock_env_load(self, *args, **kwargs)
            state = self.__dict__.get("_pddl_state")
            if is_active() and state is not None and _PRISTINE in state.__dict__:
                self.__dict__[_DONOR] = state
            return result

        def env_reset(self, *args: Any, **kwargs: Any):
            donor = self.__dict__.pop(_DONOR, None)
            if donor is None or not is_active() or donor is not self.__dict__.get("_pddl_state"):
                return stock_env_reset(self, *args, **kwargs)
            _STATE.donor = donor
            try:
                return stock_env_reset(self, *args, **kwargs)
            finally:
                _STATE.donor = None

        env_cls.load = env_load
        env_cls.reset = env_reset

        # what changes the library's state or the state's facts ends the donor's pristine state
        stock_apply, stock_applicable = pddl_state_cls.apply, pddl_state_cls.all_applicable_actions
        stock_add_fact, stock_remove_fact = pddl_state_cls.add_fact, pddl_state_cls.remove_fact

        def apply(self, action):
            _library_touched(self)
            return stock_apply(self, action)

        def all_applicable_actions(self):
            _library_touched(self)
            return stock_applicable(self)

        def add_fact(self, prop):
            self.__dict__.pop(_PRISTINE, None)
            return stock_add_fact(self, prop)

        def remove_fact(self, prop):
            self.__dict__.pop(_PRISTINE, None)
            return stock_remove_fact(self, prop)

        def add_facts(self, props):
            # State.add_facts calls self.add_fact per fact; the build adds a few hundred, so the loop
            # goes straight to the stock method (unless a subclass has its own add_fact)
            self.__dict__.pop(_PRISTINE, None)
            if type(self).add_fact is not add_fact:  # a subclass's own add_fact, as State.add_facts calls it
                for prop in props:
                    self.add_fact(prop)
                return
            for prop in props:
                stock_add_fact(self, prop)

        pddl_state_cls.apply = apply
        pddl_state_cls.all_applicable_actions = all_applicable_actions
        pddl_state_cls.add_fact = add_fact
        pddl_state_cls.remove_fact = remove_fact
        pddl_state_cls.add_facts = add_facts
        _installed = True
