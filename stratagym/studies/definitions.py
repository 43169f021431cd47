"""Study definitions: one YAML file per study in ``suites/studies/``, beside the bench suites.

A study compares advantage estimators on an env built to show the effect the estimator's paper claims
(see ``docs/envs/synthetic.md``). Every method in a study gets the *same* training budget (iterations x
tasks x group size), learning rate, policy size, loss and evaluation; only the estimator differs (and,
for HGPO, the env's ``context_k``). Seeds are ``0 .. n_seeds-1``, all reported, never selected.

A study file (``suites/studies/context.yaml`` is a full one)::

    name: context                        # optional; the file name without .yaml, which it must match
    title: GRPO vs GiGPO on CueCorridor
    claim: what the paper says and why this env tests it
    prediction: ""                       # optional: written down before the first run
    env: stratagym/CueCorridor-v0
    env_kwargs: {}                       # optional, for gymnasium.make (every method)
    methods:                             # the bench suites' algorithm entries, without 'recipe'
      - {label: GRPO, estimator: grpo}
      - {label: HGPO K=2, estimator: hgpo, estimator_kwargs: {gamma: 0.95}, env_kwargs: {context_k: 2}}
    n_seeds: 5
    iterations: 60                       # training iterations (one rollout + one update each)
    tasks_per_iteration: 8
    group_size: 8
    lr: 0.02
    hidden: 64                           # the scorer policy's size and memory (turns it sees)
    memory: 4
    goal: false                          # the scorer also sees the episode's goal at every turn (ALFWorld)
    warm_start: {}                       # optional: clone a scripted expert before RL (below)
    eval_every: 5                        # the learning curve's schedule
    eval_episodes_per_task: 4
    final_episodes_per_task: 16          # the table's final sampled evaluation
    eval_tasks: null                     # evaluate on the first N tasks only (null: every task)
    track: []                            # per-episode info keys whose means the curves also show
    split_by: null                       # info key that splits the success curve (e.g. difficulty)
    extra_metrics: []                    # more evaluation metrics for the table (e.g. return)
    compare_to: []                       # more methods to show paired differences against
    requires_env: false                  # check the env builds here before training (ALFWorld)
    eval_splits: {}                      # more evaluation sets: name -> env kwargs over the training env's
                                         #   (e.g. {out_of_distribution: {split: out_of_distribution}}); each
                                         #   adds success/<name> to the curves and the table
    registration: {}                     # optional pre-registration, committed before the runs (below)

``warm_start`` (behaviour cloning of a scripted expert into each seed's initial scorer, before RL:
:mod:`stratagym.training.scorer_imitation`; the demonstrations are collected once per study, on the
training env's train split with the study's ``env_kwargs``, never an evaluation split)::

    warm_start:
      agent: scripted:searcher           # a scripted agent of the env
      episodes_per_task: 1               # expert episodes per train task (only won ones are kept)
      epochs: 30                         # passes over the demonstrations (Adam, shuffled by the seed)
      lr: 0.01
      batch_size: 256

``registration`` (a controlled study's pre-registration; the runner refuses to run a study that has one
unless the study file is committed unchanged in git, and records that commit)::

    registration:
      registered: "2026-12-02"           # for readers; the git commit is the proof
      hypotheses:                        # arm vs baseline, in the direction the paper claims
        - {arm: HGPO K=4, baseline: GiGPO, direction: greater}
      metrics: [success/out_of_distribution]   # final metrics (the first is the primary one)
      test: permutation                  # sign flips over tasks (per-task success averaged over seeds)
      alpha: 0.05
      min_effect: 0.05                   # the smallest difference that counts as the claimed effect
      testable_floor: 0.1                # both arms' mean below this on a metric: "not testable" there

The verdict per hypothesis and metric is :func:`stratagym.eval.paired.decide` on the per-task final
outcomes, paired by seed (:func:`stratagym.studies.report.registered_verdicts`).

The names are the suites' names for the same ideas (``env``, ``env_kwargs``, ``label``, ``estimator``,
``estimator_kwargs``): a study's method is a suite's algorithm entry without ``recipe``, one
:class:`~stratagym.eval.schema.Arm` checked by the one validator both share (:mod:`stratagym.eval.schema`;
a bare estimator name is a method labelled by it). Files are read with ``yaml.safe_load`` and checked
field by field (estimator names and options against the registry), so a typo fails with a
:class:`~stratagym.errors.ConfigError` that names the file, the field and the valid choices, before any
training.

Results written before the studies were YAML name ``env`` ``env_id`` and ``estimator_kwargs``
``options`` in their ``results.json``; :func:`legacy_study_dict` maps them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from stratagym.errors import ConfigError
from stratagym.eval.schema import CHECKS, Arm, Check, arms_from, check_keys, check_values
from stratagym.paths import REPO_ROOT

__all__ = [
    "Method", "Study", "STUDY_DIR", "RESULTS_DIR", "load_study", "load_studies", "get_study", "study_names",
    "results_dir", "legacy_study_dict", "study_path", "check_registration", "check_warm_start",
]

#: Where the study definitions live: ``suites/studies/<name>.yaml`` in the source checkout.
STUDY_DIR = REPO_ROOT / "suites" / "studies"
#: Where a study's outputs go by default: ``studies/<name>/`` (relative to the working directory, like
#: the bench's ``leaderboard/`` and ``runs/``). The committed ``studies/`` folder holds the reported runs.
RESULTS_DIR = Path("studies")


#: One arm of a comparison (the schema studies share with bench suites: :class:`stratagym.eval.schema.Arm`,
#: without ``recipe``): a label, an estimator (registry name + options) and this arm's env kwargs (HGPO's K
#: is the env's ``context_k``: how many history levels it reports).
Method = Arm


@dataclass(frozen=True)
class Study:
    """A comparison of methods on one env under one budget (see the module docstring for each field)."""

    name: str
    title: str
    claim: str
    env: str
    methods: tuple[Method, ...]
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    n_seeds: int = 5
    iterations: int = 60
    tasks_per_iteration: int = 8
    group_size: int = 8
    lr: float = 0.02
    hidden: int = 64
    memory: int = 4
    eval_every: int = 5
    eval_episodes_per_task: int = 4
    final_episodes_per_task: int = 16
    eval_tasks: int | None = None
    track: tuple[str, ...] = ()
    split_by: str | None = None
    requires_env: bool = False
    compare_to: tuple[str, ...] = ()
    extra_metrics: tuple[str, ...] = ()
    prediction: str = ""
    eval_splits: dict[str, dict[str, Any]] = field(default_factory=dict)
    registration: dict[str, Any] = field(default_factory=dict)
    goal: bool = False
    warm_start: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The definition as plain data (``results.json``'s ``study``): the YAML file's fields."""
        d = asdict(self)
        d["methods"] = [{k: v for k, v in asdict(m).items() if k != "recipe"} for m in self.methods]
        return d

    def with_overrides(self, **kw: Any) -> "Study":
        """A copy with the given fields replaced (``None`` values ignored): the CLI's ``--seeds`` and
        ``--iterations``, and the tests' tiny budgets."""
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


