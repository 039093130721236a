"""Node-local page cache emulation (``--node-cache emulate|off|drop``) for runs of several ranks on one machine.

On a cluster each node's page cache holds only what that node read: a file new to a rank comes from storage, a
re-read of its own file may come from its cache. On one machine all ranks share one page cache, so a file any rank
read is warm for every other -- which makes global shuffle look *faster* than local (its files were all read by
someone) and hides the slower first epoch. This is an **emulation** of the cluster's behaviour, not the real thing:

* ``emulate``: before each epoch, a rank evicts from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``) the
  files of its coming epoch that it has not read before, so its first read of each file comes from storage and its
  re-reads find whatever the cache kept. On one machine an eviction also takes the file from the other ranks, so a
  file two ranks share is colder than on a cluster (global shuffle is penalised a little more than it would be).
* ``drop``: drop every cache once before the run (``/proc/sys/vm/drop_caches``, needs root; where that is not
  permitted, the run says so and goes on warm).
* ``off``: whatever the cache holds.

Measured here: a 400 MB file read at 4.5-5.0 GB/s warm and 0.7-1.9 GB/s after ``DONTNEED``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from typing import Any, Iterable, Sequence

NODE_CACHE = ("off", "emulate", "drop")


def evict(paths: Iterable[str]) -> int:
    """Ask the kernel to drop the cached pages of each file; returns how many files it was asked for."""
    n = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        n += 1
    return n


def drop_all() -> "str | None":
    """Drop the page cache of the machine; None when done, else why not."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return None
    except OSError as err:
        return f"cannot drop the page cache ({err.strerror or err}): the run starts with a warm cache"


_libc = None


def resident_fraction(path: str) -> float:
    """Share of the file's pages in the page cache (``mincore`` of a private mapping that touches no page); 0 for
    an empty file."""
    global _libc
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    # A private (copy-on-write) mapping is writable for ctypes to take its address; nothing is touched, so no page
    # is read in or copied: mincore reports the page cache's state of the file.
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        vec = ctypes.create_string_buffer(pages)
        anchor = ctypes.c_char.from_buffer(m)
        try:
            if _libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
        finally:
            del anchor  # the mapping cannot close while a ctypes object points into it
    return sum(b & 1 for b in vec.raw) / pages


class NodeCache:
    """One rank's view of its node's page cache under ``mode`` (see the module docstring).

    Call :meth:`before_epoch` with the files the rank is about to read; it evicts the new ones under ``emulate``
    (inside a ``Node Cache Emulation`` phase) and remembers them. :meth:`summary` says what was done.
    """

    def __init__(self, mode: str, tl: Any) -> None:
        if mode not in NODE_CACHE:
            raise ValueError(f"unknown --node-cache {mode!r}; expected one of {NODE_CACHE}")
        self.mode, self.tl = mode, tl
        self.read: set[str] = set()
        self.evicted: list[int] = []
        self.evicted_bytes: list[int] = []
        self.drop_problem: "str | None" = None
        self.dropped = False

    def before_run(self, rank: int) -> None:
        """Under ``drop``, rank 0 drops the machine's caches (call before the ranks start reading)."""
        if self.mode == "drop" and rank == 0:
            self.drop_problem = drop_all()
            self.dropped = self.drop_problem is None

    def before_epoch(self, files: Sequence[str]) -> list[str]:
        """Evict (under ``emulate``) the files in ``files`` this rank has not read; returns them."""
        new = [f for f in files if f not in self.read]
        self.read.update(files)
        if self.mode != "emulate":
            return []
        with self.tl.phase("Node Cache Emulation", cat="other") as phase:
            phase.update(files=evict(new))
        self.evicted.append(len(new))
        self.evicted_bytes.append(sum(os.path.getsize(f) for f in new))
        return new

    def job_summary(self, dist: Any) -> dict:
        """:meth:`summary` with the evictions summed over ranks (a collective: every rank calls it):
        ``evicted_files_per_epoch`` and ``evicted_bytes_per_epoch`` are the job's, i.e. under ``emulate`` the
        bytes the job's first reads of files fetch from storage."""
        out = self.summary()
        if self.mode == "emulate":
            totals = dist.sum([*self.evicted, *self.evicted_bytes])
            n = len(self.evicted)
            out["evicted_files_per_epoch"] = [int(x) for x in totals[:n]]
            out["evicted_bytes_per_epoch"] = [int(x) for x in totals[n:]]
        return out

    def summary(self) -> dict:
        """This rank's view: what ``summary.json`` records under ``node_cache`` (see :meth:`job_summary`)."""
        out: dict = {"mode": self.mode}
        if self.mode == "emulate":
            # what this rank's first reads of those files fetch from storage (whole files, for whole-file readers)
            out["evicted_files_per_epoch"] = list(self.evicted)
            out["evicted_bytes_per_epoch"] = list(self.evicted_bytes)
        if self.mode == "drop":
            out["dropped"] = self.dropped
            if self.drop_problem:
                out["problem"] = self.drop_problem
        return out
