"""Darshan DXT segments onto the aligned app clock, placed by their content.

A DXT segment's time is seconds since *that process's* Darshan start, and the reader makes it absolute
with the job header's start time: per-rank init skew leaves the segments of a rank several ms away from
where the calls happened. This module estimates, per rank, the offset ``δ`` (ns) to add to that rank's
DXT rows so they land where the aligned clock says they ran:

* **posix** basis (best): DFTracer POSIX rows of the same rank record the same calls. A segment and a
  call match when the file, the size and (where both know it) the file offset agree; every such pair
  within the search window votes for ``δ ∈ [d − τ, d + τ]`` with ``d`` = call start − segment start and
  ``τ`` = :data:`POSIX_TOLERANCE_NS`.
* **app** basis: app phases carrying ``file`` are windows the segments of that file ran inside; a pair
  (segment, phase window of the same file) votes for every ``δ`` that puts the segment wholly inside the
  window (phases of one file are merged into disjoint windows first).
* **header**: the job header placement (``δ = 0``) kept, with a warning naming the Darshan file and rank,
  when the content cannot decide.

For each candidate ``δ`` in ``[−W, W]`` (``W`` = :data:`SEARCH_WINDOW_NS`) the score is the number of
segments with a vote covering it (one sweep over the votes' end points). The chosen offset is the middle
of the region where the score is highest; ``uncertainty_ns`` is half its width. ``confidence`` compares it
with the best *other* local maximum more than :data:`SEPARATION_NS` away: of the matchable segments (those
of files the reference saw) that the runner-up leaves unexplained, the share the best offset explains
(``(b − r) / (1 − r)`` with ``b``, ``r`` the shares explained; 1 when the best explains every segment and
the runner-up does not, ~0 for a periodic pattern that fits as well one period later). The header is kept when
fewer than :data:`MIN_SEGMENTS` match, the confidence is below :data:`MIN_CONFIDENCE`, or the optimum is wider
than ``2 ×`` :data:`MAX_UNCERTAINTY_NS`.

:func:`estimate_rank` is the per-rank kernel (one rank's rows in, one small :class:`DxtClock` out);
:func:`place_source` applies it to every rank of one Darshan source. Users' description: ``docs/frame.md``.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from .intervals import merge_intervals

log = logging.getLogger(__name__)

#: offsets searched: ±2 s around the header placement (Darshan init skew is ms; seconds would be another run)
SEARCH_WINDOW_NS = 2_000_000_000
#: a DFTracer call and a DXT segment of the same call start within this of each other (both wrap the call)
POSIX_TOLERANCE_NS = 100_000
#: another local optimum closer than this to the best is the same optimum
SEPARATION_NS = 1_000_000
#: fewer matched segments than this cannot decide
MIN_SEGMENTS = 3
#: below this confidence the header placement is kept
MIN_CONFIDENCE = 0.5
#: an optimum wider than ± this does not place short reads in the right phase: the header is kept
MAX_UNCERTAINTY_NS = 1_000_000
#: (segment, partner) pairs scored in one pass; above it the first pass scores an even sample of segments
PAIR_BUDGET = 2_000_000

BASES = ("posix", "app", "header")


@dataclass
class DxtClock:
    """Where one rank's DXT segments were placed.

    Attributes
    ----------
    source
        The Darshan log.
    rank
        MPI rank of the segments.
    offset_ns
        Added to the header placement of every DXT row of this rank (ns; 0 for basis ``header``).
    confidence
        0..1: of the matchable segments the best other local optimum leaves unexplained, the share explained
        at ``offset_ns`` (see the module docstring); 0 for basis ``header``.
    basis
        ``posix``, ``app`` or ``header``.
    matched
        Segments explained at the chosen offset (the rank's POSIX-layer segments are matched when it has
        any, its MPI-IO ones otherwise: an MPI-IO segment wraps the POSIX calls it makes).
    segments
        DXT rows of this rank (every layer), all moved by ``offset_ns``.
    uncertainty_ns
        Half the width of the region of best offsets (ns); None when nothing matched.
    """

    source: str
    rank: int
    offset_ns: int
    confidence: float
    basis: str
    matched: int
    segments: int
    uncertainty_ns: Optional[int] = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Estimate:
    offset_ns: int
    confidence: float
    matched: int
    matchable: int
    uncertainty_ns: int


def _file_map(seg_files: np.ndarray, ref_files: np.ndarray) -> np.ndarray:
    """For each reference file name, the index of the segment file it names (or -1).

    Darshan stores absolute paths; an app phase may name a file relative to its working directory, so a
    reference name also matches a segment path ending in ``/<name>``.
    """
    out = np.full(len(ref_files), -1, dtype=np.int64)
    index = {str(f): i for i, f in enumerate(seg_files)}
    for j, name in enumerate(ref_files):
        name = str(name)
        hit = index.get(name)
        if hit is None:
            tail = "/" + name.lstrip("./") if not name.startswith("/") else None
            cands = [i for f, i in index.items() if tail and f.endswith(tail)]
            hit = cands[0] if len(cands) == 1 else None
        out[j] = -1 if hit is None else hit
    return out


def _codes(files: pd.Series) -> "tuple[np.ndarray, np.ndarray]":
    cat = files.astype("category")
    return cat.cat.codes.to_numpy().astype(np.int64), np.asarray(cat.cat.categories, dtype=object)


class _Grouped:
    """Items ``[lo, hi]`` in groups, sorted by (group, lo), with ``hi`` also ascending inside a group
    (disjoint windows, or points): :meth:`ranges` finds, for many queries at once, the items of the query's
    group that overlap ``[q_lo, q_hi]`` — one ``searchsorted`` over all groups instead of a loop per group.
    """

    def __init__(self, group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        order = np.lexsort((lo, group))
        self.group, self.lo, self.hi = group[order], lo[order], hi[order]
        self._lo_sorted, self._hi_sorted = np.sort(self.lo), np.sort(self.hi)
        # a time's rank among all items' times keeps its order; group * m + rank orders (group, time)
        self._m = len(lo) + 1
        self._key_lo = self.group * self._m + np.searchsorted(self._lo_sorted, self.lo, "left")
        self._key_hi = self.group * self._m + np.searchsorted(self._hi_sorted, self.hi, "left")

    def ranges(self, group: np.ndarray, q_lo: np.ndarray, q_hi: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
        """``[a, b)`` per query: items of ``group`` (-1: none) with ``hi >= q_lo`` and ``lo <= q_hi``."""
        base = np.maximum(group, 0) * self._m
        a = np.searchsorted(self._key_hi, base + np.searchsorted(self._hi_sorted, q_lo, "left"), "left")
        b = np.searchsorted(self._key_lo, base + np.searchsorted(self._lo_sorted, q_hi, "right"), "left")
        return a, np.where(group >= 0, np.maximum(a, b), a)


def _expand(a: np.ndarray, b: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    """(query index, item index) for every item in ``[a[q], b[q])``."""
    n = b - a
    q = np.repeat(np.arange(len(a)), n)
    first = np.repeat(a - np.concatenate(([0], np.cumsum(n)[:-1])), n)
    return q, np.arange(int(n.sum())) + first


class _Votes:
    """Candidate offset intervals ``[lo, hi]`` (ns) per segment, for one rank and one basis."""

    def __init__(self, seg: pd.DataFrame, ref: pd.DataFrame, basis: str) -> None:
        self.basis = basis
        s_code, s_files = _codes(seg["file"])
        r_code, r_files = _codes(ref["file"])
        fmap = _file_map(s_files, r_files)
        ref_file = np.where(r_code >= 0, fmap[np.maximum(r_code, 0)], -1) if len(r_files) else r_code
        self.matchable = np.isin(s_code, ref_file[ref_file >= 0])
        self.s_start = seg["start_ns"].to_numpy()
        self.s_end = seg["end_ns"].to_numpy()
        known = ref_file >= 0
        r_start = ref["start_ns"].to_numpy()[known]
        if basis == "app":
            r_end = ref["end_ns"].to_numpy()[known]
            groups, lo, hi = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
            for f in np.unique(ref_file[known]):  # one file's phases merged: one vote per window
                mine = ref_file[known] == f
                ws, we = merge_intervals(r_start[mine], r_end[mine])
                groups.append(np.full(len(ws), f))
                lo.append(ws)
                hi.append(we)
            self.items = _Grouped(np.concatenate(groups), np.concatenate(lo), np.concatenate(hi))
            self.queries = [s_code]
        else:
            # a call is the same as a segment when file, size and offset agree (offset -1: not recorded)
            r_keys = pd.MultiIndex.from_arrays([
                ref_file[known], ref["bytes"].to_numpy(dtype=np.int64, na_value=-1)[known],
                ref["offset"].to_numpy(dtype=np.int64, na_value=-1)[known]])
            uniq = r_keys.unique()
            self.items = _Grouped(uniq.get_indexer(r_keys).astype(np.int64), r_start, r_start)
            s_bytes = seg["bytes"].to_numpy(dtype=np.int64, na_value=-1)
            s_off = seg["offset"].to_numpy(dtype=np.int64, na_value=-1)
            self.queries = [uniq.get_indexer(pd.MultiIndex.from_arrays([s_code, s_bytes, off])).astype(np.int64)
                            for off in (s_off, np.full(len(s_off), -1, dtype=np.int64))]

    def _bounds(self, segs: np.ndarray, window: "tuple[int, int]") -> "tuple[np.ndarray, np.ndarray]":
        if self.basis == "app":
            return self.s_end[segs] + window[0], self.s_start[segs] + window[1]
        return self.s_start[segs] + window[0] - POSIX_TOLERANCE_NS, self.s_start[segs] + window[1] + POSIX_TOLERANCE_NS

    def count(self, segs: np.ndarray, window: "tuple[int, int]") -> int:
        """How many votes :meth:`pairs` would make (without making them)."""
        q_lo, q_hi = self._bounds(segs, window)
        return sum(int((b - a).sum()) for a, b in (self.items.ranges(g[segs], q_lo, q_hi) for g in self.queries))

    def pairs(self, segs: np.ndarray, window: "tuple[int, int]") -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
        """``(segment index, lo, hi)`` of every vote of segments ``segs`` with an offset inside ``window``."""
        w_lo, w_hi = window
        q_lo, q_hi = self._bounds(segs, window)
        out_i, out_lo, out_hi = [], [], []
        for g in self.queries:
            q, k = _expand(*self.items.ranges(g[segs], q_lo, q_hi))
            i = segs[q]
            if self.basis == "app":
                lo = np.maximum(self.items.lo[k] - self.s_start[i], w_lo)
                hi = np.minimum(self.items.hi[k] - self.s_end[i], w_hi)
            else:
                d = self.items.lo[k] - self.s_start[i]
                lo, hi = np.maximum(d - POSIX_TOLERANCE_NS, w_lo), np.minimum(d + POSIX_TOLERANCE_NS, w_hi)
            keep = lo <= hi
            out_i.append(i[keep])
            out_lo.append(lo[keep])
            out_hi.append(hi[keep])
        return np.concatenate(out_i), np.concatenate(out_lo), np.concatenate(out_hi)


def _coverage(i: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    """Score as a step function: ``(positions, values)`` with ``values[k]`` segments covered on
    ``[positions[k], positions[k+1]]``; a segment's overlapping votes count once."""
    if not len(i):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # per-segment union: shift each segment's votes into its own band so one running maximum serves all
    base = int(lo.min())
    span = int(hi.max()) - base + 1
    order = np.lexsort((lo, i))
    i, lo, hi = i[order], lo[order] - base, hi[order] - base
    band = i.astype(np.int64) * span
    reach = np.maximum.accumulate(hi + band)
    new = np.ones(len(i), dtype=bool)
    new[1:] = (lo[1:] + band[1:]) > reach[:-1]
    u_lo = lo[new]
    u_hi = np.maximum.reduceat(hi, np.flatnonzero(new))
    pos = np.concatenate((u_lo, u_hi))
    step = np.concatenate((np.ones(len(u_lo), np.int64), -np.ones(len(u_hi), np.int64)))
    # closed votes: at one position openings come before closings
    order = np.lexsort((-step, pos))
    pos, step = pos[order], step[order]
    values = np.cumsum(step)
    last = np.ones(len(pos), dtype=bool)
    last[:-1] = pos[1:] != pos[:-1]  # value after all events at a position
    pos, values = pos[last], values[last]
    return pos + base, values


