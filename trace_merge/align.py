"""The one clock-alignment module: every source's rows onto absolute epoch ns on rank 0's clock.

Steps (the pipeline of :mod:`trace_merge.partitioned` runs them, source by source and rank by rank):

1. **Ranks for POSIX rows.** DFTracer does not know MPI ranks; its rows carry ``(host, pid)``. The app
   (TimeLogger) files do: one file per process, forked children included, each with ``rank``, ``pid``
   and ``hostname`` in its metadata. Rows of non-app sources whose ``(host, pid)`` (or, when the host is
   missing on either side, ``pid``) matches an app process get that process's rank; otherwise a
   ``rank-<r>`` / ``rank<r>`` in the file name decides; otherwise the reader's rank stays.
2. **Different day.** An app file starting more than 12 h from the run's launch, or (without a launch time)
   a rank that far from the others, and a source whose median start time is more than 12 h from the app
   layer's median are reported (``"<file>: ..."``) and left out: its clock or its run is not this one. App
   layers shifted by more than 10 s from the other ranks', or from their own lower layers, are flagged
   (:func:`check_app_clocks`, :func:`check_layer_overlap`).
3. **Rank clock offsets.** Each rank's ``clock_offset_ns`` (its ``time_ns`` minus rank 0's, from the
   ``clock_sync`` metadata) is subtracted from every row of that rank, whatever the layer.
4. **Alignment residual** (:func:`alignment_residual`): framework events that carry a step (TF's ``step_num``
   events, the operators inside a PyTorch ``ProfilerStep#N``) must fall inside that step's app interval.
5. **Darshan DXT placement** (:mod:`trace_merge.dxt_clock`): each rank's DXT segments are moved from the
   job-header placement onto the aligned clock by matching their content (file, offset, size) to DFTracer
   POSIX calls or app phases of the same rank; the header placement is kept, with a warning, when the
   content cannot decide.
6. **Epoch/step propagation** (:func:`propagate_steps`): non-app rows get the epoch/step of the
   innermost tagged app interval of the same rank that contains them.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from timelogger.records import LaunchRecord

from .intervals import (
    Axis,
    combined_codes,
    drop_from_forest,
    innermost,
    narrow,
    nesting_parents,
    position_type,
    spans_several,
    start_order,
)
from .readers import rank_from_name
from .readers.pfw import TimeLoggerMeta
from .schema import DIFFERENT_DAY_NS, STEP_PHASE, SourceData, concat_column, empty_frame
from .threads import thread_map

log = logging.getLogger(__name__)

#: framework events further than this outside their step's app interval count as "outside"
RESIDUAL_TOLERANCE_NS = 1_000_000
APP_KINDS = ("timelogger",)


@dataclass
class Process:
    """One instrumented process, from an app file's metadata."""

    rank: int
    pid: int
    host: "str | None"
    clock_offset_ns: int = 0


def processes(app_sources: Iterable[SourceData]) -> list[Process]:
    """The instrumented processes described by app (TimeLogger) sources."""
    out = []
    for src in app_sources:
        m = src.meta
        # the reader checked these (a bad value is warned about there and comes as None)
        if not isinstance(m, TimeLoggerMeta) or m.side_layer or m.rank is None or m.pid is None:
            continue
        out.append(Process(m.rank, m.pid, m.host, m.clock_offset_ns if m.clock_offset_ns is not None else 0))
    return out


def launched_processes(records: Iterable[LaunchRecord], known: Sequence[Process]) -> list[Process]:
    """``known`` plus the ranks' processes the launcher recorded (``launch/rank-<r>.json``: rank, pid, host) that no
    app file describes: a program under ``timelogger run`` that writes no TimeLogger file (DLIO, any script)
    still gets its POSIX, Darshan and TF rows placed on its ranks (``exec`` keeps the launcher's pid)."""
    out = list(known)
    seen = {(p.host, p.pid) for p in known}
    for r in records:
        rank, pid, host = r.rank, r.pid, r.hostname
        if rank is None or pid is None or rank < 0 or pid < 0:
            continue
        if (host, pid) not in seen:
            out.append(Process(rank, pid, host))
            seen.add((host, pid))
    return out


def rank_offsets(procs: Sequence[Process]) -> dict[int, int]:
    """rank -> clock offset (ns) to subtract. A rank's processes share its clock; take any nonzero."""
    offsets: dict[int, int] = {}
    for p in procs:
        if p.clock_offset_ns or p.rank not in offsets:
            offsets[p.rank] = p.clock_offset_ns
    return offsets


def assign_ranks(frame: pd.DataFrame, procs: Sequence[Process], path: str,
                 warnings: "list[str] | None" = None) -> pd.DataFrame:
    """Give rows of a non-app source the rank of the app process with the same (host, pid).

    Rows whose process is unknown get the rank named in ``path`` (``rank-<r>``, ``trace-<r>-of-<n>``) when
    there is one and keep the reader's rank otherwise. Rows left without a rank (-1) are never silent: a warning
    naming ``path`` and their pids is added to ``warnings`` (once per source).
    """
    return assign_ranks_of_files(frame, procs, [path], [len(frame)], warnings)


