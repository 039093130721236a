"""Where the partitioned merge's tasks run (:mod:`trace_merge.partitioned`): the same tasks, three engines.

- :class:`Inline`: in this process, one after another or in a few threads. No start-up cost: the engine of small
  inputs and of the in-memory merge.
- :class:`LocalPool`: a pool of worker processes on this machine (the default for large inputs). Tasks are
  given out largest first, and no more run at once than fit the memory budget (an estimate per row of the
  partition), so peak memory follows the largest partition, not the job. Each wave (:meth:`LocalPool.map`) has
  workers of its own, forked from a server process that holds no task's memory.
- :class:`DaskEngine`: an existing Dask distributed cluster (``--scheduler ADDRESS``), for traces of thousands
  of nodes. Workers must see the input and spill directories (a shared file system, as on any HPC cluster).
  Starting one on Slurm: ``docs/partitioned.md``.

Every engine returns results in task order, so the reduction, and so every number, is the same on all three.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import multiprocessing
import os
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

from trace_merge.errors import TraceInputError
from trace_merge.threads import THREADED_ROWS

log = logging.getLogger(__name__)

#: inputs below this size (bytes on disk) are merged in this process: a pool's start-up would cost more
INLINE_BELOW_BYTES = 32 << 20
#: memory a rank task holds at its peak above the worker's own: :data:`TASK_BYTES` plus :data:`BYTES_PER_ROW` per row
#: of its partition (:func:`task_bytes`). Measured as the peak RSS of a fresh worker's first rank task above its RSS
#: before it (merge_scale.py's sets, tests/test_partitioned.py's rank); the estimate stays above every measurement
#: (docs/measurements.md#engines)
TASK_BYTES = 80 << 20
BYTES_PER_ROW = 160
#: a rank task of more rows than this is merged and summarised window by window
#: (:func:`~trace_merge.partitioned.merge_rank`), the others whole: above it, whole ranks would put two workers'
#: tasks over 1 GiB together (docs/measurements.md#engines)
WINDOW_ABOVE_ROWS = 4 << 20
#: rows of one window of such a rank: 128 Ki rows keep a window's arrays and glibc's free holes between them small,
#: at the speed of larger windows (docs/measurements.md#engines)
WINDOW_ROWS = 1 << 17


@dataclass(frozen=True)
class Windows:
    """When a rank task is merged window by window, and how many rows a window holds (the defaults above)."""

    above_rows: int = WINDOW_ABOVE_ROWS
    rows: int = WINDOW_ROWS


#: what such a rank holds per row whatever its windows (its starts and their order while it is ordered; the int32
#: order while its windows are read), from its peak RSS above the process's own, inline (docs/measurements.md#engines)
ORDER_BYTES_PER_ROW = 40
#: seconds to wait for a Dask scheduler to answer
CONNECT_TIMEOUT_S = 20
#: memory budget of the local pool's tasks together where the machine's available memory is unknown
DEFAULT_MEMORY_BYTES = 1 << 30
#: share of the machine's available memory the local pool's tasks may hold together, unless ``--memory-limit``
AVAILABLE_SHARE = 0.5


def default_memory_bytes(meminfo: str = "/proc/meminfo") -> int:
    """The local pool's budget: :data:`AVAILABLE_SHARE` of the memory the kernel says is available now
    (``MemAvailable``: free memory plus the page cache it can drop), at least :data:`DEFAULT_MEMORY_BYTES` when
    that is there, and :data:`DEFAULT_MEMORY_BYTES` where the kernel does not say."""
    try:
        with open(meminfo) as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return DEFAULT_MEMORY_BYTES
    available = kib << 10
    return max(min(DEFAULT_MEMORY_BYTES, available), int(available * AVAILABLE_SHARE))


class Engine(Protocol):
    """Where tasks run: :class:`Inline`, :class:`LocalPool`, :class:`DaskEngine`."""

    name: str
    workers: int

    def map(self, fn: Callable, items: Sequence[Any], sizes: Optional[Sequence[int]] = None) -> list:
        """``[fn(item) for item in items]``, in task order whatever order they ran in (``sizes``: each task's rows,
        for a memory budget)."""

    def close(self) -> None:
        """Release the engine's workers (an engine it did not start is left running)."""


