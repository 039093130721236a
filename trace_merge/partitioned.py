"""The merge pipeline: one task per source file and one per rank, on any engine; the only orchestration of a merge.

The work runs in waves of independent tasks (:mod:`trace_merge.engines` runs them: in this process, a local process
pool, or a Dask cluster); what passes between waves is small, and on a pool or a cluster no step holds every row of
a job at once.

1. **App files** (TimeLogger), one task each: read, spill the rows by rank, return the metadata alignment needs
   (rank, pid, host, clock offset, TF anchors) and the file's time window.
2. The driver builds the **shared tables**: processes (host/pid → rank), clock offsets, anchors, the app layer's
   median time, app files from another day (:func:`trace_merge.align.check_app_clocks`).
3. **Other sources**, one task each (DFTracer traces block by block, :func:`trace_merge.readers.pfw.read_blocks`):
   read, give rows their ranks (:func:`~trace_merge.align.assign_ranks`), subtract clock offsets, spill by rank,
   return small facts: rows per rank, the analysis hook's facts of each piece (:class:`Analysis`), hash tables,
   counters.
4. **Ranks**, one task each: load the rank's spilled rows, resolve file hashes with the run's tables, place Darshan
   DXT segments by content (:func:`trace_merge.dxt_clock.place_source`), order by time, propagate epoch/step, write
   the rank's partition (Arrow IPC, sorted by start time), and run the analysis hook on it (the summary kernels,
   :func:`trace_merge.kernels.rank_parts`); return the small tables. A rank too big to hold whole is merged window
   by window, and the hook's independent halves over its partition file run as tasks of their own, side by side, in
   a wave after the ranks' (:func:`_summarise_halves`).
5. The driver **reduces** them exactly (the hook's reduction, :func:`trace_merge.align.residual_of`).

Peak memory is one task's: the largest source block or the largest rank partition, times the tasks run at once.
Spilling is the engine's choice, not another code path: on the inline engine a run that fits in memory keeps its
pieces and partitions in memory (:func:`merge_in_memory`, behind :func:`trace_merge.merge.merge_path` and the frame
notebooks use); tests hold every engine to the same numbers.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence

import numpy as np
import pandas as pd

from timelogger.records import LaunchRecord
from trace_merge import align as A
from trace_merge import engines, sources
from trace_merge.dxt_clock import place_source
from trace_merge.engines import Engine, Inline
from trace_merge.errors import TraceInputError
from trace_merge.merged import (
    ArrowFile,
    InGroup,
    InMemory,
    Merge,
    MergeInfo,
    NotKept,
    Partition,
    file_batches,
    require_rows,
    schema_dtypes,
)
from trace_merge.outputs import pid_alive
from trace_merge.pieces import Piece, joined
from trace_merge.rank_windows import RankWindows
from trace_merge.readers import detect, rank_from_name, read_any
from trace_merge.readers.darshan import dxt_rows
from trace_merge.readers.pfw import Batch, DFTracerMeta, PfwMeta, TimeLoggerMeta
from trace_merge.schema import (
    COUNTER_DTYPES,
    FRAME_COLUMNS,
    FRAME_DTYPES,
    RANK_GROUP_ROWS,
    SourceData,
    SourceMeta,
    by_rank,
    concat_frames,
    empty_counters,
    empty_frame,
    only_columns,
)
from trace_merge.threads import ahead

log = logging.getLogger(__name__)

#: columns a summary needs (the kernels, DXT placement, step propagation); ``merge`` keeps every column
SUMMARY_COLUMNS = tuple(c for c in FRAME_COLUMNS if c not in ("args", "host"))


class Analysis(Protocol):
    """What the pipeline runs as it merges, so that a merge needs no second pass over the rows (the summary's:
    :class:`trace_merge.kernels.SummaryHook`). The merge itself imports no analysis module."""

    def facts(self, frame: pd.DataFrame, rank: int) -> Any:
        """Small facts of one piece (rows of one rank from one source)."""

    def job(self, facts: Sequence[Any], names: dict) -> Any:
        """The pieces' facts reduced, given to every rank (``names``: DFTracer file hash -> path of the run)."""

    def rank(self, rows: "RankRows", job: Any) -> Any:
        """One rank's partition in (taken from ``rows``), its small tables out (a rank too big to hold whole:
        :meth:`rank_halves`)."""

    def rank_halves(self, windows: Callable, job: Any) -> "list[Callable[[], Any]]":
        """:meth:`rank` of a rank too big to hold whole (``windows(columns)``, picklable: its rows window by window)
        as independent tasks, run side by side after the rank's merge (:func:`_summarise_halves`)."""

    def joined(self, halves: Sequence[Any]) -> Any:
        """The rank's tables from its halves' results, in order."""

    def combine(self, parts: Sequence[Any], job: Any, counters: pd.DataFrame) -> Any:
        """The ranks' tables reduced (the summary)."""


class RankRows:
    """A rank's rows handed to the analysis hook, which takes them once (:meth:`take`) and so holds the only
    reference: it can let them go as soon as it has read them, where a plain argument stays alive in every caller's
    frame until the hook returns, under the later tables' peaks (docs/measurements.md#partitioned)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame: Optional[pd.DataFrame] = frame

    def take(self) -> pd.DataFrame:
        frame, self._frame = self._frame, None
        if frame is None:
            raise RuntimeError("a rank's rows are taken once")
        return frame


# -- spilled pieces -----------------------------------------------------------------------------------------


def _write_arrow(frame: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa

    table = pa.Table.from_pandas(frame, preserve_index=False)
    tmp = path.with_name(path.name + ".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(tmp, path)


def _spill(frame: pd.DataFrame, source: str, kind: str, tag: str, spill: Optional[Path], columns: Sequence[str],
           analysis: Optional[Analysis]) -> "tuple[list[Piece], list]":
    """``frame``'s rows rank by rank, written under ``spill`` (None: kept in memory); the pieces and, with an
    ``analysis``, each piece's facts."""
    pieces, facts = [], []
    for rank, rows in by_rank(frame):
        rows = only_columns(rows, columns)
        piece = Piece(None, source, kind, rank, len(rows), A.residual_flags(rows))
        if spill is not None:
            where = spill / f"rank-{rank}"
            where.mkdir(parents=True, exist_ok=True)
            piece.path = str(where / f"{tag}.piece")
        piece.store(rows)
        pieces.append(piece)
        if analysis is not None:
            facts.append(analysis.facts(rows, rank))
    return pieces, facts


