"""How many threads one task's column work may use: the gathers, concatenations and per-rank sweeps that numpy and
pandas run without the GIL (:func:`thread_map`), and the next block or window made while one is worked on
(:func:`ahead`: gunzip, the native scanner, numpy's gathers and Arrow's reads release the GIL).

A process of its own uses every core. A local pool's worker shares the cores with the pool's other workers, each
busy with a task of its own, so the pool's initializer gives it its share (:func:`set_limit`): there, a second
thread only adds switches and hand-offs (more CPU, and no sooner done: the other core was busy with the other
worker's task; docs/measurements.md#threads). A wave of fewer tasks than workers starts as many workers as tasks,
each with a larger share (one huge rank's task: every core).
"""
from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Generator, Iterable, Optional, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_limit = os.cpu_count() or 1


def limit() -> int:
    """The most threads one :func:`thread_map` uses in this process."""
    return _limit


def set_limit(threads: int) -> None:
    """At most ``threads`` threads for one :func:`thread_map` in this process from now on."""
    global _limit
    _limit = max(1, int(threads))


#: work on fewer rows than this runs in the calling thread: the threads' hand-offs and the GIL they take turns at
#: cost more than numpy's released stretches save (docs/measurements.md#threads)
THREADED_ROWS = 1 << 18


def thread_map(fn: Callable[[T], R], items: Iterable[T], most: Optional[int] = None, rows: Optional[int] = None
               ) -> list[R]:
    """``[fn(x) for x in items]``, in up to ``most`` threads (and the process's limit); in this thread when that is
    one, or when ``rows`` (the rows one item works on) is under :data:`THREADED_ROWS`. Results in the order of
    ``items``; the first exception is raised."""
    items = list(items)
    threads = min(_limit, len(items), most or _limit)
    if threads <= 1 or (rows is not None and rows < THREADED_ROWS):
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(fn, items))


def ahead(items: Iterable[T]) -> Generator[T, None, None]:
    """``items``' items in order, the next one made in a thread while the caller works on this one, where the
    process may use a second thread (:func:`limit`); else plainly. Two items are alive at a time, not one. The first
    two are made here: one item (a small file read whole) starts no thread."""
    it = iter(items)
    if _limit <= 1:
        yield from it
        return
    yield from itertools.islice(it, 1)
    try:
        item = next(it)
    except StopIteration:
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        while True:
            coming = pool.submit(next, it)
            yield item
            del item  # not held while the next one is waited for
            try:
                item = coming.result()
            except StopIteration:
                return