def _best(pos: np.ndarray, values: np.ndarray) -> "tuple[int, int, int, int]":
    """``(best score, region lo, region hi, best other local maximum more than SEPARATION_NS away)``."""
    top = int(values.max())
    at = np.flatnonzero(values == top)
    starts = pos[at]
    ends = pos[np.minimum(at + 1, len(pos) - 1)]
    # best plateaus further apart than SEPARATION_NS are separate optima: keep the one nearest the header
    # placement (0) as the region, the others compete as runner-up peaks below
    cluster = np.cumsum(np.r_[True, starts[1:] - ends[:-1] > SEPARATION_NS]) - 1
    dist = np.minimum(np.abs(starts), np.abs(ends))
    chosen = cluster == cluster[np.argmin(dist)]
    lo, hi = int(starts[chosen].min()), int(ends[chosen].max())
    # local maxima of the step function (after merging equal neighbours)
    keep = np.ones(len(values), dtype=bool)
    keep[1:] = values[1:] != values[:-1]
    v, p = values[keep], pos[keep]
    left = np.concatenate(([0], v[:-1]))
    right = np.concatenate((v[1:], [0]))
    peak = (v > left) & (v > right)
    far = (p < lo - SEPARATION_NS) | (p > hi + SEPARATION_NS)
    runner = int(v[peak & far].max()) if (peak & far).any() else 0
    return top, lo, hi, runner