# -- wave 1 and 3: sources ----------------------------------------------------------------------------------


@dataclass
class SourceTask:
    index: int
    path: str
    kind: str
    spill: Optional[str]  # None: pieces kept in memory (the inline engine only)
    columns: tuple
    data: Optional[SourceData] = None  # the source already read (:func:`merge_read`; inline only)
    analysis: Optional[Analysis] = None
    #: wave 3 only: the shared tables
    procs: list = field(default_factory=list)
    offsets: dict = field(default_factory=dict)
    anchors: list = field(default_factory=list)
    app_median: Optional[float] = None


@dataclass
class SourceResult:
    path: str
    kind: str
    error: Optional[str] = None
    meta: SourceMeta = field(default_factory=SourceMeta)
    warnings: list = field(default_factory=list)
    pieces: list = field(default_factory=list)
    facts: list = field(default_factory=list)
    counters: Optional[pd.DataFrame] = None
    window: Optional[tuple] = None  # (first start, last end) before offsets
    starts: Optional[np.ndarray] = None  # app files: every start (the app layer's median)
    median: Optional[float] = None  # other sources: the median of their rows' starts (clocks set a day apart)
    dropped: bool = False
    rows: int = 0  # the source's rows in pieces (a batch's pieces may hold several sources' rows)


def ingest(task: SourceTask) -> SourceResult:
    """Read one source, give its rows ranks and rank 0's clock, spill them by rank (waves 1 and 3)."""
    out = SourceResult(task.path, task.kind)
    spill = Path(task.spill) if task.spill is not None else None
    try:
        blocks = _blocks(task)
        meta = SourceMeta()
        pids: set = set()
        medians: list = []
        for b, src in enumerate(blocks):
            out.warnings += src.warnings
            meta = src.meta
            pids |= set(src.meta.pids if isinstance(src.meta, PfwMeta) else [])
            if len(src.counters):
                out.counters = src.counters if out.counters is None else pd.concat([out.counters, src.counters])
            frame = src.frame
            if not len(frame):
                continue
            if task.kind not in A.APP_KINDS:
                frame = A.assign_ranks(frame, task.procs, task.path, out.warnings)
            else:
                out.starts = frame["start_ns"].to_numpy().copy()
            start, end = int(frame["start_ns"].min()), int(frame["end_ns"].max())
            out.window = (start, end) if out.window is None else (min(out.window[0], start), max(out.window[1], end))
            medians.append((float(np.median(frame["start_ns"].to_numpy())), len(frame)))
            frame = A.apply_offsets(frame, task.offsets)
            pieces, facts = _spill(frame, task.path, task.kind, f"{task.index:06d}-{b:05d}", spill, task.columns,
                                   task.analysis)
            out.pieces += pieces
            out.rows += len(frame)
            out.facts += facts
            del src, frame  # not kept while the next block is read
        if pids and isinstance(meta, PfwMeta):
            meta = replace(meta, pids=sorted(pids))
        out.meta = meta
    except TraceInputError as exc:
        out.error = str(exc)
        return out
    except ImportError as exc:
        out.error = f"{task.path}: {exc}"
        return out
    if task.kind not in A.APP_KINDS and medians:
        out.median = _weighted_median(medians)
    far = _another_day(task.path, out.median, task.app_median) if out.median is not None else None
    if far is not None:
        out.warnings.append(far)
        out.dropped = True
        for p in out.pieces:
            p.discard()
        out.pieces, out.facts, out.counters, out.rows = [], [], None, 0
    return out


def _another_day(path: str, median: float, app_median: Optional[float]) -> Optional[str]:
    """The warning leaving out a source whose rows' median start lies a day or more from the app layer's."""
    if app_median is None or abs(median - app_median) <= A.DIFFERENT_DAY_NS:
        return None
    return (f"{path}: timestamps are {(median - app_median) / 3.6e12:+.1f} h from the app layer's (a different run "
            "or a wrong clock); left out of the merge")


#: small DFTracer traces merged in memory are read in batches of about this much text (estimated as
#: :func:`~trace_merge.readers.pfw.read_blocks` does): a few tens of thousands of rows, a rank group's worth
SOURCE_BATCH_BYTES = 16 << 20


def _source_batches(tasks: "Sequence[SourceTask]") -> "list[list[SourceTask]]":
    """The tasks of small DFTracer traces (read whole, not in blocks) in batches for :func:`ingest_batch`, in rank
    order as their names give it (a batch's ranks then make one rank group, :func:`_rank_groups`); batches of one
    are left out."""
    from trace_merge.readers.pfw import GZIP_RATIO, STREAM_BLOCK_BYTES

    small: list = []
    for t in tasks:
        if t.kind != "dftracer" or t.data is not None or t.analysis is not None or t.spill is not None:
            continue
        try:
            with open(t.path, "rb") as fh:
                text = os.fstat(fh.fileno()).st_size * (GZIP_RATIO if fh.read(2) == b"\x1f\x8b" else 1)
        except OSError:
            continue  # ingest says why
        if text <= 2 * STREAM_BLOCK_BYTES:
            rank = rank_from_name(t.path)
            small.append(((rank is None, rank or 0, t.index), text, t))
    batches: list = []
    held = SOURCE_BATCH_BYTES
    for _, text, t in sorted(small, key=lambda x: x[0]):
        if held + text > SOURCE_BATCH_BYTES:
            batches.append([])
            held = 0
        batches[-1].append(t)
        held += text
    return [b for b in batches if len(b) > 1]


