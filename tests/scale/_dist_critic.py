"""One PPO step with a critic (``gae``) of the real Trainer in N processes, or replayed in one process on
the same global batch.

Run by tests/scale/test_distributed_training.py, as _dist_train.py is:

* ``record DIR`` under ``accelerate launch --multi_gpu --num_processes 2`` (CPU, gloo): every process rolls
  out its whole groups and takes one update step (policy and critic). Process 0 writes the GLOBAL batch
  (renumbered as one process would number it), the gradients both optimizers stepped with, the weights
  of both models after the step and the critic's values of the global batch before and after it.
* ``replay DIR`` in one plain process: a Trainer with twice the tasks per step updates on that batch.

The scorer's episodes end at different turns, so the processes hold different numbers of samples and
micro-batches; the GAE advantages are whitened over the batch, so the whitening statistics must be the
global batch's for the step to match.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch

from _dist_train import capture_gradients, digest, weights

TASKS_PER_PROCESS = 2


def recipe(out: str, tasks_per_step: int):
    from stratagym.training.config import RecipeConfig

    return RecipeConfig.from_dict({
        "name": "dist-critic",
        "policy": {"class": "stratagym.agents.scorer:ScorerPolicy", "hidden": 16, "memory": 2},
        "env": {"id": "stratagym/SearchStrata-v0"},
        "rollout": {"group_size": 3, "tasks_per_step": tasks_per_step, "max_turns": 6},
        "algorithm": {"estimator": "gae", "estimator_kwargs": {"gamma": 0.95, "lam": 0.9},
                      "invalid_action_penalty": 0.1},
        "loss": {"kl_coef": 0.0, "entropy_coef": 0.0},
        "optim": {"lr": 1.0e-3, "micro_batch_size": 2, "max_grad_norm": 0.0},
        # the critic's head starts at 0 (every value 0): init_std and one step give it values that vary
        "critic": {"lr": 0.05, "cliprange_value": 0.2, "max_grad_norm": None},
        "train": {"total_steps": 1, "output_dir": out, "save_every": 0, "progress": False, "tensorboard": False,
                  "seed": 0},
    })


def values(trainer, trajectories) -> torch.Tensor:
    from stratagym.agents.policy import unwrap_model

    payloads = [s.payload for t in trajectories if not t.failed for s in t.steps]
    with torch.no_grad():  # the bare module: a forward outside the step must not be a DDP collective
        model = trainer.critic.model
        trainer.critic.model = unwrap_model(model)
        try:
            return trainer.critic.values(payloads).detach().clone()
        finally:
            trainer.critic.model = model


def record(out: Path) -> None:
    from accelerate.utils import gather_object

    from stratagym.training.trainer import Trainer

    trainer = Trainer(recipe(str(out / "run-record"), TASKS_PER_PROCESS))
    acc = trainer.accelerator
    rank, world = acc.process_index, acc.num_processes
    grads, cgrads = capture_gradients(trainer), capture_gradients(trainer, critic=True)
    batch = trainer.rollout()
    per_rank = len(batch.trajectories)
    for t in batch.trajectories:  # as one process collecting all ranks' tasks in order would number them
        t.traj += rank * per_rank
        t.group += rank * TASKS_PER_PROCESS
    everything = [t for part in gather_object([batch.trajectories]) for t in part]
    samples = sum(len(t.steps) for t in batch.ok)
    control_batch = copy.deepcopy(batch)
    trainer.update(batch)
    # control: the same step whitening each process's advantages over its own rows (before issue 16)
    control = Trainer(recipe(str(out / "run-control"), TASKS_PER_PROCESS))
    control._gather_stats = None
    control_grads = capture_gradients(control)
    control.update(control_batch)
    control.close()
    seen = gather_object([{"rank": rank, "samples": samples, "policy": digest(weights(trainer)),
                           "critic": digest(weights(trainer, critic=True))}])
    if acc.is_main_process:
        torch.save({"trajectories": everything, "grads": grads[0], "critic_grads": cgrads[0],
                    "control_grads": control_grads[0],
                    "weights": weights(trainer),
                    "critic": weights(trainer, critic=True),
                    "values_after": values(trainer, everything)}, out / "record.pt")
        (out / "record.json").write_text(json.dumps({"world": world, "ranks": seen}))
    acc.wait_for_everyone()
    trainer.close()


def replay(out: Path) -> None:
    from stratagym.training.rollout import RolloutBatch
    from stratagym.training.trainer import Trainer

    data = torch.load(out / "record.pt", weights_only=False)
    trainer = Trainer(recipe(str(out / "run-replay"), 2 * TASKS_PER_PROCESS))
    grads, cgrads = capture_gradients(trainer), capture_gradients(trainer, critic=True)
    before = values(trainer, data["trajectories"])
    trainer.update(RolloutBatch(data["trajectories"]))
    torch.save({"grads": grads[0], "critic_grads": cgrads[0], "weights": weights(trainer),
                "critic": weights(trainer, critic=True),
                "values_before": before, "values_after": values(trainer, data["trajectories"])}, out / "replay.pt")
    (out / "replay.json").write_text(json.dumps({"world": trainer.accelerator.num_processes}))
    trainer.close()



def llm(out: Path) -> None:
    """The tiny local LLM policy with its LLMCritic (a transformer body: it has buffers, which DDP
    broadcasts in a forward), one PPO step in which process 1 has no sample at all (every episode
    failed): the step must complete on both processes with the critic weights in step."""
    from accelerate.utils import gather_object

    from stratagym.training.config import RecipeConfig
    from stratagym.training.trainer import Trainer

    cfg = RecipeConfig.from_dict({
        "name": "dist-critic-llm",
        "policy": {"model": "tiny", "max_new_tokens": 6, "memory_k": 1},
        "env": {"id": "stratagym/SearchStrata-v0"},
        "rollout": {"group_size": 2, "tasks_per_step": 1, "max_turns": 2},
        "algorithm": {"estimator": "gae", "invalid_action_penalty": 0.5},
        # two mini-batches: the policy's old log-probs are scored too (a no-grad pass before the update)
        "optim": {"lr": 1.0e-3, "micro_batch_size": 2, "mini_batches": 2},
        "critic": {"lr": 1.0e-2},
        "train": {"total_steps": 1, "output_dir": str(out / "run-llm"), "save_every": 0, "progress": False,
                  "tensorboard": False, "seed": 0},
    })
    trainer = Trainer(cfg)
    acc = trainer.accelerator
    batch = trainer.rollout()
    if acc.process_index == 1:
        for t in batch.trajectories:
            t.failed = True
    before = digest(weights(trainer, critic=True))
    metrics = trainer.update(batch)
    after = digest(weights(trainer, critic=True))
    seen = gather_object([[before, after, metrics.get("train/samples")]])
    if acc.is_main_process:
        (out / "llm.json").write_text(json.dumps({"world": acc.num_processes, "ranks": seen}))
    acc.wait_for_everyone()
    trainer.close()


if __name__ == "__main__":
    {"record": record, "replay": replay, "llm": llm}[sys.argv[1]](Path(sys.argv[2]))
