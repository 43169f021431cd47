"""Ends a 2-process run right after a collective, the way every training script ends.

Run by tests/scale/test_distributed_exit.py under ``accelerate launch`` (CPU, gloo). ``hook`` registers
stratagym's :func:`end_process_group_at_exit`; ``bare`` does not (the control, which shows the race is
provoked here). The all_gather's outputs are large Python-owned tensors, dropped right after ``wait``, so
a gloo worker thread is still releasing them while the interpreter exits.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from accelerate import Accelerator

from stratagym.training.trainer import end_process_group_at_exit

if __name__ == "__main__":
    acc = Accelerator(cpu=True)
    if sys.argv[1] == "hook":
        end_process_group_at_exit(acc)
    outs = [torch.zeros(4 * 10**6) for _ in range(acc.num_processes)]
    work = dist.all_gather(outs, torch.full((4 * 10**6,), float(acc.process_index)), async_op=True)
    work.wait()
    assert [float(o[-1]) for o in outs] == [float(r) for r in range(acc.num_processes)]
    del work, outs
    print("done", acc.process_index, flush=True)
