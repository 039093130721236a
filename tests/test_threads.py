"""A task's column work runs in its process's share of the cores (:mod:`trace_merge.threads`): every core alone,
one thread in each worker of a pool that has a worker per core."""
from __future__ import annotations

import os
import threading

import pytest

from trace_merge import engines, threads


def _limit_and_threads_used(items: int) -> tuple[int, int]:
    seen = set()
    barrier_free = threads.thread_map(lambda _: seen.add(threading.get_ident()), range(items))
    assert barrier_free == [None] * items
    return threads.limit(), len(seen)


def test_thread_map_keeps_order_raises_the_first_error_and_runs_here_at_a_limit_of_one() -> None:
    before = threads.limit()
    try:
        _thread_map_at_limits()
    finally:
        threads.set_limit(before)


def _thread_map_at_limits() -> None:
    threads.set_limit(4)
    assert threads.thread_map(lambda x: x * x, range(50)) == [x * x for x in range(50)]
    with pytest.raises(ZeroDivisionError):
        threads.thread_map(lambda x: 1 // (x - 3), range(8))
    threads.set_limit(1)
    assert threads.thread_map(lambda _: threading.get_ident(), range(8)) == [threading.get_ident()] * 8
    threads.set_limit(0)  # never below one
    assert threads.limit() == 1


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every process has one thread")
def test_a_pool_worker_gets_its_share_of_the_cores() -> None:
    cores = os.cpu_count() or 1
    for workers in (1, cores):
        pool = engines.LocalPool(workers=workers)
        try:
            got = pool.map(_limit_and_threads_used, [64, 64])
        finally:
            pool.close()
        assert {limit for limit, _ in got} == {max(1, cores // workers)}
        if workers == cores:
            assert {used for _, used in got} == {1}
    # a wave of one task (one huge rank) runs in one worker, which has every core
    pool = engines.LocalPool(workers=cores)
    try:
        assert pool.map(_limit_and_threads_used, [64], sizes=[1])[0][0] == cores
    finally:
        pool.close()


def _made_in(made: list, n: int, fail_at: int = -1):
    for i in range(n):
        if i == fail_at:
            raise ValueError(i)
        made.append(threading.get_ident())
        yield i


def test_ahead_gives_the_items_in_order_making_the_next_in_a_thread_and_raises_where_they_fail() -> None:
    before = threads.limit()
    try:
        for limit in (2, 1):
            threads.set_limit(limit)
            made: list = []
            assert list(threads.ahead(_made_in(made, 5))) == list(range(5))
            here = threading.get_ident()
            assert made[:2] == [here] * 2 and (set(made[2:]) == {here}) == (limit == 1)  # the rest: in a thread
            made.clear()
            assert list(threads.ahead(_made_in(made, 1))) == [0] and made == [here]  # one item: no thread
            got = []
            with pytest.raises(ValueError, match="3"):
                for x in threads.ahead(_made_in(made, 5, fail_at=3)):
                    got.append(x)
            assert got == [0, 1, 2]
            made.clear()
            early = threads.ahead(_made_in(made, 100))
            assert next(early) == 0
            early.close()  # no more is made once the caller stops: at most the one read ahead
            assert len(made) <= 2
    finally:
        threads.set_limit(before)
