"""Multi-process plumbing of the trainer, kept out of the training loop a reader follows.

Everything here exists because several processes train one model (``accelerate launch``, DDP): the
exit hook that ends the process group's threads before the interpreter finalizes, the estimator state
that must follow the global batch (HA-DW's anchor), the gathers and global loss denominators that make
a data-parallel update equal one process's update on the global batch, the empty-process rules that keep
every process in every collective (as many backward passes, a borrowed payload), and the bare-model pass
that keeps a no-grad forward out of DDP's collectives. In a single process each of them is a no-op.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import sys
import weakref
from typing import Any, Optional

import torch

from stratagym.agents.policy import unwrap_model

__all__ = [
    "end_process_group_at_exit",
    "share_batch_statistics",
    "estimate_advantages",
    "bare_model",
    "gather_statistics",
    "global_denominators",
    "max_over_processes",
    "borrow_payload",
]


@contextlib.contextmanager
def bare_model(owner: Any):
    """Let ``owner`` (a policy or critic) run on its unwrapped ``model`` for a no-grad pass. A DDP
    forward may broadcast the module's buffers (an LLM body has some, e.g. rotary frequencies): a
    collective, which a process scoring no sample never joins, so the others wait forever. A pass
    without gradients needs none of DDP's hooks. No change where the model is not wrapped (one process)."""
    wrapped = getattr(owner, "model", None)
    bare = unwrap_model(wrapped) if wrapped is not None else None
    if bare is None or bare is wrapped:
        yield
        return
    owner.model = bare
    try:
        yield
    finally:
        owner.model = wrapped


_END_AT_EXIT = False
#: multi-process trainers alive now, whose DDP wrappers the exit hook drops before it destroys the group
_DISTRIBUTED_TRAINERS: "weakref.WeakSet[Any]" = weakref.WeakSet()


def end_process_group_at_exit(accelerator: Any, trainer: Optional[Any] = None) -> None:
    """In a multi-process run, end the default process group's worker threads when the interpreter exits
    normally; ``trainer`` is released first (its ``release_process_group``, :meth:`stratagym.training.trainer.Trainer.release_process_group`).

    Why: a gloo worker thread drops its reference to a finished collective (an ``all_gather`` of
    ``gather_object``, a barrier) a moment after the caller's ``wait`` returns. When the last reference to
    a tensor that has a Python object goes, that thread takes the GIL to release it; if the main thread is
    already finalizing the interpreter, taking the GIL ends the thread with a forced unwind through a
    ``noexcept`` destructor, and the process dies with SIGABRT ("terminate called without an active
    exception") after all its work was done. At exit (``atexit`` runs before finalization) the hook drops
    every live trainer's DDP wrappers (each holds the group), collects what is left of dead trainers, and
    destroys the group; its last reference then goes with the GIL released, and its destructor waits for
    the workers. Registered once per process; a no-op in one process. Skipped when the process is dying
    of an uncaught exception (``sys.last_value`` is set): a peer may be blocked in a collective with us,
    and the teardown must not wait on it.
    """
    global _END_AT_EXIT
    if accelerator.num_processes == 1:
        return
    if trainer is not None:
        _DISTRIBUTED_TRAINERS.add(trainer)
    if not _END_AT_EXIT:
        atexit.register(_end_process_group)
        _END_AT_EXIT = True


def _end_process_group() -> None:
    if getattr(sys, "last_value", None) is not None:
        return
    for trainer in list(_DISTRIBUTED_TRAINERS):
        try:
            trainer.release_process_group()
        except Exception as exc:  # noqa: BLE001 - one odd trainer must not keep the group from ending
            print(f"stratagym: could not release a trainer's DDP wrappers at exit: {exc!r}", file=sys.stderr)
    gc.collect()  # trainers no longer referenced but kept by reference cycles: their DDP modules too
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        from accelerate.state import PartialState

        PartialState().destroy_process_group()


