"""``stratagym bench --suite SUITE.yaml``: train, evaluate, submit, render -- the README's main job.

For a suite (:mod:`stratagym.eval.suite`):

1. **baselines**: every ``baselines`` agent (e.g. ``scripted:oracle``) is evaluated on every eval env
   with the suite's seeds;
2. **training**: every (algorithm, env, seed) of each ``train`` group is trained by the project's
   :class:`~stratagym.training.trainer.Trainer` (its Python API: ``Trainer(RecipeConfig).train()``),
   checkpointed under ``runs_dir``; the policies of all seeds of an (algorithm, env) are then evaluated
   greedily by the eval harness as ONE record (record seeds = training seeds, so the board shows the
   spread across training seeds) carrying the training curve (``rollout/return`` per step);
3. every record is copied to ``<board_dir>/records/`` (plain JSON, the board's portable source: rebuild a
   store with ``stratagym leaderboard submit <board_dir>/records/*.json``), **submitted** to the
   leaderboard store (a record already there is reported, not an error); records in ``<board_dir>/records/``
   that the store lacks (a fresh clone, records of studies added by hand) are submitted too, and the board
   is **rendered** (``LEADERBOARD.md``, ``index.html``, plots) from all of them.

Resuming (default): finished training runs are reloaded from their last checkpoint instead of retrained,
and evals continue from their progress files, so a killed bench picks up where it stopped.
"""

from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from stratagym.envs.registry import get_spec, scripted_agent_names
from stratagym.errors import UserError
from stratagym.jsonl import read_jsonl
from stratagym.paths import slug
from stratagym.eval.harness import EvalConfig, EvalError, evaluate
from stratagym.eval.records import RecordError, content_hash_path, load_record, write_json_atomic
from stratagym.eval.suite import AlgorithmEntry, Suite, TrainSection, load_suite
from stratagym.leaderboard.render import render_board
from stratagym.leaderboard.store import Leaderboard, SubmissionError
from stratagym.training.checkpoint import latest_checkpoint
from stratagym.training.config import RecipeConfig
from stratagym.training.trainer import Trainer

__all__ = ["BenchError", "BenchResult", "run_bench", "recipe_for_run"]


class BenchError(UserError, RuntimeError):
    """A bench that cannot run (no env of the suite is available, a recipe the trainer refuses...)."""


@dataclass
class BenchResult:
    suite: Suite
    records: list[dict[str, Any]]
    markdown: Path
    html: Path
    submitted: int = 0
    already_on_board: int = 0
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _supersede(lb: Any, records_dir: Path, prefix: str, *, keep: Path, say: Callable[[str], None]) -> None:
    """Remove the suite's earlier record of the same (label, env, split): its file in ``records_dir`` and its
    row in the store. A rerun of a trained entry gets a new record id (new time stamps and curves), and
    without this every ``make demo`` would add a duplicate row to the committed board."""
    for old in sorted(records_dir.glob(f"{prefix}*.json")):
        if old == keep:
            continue
        try:
            rid = json.loads(old.read_text(encoding="utf-8")).get("record_id")
        except (OSError, ValueError):
            rid = None
        if isinstance(rid, str):
            lb.delete_record(rid)
        old.unlink(missing_ok=True)
        say(f"  replaced the earlier record {old.name}")


def _ingest_records_dir(lb: Any, records_dir: Path, say: Callable[[str], None]) -> int:
    """Submit every ``records_dir/*.json`` whose record id the store does not hold; returns how many.
    A file the board refuses is reported and skipped: one bad file must not stop the render."""
    added = 0
    for path in sorted(Path(records_dir).glob("*.json")) if Path(records_dir).is_dir() else []:
        try:
            rec = load_record(path)
            if lb.has_record(rec["record_id"]):
                continue
            lb.submit(rec)
            added += 1
        except (SubmissionError, RecordError, ValueError, OSError) as exc:
            say(f"  not added from {path.name}: {exc}")
    return added


def recipe_for_run(suite: Suite, section: TrainSection, alg: AlgorithmEntry, env_id: str, seed: int, output_dir: Path) -> Any:
    """The trainer recipe of one (algorithm, env, seed): the group's ``config``, the algorithm's
    ``recipe`` overrides, then env, estimator, seed and output folder. ``policy.seed: auto`` becomes
    the run's seed (policies whose initial weights take a seed, e.g. the scorer)."""
    data = _deep_merge(section.config, alg.recipe)
    data["name"] = f"{suite.name}-{slug(alg.label)}-{slug(env_id.split('/')[-1])}-seed{seed}"
    env = dict(data.get("env") or {})  # the group's env options other than id/kwargs (e.g. ``tasks``) stay
    data["env"] = {**env, "id": env_id, "kwargs": {**dict(section.env_kwargs.get(env_id, {})), **alg.env_kwargs}}
    algo = dict(data.get("algorithm") or {})
    algo["estimator"] = alg.estimator
    algo["estimator_kwargs"] = {**dict(algo.get("estimator_kwargs") or {}), **alg.estimator_kwargs}
    data["algorithm"] = algo
    train = dict(data.get("train") or {})
    train.update(seed=seed, output_dir=str(output_dir))
    train.setdefault("progress", False)
    train.setdefault("tensorboard", False)
    data["train"] = train
    policy = dict(data.get("policy") or {})
    if policy.get("seed") == "auto":
        policy["seed"] = seed
    data["policy"] = policy
    return RecipeConfig.from_dict(data)