def assign_ranks_of_files(frame: pd.DataFrame, procs: Sequence[Process], paths: Sequence[str], rows: Sequence[int],
                          warnings: "list[str] | None" = None) -> pd.DataFrame:
    """:func:`assign_ranks` of the rows of several sources, one after the other (``rows``: each one's count)."""
    if not len(frame):
        return frame
    by_host_pid = {(p.host, p.pid): p.rank for p in procs if p.host}
    by_pid: dict[int, int] = {}
    for p in procs:
        by_pid.setdefault(p.pid, p.rank)
    ranks = frame["rank"].to_numpy().copy()
    file_ranks = [rank_from_name(path) for path in paths]
    # Unique (host, pid) pairs are few: map them, not the rows. One int64 key per row:
    # host category code (+1, so a missing host is 0) in the high bits, pid (< 2**32) in the low ones.
    host = frame["host"].astype("category")
    host_code = host.cat.codes.to_numpy().astype(np.int64) + 1
    key = (host_code << 32) | (frame["pid"].to_numpy().astype(np.int64) & 0xFFFFFFFF)
    inverse, uniq = pd.factorize(key)  # hashed: a block's few processes, not a sort of its rows
    categories = list(host.cat.categories)
    mapped = np.empty(len(uniq), dtype=np.int64)
    for i, k in enumerate(uniq.tolist()):
        code, pid = (k >> 32) - 1, k & 0xFFFFFFFF
        rank = by_host_pid.get((categories[code], pid)) if code >= 0 else None
        if rank is None:
            rank = by_pid.get(pid)
        mapped[i] = -1 if rank is None else rank
    row_rank = mapped[inverse]
    known = row_rank >= 0
    ranks[known] = row_rank[known]
    named = np.repeat(np.array([-2 if r is None else r for r in file_ranks], dtype=np.int64), rows)  # -2: none
    by_name = ~known & (named != -2)
    ranks[by_name] = named[by_name]
    out = frame.copy(deep=False)  # only whole columns are replaced below
    out["rank"] = ranks.astype(np.int64)
    unplaced = ranks < 0
    if warnings is not None and unplaced.any():
        bounds = np.cumsum([0, *rows])
        for path, lo, hi in zip(paths, bounds[:-1], bounds[1:]):
            if not unplaced[lo:hi].any():
                continue
            pids = sorted(set(frame["pid"].to_numpy()[lo:hi][unplaced[lo:hi]].tolist()))
            shown = ", ".join(str(p) for p in pids[:5]) + (", ..." if len(pids) > 5 else "")
            text = (f"{path}: {int(unplaced[lo:hi].sum()):,} rows of process(es) {shown} could not be placed on a "
                    "rank (no app file, launch record or rank in the file name names them); they are pooled as "
                    "rank -1")
            if not any(w.startswith(f"{path}: ") and "pooled as rank -1" in w for w in warnings):
                warnings.append(text)
    return out


def apply_offsets(frame: pd.DataFrame, offsets: Mapping[int, int]) -> pd.DataFrame:
    """Subtract each rank's clock offset (ns) from ``start_ns``/``end_ns`` of its rows."""
    if not len(frame) or not any(offsets.values()):
        return frame
    ranks = frame["rank"].to_numpy()
    shift = np.zeros(len(frame), dtype=np.int64)
    for rank, off in offsets.items():
        if off:
            shift[ranks == rank] = off
    out = frame.copy(deep=False)  # only whole columns are replaced below
    out["start_ns"] = frame["start_ns"].to_numpy() - shift
    out["end_ns"] = frame["end_ns"].to_numpy() - shift
    return out


def _by_rank(rank: np.ndarray, rows: np.ndarray) -> "dict[int, np.ndarray]":
    """rank -> the entries of ``rows`` (row indices, ascending) on that rank, each group still ascending."""
    keys = narrow(rank[rows])
    order = np.argsort(keys, kind="stable")
    uniq, first = np.unique(keys[order], return_index=True)
    return {int(r): rows[part] for r, part in zip(uniq, np.split(order, first[1:]))}


