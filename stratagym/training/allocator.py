"""Keep freed memory in the process heap instead of handing it back to the OS (glibc only).

Why: PyTorch's CPU tensors are plain ``malloc``/``free`` calls. glibc serves large blocks with ``mmap``
and gives freed memory at the top of the heap back to the OS (``trim``), so each training step's
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
import sys
from typing import Optional

__all__ = ["retain_heap", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

#: blocks below this size come from the heap (glibc's own maximum for its dynamic threshold)
MMAP_THRESHOLD = 32 << 20
#: free memory at the top of the heap is given back to the OS only above this size
TRIM_THRESHOLD = 1 << 30

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_applied: Optional[bool] = None


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
