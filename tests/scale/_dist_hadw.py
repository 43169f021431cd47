"""HA-DW on a fixed sequence of global batches, in however many processes it was launched with.

Run by tests/scale/test_distributed_hadw.py, as ``python _dist_hadw.py OUT`` (one process) and under
``accelerate launch --multi_gpu --num_processes 2`` (two CPU processes, gloo). Process r takes whole
groups of each global batch (a contiguous slice; some batches leave one process with no rows at all),
computes advantages through the trainer's own path (``share_batch_statistics`` +
``estimate_advantages``), and process 0 writes the anchors and the gathered advantages to OUT.
"""

from __future__ import annotations

import json
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object

from stratagym.algorithms.registry import AdvantageBatch, get_estimator
from stratagym.training.trainer import estimate_advantages, share_batch_statistics

G = 4
GROUPS = [6, 5, 4, 6, 3]
CUTS = [2, 3, 4, 0, 1]  # with 2 processes, process 0 takes the first CUTS[k] groups (4: process 1 idle; 0: process 0 idle)
SPECS = {
    "grpo+hadw": {},
    "stratified+hadw/window": {"hadw_anchor": "window", "hadw_lam": 1.5},
}


def global_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(rewards[groups, G], strata[groups, G]) per step: binary rewards whose success rate drifts."""
    gen = torch.Generator().manual_seed(1234)
    out = []
    for k, n in enumerate(GROUPS):
        p = 0.2 + 0.15 * k
        rewards = (torch.rand(n, G, generator=gen) < p).double()
        strata = torch.randint(0, 3, (n, G), generator=gen)
        out.append((rewards, strata))
    return out


def local_rows(k: int, rank: int, world: int, rewards: torch.Tensor, strata: torch.Tensor) -> AdvantageBatch:
    n = rewards.shape[0]
    lo, hi = (0, n) if world == 1 else ((0, CUTS[k]) if rank == 0 else (CUTS[k], n))
    r, s = rewards[lo:hi].reshape(-1), strata[lo:hi].reshape(-1)
    group = torch.arange(hi - lo).repeat_interleave(G)
    return AdvantageBatch(rewards=r, group=group, stratum=s)


def main(out_path: str) -> None:
    acc = Accelerator(cpu=True)
    rank, world = acc.process_index, acc.num_processes
    result: dict = {"num_processes": world}
    for name, opts in SPECS.items():
        shared = get_estimator(name.split("/")[0], **opts)
        share_batch_statistics(shared, acc)
        alone = get_estimator(name.split("/")[0], **opts)  # no hook: each process's own batch (the old way)
        anchors, alone_anchors, advantages = [], [], []
        for k, (rewards, strata) in enumerate(global_batches()):
            rows = local_rows(k, rank, world, rewards, strata)
            adv = estimate_advantages(shared, rows)
            anchors.append(shared.hadw.last_anchor)
            estimate_advantages(alone, rows)
            alone_anchors.append(alone.hadw.last_anchor)
            advantages.append([float(a) for a in gather_object([float(a) for a in adv])])
        result[name] = {"anchors": anchors, "alone_anchors": alone_anchors, "advantages": advantages,
                        "state": shared.hadw.state_dict()}
    # every process must hold the same anchor state; process 0 checks and writes
    states = gather_object([json.dumps(result[n]["state"], sort_keys=True) for n in SPECS])
    result["states_agree"] = all(states[i] == states[i % len(SPECS)] for i in range(len(states)))
    if acc.is_main_process:
        with open(out_path, "w") as f:
            json.dump(result, f)
    acc.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1])