def propagate_steps(frame: pd.DataFrame, in_place: bool = False) -> pd.DataFrame:
    """Copy ``epoch``/``step`` from app intervals onto the non-app rows they contain (same rank).

    For each of ``step`` and ``epoch`` separately, a row takes the value of the innermost app interval
    of its rank that has that column set and contains the row in time. App intervals that contain
    intervals with other values (an ``Epoch`` phase around its steps, a ``Train Loop`` around its
    epochs) are containers: their tag is only the value current when they ended, so it is not lent to
    anything and is cleared on the container itself (a ``Train Loop`` tagged with the last epoch would
    otherwise stretch that epoch's window over the whole run). Rows contained in no usable interval keep
    what their reader gave them (e.g. the TF profiler's own ``step_num``).

    ``in_place``: write the tags into ``frame``'s own ``epoch`` and ``step`` columns (a caller that owns them: a
    rank task's frame) instead of new ones, lowering the rank task's high-water mark (docs/measurements.md#align).
    """
    if not len(frame):
        return frame
    is_app = (frame["layer"] == "app").to_numpy()  # compares category codes, not strings
    if not is_app.any():
        return frame
    out = frame if in_place else frame.copy(deep=False)  # only whole columns are replaced below
    rank = frame["rank"].to_numpy()
    start = frame["start_ns"].to_numpy()
    end = frame["end_ns"].to_numpy()
    pid, tid = frame["pid"].to_numpy(), frame["tid"].to_numpy()
    # each column as int64 values and a missing mask, written in place: the app rows' tags are read from it before
    # any is cleared, the other rows written (it was a float copy with NaN for missing, a second copy for the result
    # and a conversion back: inexact above 2**53, and a higher peak: docs/measurements.md#align)
    values = {c: _tag_arrays(out, c, in_place) for c in ("step", "epoch")}
    tagged_any = is_app & ~(values["step"][1] & values["epoch"][1])
    # rows, and positions among a rank's app rows below, as int32 where they fit: half the memory of the index
    # arrays at a rank task's high-water mark
    index = position_type(len(frame))
    apps_of = _by_rank(rank, np.flatnonzero(tagged_any).astype(index))  # rank -> its rows, still in start order
    targets_of = _by_rank(rank, np.flatnonzero(~is_app).astype(index))
    none = np.zeros(0, dtype=index)

    def one_rank(r: int) -> None:
        # each array is taken once and let go as soon as it is used up: this is a rank task's high-water mark
        apps, targets = apps_of.pop(r), targets_of.pop(r, none)
        s = start[apps]
        order = start_order(s, lambda tied: s[tied] - end[apps[tied]])  # ties: longer first
        s = s[order]  # one reordered array at a time, the old one let go
        apps = apps[order]
        del order
        e = end[apps]
        forest = nesting_parents(s, e).astype(index)  # one sweep serves both columns
        own = _thread_parents(s, e, combined_codes(pid[apps], tid[apps]), forest).astype(index, copy=False)
        for vals, missing in values.values():
            untagged = missing[apps]  # read before a container's tag is cleared below
            thread_parent, keep = drop_from_forest(own, untagged)
            tagged = apps[keep]
            containers = spans_several(thread_parent, _narrow_tags(vals[tagged]))
            del thread_parent
            missing[tagged[containers]] = True
            del tagged
            parent, _ = drop_from_forest(forest, untagged)
            del untagged
            parent, still = drop_from_forest(parent, containers)
            keep = keep[still]
            del containers, still
            if len(targets):
                _tag_targets(targets, start, end, s[keep], e[keep], parent, vals, apps[keep], vals, missing)
            del parent, keep

    ranks = list(apps_of)
    # numpy releases the GIL in the sorts, searches and gathers that make up a rank's work
    thread_map(one_rank, ranks, rows=max((len(apps_of[r]) + len(targets_of.get(r, none)) for r in ranks), default=0))
    for col, (vals, missing) in values.items():
        if out[col].array._data is not vals:  # copies (not the column's own buffers) become the new column
            out[col] = pd.arrays.IntegerArray(vals, missing)
    return out


_TAGS = ("step", "epoch")


@dataclass
class _AppRows:
    """App rows with a tag, as plain arrays (a window's, or those carried from earlier windows): bounds, thread,
    each tag column's values and missing mask as the reader gave them, and ``gid``, the row's number among the
    rank's app rows with a tag, in time order."""

    s: np.ndarray
    e: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    vals: dict
    missing: dict
    gid: np.ndarray

    @classmethod
    def of(cls, frame: pd.DataFrame, first_gid: int, tags: Optional[dict] = None) -> "tuple[_AppRows, np.ndarray]":
        """The app rows of ``frame`` that have a tag, and their positions in it (``tags``: the frame's
        :func:`_tag_arrays` by column, when the caller has them)."""
        tags = tags or {c: _tag_arrays(frame, c, in_place=False) for c in _TAGS}
        is_app = (frame["layer"] == "app").to_numpy()
        at = np.flatnonzero(is_app & ~(tags["step"][1] & tags["epoch"][1]))
        rows = cls(frame["start_ns"].to_numpy(dtype=np.int64)[at], frame["end_ns"].to_numpy(dtype=np.int64)[at],
                   frame["pid"].to_numpy()[at], frame["tid"].to_numpy()[at], {c: tags[c][0][at] for c in _TAGS},
                   {c: tags[c][1][at] for c in _TAGS}, first_gid + np.arange(at.size, dtype=np.int64))
        return rows, at

    def take(self, idx: np.ndarray) -> "_AppRows":
        return _AppRows(self.s[idx], self.e[idx], self.pid[idx], self.tid[idx],
                        {c: v[idx] for c, v in self.vals.items()}, {c: m[idx] for c, m in self.missing.items()},
                        self.gid[idx])

    def after(self, carried: "_AppRows") -> "_AppRows":
        """``carried`` then these rows, in start order (ties: longer first), as the whole rank orders them."""
        cat = _AppRows(np.concatenate((carried.s, self.s)), np.concatenate((carried.e, self.e)),
                       np.concatenate((carried.pid, self.pid)), np.concatenate((carried.tid, self.tid)),
                       {c: np.concatenate((carried.vals[c], self.vals[c])) for c in _TAGS},
                       {c: np.concatenate((carried.missing[c], self.missing[c])) for c in _TAGS},
                       np.concatenate((carried.gid, self.gid)))
        return cat.take(start_order(cat.s, cat.s - cat.e))


def _no_app_rows() -> _AppRows:
    z = np.zeros(0, dtype=np.int64)
    return _AppRows(z, z, z, z, {c: z for c in _TAGS}, {c: np.zeros(0, dtype=bool) for c in _TAGS}, z)


def _chain(parent: np.ndarray, last: "Iterable[int]") -> np.ndarray:
    """``last`` and all their ancestors in the forest ``parent``, ascending: what a stack sweep holds after them."""
    out: set = set()
    for i in last:
        i = int(i)
        while i >= 0 and i not in out:
            out.add(i)
            i = int(parent[i])
    return np.asarray(sorted(out), dtype=np.int64)


