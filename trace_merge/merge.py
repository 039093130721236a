"""Merge a run in memory: every source (:mod:`trace_merge.sources` finds them) read and aligned on rank 0's clock by
the one pipeline (:mod:`trace_merge.partitioned`) in this process, its rows kept in memory; :mod:`trace_merge.store`
stores the merge in the run directory.

A file that fails to read among others is skipped with a warning ``"<path>: <cause>"``; when nothing
is usable :class:`~trace_merge.errors.TraceInputError` names the path and what was looked for.
"""
from __future__ import annotations

import os
from typing import Sequence

from timelogger.records import LaunchRecord

from .partitioned import Merge, merge_in_memory, merge_read
from .schema import SourceData

# the merge's outputs, for callers of merge_path: ``from trace_merge.merge import merge_path, write_merged``
from .store import read_merged, write_merged


def merge_path(path: "str | os.PathLike[str]", batches: bool = True) -> Merge:
    """Read, align and merge every trace under ``path`` (:func:`trace_merge.partitioned.merge_in_memory`).

    Parameters
    ----------
    path
        A run directory, a directory of loose trace files (recursively), or one trace file.
    batches
        Small DFTracer traces are read in batches (False: one by one, each rank's categories exactly its files', as
        ``merged.parquet`` stores them; the rows are the same).

    Returns
    -------
    Merge
        ``frame`` holds every row.

    Raises
    ------
    TraceInputError
        Nothing usable was found (the message lists what was looked for, and why files failed).
    """
    return merge_in_memory(path, batches=batches)


def merge_sources(read: "list[SourceData]", launch_ns: "int | None" = None,
                  launched: "Sequence[LaunchRecord]" = ()) -> Merge:
    """:func:`merge_path` of sources already read (by :func:`trace_merge.readers.read_any`); ``launch_ns``: when
    the run was launched (``manifest.json``'s ``created_wall_ns``), ``launched``: the launcher's records of the
    ranks (``launch/rank-<r>.json``)."""
    return merge_read(read, launch_ns, launched)


__all__ = ["Merge", "merge_path", "merge_sources", "read_merged", "write_merged"]
