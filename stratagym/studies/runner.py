"""Run a study: every (method, seed) trained by the project's :class:`~stratagym.training.trainer.Trainer`
with the scorer policy, evaluated on a fixed schedule, then summarised (table, plots, leaderboard records).

Only the estimator (and, for HGPO's K, the env's ``context_k``) differs between the arms of a study; the
recipe is otherwise identical: same iterations, tasks per step, group size, learning rate, loss, policy
size and initial weights (a seed fixes the initial policy and the task stream).

Evaluation does not disturb training: it samples with a frozen copy of the policy that has its own
random generator, on every task of the env, ``eval_episodes_per_task`` episodes each.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from stratagym.agents.policy import unwrap_model
from stratagym.agents.scorer import ScorerPolicy
from stratagym.atomic import atomic_write, write_json_atomic
from stratagym.errors import ConfigError
from stratagym.eval.harness import EvalConfig, evaluate
from stratagym.studies.definitions import Method, Study
from stratagym.studies.preregistration import PreregistrationError, git_proof
from stratagym.studies.report import markdown_table, plot_curves, registered_verdicts, summarize, verdict_lines
from stratagym.paths import slug  # re-exported: study outputs are named with it
from stratagym.training.config import (
    AlgorithmConfig,
    EnvConfig,
    LossConfig,
    OptimConfig,
    RecipeConfig,
    RolloutConfig,
    TrainConfig,
)
from stratagym.training.rollout import InProcessPool, RolloutCollector
from stratagym.training.scorer_imitation import ScorerDemos, collect_scorer_demos, imitate
from stratagym.training.trainer import Trainer

__all__ = ["SCORER_CLASS", "StudyRun", "recipe_for", "run_one", "run_study", "finish_results", "evaluate_policy", "render",
           "rerender", "slug", "policy_dir", "saved_run", "saved_runs", "resumable_runs", "heldout_records"]

#: The policy every study trains, as recipes name it (see :mod:`stratagym.agents.scorer`).
SCORER_CLASS = "stratagym.agents.scorer:ScorerPolicy"


def policy_options(study: Study) -> dict[str, Any]:
    """The scorer's options in a recipe and a record (``goal`` only when on, so the records of studies
    run before it existed read as they did)."""
    options: dict[str, Any] = {"class": SCORER_CLASS, "hidden": study.hidden, "memory": study.memory}
    if study.goal:
        options["goal"] = True
    return options


def recipe_for(study: Study, method: Method, seed: int, output_dir: str) -> Any:
    """The training recipe of one arm and seed (a :class:`RecipeConfig`, validated)."""
    return RecipeConfig(
        name=f"{study.name}-{slug(method.label)}-seed{seed}",
        policy={**policy_options(study), "seed": seed},
        env=EnvConfig(id=study.env, kwargs={**study.env_kwargs, **method.env_kwargs}),
        rollout=RolloutConfig(group_size=study.group_size, tasks_per_step=study.tasks_per_iteration,
                              workers="inprocess", max_turns=200),
        algorithm=AlgorithmConfig(estimator=method.estimator, estimator_kwargs=dict(method.estimator_kwargs)),
        loss=LossConfig(clip_low=0.2, kl_coef=0.0, agg="token-mean"),
        optim=OptimConfig(lr=study.lr, micro_batch_size=100_000, max_grad_norm=1.0),
        train=TrainConfig(total_steps=study.iterations, seed=seed, output_dir=output_dir, save_every=0,
                          eval_every=0, tensorboard=False, progress=False, log_every=10**9),
    ).validate()


def evaluate_policy(
    policy: Any, collector: Any, *, episodes_per_task: int, sample_seed: int, split_by: str | None,
    track: Sequence[str], max_tasks: int | None = None, per_task: dict[str, float] | None = None,
) -> dict[str, float]:
    """Sampled episodes on every task (or the first ``max_tasks``): success, success per ``split_by``
    value, tracked info means. ``per_task``, when given, is filled with each task's success rate (the
    unit a registered paired test resamples)."""
    evaluator = policy.sampling_copy(sample_seed)
    collector.policy = evaluator
    collector.group_size = episodes_per_task
    tasks = collector.task_ids()[:max_tasks]
    batch = collector.collect(tasks, [sample_seed] * len(tasks))
    ok = batch.ok
    if per_task is not None:
        wins: dict[str, list[bool]] = {}
        for t in ok:
            wins.setdefault(t.task_id, []).append(bool(t.won))
        per_task.update({k: float(np.mean(v)) for k, v in sorted(wins.items())})
    out: dict[str, float] = {
        "success": float(np.mean([t.won for t in ok])) if ok else float("nan"),
        "return": float(np.mean([t.env_return for t in ok])) if ok else float("nan"),
        "turns": float(np.mean([len(t.steps) for t in ok])) if ok else float("nan"),
    }
    for key in track:
        vals = [t.steps[-1].info.get(key) for t in ok if t.steps]
        vals = [float(v) for v in vals if v is not None]
        out[key] = float(np.mean(vals)) if vals else float("nan")
    if split_by:
        groups: dict[str, list[bool]] = {}
        for t in ok:
            groups.setdefault(str(t.steps[-1].info.get(split_by)), []).append(t.won)
        for value, wins in sorted(groups.items()):
            out[f"success/{value}"] = float(np.mean(wins))
    return out


@dataclass
class StudyRun:
    """One trained arm x seed: its curve, final metrics, wall time and the trained policy."""

    method: str
    seed: int
    curve: list[dict[str, Any]]
    final: dict[str, float]
    seconds: float
    policy: Any = None
    #: eval set ("" for the training env, else an ``eval_splits`` name) -> task id -> final success rate
    per_task: dict[str, dict[str, float]] | None = None
    #: the warm start's last epoch (loss, and the share of demonstrated turns the greedy scorer matches)
    imitation: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"method": self.method, "seed": self.seed, "curve": self.curve, "final": self.final,
             "seconds": self.seconds}
        if self.per_task is not None:
            d["per_task"] = self.per_task
        if self.imitation is not None:
            d["imitation"] = self.imitation
        if self.policy is not None:  # what a resumed study checks its saved copy against
            d["weights_sha256"] = weights_hash(self.policy)
        return d


#: Demonstrations already collected in this process, by what determines them (a study's arms and seeds
#: share one collection: the expert is greedy and its features do not depend on the scorer's weights).
_DEMOS: dict[str, ScorerDemos] = {}


def warm_start_demos(study: Study, scorer: Any) -> ScorerDemos:
    """The study's ``warm_start`` demonstrations: its expert on every task of the train split, with the
    study's env kwargs (not an arm's: every arm starts from the same clone), collected once per process."""
    spec = study.warm_start
    key = json.dumps([study.env, study.env_kwargs, spec, asdict(scorer.config)], sort_keys=True, default=str)
    if key not in _DEMOS:
        _DEMOS[key] = collect_scorer_demos(scorer, study.env, spec["agent"], env_kwargs=dict(study.env_kwargs),
                                           split="train", episodes_per_task=int(spec["episodes_per_task"]))
    return _DEMOS[key]


def run_one(study: Study, method: Method, seed: int, *, final_episodes_per_task: int | None = None,
            on_iteration: Optional[Callable[[int], None]] = None, demos: ScorerDemos | None = None) -> StudyRun:
    """Train one arm with one seed through the Trainer and evaluate it on the study's schedule.

    ``demos``: the study's warm-start demonstrations when the caller collected them already (a worker
    process gets them from the parent instead of playing the expert again)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stratagym-study-") as tmp:
        trainer = Trainer(recipe_for(study, method, seed, tmp))
        imitation = None
        if study.warm_start:  # the clone is this seed's initial policy, the same for every arm
            spec = study.warm_start
            history = imitate(trainer.policy, demos or warm_start_demos(study, trainer.policy), epochs=int(spec["epochs"]),
                              lr=float(spec["lr"]), batch_size=int(spec["batch_size"]), seed=seed)
            imitation = history[-1]
        env_kwargs = {**study.env_kwargs, **method.env_kwargs}
        eval_collector = RolloutCollector(study.env, trainer.policy, group_size=1,
                                          pool=InProcessPool(study.env, env_kwargs), max_turns=200)
        # more evaluation sets (eval_splits): the training env's kwargs with the split's over them, every task
        split_collectors = {
            name: RolloutCollector(study.env, trainer.policy, group_size=1,
                                   pool=InProcessPool(study.env, {**env_kwargs, **kw}), max_turns=200)
            for name, kw in study.eval_splits.items()}
        eval_seed = 10_000 + seed  # the same evaluation episodes' randomness for every method

        def split_points(episodes: int, sample_seed: int, per_task: dict[str, dict[str, float]] | None = None):
            out: dict[str, float] = {}
            for name, coll in split_collectors.items():
                tasks: dict[str, float] | None = {} if per_task is not None else None
                m = evaluate_policy(trainer.policy, coll, episodes_per_task=episodes, sample_seed=sample_seed,
                                    split_by=None, track=(), per_task=tasks)
                out[f"success/{name}"] = m["success"]
                if per_task is not None:
                    per_task[name] = tasks
            return out

        def point(iteration: int, row: dict[str, Any] | None) -> dict[str, Any]:
            p = {"iteration": iteration}
            p.update(evaluate_policy(trainer.policy, eval_collector, episodes_per_task=study.eval_episodes_per_task,
                                     sample_seed=eval_seed + iteration, split_by=study.split_by, track=study.track,
                                     max_tasks=study.eval_tasks))
            p.update(split_points(study.eval_episodes_per_task, eval_seed + iteration))
            return p

        curve = [point(0, None)]

        def on_step(row: dict[str, Any]) -> None:
            step = int(row["step"])
            train = {"train_success": float(row.get("rollout/success", float("nan"))),
                     "train_return": float(row.get("rollout/return", float("nan")))}
            if step % study.eval_every == 0 or step == study.iterations:
                p = point(step, row)
                p.update(train)
                curve.append(p)
            if on_iteration is not None:
                on_iteration(step)

        try:
            trainer.train(on_step=on_step)
            n_final = final_episodes_per_task or study.final_episodes_per_task
            per_task: dict[str, dict[str, float]] | None = {"": {}} if study.eval_splits else None
            final = evaluate_policy(trainer.policy, eval_collector, episodes_per_task=n_final,
                                    sample_seed=eval_seed - 1, split_by=study.split_by, track=study.track,
                                    max_tasks=study.eval_tasks, per_task=per_task[""] if per_task else None)
            final.update(split_points(n_final, eval_seed - 1, per_task))
            # area under the learning curve: mean eval success over the schedule (iteration 0 excluded)
            final["auc"] = float(np.mean([p["success"] for p in curve[1:]])) if len(curve) > 1 else float("nan")
            for key in [k for k in final if k.startswith("success/")]:
                vals = [p[key] for p in curve[1:] if key in p]
                final["auc/" + key.split("/", 1)[1]] = float(np.mean(vals)) if vals else float("nan")
            policy = trainer.policy.frozen_copy()
            policy.featurizer = type(policy.featurizer)(policy.featurizer.buckets)  # the cache, not the features
        finally:
            eval_collector.close()
            for coll in split_collectors.values():
                coll.close()
            trainer.close()
    return StudyRun(method.label, seed, curve, final, time.perf_counter() - t0, policy, per_task, imitation)