def ingest_batch(tasks: "Sequence[SourceTask]") -> "list[SourceResult]":
    """:func:`ingest` of each of several small DFTracer traces (in memory): read together
    (:func:`~trace_merge.readers.pfw.read_batch`), each rank's rows a span of the batch's one frame; those the batch
    leaves out are ingested one by one. The same results, in the order of ``tasks``."""
    from trace_merge.readers import pfw

    if len(tasks) == 1:
        return [ingest(tasks[0])]
    first = tasks[0]
    batch, alone = pfw.read_batch([t.path for t in tasks], args="args" in first.columns)
    read_alone = set(alone)
    done = {t.path: ingest(t) for t in tasks if t.path in read_alone}
    if batch is not None:
        done.update(_batch_results(batch, first))
    return [done[t.path] for t in tasks]


def _batch_results(batch: Batch, task: SourceTask) -> "dict[str, SourceResult]":
    """:func:`ingest_batch`'s results of the files read together (``task``: one of theirs, for the shared tables)."""
    paths = [f.path for f in batch.files]
    warnings: list[str] = []
    frame = A.assign_ranks_of_files(batch.frame, task.procs, paths, batch.rows, warnings)
    start, end = frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy()
    bounds = np.cumsum([0, *batch.rows])
    owner = np.repeat(np.arange(len(paths)), batch.rows)
    out: dict[str, SourceResult] = {}
    for f, lo, hi in zip(batch.files, bounds[:-1], bounds[1:]):
        r = out[f.path] = SourceResult(f.path, "dftracer", meta=f.meta,
                                       warnings=f.warnings + [w for w in warnings if w.startswith(f"{f.path}: ")])
        r.window = (int(start[lo:hi].min()), int(end[lo:hi].max()))
        r.median = float(np.median(start[lo:hi]))
        far = _another_day(f.path, r.median, task.app_median)
        if far is not None:
            r.warnings.append(far)
            r.dropped = True
            owner[lo:hi] = -1
    if (owner < 0).any():
        frame, owner = frame[owner >= 0], owner[owner >= 0]
    frame = only_columns(A.apply_offsets(frame, task.offsets), task.columns)
    ranks = frame["rank"].to_numpy()
    if len(ranks) > 1 and (np.diff(ranks) < 0).any():  # each rank's rows together, in the files' order
        order = np.argsort(ranks, kind="stable")
        frame, ranks, owner = frame.take(order), ranks[order], owner[order]
    frame = frame.reset_index(drop=True)
    uniq, firsts = np.unique(ranks, return_index=True)
    flags = A.residual_flags(frame)  # the pieces' flags are only ever summed: the batch's go on its first
    for k, (rank, lo, hi) in enumerate(zip(uniq, firsts, [*firsts[1:], len(frame)])):
        r = out[paths[owner[lo]]]
        r.pieces.append(Piece(None, r.path, "dftracer", int(rank), int(hi - lo), flags if k == 0 else {},
                              frame=frame, span=(int(lo), int(hi))))
    for r, n in zip(out.values(), np.bincount(owner, minlength=len(paths))):
        r.rows = int(n)
    return out


def _clocks_apart(results: "list[SourceResult]") -> list[str]:
    """Sources other than app files whose rows lie more than :data:`DIFFERENT_DAY_NS` from the others' (a rank's
    clock reading 1970 beside 2026 ones): one warning naming each, since the job's wall time then spans both. A run
    with app files has already left such sources out against the app layer's time."""
    medians = {r.path: r.median for r in results if r.median is not None}
    if len(medians) < 2:
        return []
    middle = float(np.median(list(medians.values())))  # the majority's time, when there is a majority
    away = {p: m - middle for p, m in medians.items()}
    far = [p for p, d in away.items() if abs(d) > A.DIFFERENT_DAY_NS]
    if far and len(far) == len(medians):  # no majority to tell the wrong clock by: name them all, with their dates
        listing = ", ".join(f"{p} ({_utc_day(m)})" for p, m in medians.items())
        return [f"the sources' clocks lie more than a day apart: {listing}; a wrong clock or runs mixed: kept, but "
                "the job's wall time and every span across ranks include the gap"]
    return [f"{p}: its timestamps are {away[p] / 3.6e12:+.1f} h from the other sources' ({_utc_day(medians[p])}: "
            "a wrong clock, or a different run): kept, but the job's wall time and every span across ranks include "
            "the gap" for p in far]


def _utc_day(ns: float) -> str:
    try:
        return time.strftime("%Y-%m-%d", time.gmtime(ns / 1e9))
    except (OverflowError, OSError, ValueError):
        return f"{ns / 1e9:.3g} s after 1970"


def _weighted_median(medians: "list[tuple[float, int]]") -> float:
    """The median of a source's starts from its blocks' medians (exact for one block; a source split into blocks
    is judged by the block medians weighted by rows, which is what a 12-hour threshold needs)."""
    if len(medians) == 1:
        return medians[0][0]
    values = np.array([m for m, _ in medians])
    weights = np.array([n for _, n in medians], dtype=np.float64)
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2)])


#: kinds whose reader (:mod:`trace_merge.readers.pfw`) is thread-safe; the others read one file at a time in a
#: process (an inline engine with threads, :func:`merge_in_memory`)
_THREAD_SAFE_KINDS = ("dftracer", "timelogger")
_ONE_AT_A_TIME = threading.Lock()


