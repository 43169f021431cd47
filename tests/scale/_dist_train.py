"""One training step of the real Trainer in N processes, or replayed in one process on the same batch.

Run by tests/scale/test_distributed_training.py:

* ``record DIR`` under ``accelerate launch --multi_gpu --num_processes 2`` (CPU, gloo): every process
  rolls out its whole groups, then takes one update step. Process 0 writes the GLOBAL batch (both
  processes' trajectories, renumbered as one process would number them), the gradient the optimizer
  stepped with, the weights after the step, and what each process saw (micro-batch counts, weight
  digests), and the gradient of a control step that normalises each process by its own counts.
* ``replay DIR`` in one plain process: a Trainer with the same recipe and twice the tasks per step
  updates on that global batch; it writes its gradient and weights next to the recorded ones.

Rollouts themselves are not compared: the policy samples from each process's own RNG, so two
processes cannot draw the same actions as one. The update is what must match.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

import torch

TASKS_PER_PROCESS = 2


def recipe(out: str, tasks_per_step: int):
    from stratagym.training.config import RecipeConfig

    return RecipeConfig.from_dict({
        "name": "dist-step",
        # the scorer picks admissible actions, so episodes end at different turns and the processes hold
        # different numbers of samples and micro-batches (the DDP padding path)
        "policy": {"class": "stratagym.agents.scorer:ScorerPolicy", "hidden": 16, "memory": 2},
        "env": {"id": "stratagym/SearchStrata-v0"},
        "rollout": {"group_size": 3, "tasks_per_step": tasks_per_step, "max_turns": 6},
        "algorithm": {"estimator": "grpo+hadw", "invalid_action_penalty": 0.1},
        "loss": {"kl_coef": 0.0, "entropy_coef": 0.0},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 2, "max_grad_norm": 0.0},
        "train": {"total_steps": 1, "output_dir": out, "save_every": 0, "progress": False, "tensorboard": False,
                  "seed": 0},
    })


def capture_gradients(trainer, *, critic: bool = False) -> list:
    """Snapshot the gradient each optimizer step applies (after DDP's all-reduce): the policy's, or with
    ``critic`` the critic's."""
    from stratagym.agents.policy import unwrap_model

    model, optimizer = (trainer.critic.model, trainer.critic_optimizer) if critic else (trainer.policy.model, trainer.optimizer)
    seen: list = []
    params = list(unwrap_model(model).parameters())
    step = optimizer.step

    def wrapped(*a, **k):
        seen.append([None if p.grad is None else p.grad.detach().clone() for p in params])
        return step(*a, **k)

    optimizer.step = wrapped
    return seen


def count_micro_batches(trainer) -> list:
    calls: list = []
    inner = trainer._micro_loss

    def wrapped(*a, **k):
        calls.append(1)
        return inner(*a, **k)

    trainer._micro_loss = wrapped
    return calls


def weights(trainer, *, critic: bool = False) -> dict:
    """A copy of the policy's (or with ``critic`` the critic's) state dict, without DDP's wrapper."""
    from stratagym.agents.policy import unwrap_model

    model = trainer.critic.model if critic else trainer.policy.model
    return {k: v.detach().clone() for k, v in unwrap_model(model).state_dict().items()}


def digest(state: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].float().numpy().tobytes())
    return h.hexdigest()


def record(out: Path) -> None:
    from accelerate.utils import gather_object

    from stratagym.training.trainer import Trainer

    trainer = Trainer(recipe(str(out / "run-record"), TASKS_PER_PROCESS))
    acc = trainer.accelerator
    rank, world = acc.process_index, acc.num_processes
    grads, micro = capture_gradients(trainer), count_micro_batches(trainer)
    batch = trainer.rollout()
    per_rank = len(batch.trajectories)
    # the episodes of each group, as (task, seed) per trajectory, in this process's group order
    groups = [[(t.task_id, t.seed) for t in batch.trajectories if t.group == g] for g in range(TASKS_PER_PROCESS)]
    for t in batch.trajectories:  # as one process collecting all ranks' tasks in order would number them
        t.traj += rank * per_rank
        t.group += rank * TASKS_PER_PROCESS
    everything = gather_object([batch.trajectories])
    samples = sum(len(t.steps) for t in batch.ok)
    control_batch = copy.deepcopy(batch)
    metrics = trainer.update(batch)
    w = weights(trainer)
    # control: the same step with each process normalising its loss by its own token/row counts (the
    # trainer before issue 16): with uneven shards its averaged gradient is NOT the global one
    control = Trainer(recipe(str(out / "run-control"), TASKS_PER_PROCESS))
    control._global_denominators = lambda tokens, rows: (float(tokens), float(rows))
    control_grads = capture_gradients(control)
    control.update(control_batch)
    # starved: process 1's episodes all failed (no sample at all), process 0 trains alone; process 1
    # must join every backward (a borrowed payload, loss x 0) or DDP's all-reduce waits forever
    starved = Trainer(recipe(str(out / "run-starved"), TASKS_PER_PROCESS))
    starved_grads = capture_gradients(starved)
    starved_batch = copy.deepcopy(control_batch)
    if rank == 1:
        for t in starved_batch.trajectories:
            t.failed = True
    starved.update(starved_batch)
    seen = gather_object([{"rank": rank, "groups": groups, "samples": samples, "micro_batches": len(micro), "digest": digest(w),
                           "anchor": metrics.get("adv/hadw_anchor")}])
    if acc.is_main_process:
        torch.save({"trajectories": [t for part in everything for t in part], "grads": grads[0], "weights": w,
                    "control_grads": control_grads[0], "starved_grads": starved_grads[0]},
                   out / "record.pt")
        (out / "record.json").write_text(json.dumps({"world": world, "ranks": seen}))
    acc.wait_for_everyone()
    starved.close()
    control.close()
    trainer.close()


def replay(out: Path) -> None:
    from stratagym.training.rollout import RolloutBatch
    from stratagym.training.trainer import Trainer

    data = torch.load(out / "record.pt", weights_only=False)
    trainer = Trainer(recipe(str(out / "run-replay"), 2 * TASKS_PER_PROCESS))
    grads = capture_gradients(trainer)
    tasks, seeds = trainer._sample_tasks()  # what one process would roll out at step 1 (fresh RNG)
    trainer.rng = __import__("numpy").random.default_rng(trainer.config.train.seed)
    metrics = trainer.update(RolloutBatch(data["trajectories"]))
    # process 0's episodes alone, on a fresh trainer: the starved step must equal this
    alone = Trainer(recipe(str(out / "run-replay-alone"), TASKS_PER_PROCESS))
    alone_grads = capture_gradients(alone)
    half = [t for t in data["trajectories"] if t.group < TASKS_PER_PROCESS]
    alone.update(RolloutBatch(copy.deepcopy(half)))
    alone.close()
    torch.save({"grads": grads[0], "weights": weights(trainer), "alone_grads": alone_grads[0]}, out / "replay.pt")
    (out / "replay.json").write_text(json.dumps({"world": trainer.accelerator.num_processes,
                                                 "tasks": list(zip(tasks, seeds)),
                                                 "anchor": metrics.get("adv/hadw_anchor")}))
    trainer.close()


if __name__ == "__main__":
    {"record": record, "replay": replay}[sys.argv[1]](Path(sys.argv[2]))
