"""Merge a run in memory: read every source (:mod:`trace_merge.sources` finds them), align them on rank 0's clock
and return one frame (:class:`MergeResult`); :mod:`trace_merge.store` stores it in the run directory.

A file that fails to read among others is skipped with a warning ``"<path>: <cause>"``; when nothing
is usable :class:`~trace_merge.errors.TraceInputError` names the path and what was looked for.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .align import APP_KINDS, align, meta_value
from .errors import TraceInputError
from .identity import Identity
from .readers import detect, rank_from_name, read_any
from .schema import COUNTER_DTYPES, SourceData, empty_counters
from .sources import (LOOKED_FOR, find_sources, anchors_by_rank, ended_early, is_run_dir, launch_records,
                      missing_ranks, resolve_names)
# the merge's outputs, for callers of merge_path: ``from trace_merge.merge import merge_path, write_merged``
from .store import read_merged, write_merged

log = logging.getLogger(__name__)


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
        Alignment check, see :func:`trace_merge.align.alignment_residual`.
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
    residual: dict[str, Any] = field(default_factory=dict)
    manifest: "dict[str, Any] | None" = None
    sources: list[str] = field(default_factory=list)
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)
    dxt_clock: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, Identity] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def rows_per_layer(self) -> dict[str, int]:
        counts = self.frame["layer"].value_counts()
        return {str(k): int(v) for k, v in counts.items() if v}


#: kinds whose reader (:mod:`trace_merge.readers.pfw`) is thread-safe and releases the GIL while it
#: decompresses and parses, so several files are read at once (one gunzips while another parses)
_THREADED_KINDS = ("timelogger", "dftracer")
#: files read at once: one per core (pyarrow parses each with all cores; more files in flight only add
#: memory, each holds its decompressed text), at most 4
_READ_THREADS = max(1, min(4, os.cpu_count() or 1))


def _read_all(
    files: list[tuple[Path, str]], warnings: list[str]
) -> list[SourceData]:
    """Read app files first, then the others with the app files' anchors; failures become warnings.

    Sources and warnings come out in file order however many files are read at once.
    """

    def attempt(p: Path, kind: str, kw: dict[str, Any]) -> "SourceData | str":
        try:
            return read_any(p, kind=kind, **kw)
        except TraceInputError as exc:
            return str(exc)
        except ImportError as exc:
            return f"{p}: {exc}"

    def read_batch(batch: list, pool: ThreadPoolExecutor) -> None:
        """``batch``: (path, kind, kwargs) or a warning string, in order; sources/warnings in that order."""
        pending = [pool.submit(attempt, *job) if not isinstance(job, str) and job[1] in _THREADED_KINDS
                   else job for job in batch]
        for item in pending:
            if isinstance(item, str):
                out = item
            elif isinstance(item, tuple):  # a reader not known to be thread-safe: here, in order
                out = attempt(*item)
            else:
                out = item.result()
            if isinstance(out, str):
                warnings.append(out)
            else:
                sources.append(out)

    sources: list[SourceData] = []
    first: list = []
    later: list[tuple[Path, str]] = []
    for p, kind in files:
        try:
            kind = kind or detect(p)
        except TraceInputError as exc:
            first.append(str(exc))
            continue
        if kind not in APP_KINDS:
            later.append((p, kind))
        else:
            first.append((p, kind, {}))
    with ThreadPoolExecutor(max_workers=_READ_THREADS, thread_name_prefix="trace-read") as pool:
        read_batch(first, pool)
        anchors = anchors_by_rank(sources)
        all_anchors = [a for lst in anchors.values() for a in lst]
        second = []
        for p, kind in later:
            kw: dict[str, Any] = {}
            if kind == "xplane":
                rank = rank_from_name(str(p))
                kw = {"rank": rank, "anchors": anchors.get(rank, []) if rank is not None else all_anchors}
            second.append((p, kind, kw))
        read_batch(second, pool)
    for src in sources:
        warnings.extend(src.warnings)
    return sources


def resolve_shared_names(sources: list[SourceData]) -> None:
    """Resolve file hashes a DFTracer trace uses but another trace of the run defines.

    DFTracer writes a name's ``FH`` (hash -> path) record once per process tree: a forked child (a
    ``multiprocessing.Pool`` reader, ``trace-<id>-fork.pfw.gz``) inherits its parent's table and writes only the
    hashes, so its reads would carry no file name. The reader resolves each file's own table; this takes the
    union of the run's tables for what is left.
    """
    names: dict[str, str] = {}
    for src in sources:
        if src.kind == "dftracer":
            names.update(src.meta.get("files") or {})
    for src in sources:
        if src.kind == "dftracer":
            src.frame = resolve_names(src.frame, names)


def merge_path(path: "str | os.PathLike[str]") -> MergeResult:
    """Read, align and merge every trace under ``path``.

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
    path = Path(path)
    files, manifest, warnings, inputs = find_sources(path)
    if not files:
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise TraceInputError(path, f"no trace files found (looked for {LOOKED_FOR}){why}")
    sources = _read_all(files, warnings)
    resolve_shared_names(sources)
    usable = [s for s in sources if len(s.frame) or len(s.counters)]
    if not usable:
        why = "; ".join(warnings) if warnings else "all empty"
        raise TraceInputError(path, f"no usable trace data ({why})")
    app = [s for s in sources if s.kind in APP_KINDS]
    warnings.extend(ended_early(app))
    if is_run_dir(path):
        warnings.extend(missing_ranks(path, manifest, app))
    launch = (manifest or {}).get("created_wall_ns")
    aligned = align(sources, launch_ns=launch if isinstance(launch, int) and not isinstance(launch, bool) else None,
                    launched=launch_records(path))
    warnings.extend(aligned.warnings)
    counters = [s.counters for s in sources if len(s.counters) and s.path not in aligned.dropped]
    counters_df = pd.concat(counters, ignore_index=True) if counters else empty_counters()
    counters_df = counters_df.astype(COUNTER_DTYPES)
    for w in warnings:
        log.warning("%s", w)
    return MergeResult(
        frame=aligned.frame,
        counters=counters_df,
        warnings=warnings,
        residual=aligned.residual,
        manifest=manifest,
        sources=[s.path for s in sources if s.path not in aligned.dropped],
        clock_offsets_ns=aligned.offsets,
        dxt_clock=[c.as_dict() for c in aligned.dxt_clock],
        inputs=inputs,
        dropped={s.path: int(meta_value(s.meta, "dropped")) for s in app
                 if meta_value(s.meta, "dropped") and s.path not in aligned.dropped},
    )


__all__ = ["MergeResult", "merge_path", "resolve_shared_names", "read_merged", "write_merged"]
