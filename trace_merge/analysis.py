"""What the merged frame says: union time, breakdowns, exposed I/O, bandwidth, access pattern, verdicts.

The definitions live in ``../shared/DESIGN.md`` ("Analysis definitions"); this module is the one place that
implements them, for the CLI, the HTML report and notebooks alike. Every function takes a frame in the
:mod:`trace_merge.schema` layout and returns a :class:`pandas.DataFrame` (or a small dict of scalars).

Interval arithmetic
    :func:`merge_intervals` is the only interval-union routine (sort by start, running maximum of the ends,
    break where a start lies beyond everything seen so far: O(n log n), vectorised). Grouped work (per rank,
    per thread) lays the groups end to end on one int64 axis (:class:`_Axis`) so one sorted pass serves every
    group; intersection and difference of two merged lists are vectorised with :func:`numpy.searchsorted`.

Attribution of wall time (breakdown, exposed I/O, verdict, AU)
    Phases nest: ``Training Iteration`` (compute) may contain ``Call to Next Batch`` (wait), which contains
    ``Load File`` (io). A parent's category must not swallow what its children did, so on **one thread** each
    instant belongs to the *innermost* active interval (its "self time", as in any profiler). Across the
    threads of a rank, each instant goes to the highest-priority category any thread is in, in the order
    :data:`PRIORITY` (``io > comm > checkpoint > preprocess > compute > wait > other``): a prefetch thread
    reading while the main thread computes shows as ``io``. The exclusive shares of a row therefore never
    overlap; ``other`` takes whatever is left (uncovered time and explicit ``other`` phases) so a row sums to
    exactly 100 %. The per-category *union* time (``<cat>_s`` columns) is reported beside the shares and is
    computed from the raw intervals (a parent's full length counts there).

Layers
    By default the breakdown is made from the ``app`` layer, the user's own phase taxonomy; ``framework``,
    ``comm`` and ``posix`` rows are for drill-down (``layers=...`` or ``per_layer=True``). A frame without any
    ``app`` rows (a bare DFTracer or Darshan trace) falls back to all of its layers.

Bytes
    Read bytes come from the lowest layer that measured them for that rank (:data:`READ_LAYER_ORDER`:
    posix/stdio, then mpiio/hdf5, then framework, then app) and are never derived from sample counts.
"""
from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.schema import LAYERS

logger = logging.getLogger(__name__)

#: Exclusive attribution order across threads (first wins).
PRIORITY: tuple[str, ...] = ("io", "comm", "checkpoint", "preprocess", "compute", "wait", "other")
#: Where read bytes are taken from, lowest layer first.
READ_LAYER_ORDER: tuple[tuple[str, ...], ...] = (("posix", "stdio"), ("mpiio", "hdf5"), ("framework",), ("app",))
#: Darshan's read-size bins (``POSIX_SIZE_READ_*``), upper bounds inclusive, bytes.
SIZE_BINS: tuple[tuple[str, float], ...] = (
    ("0_100", 100), ("100_1K", 1024), ("1K_10K", 10 * 1024), ("10K_100K", 100 * 1024),
    ("100K_1M", 1024 ** 2), ("1M_4M", 4 * 1024 ** 2), ("4M_10M", 10 * 1024 ** 2),
    ("10M_100M", 100 * 1024 ** 2), ("100M_1G", 1024 ** 3), ("1G_PLUS", np.inf),
)
#: Input-bound thresholds (TF profiler): share of step time waiting for input, percent.
INPUT_BOUND_MODERATE_PCT = 5.0
INPUT_BOUND_HIGH_PCT = 20.0
#: Deeper nesting than this on one thread is treated as one level (async events, not a call tree).
MAX_DEPTH = 32

_READ_NAME = re.compile(r"read", re.IGNORECASE)
_NOT_READ_NAME = re.compile(r"readdir|readlink|thread|ready|spread|write", re.IGNORECASE)
_WRITE_NAME = re.compile(r"write", re.IGNORECASE)
_I8 = np.int64
_EMPTY = np.zeros(0, dtype=_I8)

# ----------------------------------------------------------------------------------------------------------
# Interval primitives
# ----------------------------------------------------------------------------------------------------------