def _blocks(task: SourceTask):
    """The source's :class:`SourceData`, block by block for DFTracer traces."""
    if task.data is not None:
        return [task.data]
    if task.kind == "dftracer":
        from trace_merge.readers import pfw

        return ahead(pfw.read_blocks(task.path, args="args" in task.columns))  # a summary's pieces keep no args
    kw: dict[str, Any] = {}
    if task.kind == "xplane":
        kw = {"rank": rank_from_name(task.path), "anchors": task.anchors}
    if task.kind in _THREAD_SAFE_KINDS:
        return [read_any(task.path, kind=task.kind, **kw)]
    with _ONE_AT_A_TIME:
        return [read_any(task.path, kind=task.kind, **kw)]


# -- wave 4: ranks ------------------------------------------------------------------------------------------


@dataclass
class RankTask:
    rank: int
    pieces: list
    out: Optional[str]  # the partition file to write (None: the partition is returned in memory)
    names: dict  # DFTracer file hash -> path, of the whole run
    darshan_alone: bool
    residual_basis: A.ResidualBasis
    columns: tuple = FRAME_COLUMNS
    analysis: Optional[Analysis] = None
    job: Any = None  # the analysis' job facts
    keep: bool = True  # False: the rows are summarised and let go, neither written nor returned
    windows: engines.Windows = engines.Windows()


@dataclass
class RankResult:
    rank: int
    rows: int
    partition: Partition
    start_ns: int
    end_ns: int
    residual: dict
    dxt_clock: list
    warnings: list
    layer_rows: dict  # layer -> rows
    parts: Any  # the analysis' tables of the rank (None without one)
    dxt_segments: int  # Darshan DXT segments among the rows
    #: a rank summarised window by window: the analysis' halves, still to run (:func:`_summarise_halves`), and the
    #: partition file they read, removed after them when the rows are not kept
    halves: list = field(default_factory=list)
    drop_after: Optional[str] = None


def _merge_rank_in_windows(task: RankTask) -> RankResult:
    """:func:`merge_rank` of a rank of more than ``task.windows.above_rows`` rows
    (:class:`~trace_merge.engines.Windows`), a window of ``task.windows.rows`` held at a time: ordered once
    (:class:`~trace_merge.rank_windows.RankWindows`), its steps propagated in two passes
    (:func:`~trace_merge.align.propagate_windows`), written window by window to its partition file; the analysis'
    halves, which read that file window by window, are handed back to run as tasks of their own
    (:func:`_summarise_halves`). The same rows, tags and tables as :func:`merge_rank`'s (tests/test_windows.py)."""
    import pyarrow as pa

    columns = [c for c in FRAME_COLUMNS if c in task.columns]
    windows = RankWindows([functools.partial(p.column, task.names) for p in task.pieces if p.rows], columns,
                           task.rank, task.windows.rows)
    n = len(windows.order)
    warnings = list(windows.warnings)
    residual_rows: list = []

    def source(cols: Optional[Sequence[str]]):
        for frame in windows(columns if cols is None else [c for c in columns if c in cols or c == "name"
                                                             or c == "rank"]):
            if cols is not None and task.residual_basis.fw and task.residual_basis.app:
                fw, app = A.residual_rows(frame)  # the readers' tags, before propagation
                residual_rows.extend(f for f in (fw, app) if len(f))
            yield frame

    assert task.out is not None  # merge_rank windows only ranks written to a file
    path = Path(task.out)
    tmp = path.with_name(path.name + ".tmp")
    layer_rows: dict = {}
    lo = hi = None
    dxt = 0
    schema = None
    with pa.OSFile(str(tmp), "wb") as sink:
        writer = None
        for frame in A.propagate_windows(source):
            table = pa.Table.from_pandas(frame[columns], preserve_index=False, schema=schema)
            if writer is None:
                schema = table.schema
                writer = pa.ipc.new_file(sink, schema)
            writer.write_table(table)
            for k, v in frame["layer"].value_counts(sort=False).items():
                if v:
                    layer_rows[str(k)] = layer_rows.get(str(k), 0) + int(v)
            lo = int(frame["start_ns"].min()) if lo is None else lo
            hi = int(frame["end_ns"].max()) if hi is None else max(hi, int(frame["end_ns"].max()))
            dxt += int(dxt_rows(frame).sum())
        if writer is not None:
            writer.close()
    os.replace(tmp, path)
    # in the order of the layer's categories, as a whole rank's value_counts gives them
    layer_rows = {str(k): layer_rows[str(k)] for k in windows.categories("layer") if layer_rows.get(str(k))}
    residual = A.residual_parts(concat_frames(residual_rows), task.residual_basis) if residual_rows else {}

    kept: Partition = ArrowFile(str(path)) if task.keep else NotKept()
    result = RankResult(task.rank, n, kept, lo or 0, hi or 0, residual, [], warnings,
                        layer_rows, None, dxt)
    if task.analysis is not None:  # summarised from the file by tasks of their own, side by side
        result.halves = task.analysis.rank_halves(StoredWindows(str(path)), task.job)
    if not task.keep:
        if result.halves:
            result.drop_after = str(path)
        else:
            path.unlink(missing_ok=True)
    for p in task.pieces:
        p.discard()
    return result


