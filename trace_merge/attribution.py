"""Attribution of wall time: breakdowns, exposed input, input-bound verdict, accelerator utilisation.

Phases nest: ``Training Iteration`` (compute) may contain ``Call to Next Batch`` (wait), which contains
``Load File`` (io). A parent's category must not swallow what its children did, so on **one thread** each
instant belongs to the *innermost* active interval (its "self time", as in any profiler). Across the
threads of a rank, each instant goes to the highest-priority category any thread is in, in the order
:data:`PRIORITY` (``io > comm > checkpoint > preprocess > compute > wait > other``): a prefetch thread
reading while the main thread computes shows as ``io``. The exclusive shares of a row therefore never
overlap; ``other`` takes whatever is left (uncovered time and explicit ``other`` phases) so a row sums to
exactly 100 %. The per-category *union* time (``<cat>_s`` columns) is reported beside the shares and is
computed from the raw intervals (a parent's full length counts there).

By default the breakdown is made from the ``app`` layer, the user's own phase taxonomy; ``framework``,
``comm`` and ``posix`` rows are for drill-down (``layers=...`` or ``per_layer=True``). A frame without any
``app`` rows (a bare DFTracer or Darshan trace) falls back to all of its layers. Definitions for users:
``docs/metrics.md``.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.intervals import (Axis, combined_codes, covered_ns, forest_depth, intersect_intervals,
                                   merge_intervals, nesting_parents, start_order, subtract_intervals, union_of)
from trace_merge.schema import LAYERS

logger = logging.getLogger(__name__)
_I8 = np.int64
_EMPTY = np.zeros(0, dtype=_I8)

#: Exclusive attribution order across threads (first wins).
PRIORITY: tuple[str, ...] = ("io", "comm", "checkpoint", "preprocess", "compute", "wait", "other")
#: Input-bound thresholds (TF profiler): share of step time waiting for input, percent.
INPUT_BOUND_MODERATE_PCT = 5.0
INPUT_BOUND_HIGH_PCT = 20.0
#: Deeper nesting than this on one thread is treated as one level (async events, not a call tree).
MAX_DEPTH = 32


def _layers_for(frame: pd.DataFrame, layers: "str | Sequence[str] | None") -> list[str]:
    present = [str(x) for x in pd.unique(frame["layer"].dropna())] if len(frame) else []
    if layers is None:
        return ["app"] if "app" in present else [x for x in LAYERS if x in present] or present
    if isinstance(layers, str):
        return present if layers == "all" else [layers]
    return list(layers)


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
        The rank axis (:class:`Axis`) all lists below live on.
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
        self.axis = Axis(self._r, s, e, len(self.ranks))
        rs = self.axis.to_axis(self._r, s)
        re_ = self.axis.to_axis(self._r, e)
        self.raw = {c: merge_intervals(rs[cat_idx == i], re_[cat_idx == i]) for i, c in enumerate(PRIORITY)}
        thread = combined_codes(self._r, rows["pid"].to_numpy(), rows["tid"].to_numpy())
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
        taxis = Axis(thread, s, e, nthreads)
        ts = taxis.to_axis(thread, s)
        te = taxis.to_axis(thread, e)
        order = start_order(ts, -te)  # ties: longer (outer) first; every selection below is then already sorted
        ts, te, cat_idx = ts[order], te[order], cat_idx[order]
        # depth in the nesting forest, not the count of intervals open at the start: with crossing intervals
        # the count can rank an interval below one it contains (two of its openers closed before the inner one
        # started); in the forest the innermost open interval (latest start, ties shorter) is the deepest
        depth = forest_depth(nesting_parents(ts, te), MAX_DEPTH)
        out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in PRIORITY}
        deeper = (_EMPTY, _EMPTY)
        for d in range(int(depth.max()) if depth.size else -1, -1, -1):
            at_d = depth == d
            for i, c in enumerate(PRIORITY):
                sel = at_d & (cat_idx == i)
                if sel.any():
                    out[c].append(subtract_intervals(*merge_intervals(ts[sel], te[sel]), *deeper))
            deeper = union_of(deeper, (ts[at_d], te[at_d]))
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
        return union_of(*(self.self_time[c] for c in cats))


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
        acc = union_of(acc, att.self_time[c])
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