def merge_intervals(starts: Iterable[int], ends: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into a sorted list of disjoint intervals (the "merged interval list").

    Parameters
    ----------
    starts, ends
        Interval bounds, int64 ns (any unit works; the result has the same unit). Empty and negative
        intervals (``end <= start``) are dropped. Touching intervals are joined.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Starts and ends of the merged list, int64, sorted, pairwise disjoint and non-touching.
    """
    s = np.asarray(starts, dtype=_I8)
    e = np.asarray(ends, dtype=_I8)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return _EMPTY, _EMPTY
    if not np.all(s[1:] >= s[:-1]):  # selections from already sorted data skip the sort
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def start_order(starts: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Stable order by ``starts``, ties by ``second`` ascending (both int64 arrays).

    Equal starts are few compared with all rows, so only their runs get the two-key sort (a full
    :func:`numpy.lexsort` costs about three sorts; the stable sort of nearly sorted input is cheap).
    """
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    tied = np.flatnonzero(s[1:] == s[:-1])
    if tied.size:
        at = np.unique(np.concatenate((tied, tied + 1)))
        sub = order[at]
        order[at] = sub[np.lexsort((second[sub], starts[sub]))]
    return order


def union_ns(starts: Iterable[int], ends: Iterable[int]) -> int:
    """Union time: total length of :func:`merge_intervals` of the input, same unit (ns)."""
    s, e = merge_intervals(starts, ends)
    return int((e - s).sum())


def intersect_intervals(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two merged interval lists (outputs of :func:`merge_intervals`).

    Every pair of overlapping intervals is found with two binary searches per interval of ``a``; the output
    has at most ``len(a) + len(b)`` intervals and is itself a merged list.
    """
    if a_s.size == 0 or b_s.size == 0:
        return _EMPTY, _EMPTY
    lo = np.searchsorted(b_e, a_s, side="right")  # first b that ends after a starts
    hi = np.searchsorted(b_s, a_e, side="left")  # b's that start before a ends
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    if total == 0:
        return _EMPTY, _EMPTY
    ai = np.repeat(np.arange(a_s.size), n)
    bi = lo[ai] + (np.arange(total) - np.repeat(np.cumsum(n) - n, n))
    s = np.maximum(a_s[ai], b_s[bi])
    e = np.minimum(a_e[ai], b_e[bi])
    keep = e > s
    return s[keep], e[keep]


def subtract_intervals(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """``a`` minus ``b`` for two merged interval lists: ``a`` intersected with the gaps of ``b``."""
    if a_s.size == 0 or b_s.size == 0:
        return a_s, a_e
    lo = min(int(a_s[0]), int(b_s[0]))
    hi = max(int(a_e[-1]), int(b_e[-1]))
    gap_s = np.concatenate(([lo], b_e))
    gap_e = np.concatenate((b_s, [hi]))
    keep = gap_e > gap_s
    return intersect_intervals(a_s, a_e, gap_s[keep], gap_e[keep])


def _union_of(*lists: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Merge several interval lists into one merged list."""
    return merge_intervals(np.concatenate([s for s, _ in lists] or [_EMPTY]),
                           np.concatenate([e for _, e in lists] or [_EMPTY]))


def covered_ns(ms: np.ndarray, me: np.ndarray, w_s: np.ndarray, w_e: np.ndarray) -> np.ndarray:
    """How much of each window ``[w_s, w_e)`` a merged list covers, int64 ns, one value per window.

    Uses the cumulative covered length ``F(t)`` of the merged list, so any number of windows costs two
    binary searches each.
    """
    w_s = np.asarray(w_s, dtype=_I8)
    w_e = np.asarray(w_e, dtype=_I8)
    if ms.size == 0:
        return np.zeros(w_s.shape, dtype=_I8)
    cum = np.concatenate(([0], np.cumsum(me - ms)))

    def upto(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(ms, t, side="right")
        k = np.maximum(j - 1, 0)
        inside = np.minimum(t, me[k]) - ms[k]
        return np.where(j > 0, cum[k] + inside, 0)

    return np.maximum(upto(w_e) - upto(w_s), 0)


class _Axis:
    """Lays groups of intervals end to end on one int64 axis.

    Group ``g`` occupies ``[offset[g], offset[g] + span[g]]``; consecutive groups are separated by at least
    one ns, so merging, intersecting and windowing on the axis never mixes two groups.
    """

    def __init__(self, groups: np.ndarray, starts: np.ndarray, ends: np.ndarray, ngroups: int) -> None:
        lo = np.zeros(ngroups, dtype=_I8)
        hi = np.zeros(ngroups, dtype=_I8)
        if groups.size:  # hash group-by: O(n), no sort
            lo_s = pd.Series(starts).groupby(groups).min()
            hi_s = pd.Series(ends).groupby(groups).max()
            lo[lo_s.index.to_numpy()] = lo_s.to_numpy()
            hi[hi_s.index.to_numpy()] = hi_s.to_numpy()
        width = hi - lo + 1
        self.offset = np.concatenate(([0], np.cumsum(width)[:-1])).astype(_I8)
        if ngroups and int(self.offset[-1]) + int(width[-1]) > 2 ** 62:
            raise ValueError("time span too large to analyse: check the input for absurd timestamps")
        self.lo, self.hi = lo, hi

    def to_axis(self, groups: np.ndarray, t: np.ndarray) -> np.ndarray:
        lo = self.lo[groups]
        return np.clip(t, lo, self.hi[groups]) - lo + self.offset[groups]

    def group_of(self, t_axis: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offset, t_axis, side="right") - 1

    def from_axis(self, t_axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = self.group_of(t_axis)
        return g, t_axis - self.offset[g] + self.lo[g]


def grouped_union_ns(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     ngroups: Optional[int] = None) -> np.ndarray:
    """Union time per group code, int64 ns, one value per group ``0..ngroups-1``."""
    groups = np.asarray(groups, dtype=_I8)
    starts = np.asarray(starts, dtype=_I8)
    ends = np.asarray(ends, dtype=_I8)
    ngroups = int(groups.max()) + 1 if ngroups is None and groups.size else (ngroups or 0)
    axis = _Axis(groups, starts, ends, ngroups)
    ms, me = merge_intervals(axis.to_axis(groups, starts), axis.to_axis(groups, ends))
    out = np.zeros(ngroups, dtype=_I8)
    np.add.at(out, axis.group_of(ms), me - ms)
    return out


# ----------------------------------------------------------------------------------------------------------
# Selecting rows
# ----------------------------------------------------------------------------------------------------------


def _layers_for(frame: pd.DataFrame, layers: "str | Sequence[str] | None") -> list[str]:
    present = [str(x) for x in pd.unique(frame["layer"].dropna())] if len(frame) else []
    if layers is None:
        return ["app"] if "app" in present else [x for x in LAYERS if x in present] or present
    if isinstance(layers, str):
        return present if layers == "all" else [layers]
    return list(layers)


def _category_mask(series: pd.Series, predicate) -> np.ndarray:
    """Evaluate ``predicate(str) -> bool`` once per category instead of once per row."""
    cats = series.cat.categories
    hit = np.fromiter((bool(predicate(str(c))) for c in cats), dtype=bool, count=len(cats))
    codes = series.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[np.maximum(codes, 0)] if len(cats) else False, False)


def _is_read_name(name: str) -> bool:
    return bool(_READ_NAME.search(name)) and not _NOT_READ_NAME.search(name)


def read_rows(frame: pd.DataFrame, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Rows that read data and carry the number of bytes, from the lowest layer that measured them per rank.

    A row is a read when its name contains ``read`` (``read``, ``pread64``, ``fread``, ``H5Dread``,
    ``MPI_File_read_at``, ``HDF5 File Read``; not ``readdir``/``readlink``/``thread``) or, in the app layer,
    when its cat is ``io`` and its name does not say ``write``; and ``bytes`` is known. For each rank only the
    first layer group of :data:`READ_LAYER_ORDER` that has such rows is kept, so a read counted by both
    DFTracer and the app's own timer is counted once. ``columns`` limits the columns copied out.
    """
    if not len(frame):
        return frame
    named = _category_mask(frame["name"], _is_read_name)
    app_io = ((frame["layer"] == "app") & (frame["cat"] == "io")).to_numpy(dtype=bool, na_value=False)
    app_io &= ~_category_mask(frame["name"], lambda n: bool(_WRITE_NAME.search(n)))
    mask = (named | app_io) & frame["bytes"].notna().to_numpy()
    cols = list(frame.columns) if columns is None else list(dict.fromkeys(["layer", "rank", *columns]))
    rows = frame.loc[mask, cols]
    if not len(rows):
        return rows
    level_of = {layer: i for i, group in enumerate(READ_LAYER_ORDER) for layer in group}
    level = rows["layer"].map(lambda x: level_of.get(str(x), len(READ_LAYER_ORDER))).astype("int64")
    best = level.groupby(rows["rank"].to_numpy()).transform("min")
    return rows[(level == best).to_numpy()]


# ----------------------------------------------------------------------------------------------------------
# Attribution of wall time
# ----------------------------------------------------------------------------------------------------------


class _Attribution:
    """Per rank: merged lists (on a rank axis) of each category's self time and raw union.

    Attributes
    ----------
    ranks
        Rank number of each rank code.
    axis
        The rank axis (:class:`_Axis`) all lists below live on.
    self_time
        cat -> merged list of instants whose innermost phase (on some thread) has that cat.
    raw
        cat -> merged list of the raw intervals of that cat.
    """

    #: Columns the attribution needs; only these are copied out of a (possibly huge, wide) frame.
    COLUMNS = ["rank", "pid", "tid", "cat", "start_ns", "end_ns", "epoch", "step"]

    def __init__(self, rows: pd.DataFrame) -> None:
        s = rows["start_ns"].to_numpy(dtype=_I8)
        e = rows["end_ns"].to_numpy(dtype=_I8)
        rank_codes, ranks = pd.factorize(rows["rank"].to_numpy(), sort=True)
        self.ranks = np.asarray(ranks, dtype=_I8)
        self._r = rank_codes.astype(_I8)
        self._s, self._e = s, e
        self._tags = {k: (rows[k].to_numpy(dtype=_I8, na_value=0), rows[k].notna().to_numpy())
                      for k in ("epoch", "step")}
        cat_idx = self._cat_index(rows["cat"])
        self.axis = _Axis(self._r, s, e, len(self.ranks))
        rs = self.axis.to_axis(self._r, s)
        re_ = self.axis.to_axis(self._r, e)
        self.raw = {c: merge_intervals(rs[cat_idx == i], re_[cat_idx == i]) for i, c in enumerate(PRIORITY)}
        thread = _combined_codes(self._r, rows["pid"].to_numpy(), rows["tid"].to_numpy())
        self.self_time = self._self_time(thread, s, e, cat_idx)
        self._windows: dict[tuple[str, ...], pd.DataFrame] = {}

    @staticmethod
    def _cat_index(cats: pd.Series) -> np.ndarray:
        lookup = np.array([PRIORITY.index(str(c)) if str(c) in PRIORITY else PRIORITY.index("other")
                           for c in cats.cat.categories] + [PRIORITY.index("other")], dtype=_I8)
        return lookup[cats.cat.codes.to_numpy()]  # code -1 (missing) picks the trailing "other"

    def _self_time(self, thread: np.ndarray, s: np.ndarray, e: np.ndarray, cat_idx: np.ndarray
                   ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        nthreads = int(thread.max()) + 1 if thread.size else 0
        thread_rank = np.zeros(nthreads, dtype=_I8)
        thread_rank[thread] = self._r
        taxis = _Axis(thread, s, e, nthreads)
        ts = taxis.to_axis(thread, s)
        te = taxis.to_axis(thread, e)
        order = np.argsort(ts, kind="stable")  # every selection below is then already sorted
        ts, te, cat_idx = ts[order], te[order], cat_idx[order]
        depth = np.minimum(_nesting_depth(ts, te), MAX_DEPTH)
        out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in PRIORITY}
        deeper = (_EMPTY, _EMPTY)
        for d in range(int(depth.max()) if depth.size else -1, -1, -1):
            at_d = depth == d
            for i, c in enumerate(PRIORITY):
                sel = at_d & (cat_idx == i)
                if sel.any():
                    out[c].append(subtract_intervals(*merge_intervals(ts[sel], te[sel]), *deeper))
            deeper = _union_of(deeper, (ts[at_d], te[at_d]))
        result = {}
        for c, parts in out.items():
            seg_s = np.concatenate([p[0] for p in parts] or [_EMPTY])
            seg_e = np.concatenate([p[1] for p in parts] or [_EMPTY])
            g, abs_s = taxis.from_axis(seg_s)
            abs_e = seg_e - taxis.offset[g] + taxis.lo[g]
            r = thread_rank[g]
            result[c] = merge_intervals(self.axis.to_axis(r, abs_s), self.axis.to_axis(r, abs_e))
        return result

    def windows(self, keys: Sequence[str]) -> pd.DataFrame:
        """``[start, end]`` of the rows per ``(rank, *keys)`` (keys non-null), with axis coordinates.

        Returns
        -------
        pandas.DataFrame
            ``_r`` (rank code), ``*keys``, ``start_ns``, ``end_ns``, ``rank``, ``_ws``, ``_we``.
        """
        if tuple(keys) in self._windows:
            return self._windows[tuple(keys)]
        keep = np.ones(self._s.size, dtype=bool)
        for k in keys:
            keep &= self._tags[k][1]
        data = pd.DataFrame({"_r": self._r[keep], **{k: self._tags[k][0][keep] for k in keys},
                             "start_ns": self._s[keep], "end_ns": self._e[keep]})
        w = data.groupby(["_r", *keys], sort=True).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        w = w.reset_index()
        r = w["_r"].to_numpy(dtype=_I8)
        w["rank"] = self.ranks[r] if len(w) else np.zeros(0, dtype=_I8)
        w["_ws"] = self.axis.to_axis(r, w["start_ns"].to_numpy(dtype=_I8))
        w["_we"] = self.axis.to_axis(r, w["end_ns"].to_numpy(dtype=_I8))
        self._windows[tuple(keys)] = w
        return w

    def self_union(self, cats: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return _union_of(*(self.self_time[c] for c in cats))


def _nesting_depth(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Number of intervals still open when each interval starts (0 = outermost); ties: longer is outer."""
    order = start_order(s, -e)
    pos = np.empty(s.size, dtype=_I8)
    pos[order] = np.arange(s.size, dtype=_I8)
    return pos - np.searchsorted(np.sort(e), s, side="right")


def _combined_codes(*keys: np.ndarray) -> np.ndarray:
    """One dense int64 code per distinct tuple of the key arrays (hash-based, O(n))."""
    code = np.zeros(keys[0].size, dtype=_I8)
    for k in keys:
        kc, uniq = pd.factorize(k)
        code, _ = pd.factorize(code * len(uniq) + kc)
    return code.astype(_I8)


def _attribution(frame: pd.DataFrame, layers: "str | Sequence[str] | None") -> Optional[_Attribution]:
    """The attribution of the rows of ``layers`` (see :func:`breakdown_df`), ``None`` when there are none."""
    if not len(frame):
        return None
    use = _layers_for(frame, layers)
    keep = frame["layer"].isin(use).to_numpy() & (frame["end_ns"].to_numpy() > frame["start_ns"].to_numpy())
    rows = frame.loc[keep, _Attribution.COLUMNS]
    return _Attribution(rows) if len(rows) else None


def breakdown_df(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None, *,
                 per_layer: bool = False, include_total: bool = True) -> pd.DataFrame:
    """Where each rank's wall time went, per epoch.

    Parameters
    ----------
    frame
        Merged frame (:mod:`trace_merge.schema`).
    layers
        Layers whose intervals are attributed: ``None`` = ``app`` if present else all layers, ``"all"``, one
        layer name, or a list.
    per_layer
        One block of rows per layer (adds a ``layer`` column) instead of one attribution over all of them.
    include_total
        Also one row per rank with ``epoch`` missing covering the rank's whole traced time.

    Returns
    -------
    pandas.DataFrame
        One row per ``(rank, epoch)`` (plus totals): ``rank``, ``epoch`` (Int64, missing = whole run),
        ``start_ns``, ``end_ns`` (the window: first start to last end of the rows tagged with that epoch),
        ``wall_s``; ``<cat>_pct`` for each cat of :data:`PRIORITY` -- the exclusive share of the window in
        percent (innermost phase per thread, priority across threads; ``other_pct`` is the rest, so the
        shares sum to 100); ``<cat>_s`` -- union time of that cat's raw intervals inside the window, seconds.
    """
    use = _layers_for(frame, layers)
    if per_layer:
        parts = [breakdown_df(frame, [x], include_total=include_total).assign(layer=x) for x in use]
        parts = [p for p in parts if len(p)]
        if not parts:
            return _empty_breakdown().assign(layer=pd.Series(dtype="string"))
        out = pd.concat(parts, ignore_index=True)
        return out[["layer", *[c for c in out.columns if c != "layer"]]]
    return _breakdown(_attribution(frame, use), include_total)


def _breakdown(att: Optional[_Attribution], include_total: bool = True) -> pd.DataFrame:
    if att is None:
        return _empty_breakdown()
    windows = att.windows(["epoch"])
    if include_total:
        windows = pd.concat([windows, _total_windows(att)], ignore_index=True)
    return _shares(att, windows)


def _total_windows(att: _Attribution) -> pd.DataFrame:
    """One window per rank over all of its rows, tagged with a missing epoch."""
    w = att.windows([])
    return w.assign(epoch=pd.array([pd.NA] * len(w), dtype="Int64"))


def _empty_breakdown() -> pd.DataFrame:
    cols = {"rank": "int64", "epoch": "Int64", "start_ns": "int64", "end_ns": "int64", "wall_s": "float64"}
    cols.update({f"{c}_pct": "float64" for c in PRIORITY})
    cols.update({f"{c}_s": "float64" for c in PRIORITY})
    return pd.DataFrame({k: pd.Series(dtype=v) for k, v in cols.items()})


def _shares(att: _Attribution, w: pd.DataFrame) -> pd.DataFrame:
    ws = w["_ws"].to_numpy(dtype=_I8)
    we = w["_we"].to_numpy(dtype=_I8)
    wall = (we - ws).astype(np.float64)
    safe = np.where(wall > 0, wall, np.nan)
    out = pd.DataFrame({
        "rank": w["rank"].to_numpy(dtype=_I8),
        "epoch": pd.array(w["epoch"], dtype="Int64"),
        "start_ns": w["start_ns"].to_numpy(dtype=_I8),
        "end_ns": w["end_ns"].to_numpy(dtype=_I8),
        "wall_s": wall / 1e9,
    })
    covered_before = np.zeros(len(w), dtype=_I8)
    acc = (_EMPTY, _EMPTY)
    shares = {}
    for c in PRIORITY[:-1]:
        acc = _union_of(acc, att.self_time[c])
        covered = covered_ns(*acc, ws, we)
        shares[f"{c}_pct"] = 100.0 * (covered - covered_before) / safe
        covered_before = covered
    for c in PRIORITY[:-1]:
        out[f"{c}_pct"] = np.nan_to_num(shares[f"{c}_pct"])
    out["other_pct"] = 100.0 - out[[f"{c}_pct" for c in PRIORITY[:-1]]].sum(axis=1)
    for c in PRIORITY:
        out[f"{c}_s"] = covered_ns(*att.raw[c], ws, we) / 1e9
    return out.sort_values(["rank", "epoch"], na_position="last", kind="stable").reset_index(drop=True)


def exposed_io_df(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None) -> pd.DataFrame:
    """Exposed I/O (input stall) and overlap per rank and epoch (plus a whole-run row per rank).

    ``input = io ∪ wait`` and ``compute`` are taken as self time (innermost phase per thread, see the module
    docstring); ``overlap = input ∩ compute`` (input hidden behind compute on another thread) and
    ``exposed = input − overlap``, all as union time inside the window.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch`` (Int64, missing = whole run), ``wall_s``, ``input_s``, ``compute_s``,
        ``overlap_s``, ``exposed_s``, ``exposed_pct`` (of wall time).
    """
    return _exposed(_attribution(frame, layers))


def _exposed(att: Optional[_Attribution]) -> pd.DataFrame:
    cols = ["rank", "epoch", "wall_s", "input_s", "compute_s", "overlap_s", "exposed_s", "exposed_pct"]
    if att is None:
        return pd.DataFrame({c: pd.Series(dtype="Int64" if c == "epoch" else "float64") for c in cols})
    w = pd.concat([att.windows(["epoch"]), _total_windows(att)], ignore_index=True)
    ws, we = w["_ws"].to_numpy(dtype=_I8), w["_we"].to_numpy(dtype=_I8)
    inp = att.self_union(["io", "wait"])
    comp = att.self_time["compute"]
    both = intersect_intervals(*inp, *comp)
    input_ns = covered_ns(*inp, ws, we)
    overlap_ns = covered_ns(*both, ws, we)
    wall = (we - ws).astype(np.float64)
    out = pd.DataFrame({
        "rank": w["rank"].to_numpy(dtype=_I8),
        "epoch": pd.array(w["epoch"], dtype="Int64"),
        "wall_s": wall / 1e9,
        "input_s": input_ns / 1e9,
        "compute_s": covered_ns(*comp, ws, we) / 1e9,
        "overlap_s": overlap_ns / 1e9,
        "exposed_s": (input_ns - overlap_ns) / 1e9,
        "exposed_pct": np.nan_to_num(100.0 * (input_ns - overlap_ns) / np.where(wall > 0, wall, np.nan)),
    })
    return out.sort_values(["rank", "epoch"], na_position="last", kind="stable").reset_index(drop=True)


def verdict_label(input_pct: float) -> str:
    """TF profiler's rule on the share of step time waiting for input (percent)."""
    if not np.isfinite(input_pct):
        return "unknown"
    if input_pct >= INPUT_BOUND_HIGH_PCT:
        return "highly input-bound"
    if input_pct >= INPUT_BOUND_MODERATE_PCT:
        return "moderately input-bound"
    return "not input-bound"


def input_bound_df(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None) -> pd.DataFrame:
    """Per rank: step time, exposed input wait inside steps, accelerator utilisation, verdict.

    Step time is the union of the windows of the ``(epoch, step)`` pairs tagged on the rows (``basis`` =
    ``"step"``); a rank without step tags falls back to its epoch windows (``"epoch"``), then to its whole
    traced time (``"run"``, e.g. a bare Darshan log), where the numbers are shown but the verdict is
    ``"unknown"``: without training positions there is no step time to be input-bound in.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``basis``, ``step_s``, ``input_wait_s`` (exposed io ∪ wait inside steps), ``input_pct``,
        ``compute_s`` (compute self time inside steps), ``au_pct`` (= compute_s ÷ step_s × 100),
        ``verdict``.
    """
    return _input_bound(_attribution(frame, layers))


def _input_bound(att: Optional[_Attribution]) -> pd.DataFrame:
    cols = ["rank", "basis", "step_s", "input_wait_s", "input_pct", "compute_s", "au_pct", "verdict"]
    if att is None:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("basis", "verdict") else "float64")
                             for c in cols})
    chosen = []
    done = np.zeros(len(att.ranks), dtype=bool)
    for basis, keys in (("step", ["epoch", "step"]), ("step", ["step"]), ("epoch", ["epoch"]), ("run", [])):
        if done.all():
            break
        w = att.windows(keys)
        w = w[~done[w["_r"].to_numpy(dtype=_I8)]]
        if len(w):
            chosen.append(w.assign(basis=basis)[["_r", "basis", "_ws", "_we"]])
            done[w["_r"].to_numpy(dtype=_I8)] = True
    w = pd.concat(chosen, ignore_index=True)
    steps = merge_intervals(w["_ws"].to_numpy(dtype=_I8), w["_we"].to_numpy(dtype=_I8))
    basis = w.groupby("_r")["basis"].first()
    exposed = subtract_intervals(*att.self_union(["io", "wait"]), *att.self_time["compute"])
    r_of = att.axis.group_of(steps[0])
    n = len(att.ranks)

    def per_rank(lengths: np.ndarray) -> np.ndarray:
        acc = np.zeros(n, dtype=_I8)
        np.add.at(acc, r_of, lengths)
        return acc

    step_ns = per_rank(steps[1] - steps[0])
    rank_basis = basis.reindex(range(n)).to_numpy()
    wait_ns = per_rank(covered_ns(*exposed, *steps))
    comp_ns = per_rank(covered_ns(*att.self_time["compute"], *steps))
    safe = np.where(step_ns > 0, step_ns, np.nan).astype(np.float64)
    input_pct = np.nan_to_num(100.0 * wait_ns / safe)
    return pd.DataFrame({
        "rank": att.ranks,
        "basis": rank_basis,
        "step_s": step_ns / 1e9,
        "input_wait_s": wait_ns / 1e9,
        "input_pct": input_pct,
        "compute_s": comp_ns / 1e9,
        "au_pct": np.nan_to_num(100.0 * comp_ns / safe),
        # without tagged training positions there is no step time to be input-bound in
        "verdict": [verdict_label(p) if b != "run" else "unknown" for p, b in zip(input_pct, rank_basis)],
    })


def verdict(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None) -> dict:
    """Job-level input-bound verdict: Σ exposed input wait ÷ Σ step time over ranks with steps or epochs.

    Returns
    -------
    dict
        ``input_pct``, ``verdict``, ``au_pct``, ``basis`` (the ranks' bases joined), ``worst_rank``,
        ``worst_rank_input_pct``.
    """
    return _verdict(input_bound_df(frame, layers))


def _verdict(per: pd.DataFrame) -> dict:
    per = per[per["basis"] != "run"] if len(per) else per
    step = float(per["step_s"].sum()) if len(per) else 0.0
    if not len(per) or step <= 0:
        return {"input_pct": None, "verdict": "unknown", "au_pct": None, "basis": None,
                "worst_rank": None, "worst_rank_input_pct": None}
    pct = 100.0 * float(per["input_wait_s"].sum()) / step
    worst = per.loc[per["input_pct"].idxmax()]
    return {
        "input_pct": pct,
        "verdict": verdict_label(pct),
        "au_pct": 100.0 * float(per["compute_s"].sum()) / step,
        "basis": ",".join(sorted(set(per["basis"]))),
        "worst_rank": int(worst["rank"]),
        "worst_rank_input_pct": float(worst["input_pct"]),
    }


def accelerator_utilisation(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None
                            ) -> Optional[float]:
    """DLIO's AU: union(compute) ÷ wall time of training steps, over all ranks, as a fraction (0..1).

    ``None`` when the frame has no steps to measure.
    """
    au = verdict(frame, layers)["au_pct"]
    return None if au is None else au / 100.0


# ----------------------------------------------------------------------------------------------------------
# Bytes: bandwidth and access pattern
# ----------------------------------------------------------------------------------------------------------


def _counter_bandwidth(counters: Optional[pd.DataFrame], skip_ranks: set) -> pd.DataFrame:
    """Darshan counters for ranks without interval rows: bytes and cumulative (sum, not union) read time."""
    if counters is None or not len(counters):
        return pd.DataFrame()
    rows = []
    for prefix, layer in (("POSIX", "posix"), ("STDIO", "stdio"), ("MPIIO", "mpiio"), ("H5D", "hdf5")):
        sub = counters[counters["counter"].isin([f"{prefix}_BYTES_READ", f"{prefix}_F_READ_TIME",
                                                 f"{prefix}_READS"]).to_numpy()]
        if not len(sub):
            continue
        wide = sub.pivot_table(index="rank", columns="counter", values="value", aggfunc="sum", observed=True)
        for rank, rec in wide.iterrows():
            nbytes = rec.get(f"{prefix}_BYTES_READ", np.nan)
            if rank in skip_ranks or not nbytes > 0:
                continue
            rows.append({"rank": int(rank), "layer": layer, "basis": "counters", "read_bytes": int(nbytes),
                         "reads": int(rec.get(f"{prefix}_READS", 0) or 0),
                         "read_time_s": float(rec.get(f"{prefix}_F_READ_TIME", np.nan)),
                         "read_sum_s": float(rec.get(f"{prefix}_F_READ_TIME", np.nan))})
            skip_ranks = skip_ranks | {rank}
    return pd.DataFrame(rows)


def bandwidth_df(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Read bandwidth per rank: bytes read ÷ union of read time.

    Parameters
    ----------
    frame
        Merged frame; reads are selected by :func:`read_rows`.
    counters
        Optional counters table; Darshan ``<MOD>_BYTES_READ`` / ``<MOD>_F_READ_TIME`` are used for ranks that
        have no read intervals (``basis="counters"``; the time is then Darshan's cumulative read time).

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``layer`` (where the bytes came from), ``basis`` (``intervals``/``counters``),
        ``read_bytes``, ``reads``, ``read_time_s`` (union), ``read_sum_s`` (plain sum),
        ``read_bw_MB_per_s`` (10^6 bytes per second).
    """
    rows = read_rows(frame, ["start_ns", "end_ns", "bytes"])
    parts = []
    if len(rows):
        codes, ranks = pd.factorize(rows["rank"], sort=True)
        codes = codes.astype(_I8)
        s = rows["start_ns"].to_numpy(dtype=_I8)
        e = rows["end_ns"].to_numpy(dtype=_I8)
        union = grouped_union_ns(codes, s, e, len(ranks))
        g = rows.assign(_dur=e - s).groupby(codes)
        pairs = pd.DataFrame({"r": codes, "layer": rows["layer"].cat.codes.to_numpy()}).drop_duplicates()
        names = rows["layer"].cat.categories
        layer = pairs.groupby("r")["layer"].agg(lambda x: ",".join(sorted(str(names[i]) for i in x)))
        parts.append(pd.DataFrame({
            "rank": np.asarray(ranks, dtype=_I8),
            "layer": layer.to_numpy(),
            "basis": "intervals",
            "read_bytes": g["bytes"].sum().to_numpy(dtype=_I8),
            "reads": g.size().to_numpy(dtype=_I8),
            "read_time_s": union / 1e9,
            "read_sum_s": g["_dur"].sum().to_numpy(dtype=np.float64) / 1e9,
        }))
    # Darshan's rank -1 records are shared files reduced over all ranks: with per-rank intervals they would
    # count the same bytes twice.
    extra = _counter_bandwidth(counters, set(int(r) for r in parts[0]["rank"]) | {-1} if parts else set())
    if len(extra):
        parts.append(extra)
    cols = ["rank", "layer", "basis", "read_bytes", "reads", "read_time_s", "read_sum_s", "read_bw_MB_per_s"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("layer", "basis") else "float64")
                             for c in cols})
    out = pd.concat(parts, ignore_index=True).sort_values("rank", kind="stable").reset_index(drop=True)
    t = out["read_time_s"].to_numpy(dtype=np.float64)
    out["read_bw_MB_per_s"] = np.where(t > 0, out["read_bytes"].to_numpy(dtype=np.float64) / 1e6 / np.where(
        t > 0, t, 1.0), np.nan)
    return out[cols]


def job_wall_ns(frame: pd.DataFrame) -> int:
    """First start to last end over every row of the frame, ns (0 for an empty frame)."""
    if not len(frame):
        return 0
    return int(frame["end_ns"].max()) - int(frame["start_ns"].min())


def layer_activity_df(frame: pd.DataFrame) -> pd.DataFrame:
    """How busy each captured layer was, per layer and rank, over the whole job.

    Columns: ``layer, rank, events, busy_s`` (union time of the layer's intervals on that rank, s) and
    ``busy_pct`` (``busy_s`` as % of :func:`job_wall_ns`). Layers overlap each other (a POSIX read runs inside an
    app ``Load File``), so the percentages of one rank do not add up to anything; they say where each layer's
    time lies, e.g. how much of the job Horovod's background thread spent negotiating and reducing.
    """
    cols = ["layer", "rank", "events", "busy_s", "busy_pct"]
    if not len(frame):
        return pd.DataFrame(columns=cols)
    keys = frame.groupby(["layer", "rank"], observed=True, sort=True).ngroup().to_numpy()
    busy = grouped_union_ns(keys, frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy())
    first = frame.groupby(keys, sort=True).agg(layer=("layer", "first"), rank=("rank", "first"),
                                               events=("rank", "size"))
    wall = job_wall_ns(frame)
    out = first.reset_index(drop=True)
    out["layer"] = out["layer"].astype(str)
    out["busy_s"] = busy / 1e9
    out["busy_pct"] = 100.0 * busy / wall if wall else np.nan
    return out[cols]


def bandwidth_totals(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
                     per_rank: Optional[pd.DataFrame] = None) -> dict:
    """Aggregate read bandwidth of the job.

    Returns
    -------
    dict
        ``read_bytes`` (Σ over ranks), ``ranks``, ``slowest_rank``, ``slowest_read_time_s`` (largest union
        read time), ``aggregate_bw_MB_per_s`` (Σ bytes ÷ slowest rank's union read time), ``job_wall_s``,
        ``bw_over_job_wall_MB_per_s`` (Σ bytes ÷ job wall time).
    """
    bw = bandwidth_df(frame, counters) if per_rank is None else per_rank
    wall = job_wall_ns(frame) / 1e9
    if not len(bw):
        return {"read_bytes": 0, "ranks": 0, "slowest_rank": None, "slowest_read_time_s": None,
                "aggregate_bw_MB_per_s": None, "job_wall_s": wall, "bw_over_job_wall_MB_per_s": None}
    total = int(bw["read_bytes"].sum())
    slow = bw.loc[bw["read_time_s"].fillna(-1).idxmax()]
    t = float(slow["read_time_s"])
    return {
        "read_bytes": total,
        "ranks": int(len(bw)),
        "slowest_rank": int(slow["rank"]),
        "slowest_read_time_s": t,
        "aggregate_bw_MB_per_s": total / 1e6 / t if t > 0 else None,
        "job_wall_s": wall,
        "bw_over_job_wall_MB_per_s": total / 1e6 / wall if wall > 0 else None,
    }


def access_pattern_df(frame: pd.DataFrame) -> pd.DataFrame:
    """File access pattern of the reads (:func:`read_rows`) per rank and epoch.

    Sequentiality is Darshan's (``POSIX_CONSEC_READS``, ``POSIX_SEQ_READS``), per (rank, file) in time order
    with ``last = offset + length - 1`` of the previous read (0 before the first): a read is *consecutive*
    when its offset is ``last + 1``, *sequential* when it is beyond ``last`` (consecutive included), *random*
    otherwise. Reads without an offset (``read()`` calls) and reads right after one are not classified.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch`` (Int64, may be missing), ``files``, ``reads``, ``read_bytes``, ``classified``,
        ``consecutive``, ``sequential``, ``random``, and ``size_<bin>`` read counts for Darshan's size bins
        (:data:`SIZE_BINS`).
    """
    rows = read_rows(frame, ["start_ns", "bytes", "offset", "file", "epoch"])
    size_cols = [f"size_{b}" for b, _ in SIZE_BINS]
    cols = ["rank", "epoch", "files", "reads", "read_bytes", "classified", "consecutive", "sequential",
            "random", *size_cols]
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype="Int64" if c == "epoch" else "int64") for c in cols})
    rows = rows.sort_values(["rank", "file", "start_ns"], kind="stable")
    rank = rows["rank"].to_numpy(dtype=_I8)
    file_code = rows["file"].cat.codes.to_numpy(dtype=_I8)
    nbytes = rows["bytes"].to_numpy(dtype=_I8, na_value=0)
    off = rows["offset"]
    has_off = off.notna().to_numpy()
    off = off.to_numpy(dtype=_I8, na_value=0)
    same = np.r_[False, (rank[1:] == rank[:-1]) & (file_code[1:] == file_code[:-1])] & (file_code >= 0)
    # Darshan keeps last_byte_read = offset + length - 1 of the previous read of the file, starting at 0
    last_byte = np.where(same, np.r_[0, off[:-1] + nbytes[:-1] - 1], 0)
    classified = has_off & (file_code >= 0) & np.where(same, np.r_[False, has_off[:-1]], True)
    consec = classified & (off == last_byte + 1)
    seq = classified & (off > last_byte)
    edges = np.array([b for _, b in SIZE_BINS], dtype=np.float64)
    size_bin = np.searchsorted(edges, nbytes, side="left")  # Darshan: size <= upper bound
    data = pd.DataFrame({
        "rank": rank, "epoch": pd.array(rows["epoch"], dtype="Int64"), "file": rows["file"].to_numpy(),
        "read_bytes": nbytes, "classified": classified, "consecutive": consec, "sequential": seq,
        "random": classified & ~seq,
    })
    for i, c in enumerate(size_cols):
        data[c] = size_bin == i
    g = data.groupby(["rank", "epoch"], sort=True, dropna=False)
    out = g.agg(files=("file", "nunique"), reads=("read_bytes", "size"), read_bytes=("read_bytes", "sum"),
                **{c: (c, "sum") for c in ["classified", "consecutive", "sequential", "random", *size_cols]})
    out = out.reset_index()
    out["epoch"] = pd.array(out["epoch"], dtype="Int64")
    for c in cols[2:]:
        out[c] = out[c].astype("int64")
    return out[cols]


# ----------------------------------------------------------------------------------------------------------
# Per-event statistics and comparison
# ----------------------------------------------------------------------------------------------------------


def event_stats_df(frame: pd.DataFrame, by: Sequence[str] = ("layer", "cat", "name")) -> pd.DataFrame:
    """Count and duration statistics per group of events (``dftracer_stats --report detailed`` per name).

    Parameters
    ----------
    frame
        Any schema frame.
    by
        Grouping columns; ``("name",)`` gives exactly ``dftracer_stats``' per-name groups.

    Returns
    -------
    pandas.DataFrame
        ``*by``, ``count``, ``sum_us``, ``min_us``, ``max_us``, ``mean_us`` (durations in µs, sums taken in
        integer ns first), ``bytes`` (Σ of the known ``bytes``; missing when no row of the group has any).
    """
    by = list(by)
    cols = [*by, "count", "sum_us", "min_us", "max_us", "mean_us", "bytes"]
    if not len(frame):
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    g = frame.groupby(by, sort=True, observed=True)
    dur = g["dur_ns"]
    out = pd.DataFrame({"count": g.size(), "sum_ns": dur.sum(), "min_ns": dur.min(), "max_ns": dur.max(),
                        "bytes": g["bytes"].sum(min_count=1)})
    out = out.reset_index()
    res = out[by].copy()
    res["count"] = out["count"].astype("int64")
    res["sum_us"] = out["sum_ns"].astype(np.float64) / 1e3
    res["min_us"] = out["min_ns"].astype(np.float64) / 1e3
    res["max_us"] = out["max_ns"].astype(np.float64) / 1e3
    res["mean_us"] = res["sum_us"] / res["count"]
    res["bytes"] = pd.array(out["bytes"], dtype="Int64")
    return res[cols]


def overall_breakdown(breakdown: pd.DataFrame) -> dict:
    """Whole-job exclusive shares from the per-rank total rows of :func:`breakdown_df`: Σ time ÷ Σ wall."""
    tot = breakdown[breakdown["epoch"].isna()] if breakdown["epoch"].isna().any() else breakdown
    wall = float(tot["wall_s"].sum())
    if wall <= 0:
        return {f"{c}_pct": None for c in PRIORITY}
    return {f"{c}_pct": float((tot[f"{c}_pct"] * tot["wall_s"]).sum() / wall) for c in PRIORITY}


def run_metrics(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
                layers: "str | Sequence[str] | None" = None) -> dict:
    """The handful of scalars that characterise a run (used by :func:`compare_df` and summaries)."""
    att = _attribution(frame, layers)
    return _metrics(frame, _breakdown(att), _exposed(att), bandwidth_totals(frame, counters),
                    _verdict(_input_bound(att)))


def _metrics(frame: pd.DataFrame, bd: pd.DataFrame, exp: pd.DataFrame, totals: dict, v: dict) -> dict:
    exp_tot = exp[exp["epoch"].isna()]
    wall = float(exp_tot["wall_s"].sum())
    out = {"ranks": int(frame["rank"].nunique()) if len(frame) else 0, "events": int(len(frame)),
           "job_wall_s": totals["job_wall_s"]}
    out.update(overall_breakdown(bd) if len(bd) else {f"{c}_pct": None for c in PRIORITY})
    out["exposed_io_pct"] = 100.0 * float(exp_tot["exposed_s"].sum()) / wall if wall > 0 else None
    out.update({k: totals[k] for k in ("read_bytes", "slowest_read_time_s", "aggregate_bw_MB_per_s",
                                       "bw_over_job_wall_MB_per_s")})
    out.update({"input_pct": v["input_pct"], "au_pct": v["au_pct"], "verdict": v["verdict"]})
    return out


def compare_df(runs: Sequence[pd.DataFrame], labels: Sequence[str],
               counters: Optional[Sequence[Optional[pd.DataFrame]]] = None) -> pd.DataFrame:
    """Two or more runs side by side: one column per run, one row per metric of :func:`run_metrics`.

    Parameters
    ----------
    runs
        Merged frames.
    labels
        Column names, one per run (must be unique).
    counters
        Optional counters tables, one per run (``None`` entries allowed).
    """
    if len(runs) != len(labels):
        raise ValueError("compare_df: one label per run")
    if len(set(labels)) != len(labels):
        raise ValueError("compare_df: labels must be unique")
    counters = list(counters) if counters is not None else [None] * len(runs)
    cols = {label: run_metrics(f, c) for f, c, label in zip(runs, counters, labels)}
    return pd.DataFrame(cols)


def summarise(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
              layers: "str | Sequence[str] | None" = None) -> dict[str, pd.DataFrame | dict]:
    """Everything a summary or report shows, computed with one attribution pass.

    Returns
    -------
    dict
        ``metrics`` (:func:`run_metrics`), ``breakdown``, ``exposed_io``, ``input_bound``, ``bandwidth``
        (DataFrames), ``bandwidth_totals`` and ``verdict`` (dicts), ``event_stats`` (DataFrame).
    """
    # per-name statistics and bandwidth do not need the attribution: a second thread computes them meanwhile
    # (pandas' group-by kernels and numpy release the GIL)
    with ThreadPoolExecutor(max_workers=1) as pool:
        aside = pool.submit(lambda: (bandwidth_df(frame, counters), event_stats_df(frame)))
        att = _attribution(frame, layers)
        bd = _breakdown(att)
        exp = _exposed(att)
        per = _input_bound(att)
        bw, stats = aside.result()
    totals = bandwidth_totals(frame, counters, per_rank=bw)
    v = _verdict(per)
    return {
        "metrics": _metrics(frame, bd, exp, totals, v),
        "breakdown": bd,
        "exposed_io": exp,
        "input_bound": per,
        "bandwidth": bw,
        "bandwidth_totals": totals,
        "verdict": v,
        "event_stats": stats,
    }


__all__ = [
    "PRIORITY", "READ_LAYER_ORDER", "SIZE_BINS",
    "merge_intervals", "union_ns", "intersect_intervals", "subtract_intervals", "covered_ns",
    "grouped_union_ns", "read_rows", "breakdown_df", "exposed_io_df", "input_bound_df", "verdict",
    "verdict_label", "accelerator_utilisation", "bandwidth_df", "bandwidth_totals", "job_wall_ns",
    "access_pattern_df", "event_stats_df", "overall_breakdown", "run_metrics", "compare_df", "summarise",
]