class StoredWindows:
    """``windows(columns)`` of a rank's partition file, its record batches in turn (the next read ahead), as the
    analysis reads a rank too big to hold whole; picklable, for the tasks that summarise it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
        import pyarrow as pa

        return ahead(schema_dtypes(pa.Table.from_batches([batch]).select([c for c in columns
                                                                           if c in batch.schema.names]))
                     for batch in file_batches(self.path))


def _summarise_halves(engine: Engine, done: "list[RankResult]", analysis: Analysis) -> int:
    """Run the halves of the ranks summarised window by window (:func:`_merge_rank_in_windows`) on ``engine``, each a
    task: one huge rank's passes run on two workers at once, not in turn on one (docs/measurements.md, "Trace
    shapes"). Returns the tasks run."""
    todo = [HalfTask(d.rank, h) for d in done for h in d.halves]
    if not todo:
        return 0
    # each half holds a window of the rank at a time
    out = iter(engine.map(_run_half, todo, sizes=[engines.WINDOW_ROWS] * len(todo)))
    for d in done:
        if d.halves:
            d.parts = analysis.joined([next(out) for _ in d.halves])
            d.halves = []
        if d.drop_after is not None:
            Path(d.drop_after).unlink(missing_ok=True)
    return len(todo)


@dataclass
class HalfTask:
    rank: int  # whose half (a worker that dies names it)
    run: Callable[[], Any]


def _run_half(task: HalfTask) -> Any:
    return task.run()


def merge_rank(task: RankTask) -> RankResult:
    """One rank: its pieces merged, ordered and tagged, written as its partition, and summarised (wave 4)."""
    if (sum(p.rows for p in task.pieces) > task.windows.above_rows and task.out is not None
            and not any(p.kind == "darshan" for p in task.pieces)):
        return _merge_rank_in_windows(task)

    warnings: list[str] = []
    clocks = []
    parts = [functools.partial(p.column, task.names) for p in task.pieces if p.kind != "darshan" and p.rows]
    darshan = [p for p in task.pieces if p.kind == "darshan"]
    if darshan:  # DXT segments are placed against the rank's app and POSIX rows (copies made only for that)
        app = concat_frames([p.load() for p in task.pieces if p.kind in A.APP_KINDS])
        posix = concat_frames([f[(f["layer"] == "posix").to_numpy()] for f in
                               (p.resolved(task.names) for p in task.pieces if p.kind == "dftracer")])
        for source in dict.fromkeys(p.source for p in darshan):
            segments = concat_frames([p.load() for p in darshan if p.source == source])
            placed, found, notes = place_source(source, segments, app, posix)
            if len(placed):
                parts.append(placed.__getitem__)
            clocks += [c.as_dict() for c in found]
            warnings += [] if task.darshan_alone else notes
        del app, posix
    frame, overlaps, residual = _merged_rows(parts, task.columns, task.residual_basis)
    warnings += overlaps
    partition: Partition = InMemory(frame) if task.keep else NotKept()
    if task.keep and task.out is not None:
        _write_arrow(frame, Path(task.out))
        partition = ArrowFile(task.out)
    layer_rows = {str(k): int(v) for k, v in frame["layer"].value_counts(sort=False).items() if v}
    result = RankResult(task.rank, len(frame), partition, int(frame["start_ns"].min()) if len(frame) else 0,
                        int(frame["end_ns"].max()) if len(frame) else 0, residual, clocks, warnings, layer_rows, None,
                        int(dxt_rows(frame).sum()))
    if task.analysis is not None:
        taken = RankRows(frame)
        del frame  # the hook's now: rows not kept are let go while it runs
        result.parts = task.analysis.rank(taken, task.job)
    # the pieces are read: they go here, beside the other ranks' work, not one by one in the driver after the wave
    # (docs/measurements.md#partitioned). Last, so that a task run again after its worker died still finds them.
    for p in task.pieces:
        p.discard()
    return result


def _merged_rows(parts: list, columns: Sequence[str], basis: A.ResidualBasis, ranks: bool = False
                 ) -> "tuple[pd.DataFrame, list[str], dict]":
    """The rows of ``parts`` (one rank's, or several ``ranks``': rank after rank) in time order, checked, their
    steps propagated: the rows, the checks' warnings and the residual's parts (rank -> its parts, for several
    ranks)."""
    rows = A.TimeOrdered(parts, ranks_apart=ranks)
    del parts
    frame = rows.frame([c for c in FRAME_COLUMNS if c in columns and c not in A.LATE_COLUMNS])
    warnings = A.check_layer_overlap(frame)
    residual = A.residual_parts(frame, basis) if not ranks else \
        {r: A.residual_parts(f, basis) for r, f in by_rank(frame)} if basis.fw and basis.app else {}
    frame = A.propagate_steps(frame, in_place=True)  # the rows are this task's own (TimeOrdered made them)
    late = rows.frame([c for c in FRAME_COLUMNS if c in columns and c in A.LATE_COLUMNS])
    del rows
    return pd.DataFrame({c: late[c] if c in late.columns else frame[c] for c in FRAME_COLUMNS if c in columns},
                        copy=False), warnings, residual


def merge_ranks(tasks: "Sequence[RankTask]") -> "list[RankResult]":
    """:func:`merge_rank` of each task; the small ranks of an in-memory merge (:func:`_rank_groups`) at once: their
    rows ordered, checked and tagged as one frame (each step works rank by rank), then put rank after rank, each
    rank's partition a span of that frame (:class:`~trace_merge.merged.InGroup`). The same rows in the same order
    as rank by rank, for one task's fixed costs (docs/measurements.md, "Trace shapes")."""
    if len(tasks) == 1:
        return [merge_rank(tasks[0])]
    first = tasks[0]
    frame, warnings, residual = _merged_rows([functools.partial(p.column, first.names) for p in
                                              joined([p for t in tasks for p in t.pieces]) if p.rows],
                                             first.columns, first.residual_basis, ranks=True)
    ranks = frame["rank"].to_numpy()  # rank after rank (TimeOrdered)
    uniq, firsts = np.unique(ranks, return_index=True)
    ends = np.append(firsts[1:], len(frame))
    lows = np.minimum.reduceat(frame["start_ns"].to_numpy(), firsts)
    highs = np.maximum.reduceat(frame["end_ns"].to_numpy(), firsts)
    dxt = np.add.reduceat(dxt_rows(frame).astype(np.int64), firsts)
    layer = frame["layer"].array
    layers = np.bincount(np.repeat(np.arange(len(uniq)), ends - firsts) * (len(layer.categories) + 1)
                         + layer.codes + 1, minlength=len(uniq) * (len(layer.categories) + 1)
                         ).reshape(len(uniq), -1)[:, 1:]  # rank x layer code: rows
    code_of = {c: i for i, c in enumerate(layer.categories)}
    out: list[RankResult] = []
    shared: dict = {}
    for k, (task, rank, lo, hi) in enumerate(zip(tasks, uniq, firsts, ends)):
        assert task.rank == rank, "a group's tasks are its ranks, ascending"
        own = _own_categories(task, shared)
        # in the order of the rank's own layer categories, as its frame's value_counts gives them
        layer_rows = {str(c): int(layers[k, code_of[c]]) for c in own["layer"]
                      if c in code_of and layers[k, code_of[c]]}
        out.append(RankResult(int(rank), int(hi - lo), InGroup(frame, (int(lo), int(hi)), own) if task.keep
                              else NotKept(), int(lows[k]), int(highs[k]), residual.get(int(rank), {}), [],
                              [] if out else warnings, layer_rows, None, int(dxt[k])))
        for p in task.pieces:
            p.discard()
    return out