#: the columns :func:`propagate_windows` reads in its first pass
PROPAGATE_COLUMNS = ("layer", "pid", "tid", "start_ns", "end_ns", "epoch", "step")


def propagate_windows(windows: "Callable[[Optional[Sequence[str]]], Iterable[pd.DataFrame]]"
                      ) -> "Iterable[pd.DataFrame]":
    """:func:`propagate_steps` of one rank's rows given window by window: ``windows(columns)`` gives the rank's rows
    (only ``columns``; None: every column) as consecutive frames in time order, cut where the start changes, each
    time it is called (twice). Yields each window with its ``epoch`` and ``step`` tags (every column); the
    concatenation is ``propagate_steps`` of the whole rank.

    Only a window and what a stack sweep holds at its start are in memory (the ancestors of the last app row, per
    thread and across threads: the nesting depth), not the rank's app rows: a nesting forest computed over the
    carried ancestors and a window is the whole forest's on that window. Whether an app row is a container is known
    only once its last descendant is seen, so a first pass over the windows marks the containers (marks are only
    ever set: a carried ancestor marked later is marked in the end) and a second tags the rows."""
    containers = {c: np.zeros(0, dtype=bool) for c in _TAGS}
    carried, first = _no_app_rows(), 0
    # pass one: the containers, per thread (a container holds rows of its own thread)
    for frame in windows(PROPAGATE_COLUMNS):
        rows, _ = _AppRows.of(frame, first)
        first += rows.s.size
        for c in _TAGS:
            containers[c] = np.concatenate((containers[c], np.zeros(rows.s.size, dtype=bool)))
        seq = rows.after(carried)
        if not seq.s.size:
            continue
        thread = combined_codes(seq.pid, seq.tid)
        own = _thread_parents(seq.s, seq.e, thread, nesting_parents(seq.s, seq.e)).astype(np.int64)
        for c in _TAGS:
            parent, keep = drop_from_forest(own, seq.missing[c])
            containers[c][seq.gid[keep[spans_several(parent, _narrow_tags(seq.vals[c][keep]))]]] = True
        last_of_thread = np.unique(thread[::-1], return_index=True)[1]
        carried = seq.take(_chain(own, seq.s.size - 1 - last_of_thread))
    carried, first = _no_app_rows(), 0
    for frame in windows(None):  # pass two: the tags, across threads
        out = {c: _tag_arrays(frame, c, in_place=False) for c in _TAGS}  # the window's tags, written below
        rows, at = _AppRows.of(frame, first, out)  # copies of the app rows' tags, read before any is written
        first += rows.s.size
        seq = rows.after(carried)
        if seq.s.size:
            forest = nesting_parents(seq.s, seq.e).astype(np.int64)
            targets = np.flatnonzero(~(frame["layer"] == "app").to_numpy())
            start, end = frame["start_ns"].to_numpy(dtype=np.int64), frame["end_ns"].to_numpy(dtype=np.int64)
            for c in _TAGS:
                vals, missing = out[c]
                cont = containers[c][seq.gid]
                parent, keep = drop_from_forest(forest, seq.missing[c])
                parent, still = drop_from_forest(parent, cont[keep])
                keep = keep[still]
                _tag_targets(targets, start, end, seq.s[keep], seq.e[keep], parent, seq.vals[c], keep, vals, missing)
                missing[at[containers[c][rows.gid]]] = True  # a container's own tag says nothing: cleared
            carried = seq.take(_chain(forest, [seq.s.size - 1]))
        yield frame.assign(**{c: pd.arrays.IntegerArray(v, m) for c, (v, m) in out.items()})


#: target rows looked up at a time (:func:`_tag_targets`): their starts, ends and hits are a few MiB, not a
#: rank's worth
TARGET_CHUNK = 1 << 18


def _tag_targets(targets: np.ndarray, start: np.ndarray, end: np.ndarray, s: np.ndarray, e: np.ndarray,
                 parent: np.ndarray, tags: np.ndarray, rows: np.ndarray, vals: np.ndarray,
                 missing: np.ndarray) -> None:
    """Give each of the ``targets`` rows the tag of the innermost of the intervals ``s``/``e`` (forest ``parent``,
    their tags ``tags[rows]``) that contains it, where one does; :data:`TARGET_CHUNK` targets at a time. Writes the
    targets' rows of ``vals`` and ``missing`` (``tags`` may be ``vals`` itself: the rows are disjoint)."""
    for at in range(0, len(targets), TARGET_CHUNK):
        chunk = targets[at:at + TARGET_CHUNK]
        hit = innermost(s, e, start[chunk], end[chunk], parent)
        inside = hit >= 0
        found = chunk[inside]
        vals[found] = tags[rows[hit[inside]]]
        missing[found] = False


def _narrow_tags(values: np.ndarray) -> np.ndarray:
    """Tag values as int32 where they fit (:func:`spans_several` only compares them): half the memory of int64."""
    if len(values) and -(2**31) <= values.min() and values.max() < 2**31:
        return values.astype(np.int32)
    return values


