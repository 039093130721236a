"""The attribution's sweep engine: a rank's rows, cut in time slabs, swept for the facts and sums every table of
:mod:`trace_merge.attribution` is made from (:class:`Attribution`).

On one thread each instant belongs to the innermost active interval (its self time); across the threads of a rank
it goes to the highest-priority category any thread is in (:data:`PRIORITY`). The engine holds one slab's per-row
arrays at a time, not a whole rank's, and its sums are of integer nanoseconds: the tables are the same to the last
bit however the slabs and windows are cut (:class:`SweepCuts`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.intervals import (
    Axis,
    combined_codes,
    covered_ns,
    distinct_rows,
    first_rows,
    intersect_intervals,
    merge_intervals,
    self_segments,
    subtract_intervals,
    time_windows,
    union_of,
)
from trace_merge.schema import FS_LAYERS, LAYERS, SIDE_LAYERS, STEP_PHASE, category_mask

_I8 = np.int64
_EMPTY = np.zeros(0, dtype=_I8)

#: Exclusive attribution order across threads (first wins).
PRIORITY: tuple[str, ...] = ("io", "comm", "checkpoint", "preprocess", "compute", "wait", "other")


def layers_for(frame: pd.DataFrame, layers: "str | Sequence[str] | None") -> list[str]:
    """:func:`layers_to_use` of the layers ``frame`` has."""
    return layers_to_use(present_layers(frame), layers)


def present_layers(frame: pd.DataFrame) -> list[str]:
    """The layers ``frame`` has rows of, in order of appearance."""
    return [str(x) for x in pd.unique(frame["layer"].dropna())] if len(frame) else []


def layers_to_use(present: Sequence[str], layers: "str | Sequence[str] | None") -> list[str]:
    """The layers a breakdown attributes (see :func:`breakdown_df`) given the layers the job has."""
    # the noise generators' and the CPU sampler's rows are measurements beside the job's phases, not phases
    present = [x for x in present if x not in SIDE_LAYERS]
    if layers is None:
        return ["app"] if "app" in present else [x for x in LAYERS if x in present] or present
    if isinstance(layers, str):
        return present if layers == "all" else [layers]
    return list(layers)


#: What the lower layers saw inside an app phase, in priority order: where they overlap inside a phase, the first
#: one listed gets the time.
LOWER_COMPONENTS: tuple[str, ...] = ("fs", "comm", "input_wait", "compute")
#: Components of an app phase's time in the layered breakdown: the lower layers', then the remainder split by
#: coverage -- ``python`` inside the windows the framework layer was captured (it would have seen framework work
#: there), ``not_observed`` outside them (a TF profile window of 8 of 192 steps, or no framework layer at all).
COMPONENTS: tuple[str, ...] = (*LOWER_COMPONENTS, "python", "not_observed")
#: the TimeLogger's TF-profile anchor TraceMe: bookkeeping, not framework work; it opens a profile window
_ANCHOR = "timelogger_anchor"
#: the PyTorch profiler's step spans (``ProfilerStep#N``, one ``prof.step()`` to the next): like the anchor, no work
#: (they hold the loop's Python and its fetch), and each opens a profile window
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
#: the layer of the accelerator's own timeline (kernels, copies: the PyTorch profiler's device events)
DEVICE_LAYER = "device"


def is_marker(name: str) -> bool:
    """Whether a framework row named ``name`` marks time rather than doing work (:data:`_ANCHOR`,
    ``ProfilerStep#N``)."""
    return name == _ANCHOR or bool(_PROFILER_STEP.match(name))


@dataclass(frozen=True)
class SweepCuts:
    """How the attribution cuts a rank's rows: time slabs of about ``slab_rows`` rows (:func:`slabs`; it holds one
    slab's per-row arrays at a time), inside time windows of about ``window_rows`` rows (:class:`Windows`; None: the
    whole frame is one window). The tables do not depend on them."""

    slab_rows: int = 1 << 18
    window_rows: Optional[int] = None


DEFAULT_CUTS = SweepCuts()
#: an epoch tag's stand-in where a row has none
NO_EPOCH = np.iinfo(np.int64).min
_T_MIN, _T_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


@dataclass
class _Slab:
    """A time slab of a frame: ``own`` are the rows (frame positions, in frame order) that start in ``[t0, t1)``,
    ``halo`` the earlier rows still open at ``t0``. Slabs partition time, so the coverage of any window is the sum of
    its coverage inside each slab, each computed from the slab's own and halo rows alone."""

    rows: "np.ndarray | range"  # ``own``: as positions, or a range of them (a frame in start order: no array)
    halo: np.ndarray
    t0: int
    t1: int

    @property
    def own(self) -> np.ndarray:
        rows = self.rows
        return np.arange(rows.start, rows.stop, dtype=_I8) if isinstance(rows, range) else rows


def time_slabs(start: np.ndarray, end: np.ndarray, rows_per_slab: int = DEFAULT_CUTS.slab_rows, t_lo: int = _T_MIN,
               t_hi: int = _T_MAX) -> list[_Slab]:
    """The time slabs of the rows ``(start, end)``: about ``rows_per_slab`` rows each, cut where the start changes
    (all rows of one start in one slab). One slab when the halos would outgrow the rows (everything open at once).
    ``[t_lo, t_hi)``: the time the rows' slabs cover together (a window of a frame's time: :class:`Windows`)."""
    n = start.size
    whole = [_Slab(range(n), _EMPTY, t_lo, t_hi)]
    if n <= rows_per_slab:
        return whole
    order = None if bool(np.all(start[1:] >= start[:-1])) else np.argsort(start, kind="stable")
    ss = start if order is None else start[order]
    cuts = time_windows(ss, rows_per_slab)
    bounds = ss[cuts[1:-1]]  # t0 of every slab but the first
    t = np.concatenate(([t_lo], bounds, [t_hi]))
    halos: list[list[np.ndarray]] = [[] for _ in range(len(cuts) - 1)]
    held = 0
    owns = []
    for k in range(len(cuts) - 1):
        rows = np.arange(cuts[k], cuts[k + 1], dtype=_I8) if order is None else np.sort(order[cuts[k]:cuts[k + 1]])
        owns.append(range(cuts[k], cuts[k + 1]) if order is None else rows)
        e = end[rows]
        crossing = e > t[k + 1]
        if crossing.any():
            rows_x = rows[crossing]
            last = np.searchsorted(bounds, e[crossing], "left")  # the last slab each one is open in
            for j in range(k + 1, int(last.max()) + 1):
                halos[j].append(rows_x[last >= j])
                held += int(halos[j][-1].size)
        if held > n:
            return whole
    return [_Slab(own, np.sort(np.concatenate(h)) if h else _EMPTY, int(t[k]), int(t[k + 1]))
            for k, (own, h) in enumerate(zip(owns, halos))]


def _categorical(col: pd.Series) -> pd.Series:
    return col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")


def _lookup(col: pd.Series, predicate) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, hit)`` of a categorical column: ``hit[codes]`` is ``predicate(category)`` per row (missing: the
    trailing False)."""
    col = _categorical(col)
    return col.cat.codes.to_numpy(), np.array([bool(predicate(str(c))) for c in col.cat.categories] + [False])


def _with_missing(values: list) -> np.ndarray:
    """``values`` and a trailing None (the value of the missing code, -1), as an object array."""
    return np.asarray([*values, None], dtype=object)


def _tag(col: pd.Series, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, present)`` of a nullable integer column at ``rows``: values as int64, 0 where missing."""
    part = col.array[rows]
    return np.asarray(part.to_numpy(dtype=_I8, na_value=0), dtype=_I8), ~np.asarray(part.isna(), dtype=bool)