def weights_hash(policy: Any) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(unwrap_model(policy.model).state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def policy_dir(out_dir: str | Path, method: str, seed: int) -> Path:
    """Where :func:`run_study` keeps one run's trained policy (``save_pretrained``; ~4 MB, not committed)."""
    return Path(out_dir) / "policies" / slug(method) / f"seed-{seed}"


def saved_run(out_dir: str | Path, run: dict[str, Any]) -> StudyRun | None:
    """``run`` (a ``results.json`` entry) with its trained policy read back from :func:`policy_dir`, or None
    when that policy is missing, unreadable or not the one recorded (weights hash)."""
    folder = policy_dir(out_dir, run["method"], run["seed"])
    try:
        policy = ScorerPolicy.from_pretrained(str(folder)).frozen_copy()  # as run_one hands it back
    except Exception:  # noqa: BLE001 - missing, truncated, not safetensors: all mean "not saved"
        return None
    if weights_hash(policy) != run.get("weights_sha256"):
        return None
    return StudyRun(run["method"], run["seed"], run["curve"], run["final"], run["seconds"], policy,
                    run.get("per_task"), run.get("imitation"))


def _changed_keys(stored: dict[str, Any], current: dict[str, Any], keys: Sequence[str]) -> list[str]:
    """The ``keys`` whose value in ``stored`` (read back from ``results.json``) differs from ``current``'s as
    ``results.json`` would store it (tuples read back as lists)."""
    as_stored = json.loads(json.dumps({k: current.get(k) for k in keys}))
    return [k for k in keys if stored.get(k) != as_stored[k]]


#: what a stopped study's ``results.json`` must share with the new start for its runs to be kept
_RESUME_KEYS = ("study", "seeds", "registration_commit", "warm_start")


def resumable_runs(results: dict[str, Any], out_dir: str | Path, log: Callable[[str], None] = print) -> list[StudyRun]:
    """The finished runs of a stopped start of this very study (same definition, seeds, registration
    commit and warm-start demonstrations) whose trained policies are on disk unchanged.

    Every run is seeded on its own, so a kept run equals the one a fresh start would train: the study
    resumed is the study run at once. A complete ``results.json`` is not resumed (running a study again
    runs it again); a run whose saved policy is missing or differs from its recorded hash is trained again."""
    path = Path(out_dir) / "results.json"
    if not path.is_file():
        return []
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(old, dict) or old.get("complete") is not False:
        return []
    changed = _changed_keys(old, results, _RESUME_KEYS)
    if changed:
        log(f"{results['study']['name']}: {path} holds a stopped start with another {', '.join(changed)}; "
            "starting afresh")
        return []
    kept = [run for run in (saved_run(out_dir, r) for r in old.get("runs", [])) if run is not None]
    log(f"{results['study']['name']}: resuming a stopped start: {len(kept)} of its {len(old.get('runs', []))} "
        "finished runs kept")
    return kept


def method_record(study: Study, method: Method, runs: Sequence[StudyRun], *, split: str | None = None,
                  out: str | Path | None = None) -> dict[str, Any]:
    """A leaderboard result record for one arm: the eval harness plays every task greedily once per
    training seed, with the policy trained under that seed (record ``seeds`` = training seeds).

    By default on the training env's first ``eval_tasks`` tasks; with ``split`` (an ``eval_splits`` name)
    on every task of that held-out split, the board row of what the arm learned. ``out``: where the eval
    writes the record and its progress file with the episodes' transcripts (``stratagym leaderboard
    attach`` archives them)."""
    policies = {r.seed: r.policy for r in runs}
    digest = hashlib.sha256("".join(weights_hash(policies[s]) for s in sorted(policies)).encode()).hexdigest()[:12]
    env_kwargs = {**study.env_kwargs, **method.env_kwargs}
    n_tasks = study.eval_tasks
    if split is not None:
        if split not in study.eval_splits:
            raise ConfigError(f"study {study.name} has no eval split {split!r}; choose one of {sorted(study.eval_splits)}")
        env_kwargs.update(study.eval_splits[split])
        n_tasks = None
    if n_tasks is not None:
        import gymnasium as gym

        env = gym.make(study.env, **env_kwargs)
        n_tasks = min(n_tasks, len(env.unwrapped.task_ids()))
        env.close()
    config = EvalConfig(
        agent=f"scorer:{study.name}/{slug(method.label)}@{digest}",
        env_id=study.env,
        seeds=sorted(policies),
        n=n_tasks,
        batch_size=16,
        env_kwargs=env_kwargs,
        label=f"scorer + {method.label} ({study.name} study)",
        algorithm=method.estimator,
        training={
            "study": study.name,
            "estimator": method.estimator,
            "estimator_kwargs": dict(method.estimator_kwargs),
            "iterations": study.iterations,
            "tasks_per_iteration": study.tasks_per_iteration,
            "group_size": study.group_size,
            "lr": study.lr,
            "policy": policy_options(study),
            **({"warm_start": dict(study.warm_start)} if study.warm_start else {}),
            "curve": {str(r.seed): [[p["iteration"], p["success"]] for p in r.curve] for r in runs},
        },
    )
    return evaluate(config, out=out, progress=False, transcripts=out is not None,
                    agent_factory=lambda s: policies[s])


def submit_to_board(board: str, record: dict[str, Any]) -> None:
    """Submit one record to the leaderboard at ``board`` (a path or URL)."""
    from stratagym.leaderboard import Leaderboard  # lazy: SQLAlchemy and pydantic, only with a board

    with Leaderboard(board) as lb:
        lb.submit(record)


def saved_runs(study: Study, out_dir: str | Path) -> list[StudyRun]:
    """A finished study's runs with their trained policies, read back from ``policies/`` and checked
    against ``results.json``: the same study definition (the held-out eval takes its labels, policy
    options and split kwargs from it) and the same weights hashes. Anything else is a ConfigError."""
    path = Path(out_dir) / "results.json"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist; run the study first")
    results = json.loads(path.read_text())
    if results.get("complete") is False:
        raise ConfigError(f"{path} is a stopped start; run the study again to finish it first")
    recorded, current = results.get("study", {}), study.to_dict()
    changed = _changed_keys(recorded, current, sorted(set(recorded) | set(current)))
    if changed:
        raise ConfigError(f"{path} was run from another definition of study {study.name} (fields that differ: "
                          f"{', '.join(changed)}); restore the definition it records, or run the study again")
    runs = []
    for r in results["runs"]:
        run = saved_run(out_dir, r)
        if run is None:
            raise ConfigError(f"{policy_dir(out_dir, r['method'], r['seed'])}: no saved policy with the weights "
                              f"{path} recorded (studies run before 2026-12-04 kept their policies in memory only); "
                              "run the study again")
        runs.append(run)
    return runs


def heldout_records(study: Study, out_dir: str | Path, split: str, *, log: Callable[[str], None] = print,
                    board: str | None = None) -> list[Path]:
    """Each arm's greedy record on every task of held-out ``split``, from the saved policies of a finished
    study: ``records/<method>--<split>.json`` beside the study's own records, each with its progress file
    (the episodes' transcripts). Returns the record paths."""
    runs = saved_runs(study, out_dir)
    paths = []
    for method in study.methods:
        path = Path(out_dir) / "records" / f"{slug(method.label)}--{slug(split)}.json"
        rec = method_record(study, method, [r for r in runs if r.method == method.label], split=split, out=path)
        m = rec["metrics"].get("success") or next(iter(rec["metrics"].values()))
        log(f"{study.name}: {method.label} greedy on {split}: {m['value']:.3f} [{m['ci_low']:.3f}, {m['ci_high']:.3f}] "
            f"-> {path}")
        if board:
            submit_to_board(board, rec)
        paths.append(path)
    return paths


def metric_names(results: dict[str, Any]) -> list[str]:
    """The table's metrics: success, success per split, AUC (overall and per split), tracked keys."""
    final = results["runs"][0]["final"]
    splits = [k for k in sorted(final) if k.startswith("success/")]
    extra = list(results["study"].get("extra_metrics", ()))
    return (["success"] + splits + ["auc"] + ["auc/" + k.split("/", 1)[1] for k in splits] + extra
            + list(results["study"]["track"]))


def render(results: dict[str, Any], out_dir: str | Path) -> None:
    """Write ``table.md`` and ``curves.png`` from a study's ``results.json`` content."""
    out = Path(out_dir)
    study = results["study"]
    metrics = metric_names(results)
    labels = [m["label"] for m in study["methods"]]
    table = markdown_table(summarize(results, metrics), metrics, base=labels[0])
    for ref in study.get("compare_to", ()):
        if ref in labels and ref != labels[0]:  # the first method's comparison is the main table's already
            table += "\n" + markdown_table(summarize(results, metrics, base=ref), metrics, base=ref, with_main=False)
    greedy = results.get("greedy_success") or {
        r["method"]: r["greedy_success"] for r in results.get("summary", []) if "greedy_success" in r
    }
    if greedy:
        # in the study's method order: results.json stores this mapping with sorted keys
        order = [m for m in labels if m in greedy] + [m for m in greedy if m not in labels]
        table += "\nGreedy success (eval harness: each evaluated task once per training seed; 95% CI over episodes):\n\n"
        table += "\n".join(f"- {m}: {greedy[m]['value']:.3f} [{greedy[m]['ci_low']:.3f}, {greedy[m]['ci_high']:.3f}]"
                            for m in order) + "\n"
    if results.get("records_error"):
        table += (f"\nThe leaderboard records step failed ({results['records_error']}); a method without a greedy "
                  "line above has no record.\n")
    verdicts = verdict_lines(results)
    if verdicts:
        table += "\n" + verdicts
    seeds = ", ".join(str(s) for s in results["seeds"])
    reported = "all reported"
    if results.get("complete") is False:
        done = sorted({r["seed"] for r in results["runs"]})
        reported = (f"every finished run reported.\n\n**Incomplete**: {len(results['runs'])} of "
                    f"{len(labels) * len(results['seeds'])} runs finished (seeds with runs: {', '.join(map(str, done))})")
    atomic_write(
        out / "table.md",
        f"# {study['title']}\n\nSeeds {seeds}, {reported}. Budget per run: {study['iterations']} iterations x "
        f"{study['tasks_per_iteration']} tasks x G={study['group_size']}, lr {study['lr']}.\n\n{table}\n"
        f"Total wall time: {results['seconds']:.0f} s\n"
    )
    panels = [("success", "success (sampled eval)")]
    panels += [(k, k.replace("success/", "success: ")) for k in metrics if k.startswith("success/")]
    panels += [(k, f"mean {k}") for k in (*study.get("extra_metrics", ()), *study["track"])]
    plot_curves(results, panels, out / "curves.png")


def rerender(study: Study, out_dir: str | Path) -> Path:
    """Re-write ``table.md`` and ``curves.png`` from ``out_dir/results.json`` without training.

    Results written before a field existed lack it; those fields are reporting choices (``compare_to``:
    which extra paired-difference tables to show), so the study's definition supplies them. The committed
    ``studies/<name>/`` folders re-render to the same ``table.md``, byte for byte (a test checks it)."""
    out = Path(out_dir)
    path = out / "results.json"
    if not path.is_file():
        raise ConfigError(f"no {path}: run the study first (stratagym study {study.name})")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read as JSON: {exc}") from None
    results["study"].setdefault("compare_to", list(study.compare_to))
    render(results, out)
    return out


def registration_proof(study: Study, study_file: str | Path | None, *, require_commit: bool = True) -> dict[str, str] | None:
    """For a study with a ``registration``: the commit that holds its file unchanged (``{"commit", "date"}``);
    refused (:class:`~stratagym.studies.preregistration.PreregistrationError`) when the file is not
    committed or has changed since, unless ``require_commit`` is False (then None: the report says the
    registration was not checked). A study without a registration needs nothing (None)."""
    if not study.registration:
        return None
    if study_file is None or not require_commit:
        if require_commit:
            raise PreregistrationError(f"study {study.name} has a registration but no study file to check in git")
        return None
    return git_proof(study_file)


def run_study(
    study: Study, out_dir: str | Path, *, seeds: Sequence[int] | None = None, board: str | None = None,
    log: Callable[[str], None] = print, records: bool = True, study_file: str | Path | None = None,
    require_commit: bool = True, jobs: int = 1, resume: bool = True,
) -> dict[str, Any]:
    """Run every arm x seed, write ``results.json``, ``table.md``, ``curves.png`` and records to ``out_dir``.

    Runs go seed by seed (every method of seed 0, then seed 1, ...), and ``results.json`` is rewritten
    after each run with ``"complete": false``, so a study stopped part way leaves its finished runs on
    disk (with ``jobs`` 1, complete paired seeds). ``jobs`` > 1 trains that many runs at once in spawned
    processes of one thread each; the runs and everything computed from them equal the sequential ones
    (only ``seconds`` differ), listed in the sequential order. Every finished run's policy is saved
    (:func:`policy_dir`); with ``resume``, a start that finds a stopped start of the same study keeps its
    finished runs and trains only the rest (:func:`resumable_runs`). A study with a ``registration`` runs only
    if ``study_file`` is committed unchanged in git (:func:`registration_proof`); the commit is
    recorded, and the registered verdicts are computed."""
    proof = registration_proof(study, study_file, require_commit=require_commit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(study.n_seeds)) if seeds is None else list(seeds)
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    runs: list[StudyRun] = []
    results: dict[str, Any] = {"study": study.to_dict(), "seeds": seeds, "runs": []}
    if study.registration:
        results["registration_commit"] = proof
    demos = None
    if study.warm_start:  # collected before the first run, so results.json says what every seed cloned
        probe = ScorerPolicy.from_config({k: v for k, v in policy_options(study).items() if k != "class"})
        demos = warm_start_demos(study, probe)
        results["warm_start"] = demos.summary()
    order = [(seed, method) for seed in seeds for method in study.methods]
    rank = {(seed, method.label): i for i, (seed, method) in enumerate(order)}
    if resume:
        runs = [r for r in resumable_runs(results, out, log) if (r.seed, r.method) in rank]
        done = {(r.seed, r.method) for r in runs}
        order = [(seed, method) for seed, method in order if (seed, method.label) not in done]
        results["runs"] = [r.to_dict() for r in sorted(runs, key=lambda r: rank[(r.seed, r.method)])]
    results["complete"] = False

    def finished(run: StudyRun) -> None:
        if run.policy is not None:  # saved before results.json names the run, so a listed run has its policy
            run.policy.save_pretrained(str(policy_dir(out, run.method, run.seed)))
        runs.append(run)
        runs.sort(key=lambda r: rank[(r.seed, r.method)])  # the sequential order, whatever finished first
        results["runs"] = [r.to_dict() for r in runs]
        results["seconds"] = time.perf_counter() - t_start
        write_json_atomic(out / "results.json", results)  # a stopped study keeps its finished runs
        log(f"{study.name}: {run.method:28s} seed {run.seed}: success {run.final['success']:.3f} "
            + " ".join(f"{k} {v:.3f}" for k, v in run.final.items() if k.startswith("success/"))
            + f" ({run.seconds:.1f}s)")

    if jobs <= 1:
        for seed, method in order:
            finished(run_one(study, method, seed, demos=demos))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawned workers (no fork of a process that holds torch's thread pools), one thread each; every run
        # is seeded on its own, so the runs equal the sequential ones
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=torch.set_num_threads, initargs=(1,)) as pool:
            futures = [pool.submit(run_one, study, method, seed, demos=demos) for seed, method in order]
            try:
                for future in as_completed(futures):
                    finished(future.result())
            except BaseException:  # a failed run or Ctrl-C: start nothing more; the finished runs are on disk
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    results.pop("complete")
    write_json_atomic(out / "results.json", results)  # the runs are safe even if the records step fails
    if records:
        greedy = {}
        try:
            for method in study.methods:
                rec = method_record(study, method, [r for r in runs if r.method == method.label])
                path = out / "records" / f"{slug(method.label)}.json"
                write_json_atomic(path, rec)
                m = rec["metrics"].get("success") or next(iter(rec["metrics"].values()))
                greedy[method.label] = {"value": m["value"], "ci_low": m["ci_low"], "ci_high": m["ci_high"]}
                if board:
                    submit_to_board(board, rec)
            results["greedy_success"] = greedy
        except OSError as exc:  # a full disk, an unwritable folder: the finished runs are still reported
            results["records_error"] = f"{type(exc).__name__}: {exc}"
            if greedy:  # the records written before the failure
                results["greedy_success"] = greedy
            log(f"{study.name}: the leaderboard records failed ({results['records_error']}); "
                "results.json, table.md and curves.png are written without them")
    results["seconds"] = time.perf_counter() - t_start
    finish_results(results, out)
    log(f"{study.name}: wrote {out}/results.json, table.md, curves.png ({results['seconds']:.0f}s)")
    return results


def finish_results(results: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Add the summary (and, for a registered study, the verdicts) to ``results``, write ``results.json``,
    ``table.md`` and ``curves.png``: the end of :func:`run_study`, also for runs a crash left finished but
    unreported."""
    out = Path(out_dir)
    results["summary"] = summarize(results, metric_names(results))
    if results["study"].get("registration"):
        results["verdicts"] = registered_verdicts(results)
    write_json_atomic(out / "results.json", results)
    render(results, out)
    return results