def share_batch_statistics(estimator: Any, accelerator: Any) -> None:
    """In a data-parallel run, make estimator state that depends on the batch follow the GLOBAL batch.

    Each process rolls out whole groups (``_sample_tasks`` hands it whole tasks, and the collector plays
    all G episodes of a task in that process), so per-group statistics are exact locally. HA-DW's anchor
    is not per group: it moves with the batch's mean reward, and from each process's own batch N
    processes would hold N different anchors. Its ``reduce_mean`` hook sums (reward, count) over the
    processes, so every process moves its anchor exactly as one process would on the global batch.
    """
    if accelerator.num_processes == 1:
        return
    end_process_group_at_exit(accelerator)

    def reduce_mean(rewards: torch.Tensor) -> Optional[float]:
        local = torch.tensor([float(rewards.double().sum()), float(rewards.numel())], dtype=torch.float64,
                             device=accelerator.device)
        total = accelerator.reduce(local, reduction="sum")
        return None if float(total[1]) == 0 else float(total[0]) / float(total[1])

    estimator.share_statistics(reduce_mean)  # a no-op for estimators whose state does not follow the batch


def estimate_advantages(estimator: Any, rows: Any) -> torch.Tensor:
    """``estimator(rows)``; a process with no rows (all its episodes failed) still joins HA-DW's
    collective (see :func:`share_batch_statistics`), or the other processes would wait in it forever,
    and still moves its anchor with theirs. Likewise it runs a ``batch_wide`` estimator (the whitening
    of ``gae``, REINFORCE++) on its empty rows when ``rows.gather`` is set, to join that collective."""
    if len(rows) == 0 and getattr(rows, "gather", None) is not None and getattr(estimator, "batch_wide", False):
        return estimator(rows)
    if len(rows) == 0:
        estimator.join_empty()
        return torch.zeros(0)
    return estimator(rows)


def gather_statistics(accelerator: Any, t: torch.Tensor) -> torch.Tensor:
    """Every process's 1-D statistics ``t``, stacked ``(processes, len(t))`` in float64 on the CPU, so a
    batch-wide statistic (the whitening of ``gae``, REINFORCE++) is computed over the global batch. A
    collective."""
    local = t.reshape(1, -1).to(device=accelerator.device, dtype=torch.float64)
    return accelerator.gather(local).cpu()


def global_denominators(accelerator: Any, tokens_mb: int, rows_mb: int) -> tuple[float, float]:
    """A mini-batch's token and row counts as the loss normalisers must see them. DDP averages the
    processes' gradients, so normalising each process by its OWN counts weights a token of a short shard
    more than one of a long shard. Dividing by (global count / processes) instead makes the averaged
    gradient the one a single process computes on the global mini-batch. One process: its own counts."""
    p = accelerator.num_processes
    if p == 1:
        return float(max(tokens_mb, 1)), float(rows_mb)
    t = torch.tensor([float(tokens_mb), float(rows_mb)], dtype=torch.float64, device=accelerator.device)
    tot = accelerator.reduce(t, reduction="sum")
    return max(float(tot[0]), 1.0) / p, max(float(tot[1]), 1.0) / p


def max_over_processes(accelerator: Any, n_local: int) -> int:
    """The largest ``n_local`` of any process (how many backward passes every process must run so that
    DDP's gradient all-reduce of the last one finds every process). A collective."""
    if accelerator.num_processes == 1:
        return n_local
    t = torch.tensor([n_local], device=accelerator.device)
    return int(accelerator.gather(t).max())


def borrow_payload(accelerator: Any, payload: Any, n_micro: int) -> Any:
    """For a process with no sample (``payload`` None) while others train (``n_micro > 0``): the payload
    of the first process that has one, so it can run the same backward passes (with its loss multiplied
    by 0) and DDP's all-reduce does not wait for it forever. ``None`` on every other process, and when
    every process has a sample. A collective when several processes run."""
    if accelerator.num_processes == 1 or n_micro == 0:
        return None
    from accelerate.utils import broadcast_object_list, gather_object

    have = gather_object([payload is not None])
    if all(have):
        return None
    box = [payload]
    broadcast_object_list(box, from_process=have.index(True))
    if payload is not None:
        return None
    return box[0]