def _tag_arrays(frame: pd.DataFrame, col: str, in_place: bool) -> "tuple[np.ndarray, np.ndarray]":
    """``(values, missing)`` of an ``Int64`` tag column: its own buffers when ``in_place`` allows (values under the
    mask are never read), else copies (int64, 0 where missing)."""
    arr = frame[col].array
    if in_place and isinstance(arr, pd.arrays.IntegerArray) and arr.dtype == "Int64" \
            and arr._data.flags.writeable and arr._mask.flags.writeable:
        return arr._data, arr._mask
    return frame[col].to_numpy(dtype=np.int64, na_value=0), frame[col].isna().to_numpy()


def _thread_parents(start: np.ndarray, end: np.ndarray, thread: np.ndarray, forest: np.ndarray) -> np.ndarray:
    """Each interval's parent in the nesting forest of its own thread (-1 for roots); intervals in start order, ties
    longer first, ``thread`` their threads' codes (:func:`combined_codes` of pid and tid) and ``forest`` their
    nesting forest across threads. A container holds intervals of its own thread:
    DLIO's compute step on the main thread overlaps its reader threads' events, whose own step counters say nothing
    about the step it belongs to.

    A parent in either forest is the latest-started earlier interval still open (:func:`nesting_parents`), so where
    ``forest`` gives one of the interval's own thread (or none) it is the thread's parent too: only the threads of
    intervals whose ``forest`` parent is on another thread are swept again (a 2.5 M-event rank: its 130 k reader-thread
    rows, not also its 1.6 M main-thread rows)."""
    crossing = (forest >= 0) & (thread[np.maximum(forest, 0)] != thread)
    if not crossing.any():
        return forest
    again = np.flatnonzero(np.isin(thread, np.unique(thread[crossing])))
    thread, start, end = thread[again], start[again], end[again]
    axis = Axis(thread, start, end, int(thread.max()) + 1)
    ts, te = axis.to_axis(thread, start), axis.to_axis(thread, end)
    order = start_order(ts, ts - te)
    nested = nesting_parents(ts[order], te[order])
    sub = np.empty(again.size, dtype=np.int64)
    sub[order] = np.where(nested >= 0, order[np.maximum(nested, 0)], -1)
    own = forest.copy()
    own[again] = np.where(sub >= 0, again[np.maximum(sub, 0)], -1)
    return own


def _outside_by(fw: pd.DataFrame, app: pd.DataFrame, keys: list[str]) -> "tuple[np.ndarray, int, int]":
    """ns each framework event lies outside its step window, how many found no window, and the summed width of the
    matched events' windows (ns: a numbering that merges steps of several epochs into one window is wide)."""
    win = (
        app.groupby(keys, observed=True, dropna=False)
        .agg(win_start=("start_ns", "min"), win_end=("end_ns", "max"))
        .reset_index()
    )
    joined = fw.merge(win, on=keys, how="left")
    matched = joined["win_start"].notna().to_numpy()
    j = joined[matched]
    ws, we = j["win_start"].to_numpy(np.int64), j["win_end"].to_numpy(np.int64)
    before = (ws - j["start_ns"].to_numpy(np.int64)).clip(min=0)
    after = (j["end_ns"].to_numpy(np.int64) - we).clip(min=0)
    return np.maximum(before, after), int((~matched).sum()), int((we - ws).sum())


@dataclass
class Residual:
    """The alignment check (:func:`alignment_residual`); ``as_dict`` is its JSON form (``merge_info.json``)."""

    checked: int = 0  # framework events with a step that has an app window
    outside: int = 0  # those starting or ending more than tolerance_ns outside it
    max_outside_ns: int = 0
    median_outside_ns: int = 0
    unmatched: int = 0  # framework events whose step has no app interval
    numbering: Optional[str] = None  # "global", "per_epoch" or "ordinal": the step numbering that matched
    tolerance_ns: int = RESIDUAL_TOLERANCE_NS

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def parse(cls, obj: Any) -> "Residual":
        """A stored residual (a dict; values of the wrong type are left at their defaults)."""
        out = cls()
        for name in cls().as_dict():
            value = obj.get(name) if isinstance(obj, dict) else None
            if name == "numbering" and value in ("global", "per_epoch", "ordinal"):
                out.numbering = value
            elif isinstance(value, int) and not isinstance(value, bool) and name != "numbering":
                setattr(out, name, value)
        return out


def alignment_residual(frame: pd.DataFrame, tolerance_ns: int = RESIDUAL_TOLERANCE_NS) -> Residual:
    """Check the alignment: framework events carrying a step vs that step's app interval.

    A step's app window is ``[min start, max end]`` of the app intervals of the same rank with that
    step (and epoch, when the framework event has one): the ``Training Iteration`` intervals when the
    app layer has them, else every app interval with a step. Step numbering differs between tools
    (Keras' ``train`` TraceMe counts steps per epoch, TimeLogger's callback globally, the PyTorch profiler's
    ``ProfilerStep#N`` the ``prof.step()`` calls since it started), so ``"global"``, ``"per_epoch"`` (app step minus
    the epoch's first step) and ``"ordinal"`` (the rank's app step windows in time order, from 0) are tried and the
    one matching more events with fewer outside is reported (:func:`residual_of`). Run this before
    :func:`propagate_steps`.
    Per partition: :func:`residual_flags` of every rank, then :func:`residual_parts` of each, reduced by
    :func:`residual_of`.

    Returns
    -------
    Residual
    """
    basis = ResidualBasis.of([residual_flags(frame)])
    return residual_of([residual_parts(frame, basis)], basis, tolerance_ns)


