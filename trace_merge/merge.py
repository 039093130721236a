"""Merge a run in memory: read every source (:mod:`trace_merge.sources` finds them), align them on rank 0's clock
and return one frame (:class:`MergeResult`); :mod:`trace_merge.store` stores it in the run directory.

A file that fails to read among others is skipped with a warning ``"<path>: <cause>"``; when nothing
is usable :class:`~trace_merge.errors.TraceInputError` names the path and what was looked for.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .align import Residual
from .identity import Identity
from .partitioned import PartitionedMerge, merge_in_memory, merge_read
from .schema import SourceData
# the merge's outputs, for callers of merge_path: ``from trace_merge.merge import merge_path, write_merged``
from .store import read_merged, write_merged


@dataclass
class MergeResult:
    """A merged run.

    Attributes
    ----------
    frame
        All interval rows (schema :data:`trace_merge.schema.FRAME_DTYPES`), absolute epoch ns on
        rank 0's clock, epoch/step propagated from the app layer.
    counters
        Counter rows (Darshan), :data:`trace_merge.schema.COUNTER_DTYPES`.
    warnings
        One line each, ``"<path>: <cause>"``: skipped files, missing ranks, dropped sources.
    residual
        Alignment check (:class:`trace_merge.align.Residual`).
    manifest
        ``manifest.json`` of the run, or None for loose inputs.
    sources
        Paths of the files that made it into the frame.
    clock_offsets_ns
        rank -> the clock offset (ns, that rank's clock minus rank 0's) subtracted from its rows.
    dxt_clock
        Per Darshan log and rank, where its DXT segments were placed (:class:`trace_merge.dxt_clock.DxtClock`
        as a dict: ``source, rank, offset_ns, confidence, basis, matched, segments, uncertainty_ns``).
    inputs
        Identity (:mod:`trace_merge.identity`) of every file found, read or not, and of ``manifest.json``,
        keyed by the name relative to the merged directory; taken before reading, so a file that changes
        during the merge shows as changed afterwards.
    dropped
        app file -> intervals its TimeLogger writer dropped (could not keep up, or a write failed); only files
        that dropped any. Each also has a warning.
    """

    frame: pd.DataFrame
    counters: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    residual: Residual = field(default_factory=Residual)
    manifest: "dict[str, Any] | None" = None
    sources: list[str] = field(default_factory=list)
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)
    dxt_clock: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, Identity] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def rows_per_layer(self) -> dict[str, int]:
        counts = self.frame["layer"].value_counts()
        return {str(k): int(v) for k, v in counts.items() if v}


def merge_path(path: "str | os.PathLike[str]") -> MergeResult:
    """Read, align and merge every trace under ``path``: the pipeline of :mod:`trace_merge.partitioned` in this
    process, with its pieces in memory (:func:`trace_merge.partitioned.merge_in_memory`).

    Parameters
    ----------
    path
        A run directory, a directory of loose trace files (recursively), or one trace file.

    Returns
    -------
    MergeResult

    Raises
    ------
    TraceInputError
        Nothing usable was found (the message lists what was looked for, and why files failed).
    """
    return _result(merge_in_memory(path))


def merge_sources(read: "list[SourceData]", launch_ns: "int | None" = None,
                  launched: "list[dict[str, Any]] | tuple" = ()) -> MergeResult:
    """:func:`merge_path` of sources already read (by :func:`trace_merge.readers.read_any`); ``launch_ns``: when
    the run was launched (``manifest.json``'s ``created_wall_ns``), ``launched``: the launcher's records of the
    ranks (``launch/rank-<r>.json``)."""
    return _result(merge_read(read, launch_ns, launched))


def _result(pm: PartitionedMerge) -> MergeResult:
    return MergeResult(frame=pm.frame(), counters=pm.counters, warnings=pm.warnings, residual=pm.residual,
                       manifest=pm.manifest, sources=pm.sources, clock_offsets_ns=pm.clock_offsets_ns,
                       dxt_clock=pm.dxt_clock, inputs=pm.inputs, dropped=pm.dropped)


__all__ = ["MergeResult", "merge_path", "merge_sources", "read_merged", "write_merged"]