# ---- checking a file --------------------------------------------------------------------------------

#: Every top-level field but ``methods`` and its rule (:data:`stratagym.eval.schema.CHECKS`, shared with suites).
_RULES = {
    "name": "text", "title": "text", "claim": "text", "prediction": "any_text", "env": "text",
    "env_kwargs": "mapping", "n_seeds": "positive_int", "iterations": "positive_int",
    "tasks_per_iteration": "positive_int", "group_size": "positive_int", "lr": "positive_float",
    "hidden": "positive_int", "memory": "natural", "eval_every": "positive_int",
    "eval_episodes_per_task": "positive_int", "final_episodes_per_task": "positive_int",
    "eval_tasks": "optional_positive_int", "track": "texts", "split_by": "optional_text",
    "requires_env": "bool", "compare_to": "texts", "extra_metrics": "texts", "eval_splits": "mapping",
    "registration": "mapping", "goal": "bool", "warm_start": "mapping",
}
_CHECKS: dict[str, Check] = {key: CHECKS[rule] for key, rule in _RULES.items()}
_REQUIRED = ("title", "claim", "env", "methods")
assert set(_CHECKS) | {"methods"} == {f.name for f in fields(Study)}


def study_from_dict(data: Any, *, where: str, name: str | None = None) -> Study:
    """Check a study's plain data (a YAML file's content) and build the :class:`Study`.

    ``name`` is the file's stem: the study's name when the data has none, and what a given ``name``
    must equal (so ``stratagym study X`` always writes ``studies/X``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a study is a mapping with at least {', '.join(_REQUIRED)}")
    check_keys(data, set(_CHECKS) | {"methods"}, where)
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}")
    data = dict(data)
    if name is not None:
        if "name" in data and data["name"] != name:
            raise ConfigError(f"{where}: name {data['name']!r} differs from the file name {name!r}; make them equal")
        data.setdefault("name", name)
    elif "name" not in data:
        raise ConfigError(f"{where}: missing name")
    check_values(data, _CHECKS, where)
    methods = arms_from(data.pop("methods"), f"{where}: methods")  # the arms' schema, shared with suites
    labels = [m.label for m in methods]
    unknown_refs = [r for r in data.get("compare_to", []) if r not in labels]
    if unknown_refs:
        raise ConfigError(f"{where}: compare_to names {unknown_refs}, which are not methods; methods: {labels}")
    _check_eval_splits(data.get("eval_splits", {}), where)
    if data.get("warm_start"):
        data["warm_start"] = check_warm_start(data["warm_start"], where)
    if data.get("registration"):
        check_registration(data["registration"], labels, where, eval_splits=data.get("eval_splits", {}))
    for key in ("track", "compare_to", "extra_metrics"):
        if key in data:
            data[key] = tuple(data[key])
    if "lr" in data:
        data["lr"] = float(data["lr"])
    return Study(methods=methods, **data)


def _check_eval_splits(splits: dict[str, Any], where: str) -> None:
    for name, kw in splits.items():
        if not (isinstance(name, str) and name and "/" not in name):
            raise ConfigError(f"{where}: eval_splits names must be non-empty strings without '/', got {name!r}")
        if not isinstance(kw, dict):
            raise ConfigError(f"{where}: eval_splits.{name} must be a mapping of env kwargs, got {kw!r}")


#: A ``warm_start`` mapping's keys and their defaults (``agent`` has none: it must be named).
WARM_START_DEFAULTS: dict[str, Any] = {"episodes_per_task": 1, "epochs": 30, "lr": 0.01, "batch_size": 256}


def check_warm_start(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """Check a study's ``warm_start`` and return it with every default filled in (so ``results.json``
    records exactly what ran)."""
    where = f"{where}: warm_start"
    check_keys(spec, ("agent", *WARM_START_DEFAULTS), where)
    agent = spec.get("agent")
    if not (isinstance(agent, str) and agent.startswith("scripted:") and len(agent) > len("scripted:")):
        raise ConfigError(f"{where}: agent must name a scripted agent such as scripted:searcher, got {agent!r}")
    out = {"agent": agent, **WARM_START_DEFAULTS, **{k: v for k, v in spec.items() if k != "agent"}}
    check_values(out, {"episodes_per_task": CHECKS["positive_int"], "epochs": CHECKS["positive_int"],
                       "lr": CHECKS["positive_float"], "batch_size": CHECKS["positive_int"]}, where)
    out["lr"] = float(out["lr"])
    return out


#: The keys of a controlled study's ``registration`` and the tests it may name.
REGISTRATION_KEYS = ("registered", "hypotheses", "metrics", "test", "alpha", "min_effect", "testable_floor")
REGISTRATION_TESTS = ("permutation", "mcnemar")


def check_registration(reg: dict[str, Any], labels: list[str], where: str, *,
                       eval_splits: dict[str, Any] | None = None) -> None:
    """Check a study's ``registration`` (see the module docstring): every key present, hypotheses over
    the study's methods, metrics the final evaluation reports, a known test, alpha in (0, 1)."""
    where = f"{where}: registration"
    check_keys(reg, REGISTRATION_KEYS, where)
    missing = [k for k in REGISTRATION_KEYS if k not in reg]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}: a registration states every one before the runs")
    if not isinstance(reg["registered"], str) or not reg["registered"].strip():
        raise ConfigError(f"{where}: registered must be a date string, got {reg['registered']!r}")
    hyps = reg["hypotheses"]
    if not isinstance(hyps, list) or not hyps:
        raise ConfigError(f"{where}: hypotheses must be a non-empty list of {{arm, baseline, direction}}")
    for i, h in enumerate(hyps):
        if not (isinstance(h, dict) and set(h) == {"arm", "baseline", "direction"}):
            raise ConfigError(f"{where}: hypotheses[{i}] must be {{arm, baseline, direction}}, got {h!r}")
        for key in ("arm", "baseline"):
            if h[key] not in labels:
                raise ConfigError(f"{where}: hypotheses[{i}].{key} {h[key]!r} is not a method; methods: {labels}")
        if h["arm"] == h["baseline"]:
            raise ConfigError(f"{where}: hypotheses[{i}] compares {h['arm']!r} with itself")
        if h["direction"] not in ("greater", "less"):
            raise ConfigError(f"{where}: hypotheses[{i}].direction must be greater or less, got {h['direction']!r}")
    valid = ["success"] + [f"success/{n}" for n in (eval_splits or {})]
    metrics = reg["metrics"]
    if not (isinstance(metrics, list) and metrics and all(m in valid for m in metrics)):
        raise ConfigError(f"{where}: metrics must be a non-empty list of {valid}, got {metrics!r}")
    if reg["test"] not in REGISTRATION_TESTS:
        raise ConfigError(f"{where}: test must be one of {', '.join(REGISTRATION_TESTS)}, got {reg['test']!r}")
    for key, lo, hi in (("alpha", 0.0, 1.0), ("min_effect", 0.0, 1.0), ("testable_floor", 0.0, 1.0)):
        v = reg[key]
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v < hi and (key != "alpha" or v > 0)
        if not ok or (key == "min_effect" and v <= 0):
            raise ConfigError(f"{where}: {key} must be a number in the range for it, got {v!r}")


