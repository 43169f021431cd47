"""The thread-simulated processes that the gather-hook unit tests rely on must fail loudly, not pass."""

import pytest

from stratagym.testing.threads import run_as_processes


def test_all_gather_returns_every_rank_in_rank_order():
    assert run_as_processes(3, lambda rank, g: (g(rank * 10), g(-rank))) == [([0, 10, 20], [0, -1, -2])] * 3


def test_an_error_in_one_rank_is_raised_and_frees_the_others():
    def fn(rank, g):
        if rank == 1:
            raise ValueError("rank 1 broke")
        return g(rank)

    with pytest.raises(ValueError, match="rank 1 broke"):
        run_as_processes(2, fn, timeout=5)


def test_a_rank_that_skips_a_collective_fails():
    with pytest.raises(AssertionError, match="missed collective"):  # rank 0 waits at the barrier for ever
        run_as_processes(2, lambda rank, g: g(rank) if rank == 0 else None, timeout=2)