def estimate_rank(seg: pd.DataFrame, ref: pd.DataFrame, basis: str,
                  window_ns: int = SEARCH_WINDOW_NS) -> Optional[_Estimate]:
    """Per-rank kernel: the offset (ns) to add to one rank's DXT segments to place them on ``ref``.

    Parameters
    ----------
    seg
        One rank's DXT rows (``start_ns``, ``end_ns``, ``file``, ``bytes``, ``offset``), header placement.
    ref
        The same rank's reference rows on the aligned clock: app phases with a ``file`` (basis ``app``) or
        DFTracer POSIX calls (basis ``posix``).
    basis
        ``"app"`` or ``"posix"``.
    window_ns
        Offsets searched: ``[-window_ns, window_ns]``.

    Returns
    -------
    _Estimate or None
        None when no segment has a partner in the window.
    """
    votes = _Votes(seg, ref, basis)
    segs = np.flatnonzero(votes.matchable)
    if not len(segs):
        return None
    # first pass over the whole window; an even sample of segments when all would cost too much
    window = (-window_ns, window_ns)
    total = votes.count(segs, window)
    sample = segs if total <= PAIR_BUDGET else segs[:: int(np.ceil(total / PAIR_BUDGET))]
    i, lo, hi = votes.pairs(sample, window)
    pos, values = _coverage(i, lo, hi)
    if not len(pos):
        return None
    top, r_lo, r_hi, runner = _best(pos, values)
    runner_share = runner / len(sample)
    if sample is not segs:
        # second pass: every segment, only near the optimum (few pairs)
        near = (r_lo - 2 * SEPARATION_NS, r_hi + 2 * SEPARATION_NS)
        i, lo, hi = votes.pairs(segs, near)
        pos, values = _coverage(i, lo, hi)
        top, r_lo, r_hi, _ = _best(pos, values)
    share = top / len(segs)
    # of the segments the runner-up leaves unexplained, the share the best explains
    confidence = max(0.0, (share - runner_share) / (1.0 - runner_share)) if runner_share < 1 else 0.0
    return _Estimate(offset_ns=(r_lo + r_hi) // 2, confidence=round(confidence, 4), matched=top,
                     matchable=len(segs), uncertainty_ns=(r_hi - r_lo) // 2)


def _decide(path: str, rank: int, seg: pd.DataFrame, refs: "dict[str, pd.DataFrame]"
            ) -> "tuple[DxtClock, Optional[str]]":
    """Try the bases in order of strength; the header with a warning when none decides."""
    why = []
    for basis in ("posix", "app"):
        ref = refs.get(basis)
        if ref is None or not len(ref):
            continue
        est = estimate_rank(seg, ref, basis)
        if est is None:
            why.append(f"no {basis} row of a file it read within ±{SEARCH_WINDOW_NS / 1e9:g} s")
            continue
        if est.matched < MIN_SEGMENTS:
            why.append(f"only {est.matched} segment(s) fit {basis} rows")
        elif est.confidence < MIN_CONFIDENCE:
            why.append(f"{basis} rows fit ambiguously (confidence {est.confidence:.2f})")
        elif est.uncertainty_ns > MAX_UNCERTAINTY_NS:
            why.append(f"{basis} rows place the segments only within ±{est.uncertainty_ns / 1e6:.1f} ms")
        else:
            return DxtClock(path, rank, int(est.offset_ns), float(est.confidence), basis, int(est.matched),
                            len(seg), int(est.uncertainty_ns)), None
    if not why:
        why.append("no app phase naming a file and no POSIX rows on this rank")
    warning = (f"{path}: DXT segments of rank {rank} kept at the job header time, not placed by content "
               f"({'; '.join(why)})")
    return DxtClock(path, rank, 0, 0.0, "header", 0, len(seg), None), warning


def place_source(path: str, frame: pd.DataFrame, app: pd.DataFrame, posix: pd.DataFrame
                 ) -> "tuple[pd.DataFrame, list[DxtClock], list[str]]":
    """Place every rank's DXT rows of one Darshan source by content.

    Parameters
    ----------
    path
        The Darshan log (for the results and warnings).
    frame
        Its DXT rows after rank assignment and clock offsets (header placement).
    app
        App rows of all ranks on the aligned clock (rows with a ``file`` are used).
    posix
        DFTracer POSIX rows of all ranks on the aligned clock.

    Returns
    -------
    (frame, clocks, warnings)
        ``frame`` with each rank's chosen offset added to ``start_ns``/``end_ns``; one :class:`DxtClock` per
        rank; one warning per rank left at the header placement.
    """
    if not len(frame):
        return frame, [], []
    app = app[app["file"].notna().to_numpy()]
    # each table split by rank once (a mask per rank would scan every row once per rank)
    rows_of, app_of, posix_of = (t.groupby("rank", sort=True).indices for t in (frame, app, posix))
    none = np.zeros(0, dtype=np.int64)
    shift = np.zeros(len(frame), dtype=np.int64)
    clocks, warnings = [], []
    for rank, rows in rows_of.items():
        seg = frame.iloc[rows]
        low = seg[(seg["layer"] == "posix").to_numpy()]
        seg = low if len(low) else seg  # MPI-IO segments wrap the POSIX ones: the POSIX ones are the calls
        refs = {"app": app.iloc[app_of.get(rank, none)], "posix": posix.iloc[posix_of.get(rank, none)]}
        clock, warning = _decide(path, int(rank), seg, refs)
        clock.segments = len(rows)
        clocks.append(clock)
        if warning:
            warnings.append(warning)
        shift[rows] = clock.offset_ns
    if shift.any():
        frame = frame.copy(deep=False)  # only whole columns are replaced below
        frame["start_ns"] = frame["start_ns"].to_numpy() + shift
        frame["end_ns"] = frame["end_ns"].to_numpy() + shift
    for c in clocks:
        log.debug("%s rank %d: DXT offset %+d ns (basis %s, confidence %.2f)", c.source, c.rank, c.offset_ns,
                  c.basis, c.confidence)
    return frame, clocks, warnings