def _curve(output_dir: Path) -> list[dict[str, float]]:
    """Training curve from the trainer's metrics.jsonl: ``[{step, reward, success}]``.

    Read through the one JSONL reader as the trainer's own log: a row torn by a killed run (redone on
    resume) is passed over instead of failing the bench."""
    path = output_dir / "metrics.jsonl"
    points = []
    if path.exists():
        for _, row, _ in read_jsonl(path, skip_bad=True):
            if "step" in row and "rollout/return" in row:
                p = {"step": int(row["step"]), "reward": float(row["rollout/return"])}
                if "rollout/success" in row:
                    p["success"] = float(row["rollout/success"])
                points.append(p)
    return points


def _train_one(recipe: Any, *, resume: bool) -> tuple[Any, Path, float]:
    """Train (or reload a finished run); return the policy, its checkpoint policy folder, seconds."""
    t0 = time.perf_counter()
    trainer = Trainer(recipe)
    try:
        rows = trainer.train(resume=resume)
        ckpt = latest_checkpoint(trainer.output_dir)
        if rows or ckpt is None or int(ckpt.name.split("-")[-1]) != trainer.step:
            ckpt = trainer.save()
        policy = trainer.policy
    finally:
        trainer.close()
    return policy, Path(ckpt) / "policy", time.perf_counter() - t0


def _construction_problem(entry: Any) -> str | None:
    """Why an eval entry's env cannot be built here (missing data, bad kwargs), or None."""
    import gymnasium as gym

    kwargs = dict(entry.env_kwargs)
    if entry.split is not None:
        kwargs["split"] = entry.split
    try:
        env = gym.make(entry.env, **kwargs)
        env.close()
    except Exception as exc:  # noqa: BLE001 -- reported and skipped, the rest of the suite runs
        return f"{type(exc).__name__}: {exc}"
    return None


