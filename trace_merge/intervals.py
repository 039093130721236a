"""Interval algebra: the one place where interval lists are merged, intersected, subtracted and nested.

Every analysis (breakdowns, layered attribution, exposed input, bandwidth) and the clock alignment's step
propagation are built from these functions. Intervals are half-open ``[start, end)`` int64 ns.

Merged lists
    :func:`merge_intervals` is the only interval-union routine (sort by start, running maximum of the ends,
    break where a start lies beyond everything seen so far: O(n log n), vectorised). Intersection and
    difference of two merged lists are vectorised with :func:`numpy.searchsorted`; :func:`covered_ns` says how
    much of each of many windows a merged list covers.

Groups
    Grouped work (per rank, per thread) lays the groups end to end on one int64 axis (:class:`Axis`) so one
    sorted pass serves every group (:func:`grouped_union_ns`).

Nesting
    :func:`nesting_parents` (the forest a stack sweep builds), :func:`self_segments` (each interval's self time:
    the innermost open interval owns each instant), :func:`innermost` (the innermost interval containing each
    query),
    :func:`spans_several` and :func:`drop_from_forest` (forest surgery used by step propagation). The stack sweep,
    the forest surgery, :func:`innermost`, :func:`self_segments` after its sort, :func:`covered_ns` and the dense
    codes of :func:`combined_codes` are a pass or two each in C (``_sweep.c``, compiled by ``pip install``); without
    a compiler, the vectorised numpy versions here give the same arrays.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Optional

import numpy as np
import pandas as pd

try:
    from trace_merge import _sweep
except ImportError:  # installed without a C compiler
    _sweep = None  # type: ignore[assignment]  # the stub types the module; callers test it for None

_I8 = np.int64
_EMPTY = np.zeros(0, dtype=_I8)
EMPTY = (_EMPTY, _EMPTY)


def _i8(a: "np.ndarray | Iterable[int]") -> np.ndarray:
    """``a`` as contiguous int64, as the C sweeps take bounds."""
    return np.ascontiguousarray(a, dtype=_I8)


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


def start_order(starts: np.ndarray, second: "np.ndarray | Callable[[np.ndarray], np.ndarray]") -> np.ndarray:
    """Stable order by ``starts``, ties by ``second`` ascending (int64): an array, or a function giving it at the
    positions of the tied rows alone (a rank's millions of app rows have a few ties: the key is not built for all).

    Equal starts are few compared with all rows, so only their runs get the two-key sort (a full
    :func:`numpy.lexsort` costs about three sorts; the stable sort of nearly sorted input is cheap). Starts already
    in order (rows of a time-ordered rank) are not sorted or copied at all.
    """
    if starts.size < 2 or bool(np.all(starts[1:] >= starts[:-1])):
        order, s = np.arange(starts.size, dtype=_I8), starts
    else:
        order = np.argsort(starts, kind="stable")
        s = starts[order]
    eq = s[1:] == s[:-1]
    if eq.any():
        tied = np.zeros(len(s), dtype=bool)  # members of a run of equal starts
        tied[1:] |= eq
        tied[:-1] |= eq
        at = np.flatnonzero(tied)
        sub = order[at]
        order[at] = sub[_runs_order(s[at], second(sub) if callable(second) else second[sub])]
    return order


def time_windows(starts: np.ndarray, rows: int) -> list[int]:
    """Cuts of rows in start order (``starts`` ascending) into windows of about ``rows`` rows, where the start
    changes (all rows of one start in one window): ``[0, c1, ..., n]``."""
    cuts, at = [0], rows
    while at < starts.size:
        cut = int(np.searchsorted(starts, starts[at], "left"))
        cut = cut if cut > cuts[-1] else int(np.searchsorted(starts, starts[at], "right"))
        if cut >= starts.size:
            break
        cuts.append(cut)
        at = cut + rows
    return cuts + [int(starts.size)]


def _runs_order(runs: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Stable order by ``(runs, second)`` when ``runs`` is already ascending: one stable sort of a single int64 key
    (run number, then ``second``), where :func:`numpy.lexsort` of the two keys would sort twice."""
    head = np.empty(len(runs), dtype=bool)
    head[0] = True
    np.not_equal(runs[1:], runs[:-1], out=head[1:])
    lo, hi = int(second.min()), int(second.max())
    bits = (hi - lo).bit_length()
    if bits + int(head.sum()).bit_length() > 62:  # the key would not fit in int64
        return np.lexsort((second, runs))
    key = (np.cumsum(head, dtype=_I8) - 1) << bits
    key |= second - lo  # in [0, 2**bits): no overflow
    return np.argsort(key, kind="stable")


def narrow(keys: np.ndarray) -> np.ndarray:
    """Integer sort keys as int16 when they fit: numpy's stable sort of 16-bit integers is a radix sort, O(n)."""
    if len(keys) and -(2**15) <= keys.min() and keys.max() < 2**15:
        return keys.astype(np.int16)
    return keys


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


def union_of(*lists: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Merge several interval lists into one merged list."""
    return merge_intervals(np.concatenate([s for s, _ in lists] or [_EMPTY]),
                           np.concatenate([e for _, e in lists] or [_EMPTY]))


def covered_ns(ms: np.ndarray, me: np.ndarray, w_s: np.ndarray, w_e: np.ndarray) -> np.ndarray:
    """How much of each window ``[w_s, w_e)`` a merged list covers, int64 ns, one value per window.

    Uses the cumulative covered length ``F(t)`` of the merged list, so any number of windows costs two
    binary searches each; in C (``_sweep.covered``) windows in time order (a phase's merged intervals against a
    component's) walk the list once instead.
    """
    w_s = np.asarray(w_s, dtype=_I8)
    w_e = np.asarray(w_e, dtype=_I8)
    if ms.size == 0:
        return np.zeros(w_s.shape, dtype=_I8)
    if _sweep is not None and w_s.ndim == 1 and w_e.shape == w_s.shape:
        out = np.empty(w_s.size, dtype=_I8)
        _sweep.covered(_i8(ms), _i8(me), _i8(w_s), _i8(w_e), out)
        return out
    cum = np.concatenate(([0], np.cumsum(me - ms)))

    def upto(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(ms, t, side="right")
        k = np.maximum(j - 1, 0)
        inside = np.minimum(t, me[k]) - ms[k]
        return np.where(j > 0, cum[k] + inside, 0)

    return np.maximum(upto(w_e) - upto(w_s), 0)


class Axis:
    """Lays groups of intervals end to end on one int64 axis.

    Group ``g`` occupies ``[offset[g], offset[g] + span[g]]``; consecutive groups are separated by at least
    one ns, so merging, intersecting and windowing on the axis never mixes two groups.
    """

    def __init__(self, groups: np.ndarray, starts: np.ndarray, ends: np.ndarray, ngroups: int) -> None:
        lo = np.full(ngroups, np.iinfo(_I8).max, dtype=_I8)
        hi = np.full(ngroups, np.iinfo(_I8).min, dtype=_I8)
        if groups.size:  # O(n), no sort (a pandas group-by would cost more here)
            np.minimum.at(lo, groups, starts)
            np.maximum.at(hi, groups, ends)
        absent = np.bincount(groups, minlength=ngroups) == 0 if groups.size else np.ones(ngroups, dtype=bool)
        lo[absent] = hi[absent] = 0
        width = hi - lo + 1
        self.offset = np.concatenate(([0], np.cumsum(width)[:-1])).astype(_I8)
        if ngroups and int(self.offset[-1]) + int(width[-1]) > 2 ** 62:
            raise ValueError("time span too large to analyse: check the input for absurd timestamps")
        self.lo, self.hi = lo, hi

    def to_axis(self, groups: np.ndarray, t: np.ndarray) -> np.ndarray:
        if self.lo.size == 1 and np.shape(t) == np.shape(groups):  # one group (a rank task's own rank): no gathers
            out = np.clip(np.asarray(t, dtype=_I8), self.lo[0], self.hi[0])
            out += self.offset[0] - self.lo[0]
            return out
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
    axis = Axis(groups, starts, ends, ngroups)
    ms, me = merge_intervals(axis.to_axis(groups, starts), axis.to_axis(groups, ends))
    out = np.zeros(ngroups, dtype=_I8)
    np.add.at(out, axis.group_of(ms), me - ms)
    return out

def combined_codes(*keys: np.ndarray) -> np.ndarray:
    """One dense int64 code per distinct tuple of the key arrays (hash-based, O(n)), in order of first appearance."""
    packed = _packed(keys)
    if packed is not None:  # one hash pass instead of one per key and one for the tuple
        span = int(packed.max()) + 1
        if _sweep is not None and span <= max(packed.size, 1 << 16):  # a table of the span (no larger than the
            # codes themselves, at a rank task's peak), not a hash
            codes = np.empty(packed.size, dtype=_I8)
            _sweep.first_appearance_codes(packed, span, codes)
            return codes
        return pd.factorize(packed)[0].astype(_I8, copy=False)
    code = np.zeros(keys[0].size, dtype=_I8)
    size = 1  # distinct values ``code`` can take
    for k in keys:
        kc, uniq = pd.factorize(k)
        if size * len(uniq) >= 2**62:  # re-densify before the product would overflow
            code, first = pd.factorize(code)
            size = len(first)
        code *= len(uniq)  # in place: one array of the keys' length at a time besides the factorized key
        code += kc
        del kc
        size *= len(uniq)
    code, _ = pd.factorize(code)  # one final pass: the tuple's code, dense, in order of first appearance
    return code.astype(_I8, copy=False)


def first_rows(codes: np.ndarray) -> np.ndarray:
    """The first row of each code of :func:`combined_codes` (numbered in order of first appearance)."""
    seen = np.maximum.accumulate(codes)
    return np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]])


def distinct_rows(*keys: np.ndarray) -> list[np.ndarray]:
    """The distinct tuples of ``keys``, as one array per key, in order of first appearance (hashing)."""
    if not keys[0].size:
        return list(keys)
    first = first_rows(combined_codes(*keys))
    return [k[first] for k in keys]


def _packed(keys: "tuple[np.ndarray, ...]") -> Optional[np.ndarray]:
    """The tuples of integer ``keys`` as one int64 each, ``sum((k - min k) * radix)`` (one-to-one, so its first
    appearances are the tuples'), or None when a key is not integer or the spans' product reaches 2**62."""
    if not keys or keys[0].size == 0 or not all(k.dtype.kind in "iub" and k.dtype != np.uint64 for k in keys):
        return None
    lows, spans = [], []
    for k in keys:
        lo, hi = int(k.min()), int(k.max())
        lows.append(lo)
        spans.append(hi - lo + 1)
    if math.prod(spans) >= 2**62:  # Python ints: exact
        return None
    code = np.subtract(keys[0], lows[0], dtype=_I8)  # in int64: k - lo < span, whatever k's own type holds
    for k, lo, span in zip(keys[1:], lows[1:], spans[1:]):
        code *= span
        code += k  # in place, no temporary (k cast as it is read); int64 wraps, and so adding k then taking lo
        code -= lo  # gives k - lo exactly, whatever the sum in between
    return code


def nesting_parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Parent of each interval in a nesting forest (-1 for roots); ``starts`` sorted, ties longer first.

    A crossing interval's parent is the latest-started one still open when it starts. This is the
    result of one stack sweep (:func:`_nesting_parents_loop`), computed without a Python loop over the
    intervals: the stack before interval ``i`` is the ancestor chain of ``i - 1``, so ``parent`` is the
    sweep's result exactly when ``parent[i]`` is the first interval on that chain still open at
    ``starts[i]`` for every ``i`` (by induction over ``i``). :func:`_candidate_parents` (exact for properly
    nested intervals) gives a first guess; a few vectorised passes of that rule repair what crossing
    intervals got wrong, and a trace that still does not settle gets the loop. Parents are int32 where they fit.
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if _sweep is not None:  # the sweep itself, one pass in C instead of the passes below
        parent = np.empty(n, dtype=position_type(n))
        _sweep.nesting_parents(_i8(starts), _i8(ends), parent)
        return parent
    parent = _candidate_parents(starts, ends)
    for _ in range(_PARENT_PASSES):
        swept = _sweep_step(parent, starts, ends)
        if np.array_equal(swept, parent):
            return parent
        parent = swept
    return _nesting_parents_loop(starts, ends)


#: passes of :func:`_sweep_step` before :func:`nesting_parents` gives up and loops (each pass is O(n * depth))
_PARENT_PASSES = 4


#: nesting depth up to which :func:`_candidate_parents` works level by level (a few passes each) instead of sorting
_SHALLOW = 4


def position_type(n: int) -> "type[np.signedinteger[Any]]":
    """The integer type of positions among ``n`` intervals: int32 where it holds them (half the memory of the
    index arrays of a rank's millions of intervals)."""
    return np.int32 if n < 2**31 else np.int64


def _candidate_parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For properly nested intervals: the last earlier interval one nesting level up (depth = still open)."""
    n = len(starts)
    pos_t = position_type(n)
    index = np.arange(n, dtype=pos_t)
    # stable: numpy's timsort, which is fast on the nearly sorted ends of a trace (its default quicksort is not)
    closed = np.searchsorted(np.sort(ends, kind="stable"), starts, side="right").astype(pos_t)
    depth = index - closed
    del closed
    top = int(depth.max())
    if top <= _SHALLOW:  # a trace's usual nesting: per level, the last interval one level up is a running maximum
        cand = np.full(n, -1, dtype=pos_t)
        for d in range(1, top + 1):
            last = np.maximum.accumulate(np.where(depth == d - 1, index, -1))
            at = depth == d
            cand[at] = last[at]
        return cand
    depth = depth.astype(np.int64)  # the key below needs 64 bits
    del index
    by_depth = np.argsort(narrow(depth), kind="stable")  # (depth, index) order
    key = depth[by_depth] * (n + 1) + by_depth
    pos = np.empty(n, dtype=np.int64)
    # (depth - 1, index) of every interval, asked in key order: sorted queries search faster (cache)
    pos[by_depth] = np.searchsorted(key, key - (n + 1), side="left") - 1
    cand = by_depth[np.maximum(pos, 0)]
    ok = (pos >= 0) & (depth > 0) & (depth[cand] == depth - 1)
    return np.where(ok, cand, -1).astype(pos_t)


def _sweep_step(parent: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """What the stack sweep makes each interval's parent, given ``parent`` for the earlier ones.

    Interval ``i``'s parent is the first of ``i - 1``, ``parent[i - 1]``, ... whose end is after
    ``starts[i]`` (the loop pops intervals that end at or before it). All intervals climb together.
    """
    out = np.full(len(starts), -1, dtype=parent.dtype)
    idx = np.arange(1, len(starts), dtype=parent.dtype)  # intervals still climbing
    at = idx - 1  # their current candidate on the chain
    while len(idx):
        closed = ends[at] <= starts[idx]
        out[idx[~closed]] = at[~closed]
        idx, at = idx[closed], parent[at[closed]]
        alive = at >= 0
        idx, at = idx[alive], at[alive]
    return out


def _nesting_parents_loop(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The stack sweep :func:`nesting_parents` reproduces; one Python step per interval."""
    parent = [-1] * len(starts)
    stack: list[int] = []
    ends_list = ends.tolist()  # plain lists: their element access in this loop is cheaper than numpy's
    for i, start in enumerate(starts.tolist()):
        while stack and ends_list[stack[-1]] <= start:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return np.asarray(parent, dtype=position_type(len(parent)))


def innermost(
    starts: np.ndarray,
    ends: np.ndarray,
    q_start: np.ndarray,
    q_end: np.ndarray,
    parent: "np.ndarray | None" = None,
) -> np.ndarray:
    """Index of the innermost interval containing each query ``[q_start, q_end]`` or -1.

    ``starts`` must be sorted ascending (ties: longer first); ``parent`` is
    :func:`nesting_parents` of the intervals when already known. O((n + m) log n) plus a few
    vectorised climbs of the nesting depth (one pass in C where it was compiled).
    """
    if parent is None:
        parent = nesting_parents(starts, ends)
    if _sweep is not None and parent.dtype in (np.int32, np.int64):
        idx = np.empty(len(q_start), dtype=np.int64)
        _sweep.innermost(_i8(starts), _i8(ends), np.ascontiguousarray(parent), _i8(q_start), _i8(q_end), idx)
        return idx
    idx = np.searchsorted(starts, q_start, "right") - 1
    while True:
        valid = idx >= 0
        bad = valid.copy()
        bad[valid] = ends[idx[valid]] < q_end[valid]
        if not bad.any():
            return idx
        idx[bad] = parent[idx[bad]]


def spans_several(parent: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Intervals that contain a descendant with a different value.

    TimeLogger tags an interval when it *ends*, so an enclosing phase (``Epoch``, ``Train Loop``)
    carries the last step it saw; such a tag says nothing about the rows inside it.
    """
    several = np.zeros(len(values), dtype=bool)
    up = np.maximum(parent, 0)
    differs = values[up] != values  # a root compares with interval 0: masked out next
    differs &= parent >= 0
    several[up[differs]] = True
    del up, differs
    marked = np.flatnonzero(several)
    while len(marked):  # an ancestor with the same value as a marked interval contains the same mismatch
        up = parent[marked]
        keep = (up >= 0)
        up, marked = up[keep], marked[keep]
        new = up[(values[up] == values[marked]) & ~several[up]]
        several[new] = True
        marked = new
    return several


def drop_from_forest(parent: np.ndarray, drop: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    """Remove ``drop`` nodes from a nesting forest: (parents re-indexed to the kept nodes, kept indices).

    A kept node's new parent is its nearest kept ancestor, so the forest need not be swept again.
    """
    keep = np.flatnonzero(~drop).astype(parent.dtype, copy=False)  # indices of parent's type (int32 or int64)
    if _sweep is not None and parent.dtype in (np.int32, np.int64):  # one pass in C, where parents come first
        up = np.empty(keep.size, dtype=parent.dtype)
        if _sweep.drop_from_forest(np.ascontiguousarray(parent), np.ascontiguousarray(drop, dtype=bool), up):
            return up, keep
    up = parent[keep]  # only the kept nodes climb
    while True:
        climb = np.flatnonzero(drop[up] & (up >= 0))  # up == -1 reads drop's last entry: masked out
        if not climb.size:
            break
        up[climb] = parent[up[climb]]
    new_index = np.full(len(parent) + 1, -1, dtype=parent.dtype)
    new_index[keep] = np.arange(len(keep), dtype=parent.dtype)
    up = new_index[up]  # up == -1 maps through the extra last slot to -1
    return up, keep



def self_segments(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Self time of every interval inside its group (a thread): the parts its children do not cover.

    Within a group, intervals form a nesting forest (:func:`nesting_parents`; equal starts: the longer one is
    the parent). An interval's self time is the gap before its first child, the gaps between consecutive
    children and the gap after its last child, clipped to the interval (a child, or a descendant, that crosses
    its parent's end keeps the rest, as the innermost open interval). So each instant of a group belongs to exactly
    one interval -- the innermost open one -- and the segments of one group never overlap.

    Parameters
    ----------
    groups
        Dense group code per interval (0..n_groups-1), e.g. one per (rank, pid, tid).
    starts, ends
        Interval bounds, int64 ns; intervals must have ``end > start``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, numpy.ndarray)
        Segment starts, ends (absolute, same unit as the input) and the index of the owning interval.
    """
    groups = np.asarray(groups, dtype=_I8)
    starts = np.asarray(starts, dtype=_I8)
    ends = np.asarray(ends, dtype=_I8)
    if starts.size == 0:
        return _EMPTY, _EMPTY, _EMPTY
    axis = Axis(groups, starts, ends, int(groups.max()) + 1)
    ts = axis.to_axis(groups, starts)
    te = axis.to_axis(groups, ends)
    order = start_order(ts, -te)  # ties: the longer interval is the outer one
    ts, te = ts[order], te[order]
    parent = nesting_parents(ts, te)
    seg_s, seg_e, at = (_swept_segments if _sweep is not None else _vectorised_segments)(ts, te, parent)
    del ts, te, parent  # (arrays are let go as soon as they are used up: the sweep is the attribution's peak)
    owner = order[at]
    del order, at
    g = groups[owner]
    shift = axis.lo[g] - axis.offset[g]
    del g
    seg_s += shift
    seg_e += shift
    return seg_s, seg_e, owner


def _swept_segments(ts: np.ndarray, te: np.ndarray, parent: np.ndarray) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """:func:`self_segments`' segments of intervals in start order with their nesting forest, and the position of
    each one's owner: one C pass (``_sweep.self_segments``), the same segments in the same order as
    :func:`_vectorised_segments`."""
    seg_s, seg_e, at = (np.empty(2 * ts.size, dtype=_I8) for _ in range(3))
    k = _sweep.self_segments(ts, te, np.ascontiguousarray(parent), seg_s, seg_e, at)
    return seg_s[:k], seg_e[:k], at[:k]


def _subtree_reach(te: np.ndarray, child: np.ndarray, par: np.ndarray) -> np.ndarray:
    """The last end in each interval's subtree (``child``: the intervals with a parent, ``par`` their parents). A
    crossing descendant can outlive its ancestors, and whatever follows a child only starts once all of the
    child's subtree has ended."""
    reach = te.copy()
    while child.size:
        grown = reach.copy()
        np.maximum.at(grown, par, reach[child])
        if np.array_equal(grown, reach):
            break
        reach = grown
    return reach


def _vectorised_segments(ts: np.ndarray, te: np.ndarray, parent: np.ndarray
                         ) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """:func:`_swept_segments` in numpy (an install without a C compiler)."""
    child = np.flatnonzero(parent >= 0)
    child = child[np.argsort(parent[child], kind="stable")]  # grouped by parent, each group in start order
    par = parent[child]
    reach = _subtree_reach(te, child, par)
    head_end = te.copy()
    tail_end = np.zeros(child.size, dtype=_I8)
    if child.size:
        first = np.r_[True, par[1:] != par[:-1]]
        last = np.r_[par[1:] != par[:-1], True]
        head_end[par[first]] = np.minimum(ts[child[first]], te[par[first]])
        next_start = np.r_[ts[child[1:]], 0]
        tail_end = np.minimum(np.where(last, te[par], next_start), te[par])
    # the empty segments are dropped from each half before the halves are joined (one copy of each, not two)
    head = head_end > ts
    tail_s = reach[child]
    del reach, child
    tail = tail_end > tail_s
    at = np.concatenate((np.flatnonzero(head), par[tail]))
    seg_s = np.concatenate((ts[head], tail_s[tail]))
    seg_e = np.concatenate((head_end[head], tail_end[tail]))
    return seg_s, seg_e, at
