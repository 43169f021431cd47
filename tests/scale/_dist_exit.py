"""Ends a 2-process script right after a collective, the way every training script ends.

Run by tests/scale/test_distributed_exit.py under ``accelerate launch`` (CPU, gloo) as
``_dist_exit.py SETUP``: ``raw`` (an Accelerator and a collective, with ``end_process_group_at_exit``
called by hand, as a script without the Trainer would) or ``trainer`` (a real Trainer with the tiny LLM
policy, whose DDP wrapper holds the process group, kept referenced by the module until exit, as in a
script that trains at module level). Then an ``all_gather`` with large Python-owned outputs, dropped
right after ``wait``: a gloo worker thread may still be releasing them when the interpreter exits.

At exit, after stratagym's hook (``atexit`` runs the last registered first, and this script registers
its check before the hook exists), each process prints how many gloo threads are left: the hook must
have ended them all, so none can take the GIL during finalization. Without the hook's release of the
Trainer's DDP wrapper, the 3 gloo threads were still there (the group was destroyed but alive).
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile

import torch
import torch.distributed as dist

from stratagym.training import trainer as trainer_module
from stratagym.training.config import RecipeConfig


def gloo_threads() -> int:
    """This process's threads that gloo runs (its work loops and its TCP event loop)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            names.append(open(f"/proc/self/task/{tid}/comm").read().strip())
        except OSError:  # ended while we looked
            pass
    return sum("gloo" in name for name in names)


def build_trainer() -> trainer_module.Trainer:
    trainer = trainer_module.Trainer(RecipeConfig.from_dict({
        "name": "dist-exit",
        "policy": {"model": "tiny", "max_new_tokens": 4},
        "env": {"id": "stratagym/SearchStrata-v0"},
        "rollout": {"group_size": 2, "tasks_per_step": 1, "max_turns": 1},
        "train": {"total_steps": 1, "output_dir": tempfile.mkdtemp(prefix="stratagym-dist-exit-"), "save_every": 0,
                  "progress": False, "tensorboard": False},
    }))
    assert type(trainer.policy.model).__name__ == "DistributedDataParallel"
    return trainer


def say(line: str) -> None:
    """One write(2) per line: both ranks share the pipe, and print() may split a line in several writes
    that interleave with the other rank's (a write of < PIPE_BUF bytes to a pipe is atomic)."""
    os.write(1, f"{line}\n".encode())


if __name__ == "__main__":
    atexit.register(lambda: say(f"gloo threads after the hook: {gloo_threads()}"))
    if sys.argv[1] == "trainer":
        trainer = build_trainer()
        accelerator = trainer.accelerator
    else:
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
        trainer_module.end_process_group_at_exit(accelerator)
    world, rank = accelerator.num_processes, accelerator.process_index
    outs = [torch.zeros(4 * 10**6) for _ in range(world)]
    work = dist.all_gather(outs, torch.full((4 * 10**6,), float(rank)), async_op=True)
    work.wait()
    assert [float(o[-1]) for o in outs] == [float(r) for r in range(world)]
    assert gloo_threads() >= 2, "expected gloo's worker threads while the group is up"
    del work, outs
    say(f"done {rank}")