def _min_max_by(keys: Sequence[np.ndarray], s: np.ndarray, e: np.ndarray
                ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Per distinct tuple of ``keys``: the least ``s`` and the greatest ``e`` (in order of first appearance)."""
    if not s.size:
        return [k[:0] for k in keys], s[:0], e[:0]
    codes = combined_codes(*keys)
    first = first_rows(codes)
    lo = np.full(first.size, _T_MAX, dtype=_I8)
    hi = np.full(first.size, _T_MIN, dtype=_I8)
    np.minimum.at(lo, codes, s)
    np.maximum.at(hi, codes, e)
    return [k[first] for k in keys], lo, hi


class _MinMax:
    """Per key tuple, the least start and the greatest end over every slab: each slab's partial reduction is kept
    (one entry per key) and reduced again at the end, sorted by the keys."""

    def __init__(self, nkeys: int) -> None:
        self._parts: list[tuple[list[np.ndarray], np.ndarray, np.ndarray]] = []
        self._nkeys = nkeys

    def add(self, keys: Sequence[np.ndarray], s: np.ndarray, e: np.ndarray) -> None:
        if s.size:
            self._parts.append(_min_max_by(keys, s, e))

    def result(self) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        if not self._parts:
            return [_EMPTY] * self._nkeys, _EMPTY, _EMPTY
        keys = [np.concatenate([p[0][i] for p in self._parts]).astype(_I8) for i in range(self._nkeys)]
        keys, lo, hi = _min_max_by(keys, np.concatenate([p[1] for p in self._parts]),
                                   np.concatenate([p[2] for p in self._parts]))
        order = np.lexsort(keys[::-1])
        return [k[order] for k in keys], lo[order], hi[order]


#: the columns an attribution reads (:class:`_Frame`); the others can be let go before one is made
ATTRIBUTION_COLUMNS = ("layer", "cat", "name", "rank", "pid", "tid", "start_ns", "end_ns", "epoch", "step")


class _Frame:
    """The columns the attribution reads (:data:`ATTRIBUTION_COLUMNS`), as numpy views where the frame has them so
    (no per-row copies); rows are taken from them slab by slab."""

    def __init__(self, frame: pd.DataFrame, use: Sequence[str], position: Optional[np.ndarray] = None) -> None:
        self.frame = frame
        #: each row's position in the whole frame (None: this is the whole frame)
        self.position = position
        self.start = frame["start_ns"].to_numpy(dtype=_I8)
        self.end = frame["end_ns"].to_numpy(dtype=_I8)
        self.rank = frame["rank"].to_numpy(dtype=_I8)
        self.pid, self.tid = frame["pid"].to_numpy(), frame["tid"].to_numpy()
        self.layer, self.in_use = _lookup(frame["layer"], lambda x: x in use)
        self.is_app = _lookup(frame["layer"], lambda x: x == "app")[1]
        self.is_fw = _lookup(frame["layer"], lambda x: x == "framework")[1]
        self.is_comm = _lookup(frame["layer"], lambda x: x == "comm")[1]
        self.is_fs = _lookup(frame["layer"], lambda x: x in FS_LAYERS)[1]
        self.is_device = _lookup(frame["layer"], lambda x: x == DEVICE_LAYER)[1]
        self.layer_names = _with_missing([str(x) for x in _categorical(frame["layer"]).cat.categories])
        cats = _categorical(frame["cat"])
        self.cat = cats.cat.codes.to_numpy()
        # index in PRIORITY of each category (unknown and missing: "other")
        self.cat_priority = np.array([PRIORITY.index(str(c)) if str(c) in PRIORITY else PRIORITY.index("other")
                                      for c in cats.cat.categories] + [PRIORITY.index("other")], dtype=np.int8)
        self.cat_names = _with_missing([str(c) for c in cats.cat.categories])
        name = _categorical(frame["name"])
        self.name = name.cat.codes.to_numpy()  # int8/16/32 as the categories need: read, never written
        self.names = _with_missing(name.cat.categories.to_numpy(dtype=object).tolist())
        self.is_step_phase = np.append(name.cat.categories == STEP_PHASE, False)
        texts = [str(x) for x in name.cat.categories]  # once: a run may have a hundred thousand distinct names
        self.is_anchor = np.array([is_marker(x) for x in texts] + [False])
        self.is_torch_step = np.array([bool(_PROFILER_STEP.match(x)) for x in texts] + [False])
        self.is_collective = np.array([bool(_COLLECTIVE.match(x)) for x in texts] + [False])
        self.is_negotiation = np.array([bool(_NEGOTIATION.match(x)) for x in texts] + [False])
        self._kept: Optional[np.ndarray] = None
        self._lower: Optional[np.ndarray] = None

    def cat_is(self, name: str) -> np.ndarray:
        """Per category code (missing: the trailing False): is the row's category ``name``?"""
        return self.cat_names == name

    def kept(self, rows: np.ndarray) -> np.ndarray:
        """The rows of ``rows`` the attribution counts: of its layers, positive duration."""
        if self._kept is None:  # every sweep asks, for every slab: the frame's rows judged once
            self._kept = self.in_use[self.layer] & (self.end > self.start)
        return self._kept[rows]

    def lower(self, rows: np.ndarray) -> np.ndarray:
        """The rows of ``rows`` below the app layer with a positive duration (their rank is checked by the caller)."""
        if self._lower is None:
            self._lower = ~self.is_app[self.layer] & (self.end > self.start)
        return self._lower[rows]

    def tag(self, key: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _tag(self.frame[key], rows)


class Windows:
    """A rank's rows as the attribution sweeps them: time windows in start order, each with the earlier rows still
    open at its start (its halo) and its own slabs (:func:`time_slabs`). ``source()`` gives the windows' frames (the
    same categories in each), every time it is called: one per sweep, so only one window is held at a time. A
    window's time runs from just after the previous window's last start to just after its own (the whole time for
    the first and the last), so no window needs the next one; the slabs' sums do not depend on where time is cut.
    ``slab_rows``: :attr:`SweepCuts.slab_rows`."""

    def __init__(self, source: "Callable[[], Iterable[pd.DataFrame]]", use: Sequence[str],
                 slab_rows: int = DEFAULT_CUTS.slab_rows) -> None:
        self._source, self._use, self._slab_rows = source, use, slab_rows
        self._whole: Optional[tuple[_Frame, list[_Slab]]] = None

    @classmethod
    def of(cls, frame: pd.DataFrame, use: Sequence[str], cuts: SweepCuts = DEFAULT_CUTS) -> "Windows":
        """A frame's rows in windows of about ``cuts.window_rows`` rows (:func:`~trace_merge.intervals.time_windows`;
        None, or a frame not in start order: one window)."""
        rows = cuts.window_rows
        start = frame["start_ns"].to_numpy(dtype=_I8)
        at = time_windows(start, rows) if rows is not None and bool(np.all(start[1:] >= start[:-1])) else []
        if len(at) <= 2:
            return cls(lambda: iter((frame,)), use, cuts.slab_rows)
        return cls(lambda: (frame.iloc[a:b] for a, b in zip(at, at[1:])), use, cuts.slab_rows)

    def __iter__(self) -> "Iterator[tuple[_Frame, list[_Slab]]]":
        """``(columns, slabs)`` of each window in time order."""
        if self._whole is not None:
            yield self._whole
            return
        held: Optional[pd.DataFrame] = None  # rows of earlier windows still open, with their positions
        held_at, first, frames = _EMPTY, 0, iter(self._source())
        frame = next(frames, None)
        k, t1 = 0, _T_MIN
        while frame is not None:
            following = next(frames, None)
            if k == 0 and following is None:  # one window: built once, for every sweep
                cols = _Frame(frame, self._use)
                self._whole = (cols, time_slabs(cols.start, cols.end, self._slab_rows))
                yield self._whole
                return
            start = frame["start_ns"].to_numpy(dtype=_I8)
            t0 = _T_MIN if k == 0 else t1
            t1 = _T_MAX if following is None else int(start[-1]) + 1
            own_at = first + np.arange(len(frame), dtype=_I8)
            if held is not None and len(held):
                keep = held["end_ns"].to_numpy(dtype=_I8) > t0
                held, held_at = held[keep], held_at[keep]
                rows, position = pd.concat((held, frame), ignore_index=True), np.concatenate((held_at, own_at))
            else:
                rows, position = frame.reset_index(drop=True), own_at
            cols = _Frame(rows, self._use, position=position)
            h = len(rows) - len(frame)
            slabs = []
            for slab in time_slabs(cols.start[h:], cols.end[h:], self._slab_rows, t0, t1):
                own = slab.rows
                own = range(own.start + h, own.stop + h) if isinstance(own, range) else own + h
                carried = np.flatnonzero(cols.end[:h] > slab.t0)
                slabs.append(_Slab(own, np.concatenate((carried, slab.halo + h)).astype(_I8), slab.t0, slab.t1))
            yield cols, slabs
            still = cols.end > t1
            held, held_at = rows[still], position[still]
            first += len(frame)
            frame, k = following, k + 1

    def slabs(self) -> "Iterator[tuple[_Frame, _Slab]]":
        """``(columns, slab)`` of every slab of every window, in time order."""
        for cols, slabs in self:
            for slab in slabs:
                yield cols, slab


#: What marks a rank's training steps, in order of evidence (DESIGN: step cycles): the first kind a rank has wins
MARK_KINDS: tuple[str, ...] = (
    "step phase",  # step-tagged step phase (schema.STEP_PHASE: a checkpoint tagged with its step must not stretch it)
    "step-tagged compute",  # DLIO's TFFramework.compute with metadata, pydftracer's compute, a hooked tf.function
    "step-tagged rows",  # any row carrying a step tag
    "compute events",  # untagged app compute rows, outermost: DLIO's compute without metadata, a hooked step call
    "fetches",  # untagged app wait rows: consecutive fetches of the loop
)


def _mark_kinds(c: "_Frame", rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per kind of :data:`MARK_KINDS`, which of ``rows`` are of it."""
    tagged = c.tag("step", rows)[1]
    cat = c.cat_priority[c.cat[rows]]
    compute = cat == PRIORITY.index("compute")
    # untagged rows mark steps only in the app layer (the loop's own events, DLIO's, the hooks'): a framework
    # profile's compute events are operators, many to a step
    loop = ~tagged & c.is_app[c.layer[rows]]
    return (tagged & c.is_step_phase[c.name[rows]], tagged & compute, tagged, loop & compute,
            loop & (cat == PRIORITY.index("wait")))


class Attribution:
    """The attribution of a frame's rows of some layers, per rank: every table's numbers, computed slab by slab.

    Two sweeps of the slabs take the rank facts no slab can know alone (each rank's window and epoch windows, its
    steps and the threads that mark them, the windows a TF profile covered). A last sweep builds, per slab, the
    merged lists on a rank axis -- each category's self time (the innermost phase per thread, :func:`self_segments`)
    and raw union, the consumer threads' self time, the lower layers' lists (:class:`_LowerSlab`) -- and adds up how
    much of every window (epochs, step cycles) and of every phase each covers. Sums of integer ns: the tables are
    the same whatever the slabs.

    Attributes
    ----------
    ranks
        Rank number of each rank code.
    axis
        The rank axis (:class:`Axis`): each rank's time from its first kept start to its last kept end.
    names
        Phase name of each name code (the last: None).
    table_windows
        The breakdown's and exposed input's windows (:meth:`windows` columns and ``epoch``): each rank's epochs,
        then each rank's whole time; :meth:`sum` of a window key has an entry per row.
    cycles
        The step cycles (``lower``): ``marks`` (:meth:`step_marks`), ``r`` (rank codes), ``ws``/``we`` (the
        cycles on the axis), ``step_start``, ``warmup`` (an epoch's first step: only the rest of its cycle counts).
    fallback
        Per basis of the ranks without steps (``epoch``, then ``run``): ``(basis, starts, ends, rank codes)`` of
        their merged windows on the axis.
    group_first, group_order
        Per app phase group (rank, epoch, name) of the layered breakdown: ``[frame position, rank code, epoch, name
        code, cat index]`` of its first row, and the groups in the order of their first rows.
    """

    def __init__(self, windows: Windows, lower: bool, shared: "Optional[SharedCollectives]",
                 sums: bool = True) -> None:
        self._lower = lower
        self._facts(windows, shared)
        if self.empty:
            return
        if lower:
            self._step_and_profile_facts(windows)
        if not sums:
            return
        self._queries()
        for cols, slab in windows.slabs():
            self._add_slab(cols, slab)
        self._finish_layered()

    # -- facts: sweeps one and two ---------------------------------------------------------------------------

    def _facts(self, windows: Windows, shared: "Optional[SharedCollectives]") -> None:
        whole, epochs = _MinMax(1), _MinMax(2)
        kinds: list[list[np.ndarray]] = [[] for _ in MARK_KINDS]
        layers: list[list[np.ndarray]] = []
        anchors: list[tuple[np.ndarray, np.ndarray]] = []
        torch_ranks: list[np.ndarray] = []
        collectives: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for c, slab in windows.slabs():
            self.names = c.names
            owned = slab.own
            rows = owned[c.kept(owned)]
            rank, s, e = c.rank[rows], c.start[rows], c.end[rows]
            whole.add([rank], s, e)
            ep, ep_has = c.tag("epoch", rows)
            epochs.add([rank[ep_has], ep[ep_has]], s[ep_has], e[ep_has])
            for i, kind in enumerate(_mark_kinds(c, rows)):
                kinds[i].append(pd.unique(rank[kind]))  # hashing: cheaper than a sort of every row
            if self._lower:
                low = owned[c.lower(owned)]
                lay = c.layer[low]
                layers.append(distinct_rows(c.rank[low], lay))
                a = low[c.is_fw[lay] & c.is_anchor[c.name[low]]]
                anchors.append((c.rank[a], c.start[a]))
                torch_ranks.append(pd.unique(c.rank[a[c.is_torch_step[c.name[a]]]]))
                x = low[c.is_comm[lay] & c.is_collective[c.name[low]]]
                collectives.append((c.rank[x], c.start[x], c.end[x]))
        (self.ranks,), ws, we = whole.result()
        self.empty = not len(self.ranks)
        if self.empty:
            return
        n = len(self.ranks)
        self.axis = Axis(np.arange(n, dtype=_I8), ws, we, n)
        self._windows: dict[tuple[str, ...], pd.DataFrame] = {(): self._window_frame({}, self.ranks, ws, we)}
        (ep_rank, ep), ws, we = epochs.result()
        self._windows[("epoch",)] = self._window_frame({"epoch": ep}, ep_rank, ws, we)
        #: per rank code, the index in MARK_KINDS of what marks its steps (-1: nothing): the first kind it has
        self.mark_kind = np.full(n, -1, dtype=_I8)
        for i, have in reversed(list(enumerate(kinds))):
            self.mark_kind[np.searchsorted(self.ranks, np.unique(np.concatenate(have)))] = i
        if not self._lower:
            return
        l_rank, l_layer = distinct_rows(np.concatenate([r for r, _ in layers]), np.concatenate([x for _, x in layers]))
        mine = np.isin(l_rank, self.ranks) & (l_layer >= 0)
        self.layers: dict[int, list[str]] = {}
        for r, x in zip(l_rank[mine].tolist(), c.layer_names[l_layer[mine]].tolist()):
            self.layers.setdefault(int(r), []).append(x)
        self.layers = {r: sorted(self.layers[r]) for r in sorted(self.layers)}
        a_rank = np.concatenate([a for a, _ in anchors])
        a_s = np.concatenate([s for _, s in anchors])
        mine = np.isin(a_rank, self.ranks)
        a_r = self.rank_codes(a_rank[mine])
        a_s = self.axis.to_axis(a_r, a_s[mine])
        order = np.argsort(a_s, kind="stable")  # on the axis, ranks occupy disjoint ranges in rank order
        self._anchors = (a_r[order], a_s[order])
        #: per rank code: its framework layer is a PyTorch profile (``ProfilerStep#N`` markers), not a TF one
        self.torch_profile = np.isin(self.ranks, np.concatenate(torch_ranks)) if torch_ranks else \
            np.zeros(n, dtype=bool)
        x_rank = np.concatenate([r for r, _, _ in collectives])
        mine = np.isin(x_rank, self.ranks)
        own = set(x_rank[mine].tolist())
        if shared is None:
            shared = SharedCollectives(np.concatenate([s for _, s, _ in collectives])[mine],
                                       np.concatenate([e for _, _, e in collectives])[mine], n)
        self._shared = shared if shared.starts.size and shared.ranks > 1 else None
        #: rank codes that count the shared collectives as their communication (the ranks without their own)
        self._sharing = np.asarray([k for k in range(n) if int(self.ranks[k]) not in own], dtype=_I8)

    def _window_frame(self, keys: dict, rank: np.ndarray, s: np.ndarray, e: np.ndarray) -> pd.DataFrame:
        """``_r``, ``*keys``, ``start_ns``, ``end_ns``, ``rank``, ``_ws``, ``_we`` of per-rank reductions."""
        r = self.rank_codes(rank)
        return pd.DataFrame({"_r": r, **keys, "start_ns": s, "end_ns": e, "rank": self.ranks[r],
                             "_ws": self.axis.to_axis(r, s), "_we": self.axis.to_axis(r, e)})

    def rank_codes(self, rank: np.ndarray) -> np.ndarray:
        """The rank code of each of ``rank`` (ranks the attribution has)."""
        if self.ranks.size == 1:  # a rank's partition: no search
            return np.zeros(rank.size, dtype=_I8)
        return np.searchsorted(self.ranks, rank).astype(_I8)

    def windows(self, keys: Sequence[str]) -> pd.DataFrame:
        """``[start, end]`` of the kept rows per ``(rank, *keys)`` (keys non-null), with axis coordinates.

        Returns
        -------
        pandas.DataFrame
            ``_r`` (rank code), ``*keys``, ``start_ns``, ``end_ns``, ``rank``, ``_ws``, ``_we``.
        """
        return self._windows[tuple(keys)]

    def _mark_kind(self, c: _Frame, rows: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Rows that mark training steps: per rank, the first of :data:`MARK_KINDS` the rank has."""
        kind_of_row = self.mark_kind[r]
        marks = np.zeros(rows.size, dtype=bool)
        for i, kind in enumerate(_mark_kinds(c, rows)):
            marks |= kind & (kind_of_row == i)
        return marks

    def _step_and_profile_facts(self, windows: Windows) -> None:
        """The steps (:meth:`step_marks`), the consumer threads (those whose rows mark the steps) and ``covered``: the
        merged list of the windows a framework layer covered. A profile window is what one profiler session
        recorded: it starts at the session's TimeLogger anchor marker and ends with its last event. Without anchors
        (a profile not opened by TimeLogger) each rank's window spans its first to its last framework event."""
        runs, threads, profiled, fetches = [], [], _MinMax(2), _MinMax(4)
        a_r, a_s = self._anchors
        for c, slab in windows.slabs():
            owned = slab.own
            rows = owned[c.kept(owned)]
            r = self.rank_codes(c.rank[rows])
            # each thread's fetches per epoch: the consumers' last one ends the epoch's iteration (_to_iteration_end)
            f = c.cat_priority[c.cat[rows]] == PRIORITY.index("wait")
            ep_val, ep_has = c.tag("epoch", rows[f])
            fr = rows[f]
            fetches.add([r[f], c.pid[fr], c.tid[fr], np.where(ep_has, ep_val, NO_EPOCH)], c.start[fr], c.end[fr])
            mark = self._mark_kind(c, rows, r)
            m = rows[mark]
            threads.append(distinct_rows(r[mark], c.pid[m], c.tid[m]))
            runs.append(self._runs(c, m, r[mark]))
            # framework rows: the windows a TF profile covered (see covered)
            low = owned[c.lower(owned)]
            low = low[c.is_fw[c.layer[low]] & np.isin(c.rank[low], self.ranks)]
            fr = self.rank_codes(c.rank[low])
            s, e = self.axis.to_axis(fr, c.start[low]), self.axis.to_axis(fr, c.end[low])
            sess = np.full(s.size, -1, dtype=_I8)  # the last anchor of its rank at or before it
            if a_s.size:
                k = np.searchsorted(a_s, s, side="right") - 1
                ok = k >= 0
                ok[ok] = a_r[k[ok]] == fr[ok]
                sess[ok] = k[ok]
            profiled.add([fr, sess], s, e)
        self._marks = self._join_runs(runs)
        self._consumers = distinct_rows(*(np.concatenate([t[i] for t in threads]) for i in range(3)))
        (fr, fpid, ftid, fep), fs, fe = fetches.result()
        cr, cpid, ctid = self._consumers
        both = combined_codes(np.r_[cr, fr], np.r_[cpid, fpid], np.r_[ctid, ftid])
        mine = np.isin(both[cr.size:], both[:cr.size])
        #: per (rank code, epoch): the consumer threads' first fetch start and last fetch end (its iteration)
        self._iterations = _min_max_by([fr[mine], fep[mine]], fs[mine], fe[mine])
        _, s, e = profiled.result()
        self.covered = merge_intervals(s, e)
        self.present_framework = self.covered[0].size > 0

    def _runs(self, c: _Frame, rows: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, ...]:
        """Runs of consecutive marking ``rows`` (one slab's) with the same ``(epoch, step)`` tags, per rank in start
        order: rank code, epoch (``NO_EPOCH`` for none), step, first start, last end."""
        s = c.start[rows]
        order = np.lexsort((s, r))
        rows, r, s = rows[order], r[order], s[order]
        ep_val, ep_has = c.tag("epoch", rows)
        ep = np.where(ep_has, ep_val, NO_EPOCH)
        st, st_has = c.tag("step", rows)
        # a row without a step tag (DLIO's compute events without metadata, a hooked call, a fetch) is a step of
        # its own: a negative key no tag has, numbered per rank in step_marks
        st = np.where(st_has, st, -1 - s)
        return self._collapse((r, ep, st, s, c.end[rows]))

    @staticmethod
    def _collapse(runs: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """Consecutive entries of ``runs`` (``r, ep, st, s, e``) with the same ``(r, ep, st)`` as one: the first start,
        the last end."""
        r, ep, st, s, e = runs
        if not r.size:
            return runs
        at = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (ep[1:] != ep[:-1]) | (st[1:] != st[:-1])])
        return r[at], ep[at], st[at], np.minimum.reduceat(s, at), np.maximum.reduceat(e, at)

    def _join_runs(self, runs: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        """The slabs' runs (in slab order) as the steps: per rank in start order, runs split by a slab boundary
        joined again."""
        joined = [np.concatenate([x[i] for x in runs]).astype(_I8) for i in range(5)]
        order = np.argsort(joined[0], kind="stable")
        r, ep, st, s, e = self._collapse(tuple(x[order] for x in joined))
        # an untagged mark inside an earlier one of its rank (a compute phase nested in another) is no step
        if r.size > 1 and (st < 0).any():
            e_ax = self.axis.to_axis(r, e)  # ranks hold disjoint, ordered ranges of the axis
            before = np.maximum.accumulate(e_ax)
            inner = np.r_[False, (st[1:] < 0) & (r[1:] == r[:-1]) & (e_ax[1:] <= before[:-1])]
            r, ep, st, s, e = (x[~inner] for x in (r, ep, st, s, e))
        return r, ep, st, s, e

    def step_marks(self) -> pd.DataFrame:
        """One window per training step of every rank, in start order per rank: consecutive marking rows
        (:meth:`_mark_kind`) with the same ``(epoch, step)`` tags are one step. Consecutive, not grouped: DLIO
        restarts its step numbers each epoch and leaves ``epoch`` stale on its compute events.

        Returns
        -------
        pandas.DataFrame
            ``_r``, ``epoch``, ``step`` (Int64), ``start_ns``, ``end_ns``, ``rank``, ``_ws``, ``_we``.
        """
        rr, ep, st, s, e = self._marks
        if (st < 0).any():  # untagged steps: numbered in order per rank, from 0
            first = np.searchsorted(rr, rr, side="left")
            st = np.where(st < 0, np.arange(rr.size) - first, st)
        epoch = pd.array(np.where(ep == NO_EPOCH, 0, ep), dtype="Int64")
        epoch[ep == NO_EPOCH] = pd.NA
        return pd.DataFrame({"_r": rr, "epoch": epoch, "step": pd.array(st, dtype="Int64"), "start_ns": s,
                             "end_ns": e, "rank": self.ranks[rr], "_ws": self.axis.to_axis(rr, s),
                             "_we": self.axis.to_axis(rr, e)})

    def epoch_cover(self) -> tuple[np.ndarray, np.ndarray]:
        """Merged list of the epoch windows; a rank without any epoch is covered over its whole window."""
        ep = self.windows(["epoch"])
        whole = self.windows([])
        bare = whole[~whole["_r"].isin(ep["_r"])]
        return merge_intervals(np.concatenate((ep["_ws"].to_numpy(dtype=_I8), bare["_ws"].to_numpy(dtype=_I8))),
                               np.concatenate((ep["_we"].to_numpy(dtype=_I8), bare["_we"].to_numpy(dtype=_I8))))

    # -- the windows every sum is taken over ----------------------------------------------------------------

    def _queries(self) -> None:
        if self.empty:
            return
        totals = self.windows([]).assign(epoch=pd.array([pd.NA] * len(self.windows([])), dtype="Int64"))
        #: breakdown and exposed-input windows: each rank's epochs, then each rank's whole time
        self.table_windows = pd.concat([self.windows(["epoch"]), totals], ignore_index=True)
        self._epochs = self.epoch_cover()
        self._sums: dict[str, np.ndarray] = {}
        if not self._lower:
            return
        w = self.step_marks()
        r = w["_r"].to_numpy(dtype=_I8)
        step_start = w["_ws"].to_numpy(dtype=_I8)
        own_end = w["_we"].to_numpy(dtype=_I8)
        we = _cycle_ends(r, w["epoch"], step_start, own_end)
        n_of_rank = np.bincount(r, minlength=len(self.ranks))
        # DLIO's "first step excluded" (statscounter: an epoch's time less its first step's, fetch included): the
        # first step of each epoch of a rank (graph tracing, the pipeline's start, first file opens), not what
        # follows it until the next step starts (the fetch of the next batch, a barrier): that part of its cycle
        # counts. A rank or epoch of one step keeps it.
        ep = w["epoch"].to_numpy(dtype=_I8, na_value=NO_EPOCH)
        first = np.r_[True, (r[1:] != r[:-1]) | (ep[1:] != ep[:-1])] if len(r) else np.zeros(0, dtype=bool)
        group = np.cumsum(first) - 1
        warmup = first & (np.bincount(group)[group] > 1) if len(r) else first
        ws = np.where(warmup, np.minimum(own_end, we), step_start)
        we = self._to_iteration_end(r, ep, ws, we)
        self.cycles = dict(marks=w, r=r, ws=ws, we=we, step_start=step_start, warmup=warmup)
        # ranks without steps: epoch windows, then the whole traced time (app evidence), each merged
        self.fallback = []
        no_steps = np.flatnonzero(n_of_rank == 0)
        for label, keys in (("epoch", ["epoch"]), ("run", [])):
            if not no_steps.size:
                break
            fw = self.windows(keys)
            fw = fw[fw["_r"].isin(no_steps)]
            if not len(fw):
                continue
            ms, me = merge_intervals(fw["_ws"].to_numpy(dtype=_I8), fw["_we"].to_numpy(dtype=_I8))
            rr = self.axis.group_of(ms)
            self.fallback.append((label, ms, me, rr))
            no_steps = np.setdiff1d(no_steps, rr)
        self._groups: dict[tuple, int] = {}  # (rank code, epoch or NO_EPOCH, name code) -> group, in first-row order
        self.group_first: list[list] = []  # per group: [frame position, rank code, epoch, name code, cat index]

    def _to_iteration_end(self, r: np.ndarray, ep: np.ndarray, ws: np.ndarray, we: np.ndarray) -> np.ndarray:
        """Cycle ends ``we`` with each epoch's last cycle stretched to the epoch's last fetch on the consumer threads
        (the one that finds the data exhausted: iterator teardown, as DLIO's epoch timer has it), never into the
        next cycle of its rank. What lies between two epochs' iterations is no cycle's."""
        (ir, iep), _, i_e = self._iterations
        if not r.size or not ir.size:
            return we
        codes = combined_codes(np.r_[ir, r], np.r_[iep, ep])
        lookup = np.full(int(codes.max()) + 1, -1, dtype=_I8)
        lookup[codes[:ir.size]] = np.arange(ir.size)
        at = lookup[codes[ir.size:]]
        has = at >= 0
        it_e = np.where(has, self.axis.to_axis(r, np.where(has, i_e[at], 0)), _T_MIN)
        last = np.r_[(r[1:] != r[:-1]) | (ep[1:] != ep[:-1]), True]
        limit = np.where(np.r_[r[1:] == r[:-1], False], np.r_[ws[1:], _T_MAX], _T_MAX)
        return np.where(last & (it_e > we), np.minimum(it_e, limit), we)

    def _add(self, key: str, values: np.ndarray, size: Optional[int] = None) -> None:
        """Adds one slab's ``values`` to the sum ``key`` (grown to ``size`` entries when given)."""
        have = self._sums.get(key)
        if have is None:
            self._sums[key] = values.copy()
            return
        if size is not None and have.size < size:
            have = self._sums[key] = np.concatenate((have, np.zeros(size - have.size, dtype=have.dtype)))
        have[:values.size] += values

    def _clipped(self, r: np.ndarray, ws: np.ndarray, we: np.ndarray, slab: _Slab) -> tuple[np.ndarray, np.ndarray]:
        """Windows ``[ws, we)`` of rank codes ``r`` cut to ``slab``'s time on the axis."""
        return (np.maximum(ws, self.axis.to_axis(r, np.full(r.size, slab.t0, dtype=_I8))),
                np.minimum(we, self.axis.to_axis(r, np.full(r.size, slab.t1, dtype=_I8))))

    # -- sweep three: the sums ------------------------------------------------------------------------------

    def _add_slab(self, c: _Frame, slab: _Slab) -> None:
        if self.empty:
            return
        in_slab = np.concatenate((slab.halo, slab.own))
        kept = c.kept(in_slab)
        own = (np.arange(in_slab.size) >= slab.halo.size)[kept]
        rows = in_slab[kept]
        r = self.rank_codes(c.rank[rows])
        s, e = c.start[rows], c.end[rows]
        cat = c.cat_priority[c.cat[rows]]
        thread = combined_codes(r, c.pid[rows], c.tid[rows])
        seg_s, seg_e, owner = self_segments(thread, s, e)
        np.maximum(seg_s, slab.t0, out=seg_s)  # the slab's part of each segment, row and window
        np.minimum(seg_e, slab.t1, out=seg_e)
        inside = seg_e > seg_s
        seg_s, seg_e, owner = seg_s[inside], seg_e[inside], owner[inside]
        seg_r = r[owner]
        seg_s, seg_e = self.axis.to_axis(seg_r, seg_s), self.axis.to_axis(seg_r, seg_e)
        del seg_r
        seg_cat = cat[owner]
        self_time = {x: merge_intervals(seg_s[seg_cat == i], seg_e[seg_cat == i]) for i, x in enumerate(PRIORITY)}
        cs = self.axis.to_axis(r, np.maximum(s, slab.t0))
        ce = self.axis.to_axis(r, np.minimum(e, slab.t1))
        raw = {x: merge_intervals(cs[cat == i], ce[cat == i]) for i, x in enumerate(PRIORITY)}
        del cs, ce
        tw = self.table_windows
        ws, we = self._clipped(tw["_r"].to_numpy(dtype=_I8), tw["_ws"].to_numpy(dtype=_I8),
                               tw["_we"].to_numpy(dtype=_I8), slab)
        epochs = self._epochs
        acc = (_EMPTY, _EMPTY)
        for x in PRIORITY[:-1]:
            acc = union_of(acc, self_time[x])
            self._add(f"share_{x}", covered_ns(*intersect_intervals(*acc, *epochs), ws, we))
        for x in PRIORITY:
            self._add(f"raw_{x}", covered_ns(*raw[x], ws, we))
        inp = union_of(self_time["io"], self_time["wait"])
        comp = self_time["compute"]
        self._add("input", covered_ns(*inp, ws, we))
        self._add("overlap", covered_ns(*intersect_intervals(*inp, *comp), ws, we))
        self._add("compute", covered_ns(*comp, ws, we))
        if not self._lower:
            return
        lower = _LowerSlab(self, c, in_slab, slab)
        # the step cycles: input wait and compute inside each (see step_series_df)
        consumer = self._consumer_threads(c, rows, r, thread)[owner]
        def consumer_self(cats: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
            m = consumer & np.isin(seg_cat, [PRIORITY.index(x) for x in cats])
            return merge_intervals(seg_s[m], seg_e[m])
        app_busy = consumer_self(["compute", "comm"])
        # a wait on one consumer thread while another computes is hidden behind it (exposed input only)
        loop_wait = consumer_self(["io", "wait"])
        wait_ev = union_of(lower.raw["input_wait"], subtract_intervals(*loop_wait, *app_busy))
        busy = union_of(lower.raw["compute"], lower.raw["comm"], app_busy)
        # waiting for other ranks inside a step phase is neither input wait nor compute (the phase holds the wait)
        sync = subtract_intervals(*lower.sync_wait, *wait_ev)
        cy = self.cycles
        cws, cwe = self._clipped(cy["r"], cy["ws"], cy["we"], slab)
        self._add("wait", covered_ns(*wait_ev, cws, cwe))
        self._add("sync", covered_ns(*sync, cws, cwe))
        computing = subtract_intervals(*busy, *wait_ev)  # once: the busy term and the producers' share below
        self._add("busy", covered_ns(*subtract_intervals(*computing, *sync), cws, cwe))
        self._add("loop_wait", covered_ns(*loop_wait, cws, cwe))
        self._add("fw_wait", covered_ns(*lower.raw["input_wait"], cws, cwe))
        self._add("others_wait", covered_ns(*lower.raw["others_wait"], cws, cwe))
        self._add("device_busy", covered_ns(*lower.raw["device"], cws, cwe))
        # the input pipeline's own work (file-system calls, app io/preprocess phases on any thread): while the step
        # computes and while it waits. A pipeline that reads ahead works in both; a synchronous one only in waits
        producer = union_of(lower.raw["fs"], self_time["io"], self_time["preprocess"])
        self._add("producer", covered_ns(*producer, cws, cwe))
        self._add("producer_in_wait", covered_ns(*intersect_intervals(*producer, *wait_ev), cws, cwe))
        self._add("producer_in_compute", covered_ns(*intersect_intervals(*producer, *computing), cws, cwe))
        # the cycles' time no evidence explains, and how much of it lies outside every app phase (a gap)
        c_ok = cwe > cws
        cycles = merge_intervals(cws[c_ok], cwe[c_ok])
        unexplained = subtract_intervals(*subtract_intervals(*subtract_intervals(*cycles, *wait_ev), *busy), *sync)
        in_phases = union_of(acc, self_time["other"])  # every app phase's self time: acc holds all the other cats
        self._add("gap", covered_ns(*subtract_intervals(*unexplained, *in_phases), cws, cwe))
        exposed = subtract_intervals(*inp, *comp)
        for i, (_, ms, me, rr) in enumerate(self.fallback):
            fs, fe = self._clipped(rr, ms, me, slab)
            self._add(f"fallback_wait_{i}", covered_ns(*exposed, fs, fe))
            self._add(f"fallback_compute_{i}", covered_ns(*comp, fs, fe))
        self._add_phases(c, rows, r, own, (seg_s, seg_e, owner), lower, unexplained)

    def _consumer_threads(self, c: _Frame, rows: np.ndarray, r: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """Per row of ``rows`` (codes ``thread``): is its thread a consumer thread, one whose rows mark the steps
        (the training loop)? A prefetch thread reading while the loop computes is not the loop waiting."""
        codes, first = np.unique(thread, return_index=True)
        cr, cpid, ctid = self._consumers
        # one code per (rank code, pid, tid) over the consumers and this slab's threads
        both = combined_codes(np.r_[cr, r[first]], np.r_[cpid, c.pid[rows[first]]], np.r_[ctid, c.tid[rows[first]]])
        hit = np.zeros(int(codes.max()) + 1 if codes.size else 0, dtype=bool)
        hit[codes] = np.isin(both[cr.size:], both[:cr.size])
        return hit[thread]

    def _add_phases(self, c: _Frame, rows: np.ndarray, r: np.ndarray, own: np.ndarray, segments: tuple,
                    lower: "_LowerSlab", unexplained: tuple[np.ndarray, np.ndarray]) -> None:
        """The layered breakdown's sums of one slab: per app phase (rank, epoch, name) its calls, the calls a
        profile window saw, its self time and each component's part of it, and how much of the step cycles' time
        that no evidence explains (``unexplained``) is its self time."""
        ep_val, ep_has = c.tag("epoch", rows)
        ep = np.where(ep_has, ep_val, NO_EPOCH)
        name = c.name[rows]
        local = combined_codes(r, ep, name)
        ngroups_local = int(local.max()) + 1 if local.size else 0
        first_any = np.full(ngroups_local, rows.size, dtype=_I8)
        np.minimum.at(first_any, local, np.arange(rows.size, dtype=_I8))
        own_at = np.flatnonzero(own)
        first_own = np.full(ngroups_local, rows.size, dtype=_I8)
        np.minimum.at(first_own, local[own_at], own_at)
        # each group's first row, and its first own row (the one whose facts it keeps), as Python ints at once: a
        # slab has hundreds of groups
        has_own = first_own < rows.size
        j = np.where(has_own, first_own, first_any)  # (a group only in the halo has its facts from an earlier slab)
        at = np.where(has_own, rows[j] if c.position is None else c.position[rows[j]], -1)
        keys = list(zip(r[first_any].tolist(), ep[first_any].tolist(), name[first_any].tolist()))
        facts = list(zip(at.tolist(), r[j].tolist(), ep[j].tolist(), name[j].tolist(),
                         c.cat_priority[c.cat[rows[j]]].tolist()))
        # a slab's keys are distinct: the new ones get the next codes in slab order, in bulk (a group per
        # distinct phase name: there may be a hundred thousand)
        to_group = np.fromiter((self._groups.get(k, -1) for k in keys), dtype=_I8, count=ngroups_local)
        known = to_group >= 0
        new = np.flatnonzero(~known).tolist()
        to_group[new] = np.arange(len(self.group_first), len(self.group_first) + len(new), dtype=_I8)
        self._groups.update(zip([keys[i] for i in new], to_group[new].tolist()))
        self.group_first.extend([list(facts[i]) for i in new])
        # a known group's own row earlier than its first: a frame not in start order
        for i in np.flatnonzero(known & has_own).tolist():
            code = int(to_group[i])
            if facts[i][0] < self.group_first[code][0]:
                self.group_first[code] = list(facts[i])
        key = to_group[local]
        n = len(self.group_first)
        self._add("calls", np.bincount(key[own], minlength=n), n)
        s_ax = self.axis.to_axis(r[own], c.start[rows[own]])
        e_ax = self.axis.to_axis(r[own], c.end[rows[own]])
        seen = covered_ns(*self.covered, s_ax, e_ax) > 0
        self._add("observed_calls", np.bincount(key[own], weights=seen, minlength=n).astype(np.float64), n)
        seg_s, seg_e, owner = segments
        gseg = key[owner]
        gaxis = Axis(gseg, seg_s, seg_e, n)  # a phase's intervals on several threads may overlap: union
        ms, me = merge_intervals(gaxis.to_axis(gseg, seg_s), gaxis.to_axis(gseg, seg_e))
        g = gaxis.group_of(ms)
        shift = gaxis.lo[g] - gaxis.offset[g]
        ms, me = ms + shift, me + shift

        def per_group(lengths: np.ndarray) -> np.ndarray:
            out = np.zeros(n, dtype=_I8)
            np.add.at(out, g, lengths)
            return out

        self._add("phase_time", per_group(me - ms), n)
        for x in LOWER_COMPONENTS:
            self._add(f"phase_{x}", per_group(covered_ns(*lower.exclusive[x], ms, me)), n)
        self._add("phase_python", per_group(covered_ns(*lower.unclaimed_covered, ms, me)), n)
        self._add("phase_unexplained", per_group(covered_ns(*unexplained, ms, me)), n)

    def _finish_layered(self) -> None:
        """The groups in the order of their first row (as a single pass over the frame finds them)."""
        if self.empty or not self._lower:
            return
        self.group_order = np.argsort(np.asarray([f[0] for f in self.group_first], dtype=_I8), kind="stable")

    def sum(self, key: str, size: int) -> np.ndarray:
        """The sum ``key`` over every slab (zeros when no slab added to it)."""
        have = self._sums.get(key)
        if have is None:
            return np.zeros(size, dtype=_I8)
        return have if have.size == size else np.concatenate((have, np.zeros(size - have.size, dtype=have.dtype)))


class _LowerSlab:
    """What the layers below the app did in one slab, as merged lists on an attribution's rank axis.

    ``raw[c]`` for each of :data:`LOWER_COMPONENTS`: ``fs`` = every call of a file-system layer
    (:data:`~trace_merge.schema.FS_LAYERS`, cat ``io``: reads, writes, opens, metadata; not the process control
    DFTracer also traces) of the rank's processes, forked workers included; ``comm`` = the ``comm`` layer (Horovod
    timeline, rank 0) and framework ``comm`` events (Horovod ops where a TF profile times them; TF 2.15's host
    profile does not). Horovod writes its timeline on rank 0 only, so the collectives it shows *executing*
    (``ALLREDUCE``, ``MPI_ALLREDUCE``, ``BROADCAST``, ...: :data:`_COLLECTIVE`) count as communication on every
    rank: a collective runs on all ranks at once (to within Horovod's cycle time and the clock alignment);
    ``input_wait`` = framework ``wait`` events (the consumer side of tf.data: ``IteratorGetNext`` and the pipeline
    it pulls inline); ``compute`` = framework ``compute`` and ``other`` events (kernels, the step
    function around them). tf.data producer threads' work (framework ``io``/``preprocess``) is no component: it
    runs the user's Python (``py_function``, generators) or decodes, which is what the remainder stands for.
    ``exclusive`` resolves overlaps by :data:`LOWER_COMPONENTS` order. ``sync_wait``: the timeline's negotiations
    (:data:`_NEGOTIATION`) in which its rank waited for a later one (``cat`` ``wait``) that no component covers: no
    component of the layered breakdown, a term of the step cycles; ``others_wait``: those in which its rank was
    the last ready (``cat`` ``other``: the other ranks waited for it), a fact for the straggler, no term.
    ``unclaimed_covered`` is the framework layer's coverage (:attr:`Attribution.covered`) no component claimed:
    only there can the remainder be called Python.
    Rows are clipped to their rank's window and to the slab.
    """

    def __init__(self, att: Attribution, c: _Frame, rows: np.ndarray, slab: _Slab) -> None:
        rows = rows[c.lower(rows)]
        rows = rows[np.isin(c.rank[rows], att.ranks)]
        r = att.rank_codes(c.rank[rows])
        s = att.axis.to_axis(r, np.maximum(c.start[rows], slab.t0))
        e = att.axis.to_axis(r, np.minimum(c.end[rows], slab.t1))
        lay, cat = c.layer[rows], c.cat[rows]
        in_fw = c.is_fw[lay]
        fw = in_fw & ~c.is_anchor[c.name[rows]]
        negotiating = c.is_negotiation[c.name[rows]]  # ranks waiting for one another: no communication
        masks = {
            "fs": c.is_fs[lay] & c.cat_is("io")[cat],
            "comm": (c.is_comm[lay] & ~negotiating) | (fw & c.cat_is("comm")[cat]),
            "input_wait": fw & c.cat_is("wait")[cat],
            "compute": fw & (c.cat_is("compute")[cat] | c.cat_is("other")[cat]),
            # the timeline reader's cat says what a negotiation was for the rank that wrote it: ``wait`` (it waited
            # for the last ready rank), ``other`` (it was the last: the others waited for it), ``comm`` (not told)
            "sync_wait": c.is_comm[lay] & negotiating & c.cat_is("wait")[cat],
            "others_wait": c.is_comm[lay] & negotiating & c.cat_is("other")[cat],
            # the accelerator busy with compute kernels (its own timeline): the AU where a rank has one
            "device": c.is_device[lay] & c.cat_is("compute")[cat],
        }
        # Horovod writes its timeline on rank 0 only, but a collective it shows executing (not negotiating)
        # runs on every rank at once: other ranks get those activities as their communication time.
        if att._shared is not None and att._sharing.size:
            src_s = np.maximum(att._shared.starts, slab.t0)
            src_e = np.minimum(att._shared.ends, slab.t1)
            part = src_e > src_s
            src_s, src_e = src_s[part], src_e[part]
            ks = np.repeat(att._sharing, src_s.size)
            s = np.concatenate((s, att.axis.to_axis(ks, np.tile(src_s, att._sharing.size))))
            e = np.concatenate((e, att.axis.to_axis(ks, np.tile(src_e, att._sharing.size))))
            masks = {x: np.concatenate((m, np.full(ks.size, x == "comm"))) for x, m in masks.items()}
        self.raw = {x: merge_intervals(s[m], e[m]) for x, m in masks.items()}
        self.exclusive: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        taken = (_EMPTY, _EMPTY)
        for x in LOWER_COMPONENTS:
            self.exclusive[x] = subtract_intervals(*self.raw[x], *taken)
            taken = union_of(taken, self.raw[x])
        #: covered time no lower layer claimed: what Python / decoding / IPC did while the profiler watched
        self.unclaimed_covered = subtract_intervals(*att.covered, *taken)
        #: negotiation time none of the rank's own lower-layer work covers: waiting for the other ranks
        self.sync_wait = subtract_intervals(*self.raw["sync_wait"], *taken)


#: Horovod timeline activities that are a collective executing (on every rank at once), not a negotiation; the
#: fusion buffer's copies (``MEMCPY_IN/OUT_FUSION_BUFFER``) run nested inside the executing ``ALLREDUCE``
_COLLECTIVE = re.compile(
    r"^(ALLREDUCE|ALLGATHER|BROADCAST|ALLTOALL|REDUCESCATTER|BARRIER|MPI_|NCCL_|GLOO_|CCL_|MEMCPY_)")
#: Horovod timeline activities of ranks waiting for one another: a ``NEGOTIATE_*`` runs from the first rank's
#: readiness for a tensor to the last's (measured on Horovod 0.28: a 50 ms sleep on either of 2 ranks gives
#: 50 ms negotiations), so it is synchronisation wait, never communication; whose wait is the reader's ``cat``
_NEGOTIATION = re.compile(r"^NEGOTIATE_")


def _collective_rows(rows: pd.DataFrame) -> np.ndarray:
    return category_mask(rows["name"], lambda n: bool(_COLLECTIVE.match(n)))


@dataclass
class SharedCollectives:
    """The ``comm``-layer collectives of a job (Horovod's rank-0 timeline) that every other attributed rank counts
    as its communication, and how many ranks are attributed (sharing needs more than one)."""

    starts: np.ndarray
    ends: np.ndarray
    ranks: int


def collective_mask(rows: pd.DataFrame) -> np.ndarray:
    """Which of ``rows`` are executing collectives (comm layer, positive duration): :func:`shared_collectives`'."""
    return (rows["layer"] == "comm").to_numpy() & _collective_rows(rows) & \
        (rows["end_ns"].to_numpy() > rows["start_ns"].to_numpy())


def shared_collectives(rows: pd.DataFrame, attributed_ranks: int) -> SharedCollectives:
    """The executing collectives among ``rows`` (comm layer, positive duration; of one partition or the job)."""
    if not len(rows):
        return SharedCollectives(_EMPTY, _EMPTY, attributed_ranks)
    keep = collective_mask(rows)
    return SharedCollectives(rows["start_ns"].to_numpy(dtype=_I8)[keep], rows["end_ns"].to_numpy(dtype=_I8)[keep],
                             attributed_ranks)


def _cycle_ends(r: np.ndarray, epoch: pd.Series, ws: np.ndarray, we: np.ndarray) -> np.ndarray:
    """Each step's cycle end (axis coordinates): the next step's start on the same rank and in the same epoch,
    else the step's own end."""
    ends = we.copy()
    if r.size > 1:
        ep = epoch.to_numpy(dtype=np.float64, na_value=np.nan)
        same_epoch = (ep[1:] == ep[:-1]) | (np.isnan(ep[1:]) & np.isnan(ep[:-1]))
        chained = (r[1:] == r[:-1]) & same_epoch & (ws[1:] > ws[:-1])
        ends[:-1] = np.where(chained, ws[1:], we[:-1])
    return ends