def study_path(name_or_path: str | os.PathLike[str]) -> Path:
    """The file of a study given by name (``suites/studies/<name>.yaml``) or by path."""
    text = os.fspath(name_or_path)
    if text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text:
        return Path(text)
    return STUDY_DIR / f"{text}.yaml"


def load_study(path: str | os.PathLike[str]) -> Study:
    """Read and check one study file (see the module docstring)."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read study file {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"study file {p} is not UTF-8 text: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p} is not valid YAML: {exc}") from None
    return study_from_dict(data, where=str(p), name=p.stem)


def study_names(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """The names of the studies in ``directory`` (default :data:`STUDY_DIR`), sorted."""
    d = Path(directory) if directory is not None else STUDY_DIR
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def load_studies(directory: str | os.PathLike[str] | None = None) -> dict[str, Study]:
    """Every study of ``directory`` (default :data:`STUDY_DIR`), by name; a bad file raises."""
    d = Path(directory) if directory is not None else STUDY_DIR
    return {n: load_study(d / f"{n}.yaml") for n in study_names(d)}


def get_study(name_or_path: str | os.PathLike[str]) -> Study:
    """A study by name (``suites/studies/<name>.yaml``) or by the path of a study file."""
    text = os.fspath(name_or_path)
    if text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text:
        return load_study(text)
    path = STUDY_DIR / f"{text}.yaml"
    if not path.is_file():
        names = study_names()
        raise ConfigError(f"unknown study {text!r}; studies: {', '.join(names) or f'none in {STUDY_DIR}'} "
                          "(or give the path of a study YAML file)")
    return load_study(path)


def results_dir(study: Study) -> Path:
    """The default output folder of ``study``: ``studies/<name>``."""
    return RESULTS_DIR / study.name


#: ``results.json`` files written before the studies were YAML used these names.
_LEGACY_STUDY_KEYS = {"env_id": "env"}
_LEGACY_METHOD_KEYS = {"options": "estimator_kwargs"}


def legacy_study_dict(recorded: dict[str, Any]) -> dict[str, Any]:
    """A ``results.json`` ``study`` mapping in today's field names (older runs say ``env_id`` and
    ``options``); values are left as recorded."""
    out = {_LEGACY_STUDY_KEYS.get(k, k): v for k, v in recorded.items()}
    out["methods"] = [{_LEGACY_METHOD_KEYS.get(k, k): v for k, v in m.items()} for m in recorded.get("methods", [])]
    return out
