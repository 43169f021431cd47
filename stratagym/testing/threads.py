"""Data-parallel processes simulated by threads, for unit tests of code that takes a ``gather`` hook.

Collective code (an all-gather every process must join, in step) is cheaper to pin with threads than
with ``accelerate launch``: :func:`run_as_processes` runs one function per "rank", each given an
all-gather that is a barrier, so a rank that skips a collective deadlocks the others and the test fails.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["run_as_processes"]


def run_as_processes(n: int, fn: Callable[[int, Callable[[Any], list]], Any], *, timeout: float = 30.0) -> list:
    """Run ``fn(rank, all_gather)`` for ranks ``0..n-1`` in threads; returns their results in rank order.

    ``all_gather(obj)`` blocks until every rank has called it and returns every rank's ``obj`` in rank
    order, as ``accelerate.utils.gather_object`` does for one object per process. An exception in a
    rank is re-raised here; a rank still running after ``timeout`` seconds (a missed collective) fails."""
    box: list = [None] * n
    out: list = [None] * n
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(rank: int) -> None:
        def all_gather(obj: Any) -> list:
            box[rank] = obj
            barrier.wait()
            got = list(box)
            barrier.wait()  # nobody overwrites box before every rank has read it
            return got

        try:
            out[rank] = fn(rank, all_gather)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            errors.append(exc)
            barrier.abort()  # release the other ranks instead of leaving them waiting

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    if errors:
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
    if any(t.is_alive() for t in threads):
        raise AssertionError(f"a simulated process was still running after {timeout} s (a missed collective?)")
    return out