def run_bench(
    suite_path: str | os.PathLike[str],
    *,
    board: str | None = None,
    board_dir: str | os.PathLike[str] = "leaderboard",
    runs_dir: str | os.PathLike[str] = "runs/bench",
    committed_records: str | os.PathLike[str] | None = None,
    resume: bool = True,
    progress: bool = True,
    console: Any = None,
    log: Callable[[str], None] | None = None,
) -> BenchResult:
    """Run a suite end to end (see the module docstring); return the records and where the board is.

    ``committed_records``: a records folder read (never written) before rendering, so a board rendered
    outside the checkout (``make demo``: under ``runs_dir``) still shows the committed results."""
    t_start = time.perf_counter()
    say = log or ((lambda text: console.print(text, markup=False, highlight=False)) if console is not None else print)
    suite = load_suite(suite_path)
    root = Path(runs_dir) / slug(suite.name)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1") or 1)))

    available: set[str] = set()
    skipped: list[str] = []
    good_entries: list[Any] = []  # eval entries whose env builds here
    for e in suite.evals:
        try:
            spec = get_spec(e.env)
        except KeyError:
            skipped.append(f"{e.env}: not registered here")
            say(f"skip {e.env}: not a registered env here (see `stratagym envs list`)")
            continue
        if spec.available:
            problem = _construction_problem(e)
            if problem is None:
                available.add(e.env)
                good_entries.append(e)
            else:
                skipped.append(f"{e.env}: {problem}")
                say(f"skip {e.env}: cannot be built here: {problem}")
        else:
            skipped.append(f"{e.env}: {spec.availability()}")
            say(f"skip {e.env}: {spec.availability()}")
    if not available:
        raise BenchError(f"no env of suite {suite.name!r} is available here: " + "; ".join(skipped))

    records: list[dict[str, Any]] = []
    lb = Leaderboard(board)
    counts = {"submitted": 0, "dup": 0}

    records_dir = Path(board_dir) / "records"

    def submit(rec: dict[str, Any]) -> None:
        prefix = f"{slug(rec['agent']['label'])}__{slug(rec['env']['id'])}__{slug(rec['split'])}__"
        path = records_dir / f"{prefix}{rec['record_id'][:12]}.json"
        if not path.exists():  # the same evaluation rerun keeps its first copy (and its time stamp)
            write_json_atomic(path, rec)
        _supersede(lb, records_dir, prefix, keep=path, say=say)
        try:
            rid = lb.submit(rec)
            counts["submitted"] += 1
            say(f"  submitted #{rid}: {rec['agent']['label']} on {rec['env']['id']} / {rec['split']}")
        except SubmissionError as exc:
            if any(p.startswith("duplicate") for p in exc.problems):
                counts["dup"] += 1
                say(f"  already on the board: {rec['agent']['label']} on {rec['env']['id']}")
            else:
                raise BenchError(f"the leaderboard refused a bench record: {exc}") from exc

    # 1. baselines ------------------------------------------------------------------------------------
    for baseline in suite.baselines:
        agent = baseline.agent
        entries = [e for e in good_entries if baseline.applies_to(e.env)]
        lacking = [e.env for e in entries if agent.startswith("scripted:") and agent.split(":", 1)[1] not in scripted_agent_names(e.env)]
        if lacking:
            say(f"skip {agent} on {', '.join(sorted(set(lacking)))}: not a scripted agent of those envs")
        for e in entries:
            if e.env in lacking:
                continue
            say(f"eval {agent} on {e.env} ({e.split or 'default split'})")
            out = root / "baselines" / f"{slug(agent)}__{slug(e.env)}__{slug(e.split or 'default')}.json"
            cfg = EvalConfig(agent=agent, env_id=e.env, split=e.split, n=e.n, seeds=baseline.seeds or suite.seeds,
                             batch_size=suite.batch_size, env_kwargs=dict(e.env_kwargs), max_steps=e.max_steps,
                             label=baseline.label, agent_options=dict(baseline.agent_options))
            try:
                rec = evaluate(cfg, out=out, resume=resume, progress=progress)
            except (EvalError, ValueError) as exc:
                raise BenchError(f"baseline {agent} on {e.env}: {exc}") from exc
            records.append(rec)
            submit(rec)

    # 2. training runs --------------------------------------------------------------------------------
    runs = [r for r in suite.runs() if r[2] in available]
    total = len(runs)
    done_runs = 0
    for section in suite.train:
        for alg in section.algorithms:
            for env_id in section.envs:
                if env_id not in available:
                    continue
                seeds = suite.seeds_of(section)
                policies: dict[int, Any] = {}
                curves: dict[str, list[dict[str, float]]] = {}
                hashes: list[str] = []
                recipe_dump: dict[str, Any] = {}
                for seed in seeds:
                    done_runs += 1
                    out_dir = root / "train" / slug(alg.label) / slug(env_id) / f"seed{seed}"
                    try:
                        recipe = recipe_for_run(suite, section, alg, env_id, seed, out_dir)
                    except ValueError as exc:  # ConfigError
                        raise BenchError(f"{suite.path}: recipe for {alg.label} on {env_id}: {exc}") from exc
                    say(f"train {done_runs}/{total}: {alg.label} on {env_id}, seed {seed}")
                    policy, policy_dir, secs = _train_one(recipe, resume=resume)
                    curve = _curve(out_dir)
                    last = curve[-1] if curve else {}
                    say(f"  {recipe.train.total_steps} steps in {secs:.1f}s; last train return {last.get('reward', float('nan')):.3f}")
                    policies[seed] = policy
                    curves[str(seed)] = curve
                    hashes.append(content_hash_path(policy_dir))
                    recipe_dump = recipe.to_dict()
                import hashlib

                digest = hashlib.sha256("".join(hashes).encode()).hexdigest()[:16]
                training = {
                    "suite": suite.name,
                    "algorithm": alg.label,
                    "estimator": alg.estimator,
                    "estimator_kwargs": dict(alg.estimator_kwargs),
                    "steps": int(recipe_dump.get("train", {}).get("total_steps", 0)),
                    "checkpoint_hashes": hashes,
                    "curve": curves,
                    "recipe": {k: v for k, v in recipe_dump.items() if k != "train"},
                }
                for e in [x for x in good_entries if x.env == env_id]:
                    cfg = EvalConfig(
                        agent=f"bench:{suite.name}/{slug(alg.label)}@{digest}",
                        env_id=env_id, split=e.split, n=e.n, seeds=list(seeds), batch_size=suite.batch_size,
                        env_kwargs=dict(e.env_kwargs), max_steps=e.max_steps, label=alg.label, algorithm=alg.estimator,
                        training=training,
                    )
                    say(f"eval {alg.label} ({len(seeds)} training seeds) on {env_id} ({e.split or 'default split'})")
                    out = root / "evals" / f"{slug(alg.label)}__{slug(env_id)}__{slug(e.split or 'default')}.json"
                    rec = evaluate(cfg, out=out, resume=resume, progress=progress,
                                   agent_factory=lambda s, _p=policies: _p[s])
                    records.append(rec)
                    submit(rec)

    # 3. render -----------------------------------------------------------------------------------------
    # The committed records folder is the board's source: records in it that this store lacks (a fresh
    # clone has no board.db; studies and SFT/RL comparisons add records by hand) are submitted first, so
    # the rendered board is the same on every machine.
    for folder in dict.fromkeys(p for p in (records_dir, committed_records) if p is not None):
        ingested = _ingest_records_dir(lb, Path(folder), say)
        if ingested:
            say(f"  added {ingested} record(s) from {folder} that the store did not hold")
    paths = render_board(lb, board_dir)
    lb.close()
    summary = {"suite": suite.name, "records": [r["record_id"] for r in records], "seconds": time.perf_counter() - t_start}
    write_json_atomic(root / "bench.json", summary)
    return BenchResult(
        suite=suite, records=records, markdown=paths["markdown"], html=paths["html"], submitted=counts["submitted"],
        already_on_board=counts["dup"], skipped=skipped, seconds=summary["seconds"],
    )