def _own_categories(task: RankTask, shared: dict) -> "dict[str, pd.Index]":
    """The categories of a rank's categorical columns, its pieces' united, as :func:`merge_rank` gives them. A
    span's are its shared frame's: found once per frame (``shared``, kept by the caller while the frames live)."""
    def of(p: Piece, c: str) -> pd.Index:
        if p.span is None:
            return p.column(task.names, c).array.categories
        key = (id(p.frame), p.kind, c)
        if key not in shared:
            whole = p.shared_frame()
            shared[key] = whole, Piece(None, p.source, p.kind, p.rank, len(whole), {}, frame=whole
                                        ).column(task.names, c).array.categories
        return shared[key][1]

    out = {}
    for c in task.columns:
        if FRAME_DTYPES[c] == "category":
            found = [of(p, c) for p in task.pieces]
            out[c] = found[0] if len(found) == 1 else pd.Index(pd.unique(np.concatenate(found)), dtype=object)
    return out


def _rank_groups(tasks: "list[RankTask]") -> "list[list[RankTask]]":
    """An in-memory merge's rank tasks in groups of consecutive ranks for :func:`merge_ranks`, a group closed once
    it holds :data:`~trace_merge.schema.RANK_GROUP_ROWS` rows; a rank of as many rows, or with DXT segments to
    place, or with none, is a group of its own."""
    groups: list = []
    held, joinable = 0, False  # rows of the last group; whether it takes more ranks
    for t in tasks:
        rows = sum(p.rows for p in t.pieces)
        if not rows or rows >= RANK_GROUP_ROWS or any(p.kind == "darshan" for p in t.pieces):
            groups.append([t])
            joinable = False
        elif joinable and held < RANK_GROUP_ROWS:
            groups[-1].append(t)
            held += rows
        else:
            groups.append([t])
            held, joinable = rows, True
    return groups


def over_ranks(engine: Engine, fn: Any, partitions: "dict[int, Partition]", rows: "dict[int, int]", *extra: Any
               ) -> list:
    """``fn((partition, *extra))`` for every rank's partition, in rank order, on ``engine``."""
    require_rows(partitions)
    ranks = sorted(partitions)
    return engine.map(fn, [(partitions[r], *extra) for r in ranks], sizes=[rows[r] for r in ranks])


@contextlib.contextmanager
def engine_for_rows(engine: Optional[Engine], rows: "dict[int, int]") -> Iterator[Engine]:
    """``engine``, or a local one sized to ``rows`` that is closed afterwards."""
    if engine is not None:
        yield engine
        return
    own = engines.local(sum(rows.values()) * 100)
    try:
        yield own
    finally:
        own.close()


# -- the driver ---------------------------------------------------------------------------------------------


def new_spill_dir(parent: "str | os.PathLike[str] | None" = None) -> Path:
    """A fresh spill directory ``trace-merge-<host>-<pid>-<random>`` under ``parent`` (default: the system's
    temporary directory), after removing the ones this host's merges left when they were killed (their pid no
    longer runs; a directory of another host, or of a live merge, is left alone)."""
    import socket

    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())
    pattern = re.compile(rf"^trace-merge-{re.escape(host)}-(\d+)-")
    try:
        entries = list(os.scandir(base))
    except OSError:
        entries = []
    for entry in entries:
        m = pattern.match(entry.name)
        if not m or not entry.is_dir(follow_symlinks=False) or pid_alive(int(m.group(1))):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        log.warning("%s: spill directory of a merge that no longer runs (process %s); removed", entry.path, m.group(1))
    return Path(tempfile.mkdtemp(prefix=f"trace-merge-{host}-{os.getpid()}-", dir=base))