class Inline:
    """Run every task here: one after another, or in ``threads`` threads (the readers of DFTracer and TimeLogger
    files, numpy's sorts and pandas' group-bys release the GIL: one file is gunzipped while another is parsed)."""

    name = "inline"

    def __init__(self, threads: int = 1) -> None:
        self.workers = max(1, threads)

    def map(self, fn: Callable, items: Sequence[Any], sizes: Optional[Sequence[int]] = None) -> list:
        small = sizes is not None and max(sizes, default=0) < THREADED_ROWS  # Python work that threads only slow
        if self.workers == 1 or len(items) < 2 or small:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="trace-merge") as pool:
            return list(pool.map(fn, items))  # in task order

    def close(self) -> None:
        pass


def task_bytes(rows: int) -> int:
    """The memory a rank task of ``rows`` rows is estimated to hold at its peak, above its worker's own: a rank of
    more than :data:`WINDOW_ABOVE_ROWS` rows holds its time order and one window of :data:`WINDOW_ROWS`, not its
    rows."""
    if rows > WINDOW_ABOVE_ROWS:
        return TASK_BYTES + WINDOW_ROWS * BYTES_PER_ROW + int(rows) * ORDER_BYTES_PER_ROW
    return TASK_BYTES + int(rows) * BYTES_PER_ROW


