"""How glibc's malloc hands a training process's freed memory back to the OS: two process-wide policies.

PyTorch's CPU tensors are plain ``malloc``/``free`` calls. glibc serves a block above its *mmap threshold*
with its own ``mmap`` and unmaps it on ``free``; smaller blocks come from the heap, which shrinks only from
its top. The threshold starts at 128 KiB but is *dynamic*: each freed mmapped block raises it to that
block's size, up to 32 MiB.

**Return (the Trainer's default, :func:`return_freed_memory`).** The threshold pinned at glibc's own
starting value, 128 KiB, which turns the raising off (``M_MMAP_THRESHOLD``'s documented effect), so big
transient blocks are always mmapped and always given back. Why: with the dynamic threshold, after the first
freed activation or logits tensor blocks of up to 32 MiB come from the heap, and any long-lived allocation
made after one of them keeps the heap from shrinking past it. A step frees thousands of such blocks in
sizes that change with each batch's lengths, so a long run holds more and more freed memory. Measured
2026-12-03 (SmolLM2-135M LoRA RL on SearchQA, ``recipes/cpu/grpo-smollm2-lora-kl-searchqa-program.yaml`` and its
env-side partner, one process per core on a 24 GiB machine): the program run's resident memory rose from
3.4 to 8.6 GB over its first three steps and the env run's to 14.7 GB, together enough for the kernel's
OOM killer to end one; resumed with the threshold pinned, the program run held 1.4-3.1 GB over its next
two steps.
``tests/training/test_allocator.py`` shows the mechanism with plain ``malloc`` calls. The user's own
``MALLOC_MMAP_THRESHOLD_`` (which glibc read at start-up) is left alone.

**Retain (``train.retain_heap: true``, :func:`retain_heap`).** The opposite trade, for speed: keep freed
memory in the process heap instead of handing it back to the OS. Why: with big blocks unmapped and freed
memory at the top of the heap given back (``trim``), each training step's
activations, gradients and logits (MBs each at a few million parameters) come back as fresh pages that
the kernel must fault in and zero again: ~4000 page faults per scoring pass + backward at ``--hidden 256``
in ``benchmarks/trainer.py``, and the zeroed pages also evict the cache. With a 32 MiB mmap threshold and
no trimming below 1 GiB the same blocks are reused from the heap step after step (faults ~0) and the
reference forward, the loss forward and the backward each ran 0-10 % faster (thread CPU time, interleaved).
The cost is resident memory that stays at the step's peak between steps, which a training loop reaches
every step anyway. It is a process-wide setting: everything in the process (another trainer too) gets it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import Optional

__all__ = ["retain_heap", "return_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "RETURN_MMAP_THRESHOLD"]

#: blocks below this size come from the heap (glibc's own maximum for its dynamic threshold)
MMAP_THRESHOLD = 32 << 20
#: free memory at the top of the heap is given back to the OS only above this size
TRIM_THRESHOLD = 1 << 30
#: the "return" policy's threshold: glibc's initial one (``DEFAULT_MMAP_THRESHOLD_MIN`` in malloc.c), pinned
RETURN_MMAP_THRESHOLD = 128 << 10

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_applied: Optional[bool] = None
_returning: Optional[bool] = None


def _glibc() -> Optional[ctypes.CDLL]:
    """The C library when it is glibc (musl and macOS have no ``mallopt`` with these meanings)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # only glibc has it
        return libc
    except (OSError, AttributeError):
        return None


def retain_heap() -> bool:
    """Apply the thresholds above once per process; True when they are in effect (glibc), else False."""
    global _applied
    if _applied is None:
        libc = _glibc()
        _applied = bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                        and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied


def return_freed_memory() -> bool:
    """Pin the mmap threshold at :data:`RETURN_MMAP_THRESHOLD` once per process (the "return" policy of the
    module docstring); True when it is in effect, False where the C library is not glibc, where the user
    set ``MALLOC_MMAP_THRESHOLD_``, or after :func:`retain_heap` (its setting is kept)."""
    global _returning
    if _returning is None:
        libc = None if "MALLOC_MMAP_THRESHOLD_" in os.environ or _applied else _glibc()
        _returning = bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, RETURN_MMAP_THRESHOLD))
    return _returning