def merge_partitioned(path: "str | os.PathLike[str]", engine: Optional[Engine] = None,
                      spill_dir: "str | os.PathLike[str] | None" = None,
                      analysis: Optional[Analysis] = None, summary_only: bool = True, keep_rows: bool = True,
                      windows: engines.Windows = engines.Windows()) -> Merge:
    """Merge and summarise the traces under ``path`` partition by partition (see the module docstring).

    Parameters
    ----------
    path
        A run directory, a directory of loose trace files, or one file (as :func:`trace_merge.merge.merge_path`).
    engine
        An engine of :mod:`trace_merge.engines` (default: :func:`trace_merge.engines.local` sized to the input).
    spill_dir
        Where the pieces and rank partitions are written (a fresh directory below it; default: the system's
        temporary directory). Dask workers must see it (a shared file system).
    analysis
        What to run on each rank as it is merged (:class:`Analysis`; the summary:
        :class:`trace_merge.kernels.SummaryHook`); its reduction is :attr:`Merge.summary`.
    summary_only
        Keep only the columns a summary needs (``args`` and ``host`` are left out of the partitions).
    keep_rows
        False: each rank's rows are summarised and let go, no partition is written (with ``analysis``; what writing
        them cost: docs/measurements.md#partitioned); :meth:`Merge.load` then raises
        :class:`~trace_merge.merged.RowsNotKept`.
    windows
        When a rank is merged window by window, and the window's rows (:class:`~trace_merge.engines.Windows`).
    """
    path = Path(path)
    files, manifest, warnings, inputs = _found(path)
    if engine is None:
        engine = engines.local(sources.bytes_on_disk(p for p, _ in files))
    spill = new_spill_dir(spill_dir)
    columns = SUMMARY_COLUMNS if summary_only else FRAME_COLUMNS
    try:
        tasks = _tasks(files, warnings, str(spill), columns, analysis)
        return _run(path, tasks, manifest, warnings, inputs, engine, spill, columns, analysis, _launch(manifest),
                    sources.launch_records(path), keep_rows=keep_rows or analysis is None, rank_windows=windows)
    except BaseException:
        shutil.rmtree(spill, ignore_errors=True)
        raise


#: threads of the in-memory merge: one per core, at most 4 (each file in flight holds its text)
_THREADS = max(1, min(4, os.cpu_count() or 1))


def merge_in_memory(path: "str | os.PathLike[str]", threads: int = _THREADS, batches: bool = True) -> Merge:
    """The same pipeline in this process, every piece and partition kept in memory and every column kept, without
    the summary (:func:`trace_merge.merge.merge_path`: a run that fits in memory), reading up to ``threads`` files
    at once, small DFTracer traces in batches (:func:`ingest_batch`; ``batches=False``: one by one, each rank's
    categories then exactly its files', as a stored merge keeps them)."""
    path = Path(path)
    files, manifest, warnings, inputs = _found(path)
    tasks = _tasks(files, warnings, None, FRAME_COLUMNS, None)
    return _run(path, tasks, manifest, warnings, inputs, Inline(threads), None, FRAME_COLUMNS, None,
                _launch(manifest), sources.launch_records(path), batches=batches)


def merge_read(read: Sequence[SourceData], launch_ns: Optional[int] = None,
               launched: Sequence[LaunchRecord] = ()) -> Merge:
    """:func:`merge_in_memory` of sources already read (``launch_ns``: when the run was launched, if known;
    ``launched``: the launcher's records of the ranks, ``launch/rank-<r>.json``)."""
    tasks = [SourceTask(i, s.path, s.kind, None, FRAME_COLUMNS, data=s) for i, s in enumerate(read)]
    return _run(None, tasks, None, [], {}, Inline(), None, FRAME_COLUMNS, None, launch_ns, launched)


def _found(path: Path) -> tuple:
    """:func:`trace_merge.sources.find_sources`, refusing a path with no trace files."""
    files, manifest, warnings, inputs = sources.find_sources(path)
    if not files:
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise TraceInputError(path, f"no trace files found (looked for {sources.LOOKED_FOR}){why}")
    return files, manifest, warnings, inputs


def _launch(manifest: Optional[dict]) -> Optional[int]:
    return sources.launched_at(manifest)


def _tasks(files: list, warnings: list, spill: Optional[str], columns: tuple, analysis: Optional[Analysis]
           ) -> "list[SourceTask]":
    """A task per file whose kind is known (the others become warnings)."""
    tasks = []
    for i, (p, kind) in enumerate(files):
        try:
            tasks.append(SourceTask(i, str(p), kind or detect(p), spill, columns, analysis=analysis))
        except TraceInputError as exc:
            warnings.append(str(exc))
    return tasks