#: what decides how a residual is computed, per rank (:func:`residual_flags`)
RESIDUAL_FLAGS = ("fw", "fw_epoch", "app", "app_epoch", "step_phase", "step_phase_epoch")


def residual_rows(frame: pd.DataFrame) -> "tuple[pd.DataFrame, pd.DataFrame]":
    """(framework rows with a step, app rows with a step)."""
    has_step = frame["step"].notna().to_numpy()
    layer = frame["layer"]
    return frame[(layer == "framework").to_numpy() & has_step], frame[(layer == "app").to_numpy() & has_step]


def residual_flags(frame: pd.DataFrame) -> dict[str, int]:
    """What of the residual's inputs one partition has (counts; the job's are their sums)."""
    if not len(frame):
        return dict.fromkeys(RESIDUAL_FLAGS, 0)
    # counts of masks: no copy of the rows
    has_step = frame["step"].notna().to_numpy()
    has_epoch = frame["epoch"].notna().to_numpy()
    fw = (frame["layer"] == "framework").to_numpy() & has_step
    app = (frame["layer"] == "app").to_numpy() & has_step
    steps = app & (frame["name"] == STEP_PHASE).to_numpy()
    return {"fw": int(fw.sum()), "fw_epoch": int((fw & has_epoch).sum()), "app": int(app.sum()),
            "app_epoch": int((app & has_epoch).sum()), "step_phase": int(steps.sum()),
            "step_phase_epoch": int((steps & has_epoch).sum())}


@dataclass(frozen=True)
class ResidualBasis:
    """The job-wide choices of :func:`alignment_residual`, from every partition's :func:`residual_flags`."""

    fw: int  # framework events with a step, job-wide
    app: bool  # the job has app intervals with a step
    step_phase: bool  # windows are Training Iteration intervals (the job has them), else every app interval
    with_epoch: bool  # windows are per (step, epoch)
    per_epoch: bool  # the per-epoch numbering is tried too

    @classmethod
    def of(cls, flags: "Sequence[Mapping[str, int]]") -> "ResidualBasis":
        tot = {k: sum(int(f.get(k, 0)) for f in flags) for k in RESIDUAL_FLAGS}
        step_phase = tot["step_phase"] > 0
        app_epoch = tot["step_phase_epoch"] if step_phase else tot["app_epoch"]
        return cls(fw=tot["fw"], app=tot["app"] > 0, step_phase=step_phase,
                   with_epoch=tot["fw_epoch"] > 0 and app_epoch > 0, per_epoch=app_epoch > 0)


def residual_parts(frame: pd.DataFrame, basis: ResidualBasis) -> dict[str, "tuple[np.ndarray, int, int]"]:
    """One partition's share of the residual: numbering -> (ns outside per matched event, unmatched events, summed
    window width of the matched events)."""
    if not basis.fw or not basis.app or not len(frame):
        return {}
    fw, app = residual_rows(frame)
    if not len(fw):
        return {}
    if basis.step_phase:
        app = app[(app["name"] == STEP_PHASE).to_numpy()]
    app = app[["rank", "start_ns", "end_ns"]].assign(
        step=app["step"].astype("int64"), epoch=app["epoch"].astype("float64")
    )
    fw = fw[["rank", "start_ns", "end_ns"]].assign(
        step=fw["step"].astype("int64"), epoch=fw["epoch"].astype("float64")
    )
    keys = ["rank", "step"] + (["epoch"] if basis.with_epoch else [])
    schemes = {"global": app}
    if basis.per_epoch:
        first = app.groupby(["rank", "epoch"], dropna=False)["step"].transform("min")
        schemes["per_epoch"] = app.assign(step=app["step"] - first)
    out = {numbering: _outside_by(fw, windows, keys) for numbering, windows in schemes.items()}
    # a profiler that counts its own steps (PyTorch's ProfilerStep#N: prof.step() calls since the profiler started)
    # numbers them 0, 1, ... over the whole run, whatever the loop calls them: the rank's step windows in time order
    out["ordinal"] = _outside_by(fw, _ordinal_windows(app), ["rank", "step"])
    return out


def _ordinal_windows(app: pd.DataFrame) -> pd.DataFrame:
    """The app step windows of :func:`residual_parts` numbered per rank in time order from 0 (``epoch`` dropped)."""
    win = (app.groupby(["rank", "epoch", "step"], observed=True, dropna=False)
           .agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()
           .sort_values(["rank", "start_ns"], kind="stable"))
    return win.assign(step=win.groupby("rank").cumcount().astype("int64"))[["rank", "start_ns", "end_ns", "step"]]


