"""Dynamic sampling (``rollout.filter_groups``) through the real Trainer, in however many processes it
was launched with.

Run by tests/scale/test_distributed_filter.py as ``python _dist_filter.py OUT`` (one process, twice the
tasks per step) and under ``accelerate launch --multi_gpu --num_processes 2`` (two CPU processes, gloo).
The scorer plays real SearchStrata episodes, but which groups carry signal is scripted: the collector is
wrapped so that, in round k, the group at index i of the round's GLOBAL task list (process r's group g
is index r x tasks_per_step + g) is informative iff ``TABLES[name][k][i]`` (its two episodes then earn
0 and 1, otherwise 0 and 0). One process drawing the global list sees the same table, so the selection
each run makes can be compared exactly. Process 0 writes, per scenario, what each process drew and
kept, the filter metrics and the next draw of the shared task RNG; then every process takes one update
step on the first scenario's batch (where process 0 kept nothing) and reports a digest of its weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

TASKS_PER_PROCESS = 2  # with 2 processes: a global list of 4 groups per round, target 4 informative groups
# name -> (rounds of 4 flags, max_filter_rounds)
TABLES = {
    "process0_keeps_nothing": ([[0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]], 5),
    "cut_after_process0": ([[1, 0, 1, 1], [1, 1, 1, 1]], 5),
    "round_cap": ([[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], 3),
    "nothing_informative": ([[0, 0, 0, 0], [0, 0, 0, 0]], 2),
}


def recipe(out: str, tasks_per_step: int):
    from stratagym.training.config import RecipeConfig

    return RecipeConfig.from_dict({
        "name": "dist-filter",
        "policy": {"class": "stratagym.agents.scorer:ScorerPolicy", "hidden": 16, "memory": 2},
        "env": {"id": "stratagym/SearchStrata-v0"},
        "rollout": {"group_size": 2, "tasks_per_step": tasks_per_step, "max_turns": 3, "filter_groups": True,
                    "max_filter_rounds": 5},
        "algorithm": {"estimator": "grpo", "invalid_action_penalty": 0.0},
        "loss": {"kl_coef": 0.0, "entropy_coef": 0.0},
        "optim": {"lr": 1.0e-2, "micro_batch_size": 2, "max_grad_norm": 0.0},
        "train": {"total_steps": 1, "output_dir": out, "save_every": 0, "progress": False, "tensorboard": False,
                  "seed": 0},
    })


def script_rewards(trainer, log: list) -> dict:
    """Wrap the trainer's collector: real episodes, scripted rewards (see the module docstring). Every
    draw is appended to ``log`` as (round, [(task, seed, global index), ...])."""
    acc = trainer.accelerator
    n_local = trainer.config.rollout.tasks_per_step
    base = acc.process_index * n_local
    inner = trainer.collector.collect
    state = {"table": None, "round": 0}

    def collect(tasks, seeds, **kw):
        batch = inner(tasks, seeds, **kw)
        k = state["round"]
        state["round"] += 1
        flags = state["table"][k]
        log.append((k, [(t, int(s), base + g) for g, (t, s) in enumerate(zip(tasks, seeds))]))
        for t in batch.trajectories:
            assert t.steps and not t.failed, "a scripted episode must have steps"
            member = t.traj - 2 * t.group  # the collector numbers a group's episodes consecutively
            for s in t.steps:
                s.reward = 0.0
            t.steps[-1].reward = float(member * flags[base + t.group])
        return batch

    trainer.collector.collect = collect
    return state


def digest(trainer) -> str:
    from stratagym.agents.policy import unwrap_model

    h = hashlib.sha256()
    state = unwrap_model(trainer.policy.model).state_dict()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].detach().float().numpy().tobytes())
    return h.hexdigest()


def main(out: Path) -> None:
    from accelerate.utils import gather_object

    from stratagym.training.trainer import Trainer

    world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's; checked against the trainer's below
    # one process draws the global list of 2 processes: twice the tasks per step
    trainer = Trainer(recipe(str(out.with_suffix(".run")), TASKS_PER_PROCESS * (2 if world == 1 else 1)))
    acc = trainer.accelerator
    assert acc.num_processes == world
    log: list = []
    state = script_rewards(trainer, log)
    result: dict = {"world": world, "scenarios": {}}
    first = None
    for name, (table, max_rounds) in TABLES.items():
        trainer.rng = np.random.default_rng(trainer.config.train.seed)  # each scenario from the same task RNG
        trainer.config.rollout.max_filter_rounds = max_rounds
        state.update(table=table, round=0)
        del log[:]
        batch = trainer.rollout()
        first = batch if first is None else first
        where = {(t, s): (k, i) for k, drawn in log for t, s, i in drawn}
        kept = list(dict.fromkeys(where[(t.task_id, int(t.seed))] for t in batch.trajectories))
        m = batch.metrics()
        mine = {"rounds": state["round"], "kept": kept,
                "metrics": {k: m[k] for k in ("rollout/filter_rounds", "rollout/informative_groups",
                                              "rollout/filtered_frac")},
                "next_draw": int(trainer.rng.integers(0, 2**62))}  # the shared task RNG after the step
        result["scenarios"][name] = gather_object([mine])
    before = digest(trainer)
    trainer.update(first)  # process 0 kept nothing in the first scenario: it must still join the step
    result["digests"] = gather_object([[before, digest(trainer)]])
    if acc.is_main_process:
        out.write_text(json.dumps(result))
    acc.wait_for_everyone()
    trainer.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