def _run(path: Optional[Path], tasks: "list[SourceTask]", manifest: Optional[dict], warnings: list, inputs: dict,
         engine: Engine, spill: Optional[Path], columns: tuple, analysis: Optional[Analysis], launch: Optional[int],
         launched: Sequence[LaunchRecord], keep_rows: bool = True,
         rank_windows: engines.Windows = engines.Windows(), batches: bool = False) -> Merge:
    app_tasks = [t for t in tasks if t.kind in A.APP_KINDS]
    clock = _Clock(engine)
    app_results = engine.map(ingest, app_tasks)
    clock("app files", len(app_tasks))
    results = list(app_results)
    app_sources = [SourceData(r.path, r.kind, empty_frame(), meta=r.meta) for r in app_results if r.error is None]
    windows = {r.path: (r.window[0], r.window[1], r.meta.rank if isinstance(r.meta, TimeLoggerMeta) else None)
               for r in app_results if r.error is None and r.window is not None}
    clock_warnings, dropped = A.check_app_clocks(app_sources, launch, windows)
    kept_app = [s for s in app_sources if s.path not in dropped]
    procs = A.launched_processes(launched, A.processes(kept_app))
    offsets = A.rank_offsets(procs)
    starts = [r.starts for r in app_results if r.error is None and r.path not in dropped and r.starts is not None]
    app_median = float(np.median(np.concatenate(starts))) if starts else None
    anchors = sources.anchors_by_rank(kept_app)
    all_anchors = [a for lst in anchors.values() for a in lst]
    for r in app_results:  # app rows were spilled before the offsets were known: shift them now, per piece
        if r.path in dropped:
            for p in r.pieces:
                p.discard()
            r.pieces, r.facts = [], []
    _shift_app_pieces([p for r in app_results if r.path not in dropped for p in r.pieces], offsets)
    other = [t for t in tasks if t.kind not in A.APP_KINDS]
    for t in other:
        rank = rank_from_name(t.path) if t.kind == "xplane" else None
        t.procs, t.offsets, t.app_median = procs, offsets, app_median
        t.anchors = anchors.get(rank, []) if rank is not None else all_anchors
    results += _ingest_all(engine, other, batches)
    clock("other sources", len(other))
    for r in results:
        if r.error is not None:
            warnings.append(r.error)
        warnings.extend(r.warnings)
        if r.dropped:
            dropped.append(r.path)
    usable = [r for r in results if r.error is None and r.path not in dropped and
              (r.rows or (r.counters is not None and len(r.counters)))]
    if not usable:
        why = "; ".join(warnings) if warnings else "all empty"
        raise TraceInputError(path if path is not None else ", ".join(t.path for t in tasks) or "no sources",
                              f"no usable trace data ({why})")
    warnings.extend(sources.ended_early(app_sources))
    warnings.extend(_clocks_apart([r for r in usable if r.path not in dropped]))
    if path is not None and sources.is_run_dir(path):
        warnings.extend(sources.missing_ranks(path, manifest, app_sources))
    warnings.extend(clock_warnings)
    names: dict[str, str] = {}
    for r in results:
        if r.kind == "dftracer" and isinstance(r.meta, DFTracerMeta):
            names.update(r.meta.files)
    kept = [r for r in results if r.error is None and r.path not in dropped]
    pieces_of: dict[int, list[Piece]] = {}
    for r in kept:
        for p in r.pieces:
            pieces_of.setdefault(p.rank, []).append(p)
    job = analysis.job([f for r in kept for f in r.facts], names) if analysis is not None else None
    darshan_alone = all(r.kind == "darshan" for r in kept if r.rows)
    basis = A.ResidualBasis.of([_residual_flags(r) for r in kept])
    rank_tasks = [RankTask(rank, pieces_of[rank], str(spill / f"partition-rank-{rank}.arrow") if spill else None,
                           names, darshan_alone, basis, columns, analysis, job, keep_rows, rank_windows)
                  for rank in sorted(pieces_of)]
    # merged in memory, small ranks go a group to a task: their rows end as one frame whatever the partitions
    groups = _rank_groups(rank_tasks) if spill is None else [[t] for t in rank_tasks]
    done = [d for ds in engine.map(merge_ranks, groups, sizes=[sum(p.rows for t in g for p in t.pieces)
                                                                for g in groups]) for d in ds]
    clock("ranks", len(rank_tasks))  # each task removed its pieces (merge_rank)
    if analysis is not None:
        clock("halves of ranks summarised window by window", _summarise_halves(engine, done, analysis))
    for d in done:
        warnings.extend(d.warnings)
    counters = [r.counters for r in kept if r.counters is not None and len(r.counters)]
    counters_df = (pd.concat(counters, ignore_index=True) if counters else empty_counters()).astype(COUNTER_DTYPES)
    summary = analysis.combine([d.parts for d in done], job, counters_df) if analysis is not None else None
    layer_rows: dict = {}
    for d in done:
        for layer, n in d.layer_rows.items():
            layer_rows[layer] = layer_rows.get(layer, 0) + n
    for w in warnings:
        log.warning("%s", w)
    info = MergeInfo(
        sources=[r.path for r in kept], inputs=inputs, warnings=warnings,
        residual=A.residual_of([d.residual for d in done], basis), clock_offsets_ns=offsets,
        dxt_clock=[c for d in done for c in d.dxt_clock],
        dropped_intervals={r.path: r.meta.dropped for r in kept
                           if r.kind in A.APP_KINDS and isinstance(r.meta, TimeLoggerMeta) and r.meta.dropped},
        rows_per_layer=dict(sorted(layer_rows.items(), key=lambda kv: -kv[1])),
        rows=sum(d.rows for d in done), counter_rows=len(counters_df))
    return Merge(
        partitions={d.rank: d.partition for d in done}, rank_rows={d.rank: d.rows for d in done},
        counters=counters_df, info=info, manifest=manifest, spill=spill, job=job, summary=summary,
        parts=[d.parts for d in done] if analysis is not None else None,
        dxt_segments=sum(d.dxt_segments for d in done))


def _ingest_all(engine: Engine, tasks: "list[SourceTask]", in_batches: bool) -> "list[SourceResult]":
    """:func:`ingest` of each task on ``engine``, in their order; with ``in_batches``, small DFTracer traces merged
    in memory in batches (:func:`ingest_batch`)."""
    batches = _source_batches(tasks) if in_batches else []
    batched = {t.index for b in batches for t in b}
    alone = [[t] for t in tasks if t.index not in batched]
    # a batch is Python work on small tables, which threads only slow (docs/measurements.md#threads)
    done = {t.index: r for work, results in ((batches, Inline(1).map(ingest_batch, batches)),
                                             (alone, engine.map(ingest_batch, alone)))
            for group, rs in zip(work, results) for t, r in zip(group, rs)}
    return [done[t.index] for t in tasks]


class _Clock:
    """Logs how long each wave took (``--debug``)."""

    def __init__(self, engine: Engine) -> None:
        import time

        self._now = time.perf_counter
        self._last = self._now()
        self._engine = engine.name

    def __call__(self, wave: str, tasks: int) -> None:
        now = self._now()
        log.debug("partitioned merge (%s engine): %s, %d tasks, %.3f s", self._engine, wave, tasks, now - self._last)
        self._last = now


def _shift_app_pieces(pieces: Sequence[Piece], offsets: dict) -> None:
    """Subtract the clock offsets from app rows spilled before they were known."""
    if not any(offsets.values()):
        return
    for p in pieces:
        if offsets.get(p.rank):
            p.store(A.apply_offsets(p.load(), offsets))


def _residual_flags(r: SourceResult) -> dict:
    return {k: sum(int(p.residual_flags.get(k, 0)) for p in r.pieces) for k in A.RESIDUAL_FLAGS}