def residual_of(parts: "Sequence[Mapping[str, tuple[np.ndarray, int, int]]]", basis: ResidualBasis,
                tolerance_ns: int = RESIDUAL_TOLERANCE_NS) -> Residual:
    """:func:`alignment_residual` from the partitions' :func:`residual_parts` (the numbering is chosen job-wide).

    The numbering matching more events with fewer outside wins; ``ordinal`` (the rank's step windows in time order)
    wins only where it does strictly better than the tools' own numberings, or as well with narrower windows (a
    loop numbering its steps per epoch, against a profiler that counts them over the run: the global numbering
    then matches each event to one window stretched over every epoch's step of that number)."""
    if not basis.fw:
        return Residual(tolerance_ns=int(tolerance_ns))
    if not basis.app:
        return Residual(unmatched=int(basis.fw), tolerance_ns=int(tolerance_ns))
    best = None
    for numbering in ("global", "per_epoch", "ordinal") if basis.per_epoch else ("global", "ordinal"):
        mine = [p[numbering] for p in parts if numbering in p]
        out_by = np.concatenate([m[0] for m in mine]) if mine else np.zeros(0, dtype=np.int64)
        unmatched = sum(m[1] for m in mine)
        width = sum(m[2] for m in mine)
        score = (-len(out_by), int((out_by > tolerance_ns).sum()))
        if best is None or score < best[0] or (numbering == "ordinal" and score == best[0] and width < best[4]):
            best = (score, numbering, out_by, unmatched, width)
    assert best is not None  # "global" is always tried
    _, numbering, out_by, unmatched, _ = best
    return Residual(checked=int(len(out_by)), outside=int((out_by > tolerance_ns).sum()),
                    max_outside_ns=int(out_by.max()) if len(out_by) else 0,
                    median_outside_ns=int(np.median(out_by)) if len(out_by) else 0, unmatched=int(unmatched),
                    numbering=numbering if len(out_by) else None, tolerance_ns=int(tolerance_ns))