class LocalPool:
    """Worker processes on this machine (forked from a clean server process, so they start in milliseconds).

    Parameters
    ----------
    workers
        Processes (default: one per core).
    memory_bytes
        Budget of the tasks running at once (default: :func:`default_memory_bytes`, half the available memory):
        a task of ``n`` rows is estimated at :func:`task_bytes` and a task waits until the running ones leave room
        for it (one always runs).
    """

    name = "local"

    def __init__(self, workers: Optional[int] = None, memory_bytes: Optional[int] = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.memory_bytes = memory_bytes or default_memory_bytes()
        self._pool: Optional[ProcessPoolExecutor] = None

    def _executor(self, mmap_threshold: int, tasks: int) -> ProcessPoolExecutor:
        if self._pool is None:
            server = start_fork_server()  # started here if not before: with one BLAS thread
            workers = min(self.workers, tasks)  # fewer tasks than workers: the cores shared among the tasks alone
            self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=server,
                                             initializer=_one_thread_each,
                                             initargs=(mmap_threshold, (os.cpu_count() or 1) // workers))
        return self._pool

    def map(self, fn: Callable, items: Sequence[Any], sizes: Optional[Sequence[int]] = None) -> list:
        items = list(items)
        if not items:
            return []
        if len(items) == 1 and not sizes:
            return [fn(items[0])]
        with _workers_skip_main():
            try:
                return self._map(fn, items, sizes)
            finally:
                # a wave's workers end with it: the next wave's start from the fork server holding nothing of this
                # one's (a worker's allocators keep much of what its tasks freed, which would sit under the next
                # wave's tasks: docs/measurements.md#engines)
                self.close()

    def _map(self, fn: Callable, items: list, sizes: Optional[Sequence[int]]) -> list:
        # tasks sized by rows (a rank each) hold whole columns, mapped when large; the others (a file each) stream
        # blocks, reused from the heap (its workers end with the wave: the heap they keep is not the rank wave's)
        pool = self._executor(WORKER_MMAP_THRESHOLD if sizes is not None else STREAMING_MMAP_THRESHOLD, len(items))
        # a big rank's task hands back what it freed before the worker's next task (its heap would otherwise sit
        # under the next one's columns); other tasks leave it for the next, which needs as much: a file's blocks
        # (the wave's workers end with it), or a rank whose columns all come from the heap. Handed back, they
        # paid their page faults again (docs/measurements.md#engines)
        released = functools.partial(_then_release, fn)
        need = [task_bytes(n) for n in sizes] if sizes is not None else [0] * len(items)
        order = sorted(range(len(items)), key=lambda i: -need[i])  # largest first: the tail is short
        results: list = [None] * len(items)
        running: dict = {}
        used = 0
        while order or running:
            while order and len(running) < self.workers and (not running or used + need[order[0]] <= self.memory_bytes):
                i = order.pop(0)
                try:
                    big = sizes is not None and sizes[i] >= RELEASE_AFTER_ROWS
                    running[pool.submit(released if big else fn, items[i])] = i
                except (BrokenProcessPool, OSError):  # a worker died before this task went out (OSError: the
                    # executor was tearing down its queues as it spawned a worker for it)
                    self._abandon()
                    raise _worker_died(items[min(running.values(), default=i)]) from None
                used += need[i]
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                i = running.pop(fut)
                used -= need[i]
                try:
                    results[i] = fut.result()
                except BrokenProcessPool:
                    self._abandon()
                    raise _worker_died(items[i]) from None
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _abandon(self) -> None:
        """Let go of a pool a worker died in, without waiting on it: its own shutdown joins every worker, and a
        worker spawned for the next task after the executor had sent its workers SIGTERM is never told to stop, so
        that join can wait forever (seen in CI: docs/measurements.md#engines). The workers left are killed, so the
        executor's thread can finish."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        workers = list((getattr(pool, "_processes", None) or {}).values())  # pid -> Process, CPython's own table
        pool.shutdown(wait=False, cancel_futures=True)
        for p in workers:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                p.kill()
        for p in workers:
            with contextlib.suppress(OSError, ValueError, AttributeError, AssertionError):
                p.join(timeout=5)


#: sources of at least this many bytes on disk are merged partition by partition (:func:`trace_merge.run.Run.open`)
PARTITION_ABOVE_BYTES = 64 << 20
#: what the fork server imports before it forks a worker: the server dies with this process (kill -9 included),
#: its workers with it (:func:`_one_thread_each`), and the tasks' modules are imported once, not by every worker
_SERVER_PRELOAD = ["trace_merge._lifeline", "trace_merge.partitioned", "trace_merge.analysis"]


def _fork_server() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_SERVER_PRELOAD)
    return ctx


#: OpenBLAS, numpy's BLAS, starts a thread per core when it is loaded, which spins (``sched_yield``) for a while:
#: CPU time of every process that imports numpy (docs/measurements.md#engines), taken from the cores the driver and
#: the fork server import on side by side. Nothing here uses BLAS.
_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


@contextlib.contextmanager
def one_blas_thread():
    """Within: processes started, and numpy when first imported, load OpenBLAS with one thread. The variable is
    set for that time only, so that the commands this process runs for the user (``advise``, ``noise``) get the
    user's environment."""
    saved = os.environ.get(_BLAS_THREADS)
    os.environ[_BLAS_THREADS] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(_BLAS_THREADS, None)
        else:
            os.environ[_BLAS_THREADS] = saved


def start_fork_server() -> Any:
    """Start the local pool's fork server now rather than at the first wave: it imports its preloads
    (docs/measurements.md#engines) while this process is still importing the same modules for itself, on the other
    core. Without effect after the server has started (every wave's workers are forked from the one server). Returns
    its multiprocessing context."""
    import multiprocessing.forkserver

    ctx = _fork_server()
    with _workers_skip_main(), one_blas_thread():
        multiprocessing.forkserver.ensure_running()
    return ctx


def holds_at_least(path: "str | os.PathLike[str]", size: int) -> bool:
    """Whether the files under ``path`` (or the file) add up to ``size`` bytes: an upper bound of its sources' bytes
    (every file counts, trace or not), read without importing the readers; the walk stops once it is reached."""
    todo, total = [os.fspath(path)], 0
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    elif entry.is_file():
                        total += entry.stat().st_size
                        if total >= size:
                            return True
        except NotADirectoryError:
            return os.path.getsize(path) >= size
        except OSError:
            continue
    return False


@contextlib.contextmanager
def _workers_skip_main():
    """While workers start: make them import :mod:`trace_merge._worker_main` as their ``__main__`` instead of the
    caller's.

    A worker process re-imports the parent's main module (multiprocessing's rule outside ``fork``): a user's
    script without an ``if __name__ == "__main__"`` guard would run again in every worker, and a notebook or
    ``python -`` has no file to import at all. The tasks live in importable modules, so the caller's main is not
    needed.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    had = "__spec__" in main.__dict__
    saved = main.__dict__.get("__spec__")
    main.__spec__ = importlib.util.find_spec("trace_merge._worker_main")
    try:
        yield
    finally:
        if had:
            main.__spec__ = saved
        else:
            del main.__spec__


def _then_release(fn: Callable, item: Any) -> Any:
    """``fn(item)``, then hand the memory it freed back to the system: a worker's allocators (Arrow's pool,
    glibc's arenas) otherwise keep the peak of its largest task resident for the rest of the wave (its workers end
    with it: :meth:`LocalPool.map`)."""
    try:
        return fn(item)
    finally:
        import ctypes
        import gc

        import pyarrow as pa

        gc.collect()
        pa.default_memory_pool().release_unused()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


def _worker_died(item: Any) -> TraceInputError:
    """The one-line error when a pool worker died (killed, out of memory) while working on ``item``: it names the
    source file or the rank, never a bare ``BrokenProcessPool``."""
    path = getattr(item, "path", None)
    what = path if path is not None else (f"rank {item.rank}" if hasattr(item, "rank") else repr(item))
    return TraceInputError(what, "a merge worker process died while working on it (killed, or out of memory: "
                                 "--workers 1 or --memory-limit lowers the memory in use)")


def _one_thread_each(mmap_threshold: int, threads: int) -> None:
    """In a pool worker: die with the forkserver, Arrow parses with one thread (the pool's processes already use
    every core; threads cost more CPU for the same parse: docs/measurements.md#engines), a task's column work
    uses the worker's share of the cores, ``threads`` (at least one: :mod:`trace_merge.threads`), and glibc's malloc
    keeps at most :data:`WORKER_MALLOC_ARENAS` arenas and reuses what a task freed below ``mmap_threshold`` bytes
    (:data:`WORKER_MMAP_THRESHOLD` for the rank waves, :data:`STREAMING_MMAP_THRESHOLD` for the ingest waves)."""
    import ctypes
    import gc

    import pyarrow as pa

    from trace_merge import _lifeline
    from trace_merge import threads as task_threads

    # the forkserver (it preloaded _lifeline: SERVER is its pid; had it not, this worker imported it just now): when
    # it dies with the driver, no worker is left behind
    _lifeline.die_with_parent(_lifeline.SERVER if _lifeline.SERVER != os.getpid() else None)
    pa.set_cpu_count(1)
    task_threads.set_limit(threads)
    # what the worker was forked with (the preloaded modules' objects) is never garbage: left out of its
    # collections, a collection (after a big rank, _then_release) walks only what the tasks made and writes nothing
    # to the pages it shares with the fork server (docs/measurements.md#engines)
    gc.freeze()
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_ARENA_MAX, WORKER_MALLOC_ARENAS)
        libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
        libc.mallopt(_M_TRIM_THRESHOLD, WORKER_TRIM_THRESHOLD)
    except (OSError, AttributeError):  # not glibc
        pass


#: glibc malloc arenas a pool worker may use: each thread of a rank task (the column gathers and concatenations
#: run in threads) would otherwise get an arena of its own that keeps what it freed; two lower the summary's peak
#: as well as one, and no slower (docs/measurements.md#engines)
WORKER_MALLOC_ARENAS = 2
#: arrays up to this size come from malloc's heap, not from fresh pages of their own: each array mapped afresh pays
#: its page faults again (with glibc's default threshold, a large part of ``propagate_steps``' time). Larger ones,
#: a big rank's whole columns (a column of 2.1 M rows or more), are mapped, and go back to the system when freed: a
#: heap keeps its extent, so a task's heap had reached its largest working set plus the holes between its arrays
#: (a lower peak than at 256 MiB, at about the same time: docs/measurements.md#engines)
WORKER_MMAP_THRESHOLD = 16 << 20
#: a rank task of this many rows or more hands back the memory it freed when it is done (:meth:`LocalPool.map`):
#: its int64 columns are mapped (:data:`WORKER_MMAP_THRESHOLD`), and the heap it leaves is the holes between them
RELEASE_AFTER_ROWS = WORKER_MMAP_THRESHOLD // 8
#: the same for the tasks that read a file in blocks of 16 MiB and more (the ingest wave, unsized): each block mapped
#: afresh paid its page faults again (docs/measurements.md#engines)
STREAMING_MMAP_THRESHOLD = 256 << 20
#: free memory at the top of the heap kept for the task's next arrays instead of being handed back at once
WORKER_TRIM_THRESHOLD = 128 << 20
_M_ARENA_MAX, _M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD = -8, -3, -1  # mallopt's parameter numbers (malloc.h)


class DaskEngine:
    """Tasks on a Dask distributed cluster (``pip install 'dlio-layers[dask]'``).

    Parameters
    ----------
    scheduler
        The scheduler's address (``tcp://host:8786``), or a ``distributed.Client`` / ``LocalCluster`` to use.
    """

    name = "dask"

    def __init__(self, scheduler: Any) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise ImportError("the Dask engine needs dask.distributed: pip install 'dlio-layers[dask]'") from None
        self._own = not isinstance(scheduler, Client)
        try:
            if isinstance(scheduler, Client):
                self.client = scheduler
            elif hasattr(scheduler, "scheduler_address"):
                self.client = Client(scheduler)
            else:
                self.client = Client(str(scheduler), timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError, TypeError) as exc:  # TypeError: tls:// without a TLS config
            raise TraceInputError(str(scheduler), f"cannot reach the Dask scheduler ({type(exc).__name__}: "
                                                  f"{str(exc).splitlines()[0] if str(exc) else 'no answer'})") from None
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))

    def map(self, fn: Callable, items: Sequence[Any], sizes: Optional[Sequence[int]] = None) -> list:
        items = list(items)
        if not items:
            return []
        # pure=False: a task writes files; priority: largest first, as the local pool does
        prio = [int(n) for n in sizes] if sizes is not None else [0] * len(items)
        futures = [self.client.submit(fn, item, pure=False, priority=p) for item, p in zip(items, prio)]
        try:
            return self.client.gather(futures)
        except Exception as exc:
            if type(exc).__name__ != "KilledWorker":  # dask's: the task's workers kept dying
                raise
            lost = next((item for item, fut in zip(items, futures) if fut.status == "error"), items[0])
            raise _worker_died(lost) from None

    def close(self) -> None:
        if self._own:
            self.client.close()


def local(input_bytes: int, workers: Optional[int] = None, memory_bytes: Optional[int] = None) -> Engine:
    """The local engine for an input of ``input_bytes``: :class:`Inline` when small, else :class:`LocalPool`."""
    if input_bytes < INLINE_BELOW_BYTES or (workers or os.cpu_count() or 1) == 1:
        return Inline()
    return LocalPool(workers, memory_bytes)


def engine_for(scheduler: Any = None, input_bytes: int = 0, workers: Optional[int] = None,
               memory_bytes: Optional[int] = None) -> Engine:
    """:class:`DaskEngine` on ``scheduler`` when given, else :func:`local`."""
    return DaskEngine(scheduler) if scheduler else local(input_bytes, workers, memory_bytes)