def time_order(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` sorted by ``start_ns`` then ``layer`` (category order), stable, with a fresh index.

    Same result as ``sort_values(["start_ns", "layer"], kind="stable")`` at a third of its cost: one
    order from numpy, then one ``take`` per column without pandas' block machinery.
    """
    order = rows_time_order(frame["start_ns"].to_numpy(), frame["layer"].array)
    if order is None:
        return frame.reset_index(drop=True)
    columns = list(frame.columns)
    # one gather per column; numpy and pandas' take kernels release the GIL, so columns go in parallel
    arrays = thread_map(lambda c: frame[c].array.take(order), columns, rows=len(frame))
    return pd.DataFrame(dict(zip(columns, arrays)), columns=columns, copy=False)


def rows_time_order(start: np.ndarray, layer: pd.Categorical) -> "np.ndarray | None":
    """The order of :func:`time_order` (``None``: the rows are in it already)."""
    def layer_key(tied: np.ndarray) -> np.ndarray:
        codes = layer.codes[tied].astype(np.int64)
        codes[codes < 0] = np.iinfo(np.int64).max  # missing layer sorts last, as in sort_values
        return codes

    order = start_order(start, layer_key)
    return None if np.array_equal(order, np.arange(len(order))) else order


#: columns no step of a rank task reads before the kernels (:func:`propagate_steps` and the checks do not): put in
#: time order after the steps, so they are not held through ``propagate_steps``' peak (docs/measurements.md#align)
LATE_COLUMNS = ("dur_ns", "bytes", "offset", "args")


class TimeOrdered:
    """:func:`time_order` of the concatenation of ``parts`` (:func:`~trace_merge.schema.concat_frames`: categories
    united), each part a function giving one of its columns by name. Put together one column at a time, each part's
    column asked for when that column's turn comes: a rank merged from spilled pieces is held once, not as its pieces
    and their concatenation and then that and its copy in time order (docs/measurements.md#align). The order
    is taken once (from ``layer`` and ``start_ns``); :meth:`frame` puts any columns in it, when they are needed.
    ``ranks_apart``: the rows rank after rank (ascending), each rank's in time order."""

    def __init__(self, parts: "Sequence[Callable[[str], pd.Series]]", ranks_apart: bool = False) -> None:
        self._parts = list(parts)
        self._placed: dict = {}
        self.order = None
        self.rows = 0
        if self._parts:
            self._placed = {"layer": self._column("layer"), "start_ns": self._column("start_ns")}
            self.rows = len(self._placed["start_ns"])
            self.order = rows_time_order(np.asarray(self._placed["start_ns"], dtype=np.int64), self._placed["layer"])
        if self._parts and ranks_apart:  # rank after rank, each in time order (several ranks merged at once)
            rank = self._placed["rank"] = self._column("rank")
            timed = np.arange(len(rank)) if self.order is None else self.order
            in_time = np.asarray(rank)[timed]
            if (np.diff(in_time) < 0).any():
                self.order = timed[np.argsort(in_time, kind="stable")]

    def _column(self, name: str) -> Any:
        return concat_column([part(name) for part in self._parts], name)

    def frame(self, columns: Sequence[str]) -> pd.DataFrame:
        """``columns`` of the rows, in time order (each column taken once: the parts are asked for it now)."""
        if not self._parts:
            return empty_frame()[list(columns)]

        def in_order(name: str) -> Any:
            values = self._placed.pop(name) if name in self._placed else self._column(name)
            return values if self.order is None else values.take(self.order)

        # two columns at a time: the gathers release the GIL, and the rank is held once plus a few columns
        arrays = thread_map(in_order, columns, most=2, rows=self.rows)
        return pd.DataFrame(dict(zip(columns, arrays)), columns=list(columns), copy=False)


#: a rank's app layer further than this from the other ranks' (start and end alike), or from its own lower
#: layers, is flagged: measured clock offsets are µs to ms, and ranks of one job start and stop together
SHIFT_WARN_NS = 10 * 10**9
#: an app file may start this long before its launcher ran (clock read jitter); earlier is a shifted file
BEFORE_LAUNCH_NS = 2 * 10**9


def _app_windows(app_sources: Sequence[SourceData]) -> "dict[str, tuple[int, int, int | None]]":
    """path -> (first start, last end, rank) of each app file with rows."""
    out = {}
    for src in app_sources:
        if len(src.frame):
            rank = src.meta.rank if isinstance(src.meta, TimeLoggerMeta) else None
            out[src.path] = (int(src.frame["start_ns"].min()), int(src.frame["end_ns"].max()), rank)
    return out


def check_app_clocks(app_sources: Sequence[SourceData], launch_ns: "int | None",
                     windows: "dict[str, tuple[int, int, int | None]] | None" = None) -> "tuple[list[str], list[str]]":
    """App files whose time is not this run's: against the launch time (``manifest.json``) when there is one,
    and against the other ranks. Returns ``(warnings, paths to leave out)``.

    Left out: an app file starting more than :data:`DIFFERENT_DAY_NS` from the launch (or, without a launch
    time, a rank that far from the median of the others). Flagged: one starting more than
    :data:`BEFORE_LAUNCH_NS` before its launch, and a rank whose start and end both lie more than
    :data:`SHIFT_WARN_NS` away from the other ranks' in the same direction — far beyond any measured clock
    offset, so a wrong clock or an edited file.
    """
    warnings: list[str] = []
    drop: list[str] = []
    windows = _app_windows(app_sources) if windows is None else windows
    for path, (start, _, _) in windows.items():
        if launch_ns is None:
            break
        away = start - launch_ns
        if abs(away) > DIFFERENT_DAY_NS:
            warnings.append(f"{path}: its events start {away / 3.6e12:+.1f} h from the run's launch (manifest.json):"
                            " a different run or a wrong clock; left out of the merge")
            drop.append(path)
        elif away < -BEFORE_LAUNCH_NS:
            warnings.append(f"{path}: its events start {-away / 1e9:.1f} s before the run was launched "
                            "(manifest.json): a wrong clock or an edited file; kept, but its times are suspect")
    by_rank: dict[int, list[tuple[int, int]]] = {}
    for path, (start, end, rank) in windows.items():
        if path not in drop and rank is not None:
            by_rank.setdefault(rank, []).append((start, end))
    if len(by_rank) < 2:
        return warnings, drop
    spans = {r: (min(s for s, _ in w), max(e for _, e in w)) for r, w in by_rank.items()}
    paths_of = {r: [p for p, (_, _, rk) in windows.items() if rk == r and p not in drop] for r in spans}
    for rank, (start, end) in spans.items():
        others = [v for r, v in spans.items() if r != rank]
        d_start = start - float(np.median([s for s, _ in others]))
        d_end = end - float(np.median([e for _, e in others]))
        if np.sign(d_start) != np.sign(d_end) or min(abs(d_start), abs(d_end)) <= SHIFT_WARN_NS:
            continue
        shift = d_start if abs(d_start) < abs(d_end) else d_end
        names = ", ".join(paths_of[rank])
        if abs(shift) > DIFFERENT_DAY_NS and launch_ns is None:
            warnings.append(f"{names}: rank {rank}'s app layer lies {shift / 3.6e12:+.1f} h from the other ranks': "
                            "a different run or a wrong clock; left out of the merge")
            drop.extend(paths_of[rank])
        else:
            warnings.append(f"{names}: rank {rank}'s app layer starts and ends {shift / 1e9:+.1f} s away from the "
                            "other ranks' (far beyond a clock offset): a wrong clock or an edited file; its times "
                            "are suspect")
    return warnings, drop


def check_layer_overlap(frame: pd.DataFrame) -> list[str]:
    """Ranks whose lower layers (same processes, same clock) nearly all lie outside their app layer's time span
    (± :data:`SHIFT_WARN_NS`): the app file or the lower layer is shifted. One warning per rank; nothing is changed."""
    if not len(frame):
        return []
    is_app = (frame["layer"] == "app").to_numpy()
    rank = frame["rank"].to_numpy()
    start = frame["start_ns"].to_numpy()
    end = frame["end_ns"].to_numpy()
    layer = frame["layer"].array
    lows_of = _by_rank(rank, np.flatnonzero(~is_app))
    found = (rank_layer_overlap(r, start[app], end[app], start[lows_of[r]], layer[lows_of[r]])
             for r, app in _by_rank(rank, np.flatnonzero(is_app)).items() if r in lows_of)
    return [w for w in found if w]


def rank_layer_overlap(rank: int, app_start: np.ndarray, app_end: np.ndarray, low_start: np.ndarray,
                       low_layer: "np.ndarray | pd.Categorical") -> Optional[str]:
    """:func:`check_layer_overlap`'s warning for one rank, from its app rows' and lower rows' times (None: none)."""
    if len(low_start) < 5 or not len(app_start):
        return None
    lo, hi = app_start.min() - SHIFT_WARN_NS, app_end.max() + SHIFT_WARN_NS
    inside = ((low_start >= lo) & (low_start <= hi)).mean()
    # below 10 %: an unfiltered POSIX trace holds many reads from before the logger started (imports)
    if inside >= 0.1:
        return None
    gap = float(np.median(low_start)) - float(np.median(app_start))
    layers = ", ".join(sorted({str(x) for x in low_layer}))
    return (f"rank {rank}: {100 * (1 - inside):.0f} % of its {layers} rows lie outside its app "
            f"layer's time span (median {gap / 1e9:+.1f} s apart): a shifted app file or a wrong "
            "clock; times of this rank are suspect")
