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
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.intervals import (Axis, combined_codes, covered_ns, intersect_intervals, merge_intervals,
                                   self_segments, subtract_intervals, union_of)
from trace_merge.schema import FS_LAYERS, LAYERS, STEP_PHASE, as_text, category_mask, layer_order

logger = logging.getLogger(__name__)
_I8 = np.int64
_EMPTY = np.zeros(0, dtype=_I8)

#: Exclusive attribution order across threads (first wins).
PRIORITY: tuple[str, ...] = ("io", "comm", "checkpoint", "preprocess", "compute", "wait", "other")
#: Input-bound thresholds (TF profiler): share of step time waiting for input, percent.
INPUT_BOUND_MODERATE_PCT = 5.0
INPUT_BOUND_HIGH_PCT = 20.0


def _layers_for(frame: pd.DataFrame, layers: "str | Sequence[str] | None") -> list[str]:
    return layers_to_use(present_layers(frame), layers)


def present_layers(frame: pd.DataFrame) -> list[str]:
    """The layers ``frame`` has rows of, in order of appearance."""
    return [str(x) for x in pd.unique(frame["layer"].dropna())] if len(frame) else []


def layers_to_use(present: Sequence[str], layers: "str | Sequence[str] | None") -> list[str]:
    """The layers a breakdown attributes (see :func:`breakdown_df`) given the layers the job has."""
    present = list(present)
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
    segments
        ``(starts, ends, owner)``: each interval's self time on its thread (:func:`self_segments`), on the
        rank axis, with the index of the owning row.
    self_time
        cat -> merged list of instants whose innermost phase (on some thread) has that cat.
    raw
        cat -> merged list of the raw intervals of that cat.
    """

    def __init__(self, frame: pd.DataFrame, keep: "np.ndarray | slice") -> None:
        """The attribution of ``frame``'s rows where ``keep`` (a mask, or ``slice(None)`` for all; only the arrays it
        needs are taken out, as numpy arrays: a pandas selection of the rows cost twice as much)."""
        s = frame["start_ns"].to_numpy(dtype=_I8)[keep]
        e = frame["end_ns"].to_numpy(dtype=_I8)[keep]
        rank_codes, ranks = pd.factorize(frame["rank"].to_numpy()[keep], sort=True)
        self.ranks = np.asarray(ranks, dtype=_I8)
        self._r = rank_codes.astype(_I8, copy=False)
        self._s, self._e = s, e
        self._tags = {k: (frame[k].to_numpy(dtype=_I8, na_value=0)[keep], frame[k].notna().to_numpy()[keep])
                      for k in ("epoch", "step")}
        cat_idx = self._cat_index(frame["cat"], keep)
        self._cat_idx = cat_idx
        # names by their category codes (no string per row); code -1 (missing) is the trailing None
        name = frame["name"].astype("category")  # a no-op on the schema's column
        self._name_codes = name.cat.codes.to_numpy()[keep]  # int8/16/32 as the categories need: read, never written
        self._names = np.append(name.cat.categories.to_numpy(dtype=object), None)
        self._is_step_phase = np.append(name.cat.categories == STEP_PHASE, False)[self._name_codes]
        self.axis = Axis(self._r, s, e, len(self.ranks))
        rs = self.axis.to_axis(self._r, s)
        re_ = self.axis.to_axis(self._r, e)
        self.raw = {c: merge_intervals(rs[cat_idx == i], re_[cat_idx == i]) for i, c in enumerate(PRIORITY)}
        del rs, re_  # not held through the self-time sweep, the attribution's peak (38 MiB at 2.5 M rows)
        thread = combined_codes(self._r, frame["pid"].to_numpy()[keep], frame["tid"].to_numpy()[keep])
        self._thread = thread
        seg_s, seg_e, owner = self_segments(thread, s, e)
        seg_r = self._r[owner]
        self.segments = (self.axis.to_axis(seg_r, seg_s), self.axis.to_axis(seg_r, seg_e), owner)
        seg_cat = cat_idx[owner]
        self.self_time = {c: merge_intervals(self.segments[0][seg_cat == i], self.segments[1][seg_cat == i])
                          for i, c in enumerate(PRIORITY)}
        self._windows: dict[tuple[str, ...], pd.DataFrame] = {}
        self._step_rows: Optional[np.ndarray] = None
        self._consumer: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}

    @staticmethod
    def _cat_index(cats: pd.Series, keep: "np.ndarray | slice") -> np.ndarray:
        """Index in :data:`PRIORITY` of each kept row's category."""
        lookup = np.array([PRIORITY.index(str(c)) if str(c) in PRIORITY else PRIORITY.index("other")
                           for c in cats.cat.categories] + [PRIORITY.index("other")], dtype=np.int8)
        return lookup[cats.cat.codes.to_numpy()[keep]]  # code -1 (missing) picks the trailing "other"

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

    def step_rows(self) -> np.ndarray:
        """Rows that mark training steps, per rank, the first kind the rank has: the step phase
        (``Training Iteration``: a Checkpoint tagged with the current step must not stretch the step); else
        step-tagged ``compute`` rows (DLIO's ``TFFramework.compute``, pydftracer's ``compute``, a compute phase of
        any name); else every step-tagged row."""
        if self._step_rows is not None:
            return self._step_rows
        tagged = self._tags["step"][1]
        marks = np.zeros(self._s.size, dtype=bool)
        decided = np.zeros(len(self.ranks), dtype=bool)
        for kind in (tagged & self._is_step_phase, tagged & (self._cat_idx == PRIORITY.index("compute")), tagged):
            ranks_with = np.zeros(len(self.ranks), dtype=bool)
            ranks_with[np.unique(self._r[kind])] = True
            take = ranks_with & ~decided
            marks |= kind & take[self._r]
            decided |= take
        self._step_rows = marks
        return marks

    def step_marks(self) -> pd.DataFrame:
        """One window per training step of every rank, in start order per rank: consecutive marking rows
        (:meth:`step_rows`) with the same ``(epoch, step)`` tags are one step. Consecutive, not grouped: DLIO
        restarts its step numbers each epoch and leaves ``epoch`` stale on its compute events.

        Returns
        -------
        pandas.DataFrame
            ``_r``, ``epoch``, ``step`` (Int64), ``start_ns``, ``end_ns``, ``rank``, ``_ws``, ``_we``.
        """
        rows = np.flatnonzero(self.step_rows())
        r, s = self._r[rows], self._s[rows]
        order = np.lexsort((s, r))
        rows, r = rows[order], r[order]
        ep_val, ep_has = self._tags["epoch"]
        st_val = self._tags["step"][0]
        ep = np.where(ep_has[rows], ep_val[rows], np.iinfo(np.int64).min)
        st = st_val[rows]
        new = np.r_[True, (r[1:] != r[:-1]) | (ep[1:] != ep[:-1]) | (st[1:] != st[:-1])] if rows.size \
            else np.zeros(0, dtype=bool)
        g = np.cumsum(new) - 1
        w = pd.DataFrame({"g": g, "s": self._s[rows], "e": self._e[rows]}).groupby("g", sort=True).agg(
            start_ns=("s", "min"), end_ns=("e", "max"))
        first = rows[new]
        rr = self._r[first]
        epoch = pd.array(np.where(ep_has[first], ep_val[first], 0), dtype="Int64")
        epoch[~ep_has[first]] = pd.NA
        out = pd.DataFrame({"_r": rr, "epoch": epoch, "step": pd.array(st_val[first], dtype="Int64"),
                            "start_ns": w["start_ns"].to_numpy(dtype=_I8), "end_ns": w["end_ns"].to_numpy(dtype=_I8)})
        out["rank"] = self.ranks[rr] if len(out) else np.zeros(0, dtype=_I8)
        out["_ws"] = self.axis.to_axis(rr, out["start_ns"].to_numpy(dtype=_I8))
        out["_we"] = self.axis.to_axis(rr, out["end_ns"].to_numpy(dtype=_I8))
        return out  # in (rank, start) order already: the runs follow the sorted rows

    def consumer_self(self, cats: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Merged self time of ``cats`` on the consumer threads: the threads whose rows mark the steps (the
        training loop). A prefetch thread reading while the loop computes is not the loop waiting."""
        key = tuple(cats)
        if key not in self._consumer:  # the step series and the verdict ask for the same lists
            consumer = np.unique(self._thread[self.step_rows()])
            seg_s, seg_e, owner = self.segments
            idx = [PRIORITY.index(c) for c in cats]
            keep = np.isin(self._cat_idx[owner], idx) & np.isin(self._thread[owner], consumer)
            self._consumer[key] = merge_intervals(seg_s[keep], seg_e[keep])
        return self._consumer[key]

    def self_union(self, cats: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return union_of(*(self.self_time[c] for c in cats))

    def epoch_cover(self) -> tuple[np.ndarray, np.ndarray]:
        """Merged list of the epoch windows; a rank without any epoch is covered over its whole window."""
        ep = self.windows(["epoch"])
        whole = self.windows([])
        bare = whole[~whole["_r"].isin(ep["_r"])]
        return merge_intervals(np.concatenate((ep["_ws"].to_numpy(dtype=_I8), bare["_ws"].to_numpy(dtype=_I8))),
                               np.concatenate((ep["_we"].to_numpy(dtype=_I8), bare["_we"].to_numpy(dtype=_I8))))


def _attribution(frame: pd.DataFrame, layers: "str | Sequence[str] | None") -> Optional[_Attribution]:
    """The attribution of the rows of ``layers`` (see :func:`breakdown_df`), ``None`` when there are none."""
    if not len(frame):
        return None
    use = _layers_for(frame, layers)
    keep = frame["layer"].isin(use).to_numpy() & (frame["end_ns"].to_numpy() > frame["start_ns"].to_numpy())
    if not keep.any():
        return None
    # every row kept (the usual case): the arrays are taken as they are, a boolean selection would copy each one
    return _Attribution(frame, slice(None) if keep.all() else keep)


#: What the lower layers saw inside an app phase, in priority order: where they overlap inside a phase, the first
#: one listed gets the time.
LOWER_COMPONENTS: tuple[str, ...] = ("fs", "comm", "input_wait", "compute")
#: Components of an app phase's time in the layered breakdown: the lower layers', then the remainder split by
#: coverage -- ``python`` inside the windows the framework layer was captured (it would have seen framework work
#: there), ``not_observed`` outside them (a TF profile window of 8 of 192 steps, or no framework layer at all).
COMPONENTS: tuple[str, ...] = (*LOWER_COMPONENTS, "python", "not_observed")
COMPONENT_LABELS: dict[str, str] = {
    "fs": "file system", "comm": "communication", "input_wait": "input wait (tf.data)",
    "compute": "framework compute", "python": "Python / decode / IPC (inside profiled windows)",
    "not_observed": "not observed (no framework profile there)",
}
#: the TimeLogger's TF-profile anchor TraceMe: bookkeeping, not framework work; it opens a profile window
_ANCHOR = "timelogger_anchor"


def profile_windows(r: np.ndarray, s: np.ndarray, e: np.ndarray, anchor: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Merged list of the windows a framework layer covered, from its rows (on an attribution's rank axis).

    A profile window is what one profiler session recorded: it starts at the session's TimeLogger anchor marker
    (``anchor`` rows) and ends with its last event. Without anchors (a profile not opened by TimeLogger) each
    rank's window spans its first to its last framework event.
    """
    if not s.size:
        return _EMPTY, _EMPTY
    order = np.argsort(s[anchor], kind="stable")  # on the axis, ranks occupy disjoint ranges in rank order
    a_r, a_s = r[anchor][order], s[anchor][order]
    # session of a row: the last anchor of its rank at or before it (rows before a rank's first anchor: -1)
    sess = np.full(s.size, -1, dtype=_I8)
    if a_s.size:
        k = np.searchsorted(a_s, s, side="right") - 1
        ok = k >= 0
        ok[ok] = a_r[k[ok]] == r[ok]
        sess[ok] = k[ok]
    grp = combined_codes(r, sess)
    w = pd.DataFrame({"g": grp, "s": s, "e": e}).groupby("g", sort=False).agg(s=("s", "min"), e=("e", "max"))
    return merge_intervals(w["s"].to_numpy(dtype=_I8), w["e"].to_numpy(dtype=_I8))


class LowerLayers:
    """What the layers below the app did, per rank, as merged lists on an attribution's rank axis.

    ``raw[c]`` for each of :data:`LOWER_COMPONENTS`: ``fs`` = every call of a file-system layer
    (:data:`~trace_merge.schema.FS_LAYERS`, cat ``io``: reads, writes, opens, metadata; not the process control
    DFTracer also traces) of the rank's processes, forked
    workers included; ``comm`` = the ``comm`` layer (Horovod timeline, rank 0) and framework ``comm`` events
    (Horovod ops where a TF profile times them; TF 2.15's host profile does not). Horovod writes its timeline on
    rank 0 only, so the collectives it shows *executing* (``ALLREDUCE``, ``MPI_ALLREDUCE``, ``BROADCAST``, ...;
    not the per-rank ``NEGOTIATE_*``) count as communication on every rank: a collective runs on all ranks at
    once (to within Horovod's cycle time and the clock alignment); ``input_wait`` = framework ``wait`` events (the consumer side
    of tf.data: ``IteratorGetNext`` and the pipeline it pulls inline); ``compute`` = framework ``compute``
    and ``other`` events (kernels, the step function around them). tf.data producer threads' work
    (framework ``io``/``preprocess``) is no component: it runs the user's Python (``py_function``,
    generators) or decodes, which is what the remainder stands for. ``exclusive`` resolves overlaps by
    :data:`LOWER_COMPONENTS` order. ``covered`` is the framework layer's coverage (:func:`profile_windows`):
    only inside it can the remainder be called Python.
    """

    def __init__(self, raw: dict[str, tuple[np.ndarray, np.ndarray]], covered: tuple[np.ndarray, np.ndarray],
                 layers: dict[int, list[str]]) -> None:
        self.raw = raw
        self.covered = covered
        self.present_framework = covered[0].size > 0
        self.layers = layers
        self.exclusive: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        taken = (_EMPTY, _EMPTY)
        for c in LOWER_COMPONENTS:
            self.exclusive[c] = subtract_intervals(*raw[c], *taken)
            taken = union_of(taken, raw[c])
        #: covered time no lower layer claimed: what Python / decoding / IPC did while the profiler watched
        self.unclaimed_covered = subtract_intervals(*covered, *taken)

    @classmethod
    def of(cls, frame: pd.DataFrame, att: Optional[_Attribution],
           shared: "Optional[SharedCollectives]" = None) -> "LowerLayers":
        """The non-app rows of ``frame`` whose rank ``att`` attributes, clipped to each rank's window.

        ``shared``: the job's executing collectives (:func:`shared_collectives`) when ``frame`` is one partition
        of it; by default they are ``frame``'s own."""
        empty = {c: (_EMPTY, _EMPTY) for c in LOWER_COMPONENTS}
        if att is None or not len(frame):
            return cls(empty, (_EMPTY, _EMPTY), {})
        layer = frame["layer"]
        keep = (layer != "app").to_numpy() & (frame["end_ns"].to_numpy() > frame["start_ns"].to_numpy())
        rank = frame["rank"].to_numpy(dtype=_I8)
        pos = np.clip(np.searchsorted(att.ranks, rank), 0, max(len(att.ranks) - 1, 0))
        keep &= att.ranks[pos] == rank if len(att.ranks) else False
        rows = frame.loc[keep, ["layer", "cat", "name", "rank", "start_ns", "end_ns"]]
        r = pos[keep]
        s = att.axis.to_axis(r, rows["start_ns"].to_numpy(dtype=_I8))
        e = att.axis.to_axis(r, rows["end_ns"].to_numpy(dtype=_I8))
        lay, cat = rows["layer"], rows["cat"]  # category comparisons: codes, not strings per row
        is_comm = (lay == "comm").to_numpy()
        in_fw = (lay == "framework").to_numpy()
        anchor = in_fw & (rows["name"] == _ANCHOR).to_numpy()
        fw = in_fw & ~anchor
        covered = profile_windows(r[in_fw], s[in_fw], e[in_fw], anchor[in_fw])
        masks = {
            "fs": lay.isin(FS_LAYERS).to_numpy() & (cat == "io").to_numpy(),
            "comm": is_comm | (fw & (cat == "comm").to_numpy()),
            "input_wait": fw & (cat == "wait").to_numpy(),
            "compute": fw & cat.isin(("compute", "other")).to_numpy(),
        }
        # Horovod writes its timeline on rank 0 only, but a collective it shows executing (not negotiating)
        # runs on every rank at once: other ranks get those activities as their communication time.
        if shared is None:
            shared = shared_collectives(rows, len(att.ranks))
        own = set(rows["rank"].to_numpy(dtype=_I8)[is_comm & _collective_rows(rows)].tolist())
        if shared.starts.size and shared.ranks > 1:
            other = [k for k in range(len(att.ranks)) if int(att.ranks[k]) not in own]
            src_s, src_e = shared.starts, shared.ends
            ks = np.repeat(np.asarray(other, dtype=_I8), src_s.size)
            s = np.concatenate((s, att.axis.to_axis(ks, np.tile(src_s, len(other)))))
            e = np.concatenate((e, att.axis.to_axis(ks, np.tile(src_e, len(other)))))
            masks = {c: np.concatenate((m, np.full(ks.size, c == "comm"))) for c, m in masks.items()}
        raw = {c: merge_intervals(s[m], e[m]) for c, m in masks.items()}
        present = rows.groupby(["rank", "layer"], observed=True).size().index
        layers: dict[int, list[str]] = {}
        for rank, layer in present:
            layers.setdefault(int(rank), []).append(str(layer))
        layers = {k: sorted(v) for k, v in layers.items()}
        return cls(raw, covered, layers)


#: Horovod timeline activities that are a collective executing (on every rank at once), not a negotiation
_COLLECTIVE = re.compile(r"^(ALLREDUCE|ALLGATHER|BROADCAST|ALLTOALL|REDUCESCATTER|BARRIER|MPI_|NCCL_|GLOO_|CCL_)")


def _collective_rows(rows: pd.DataFrame) -> np.ndarray:
    return category_mask(rows["name"], lambda n: bool(_COLLECTIVE.match(n)))


@dataclass
class SharedCollectives:
    """The ``comm``-layer collectives of a job (Horovod's rank-0 timeline) that every other attributed rank counts
    as its communication, and how many ranks are attributed (sharing needs more than one)."""

    starts: np.ndarray
    ends: np.ndarray
    ranks: int


def shared_collectives(rows: pd.DataFrame, attributed_ranks: int) -> SharedCollectives:
    """The executing collectives among ``rows`` (comm layer, positive duration; of one partition or the job)."""
    if not len(rows):
        return SharedCollectives(_EMPTY, _EMPTY, attributed_ranks)
    keep = (rows["layer"] == "comm").to_numpy() & _collective_rows(rows) & \
        (rows["end_ns"].to_numpy() > rows["start_ns"].to_numpy())
    return SharedCollectives(rows["start_ns"].to_numpy(dtype=_I8)[keep], rows["end_ns"].to_numpy(dtype=_I8)[keep],
                             attributed_ranks)


def layered_breakdown_df(frame: pd.DataFrame) -> pd.DataFrame:
    """What the lower layers of the same rank did inside each app phase, per rank × epoch × phase.

    Each app phase's time is its self time (innermost phase per thread, as in :func:`breakdown_df`), the
    union over the phase's intervals on the rank. Inside it, each instant goes to the first of
    :data:`COMPONENTS` whose :class:`LowerLayers` list covers it (file system, then communication, then
    framework input wait, then framework compute). The rest is ``python`` (Python, decoding and IPC that no lower
    layer saw) only inside the windows a framework profile covered; outside them it is ``not_observed``: no layer
    that could tell framework work from Python was watching. Every row sums to its phase's time.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch`` (Int64; missing = the phase ran outside any epoch), ``phase``, ``cat`` (the
        phase's own category, a hint), ``calls``, ``observed_calls`` (calls a framework profile window
        overlapped: the sample behind the ``python``/``compute`` split), ``time_s``, ``<component>_s`` for each of
        :data:`COMPONENTS` (seconds, summing to ``time_s``), ``layers`` (lower layers captured on the rank).
    """
    att = _attribution(frame, ["app"])
    return _layered(att, LowerLayers.of(frame, att))


def _empty_layered() -> pd.DataFrame:
    cols = {"rank": "int64", "epoch": "Int64", "phase": "object", "cat": "object", "calls": "int64",
            "observed_calls": "int64", "time_s": "float64", **{f"{c}_s": "float64" for c in COMPONENTS}, "layers": "object"}
    return pd.DataFrame({k: pd.Series(dtype=v) for k, v in cols.items()})


def _layered(att: Optional[_Attribution], lower: LowerLayers) -> pd.DataFrame:
    if att is None:
        return _empty_layered()
    seg_s, seg_e, owner = att.segments
    ep_val, ep_has = att._tags["epoch"]
    no_epoch = np.iinfo(np.int64).min
    key = combined_codes(att._r, np.where(ep_has, ep_val, no_epoch), att._name_codes)
    ngroups = int(key.max()) + 1
    calls = np.bincount(key, minlength=ngroups)
    first = np.zeros(ngroups, dtype=_I8)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)  # first interval of each group
    gseg = key[owner]
    gaxis = Axis(gseg, seg_s, seg_e, ngroups)  # a phase's intervals on several threads may overlap: union
    ms, me = merge_intervals(gaxis.to_axis(gseg, seg_s), gaxis.to_axis(gseg, seg_e))
    g = gaxis.group_of(ms)
    shift = gaxis.lo[g] - gaxis.offset[g]
    ms, me = ms + shift, me + shift

    def per_group(lengths: np.ndarray) -> np.ndarray:
        out = np.zeros(ngroups, dtype=_I8)
        np.add.at(out, g, lengths)
        return out

    time_ns = per_group(me - ms)
    parts = {c: per_group(covered_ns(*lower.exclusive[c], ms, me)) for c in LOWER_COMPONENTS}
    parts["python"] = per_group(covered_ns(*lower.unclaimed_covered, ms, me))
    parts["not_observed"] = time_ns - sum(parts.values())
    # calls of the phase a framework profile saw (any part of): the sample behind the python/compute split
    rs, re_ = att.axis.to_axis(att._r, att._s), att.axis.to_axis(att._r, att._e)
    observed_calls = np.bincount(key, weights=(covered_ns(*lower.covered, rs, re_) > 0), minlength=ngroups)
    r = att._r[first]
    ranks = att.ranks[r]
    cats = np.asarray(PRIORITY, dtype=object)[att._cat_idx[first]]
    out = pd.DataFrame({
        "rank": ranks,
        "epoch": pd.array(np.where(ep_has[first], ep_val[first], 0), dtype="Int64"),
        "phase": np.asarray(att._names, dtype=object)[att._name_codes[first]],
        "cat": cats,
        "calls": calls.astype(_I8),
        "observed_calls": observed_calls.astype(_I8),
        "time_s": time_ns / 1e9,
        **{f"{c}_s": parts[c] / 1e9 for c in COMPONENTS},
        "layers": [",".join(lower.layers.get(int(x), [])) or "-" for x in ranks],
    })
    out.loc[~ep_has[first], "epoch"] = pd.NA
    return out.sort_values(["rank", "epoch", "time_s"], ascending=[True, True, False], na_position="first",
                           kind="stable").reset_index(drop=True)


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
    if per_layer:  # the layers in the schema's order (a partitioned run's ranks can be joined in it)
        use = sorted(use, key=layer_order)
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
    cols["outside_epochs_pct"] = "float64"
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
    # time outside every epoch window (start-up, imports, teardown) is its own share, not "other"
    epochs = att.epoch_cover()
    in_epochs = covered_ns(*epochs, ws, we)
    covered_before = np.zeros(len(w), dtype=_I8)
    acc = (_EMPTY, _EMPTY)
    shares = {}
    for c in PRIORITY[:-1]:
        acc = union_of(acc, att.self_time[c])
        covered = covered_ns(*intersect_intervals(*acc, *epochs), ws, we)
        shares[f"{c}_pct"] = 100.0 * (covered - covered_before) / safe
        covered_before = covered
    for c in PRIORITY[:-1]:
        out[f"{c}_pct"] = np.nan_to_num(shares[f"{c}_pct"])
    out["outside_epochs_pct"] = np.nan_to_num(100.0 * (we - ws - in_epochs) / safe)
    out["other_pct"] = 100.0 - out[[f"{c}_pct" for c in PRIORITY[:-1]]].sum(axis=1) - out["outside_epochs_pct"]
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
    """Per rank: step-cycle time, input wait and compute inside the cycles, AU, verdict.

    Sums of :func:`step_series_df` over the rank's counted cycles (the first step of each rank, pipeline warm-up,
    is left out when the rank has more; the rest of its cycle counts). A rank without step tags falls back to its epoch windows
    (``"epoch"``), then to its whole traced time (``"run"``, e.g. a bare Darshan log, verdict ``"unknown"``).

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``basis`` (``framework`` when cycles inside a TF profile window are counted, else ``app``,
        ``epoch`` or ``run``), ``steps`` (counted), ``steps_total``, ``step_s``, ``input_wait_s``,
        ``input_pct``, ``compute_s``, ``au_pct`` (= compute_s ÷ step_s × 100), ``other_s`` (neither),
        ``excluded_s`` (the warm-up step left out), ``input_visible`` (False: no counted cycle has any wait
        evidence -- Keras batches timed whole, no TF profile -- so input wait cannot be seen), ``verdict``.
    """
    att = _attribution(frame, layers)
    return _input_bound(att, LowerLayers.of(frame, att))


#: the step series' columns on the attribution's rank axis: the kernel's own, left out of every table it gives
STEP_AXIS_COLUMNS = ["_r", "_ws", "_we"]


def step_series_df(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per rank and training step cycle: its time, and the input wait and compute inside it.

    A **cycle** runs from one step's start to the next step's start on the same rank (within one epoch; the
    last step of an epoch ends with its own rows), so it holds the fetch of the next batch whether or not the app
    timed the fetch inside a step phase. Steps are marked by the step phase (``Training Iteration``: the README
    loop, Keras batches) where the rank has it, else by the rows' ``step`` tags (``set_step``, DLIO/pydftracer
    step args). Inside a cycle:

    - **input wait** = union of the framework's input-pipeline waits (``IteratorGetNext`` family) and the app's
      own ``wait``/``io`` self time on the consumer threads (the threads that mark the steps) while no consumer
      thread computes;
    - **compute** = union of framework compute/comm and the app's ``compute``/``comm`` self time on the consumer
      threads, minus input wait (a Keras batch holds its fetch; the profile tells it apart);
    - **other** = the rest (checkpoints, logging, Python between steps), its own term.

    A cycle is ``basis="framework"`` when a TF profile window covers at least half of it. Where a rank's
    app layer shows no wait evidence in any cycle (Keras batches timed whole), only its framework-covered cycles
    are evidence (``counted``).

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch``, ``step`` (Int64), ``start_ns``, ``end_ns`` (the cycle), ``step_s``,
        ``input_wait_s``, ``compute_s``, ``other_s``, ``excluded_s``, ``basis``, ``warmup`` (first step of the
        rank: the step itself is left out, ``excluded_s``, and its cycle starts where it ended), ``counted``
        (used by the verdict).
    """
    att = _attribution(frame, None)
    return _step_series(att, LowerLayers.of(frame, att)).drop(columns=STEP_AXIS_COLUMNS)


def step_marks_df(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per training step of every rank, as :func:`step_series_df` finds them (:meth:`_Attribution.step_marks`:
    the step phase, else step-tagged compute rows, else step-tagged rows; consecutive ones with the same tags are one
    step): ``rank``, ``epoch``, ``step`` (Int64), ``start_ns``, ``end_ns`` (first start and last end of its rows)."""
    att = _attribution(frame, None)
    if att is None:
        return pd.DataFrame({"rank": pd.Series(dtype="int64"), "epoch": pd.Series(dtype="Int64"),
                             "step": pd.Series(dtype="Int64"), "start_ns": pd.Series(dtype="int64"),
                             "end_ns": pd.Series(dtype="int64")})
    return att.step_marks()[["rank", "epoch", "step", "start_ns", "end_ns"]]


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


def _step_series(att: Optional[_Attribution], lower: "LowerLayers") -> pd.DataFrame:
    cols = {"_r": "int64", "rank": "int64", "epoch": "Int64", "step": "Int64", "start_ns": "int64",
            "end_ns": "int64", "_ws": "int64", "_we": "int64", "step_s": "float64", "input_wait_s": "float64",
            "compute_s": "float64", "other_s": "float64", "excluded_s": "float64", "basis": "object",
            "warmup": "bool", "counted": "bool"}
    if att is None:
        return pd.DataFrame({k: pd.Series(dtype=v) for k, v in cols.items()})
    w = att.step_marks()
    r = w["_r"].to_numpy(dtype=_I8)
    step_start = w["_ws"].to_numpy(dtype=_I8)
    own_end = w["_we"].to_numpy(dtype=_I8)
    we = _cycle_ends(r, w["epoch"], step_start, own_end)
    first = np.r_[True, r[1:] != r[:-1]] if len(r) else np.zeros(0, dtype=bool)
    n_of_rank = np.bincount(r, minlength=len(att.ranks))
    warmup = first & (n_of_rank[r] > 1)
    # DLIO's "first step excluded": the first step itself (graph tracing, first file opens), not what follows it
    # until the next step starts (the fetch of the next batch, a barrier): that part of its cycle counts
    ws = np.where(warmup, np.minimum(own_end, we), step_start)
    length = we - ws
    by_fw = (lower.present_framework & (2 * covered_ns(*lower.covered, ws, we) >= length)) if len(w) \
        else np.zeros(0, dtype=bool)
    app_busy = att.consumer_self(["compute", "comm"])
    # a wait on one consumer thread while another computes is hidden behind it (exposed input only)
    loop_wait = att.consumer_self(["io", "wait"])
    app_wait = subtract_intervals(*loop_wait, *app_busy)
    wait_ev = union_of(lower.raw["input_wait"], app_wait)
    busy = union_of(lower.raw["compute"], lower.raw["comm"], app_busy)
    wait = covered_ns(*wait_ev, ws, we)
    comp = covered_ns(*subtract_intervals(*busy, *wait_ev), ws, we)
    # a rank whose app layer shows no wait in its cycles (Keras batches timed whole) can only be judged where a
    # profile window looked inside its steps; a rank with app wait evidence counts every cycle
    app_seen = np.bincount(r, weights=covered_ns(*loop_wait, ws, we),
                           minlength=len(att.ranks)) > 0
    fw_ranks = np.unique(r[by_fw])
    counted = (length > 0) & (by_fw | app_seen[r] | ~np.isin(r, fw_ranks))
    excluded = ws - step_start
    start_ns = w["start_ns"].to_numpy(dtype=_I8) + excluded
    return pd.DataFrame({
        "_r": r, "rank": att.ranks[r] if len(r) else r, "epoch": pd.array(w["epoch"], dtype="Int64"),
        "step": pd.array(w["step"], dtype="Int64"), "start_ns": start_ns, "end_ns": start_ns + length,
        "_ws": ws, "_we": we, "step_s": length / 1e9, "input_wait_s": wait / 1e9, "compute_s": comp / 1e9,
        "other_s": (length - wait - comp) / 1e9, "excluded_s": excluded / 1e9,
        "basis": np.where(by_fw, "framework", "app").astype(object), "warmup": warmup, "counted": counted,
    })


#: Below this share of cycle time explained by wait or compute evidence a verdict would be a guess: "unknown".
MIN_EXPLAINED_PCT = 50.0


def _input_bound(att: Optional[_Attribution], lower: "LowerLayers",
                 series: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Per-rank sums of :func:`_step_series` (``series`` when the caller has it already)."""
    cols = ["rank", "basis", "steps", "steps_total", "step_s", "input_wait_s", "input_pct", "compute_s",
            "au_pct", "other_s", "excluded_s", "input_visible", "verdict"]
    if att is None:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("basis", "verdict") else "float64")
                             for c in cols})
    if series is None:
        series = _step_series(att, lower)
    n = len(att.ranks)
    used = series[series["counted"]]
    r_used = used["_r"].to_numpy(dtype=_I8)

    def per_rank(values: np.ndarray, rows: np.ndarray = r_used) -> np.ndarray:
        return np.bincount(rows, weights=values, minlength=n).astype(np.float64)

    step_s = per_rank(used["step_s"].to_numpy())
    wait_s = per_rank(used["input_wait_s"].to_numpy())
    comp_s = per_rank(used["compute_s"].to_numpy())
    fw_steps = per_rank((used["basis"] == "framework").to_numpy(dtype=float))
    steps = np.bincount(r_used, minlength=n)
    steps_total = np.bincount(series["_r"].to_numpy(dtype=_I8), minlength=n)
    excluded_s = per_rank(series["excluded_s"].to_numpy(), series["_r"].to_numpy(dtype=_I8))
    basis = np.where(fw_steps > 0, "framework", "app").astype(object)
    # wait phases of the loop inside the counted cycles (hidden or not): input wait could have been seen
    seen = covered_ns(*att.consumer_self(["io", "wait"]), used["_ws"].to_numpy(dtype=_I8),
                      used["_we"].to_numpy(dtype=_I8))
    visible = (basis == "framework") | (per_rank(seen.astype(np.float64)) > 0)
    # ranks without steps: epoch windows, then the whole traced time (app evidence)
    no_steps = np.flatnonzero(steps_total == 0)
    if no_steps.size:
        exposed = subtract_intervals(*att.self_union(["io", "wait"]), *att.self_time["compute"])
        for label, keys in (("epoch", ["epoch"]), ("run", [])):
            w = att.windows(keys)
            w = w[w["_r"].isin(no_steps)]
            if not len(w):
                continue
            ms, me = merge_intervals(w["_ws"].to_numpy(dtype=_I8), w["_we"].to_numpy(dtype=_I8))
            rr = att.axis.group_of(ms)
            step_s += per_rank((me - ms) / 1e9, rr)
            wait_s += per_rank(covered_ns(*exposed, ms, me) / 1e9, rr)
            comp_s += per_rank(covered_ns(*att.self_time["compute"], ms, me) / 1e9, rr)
            basis[np.unique(rr)] = label
            visible[np.unique(rr)] = True
            no_steps = np.setdiff1d(no_steps, rr)
    safe = np.where(step_s > 0, step_s, np.nan)
    input_pct = np.nan_to_num(100.0 * wait_s / safe)
    au_pct = np.nan_to_num(100.0 * comp_s / safe)
    return pd.DataFrame({
        "rank": att.ranks,
        "basis": basis,
        "steps": steps.astype(_I8),
        "steps_total": steps_total.astype(_I8),
        "step_s": step_s,
        "input_wait_s": wait_s,
        "input_pct": input_pct,
        "compute_s": comp_s,
        "au_pct": au_pct,
        "other_s": step_s - wait_s - comp_s,
        "excluded_s": excluded_s,
        "input_visible": visible,
        "verdict": [_judge(p, a, b, v) for p, a, b, v in zip(input_pct, au_pct, basis, visible)],
    })


def _judge(input_pct: float, au_pct: float, basis: str, visible: bool) -> str:
    """A rank's verdict: 'unknown' where there is no step time to be input-bound in (``run``) or no wait could be
    seen, else :func:`_explained_label`."""
    return "unknown" if basis == "run" or not visible else _explained_label(input_pct, au_pct)


def _explained_label(input_pct: float, au_pct: float) -> str:
    """:func:`verdict_label`, or 'unknown' when wait and compute together explain too little of the cycles: a
    verdict that cannot contradict its own numbers."""
    return "unknown" if input_pct + au_pct < MIN_EXPLAINED_PCT else verdict_label(input_pct)


#: what each basis of the verdict measured, for the text outputs
BASIS_TEXT = {
    "framework": "step cycles inside the TF profile window: the profiler's input-pipeline wait (IteratorGetNext "
                 "family) with the app's own wait/io phases of the training loop",
    "app": "step cycles (one step start to the next): the app's wait/io phases of the training loop",
    "epoch": "the app layer's exposed io/wait phases inside epochs (no step tags)",
}
#: the one command that makes input wait inside Keras batches visible
CAPTURE_HINT = "timelogger run -o RUN --tf-profile -- python train.py"


@dataclass
class Verdict:
    """Job-level input-bound verdict (:func:`verdict`); ``as_dict`` is its JSON form (``label`` as ``verdict``)."""

    label: str = "unknown"  # not / moderately / highly input-bound, or unknown
    input_pct: Optional[float] = None  # Σ input wait ÷ Σ cycle time over the counted step cycles
    au_pct: Optional[float] = None  # DLIO's AU: Σ compute ÷ Σ cycle time
    other_pct: Optional[float] = None  # neither: 100 - input - AU
    basis: Optional[str] = None  # the ranks' bases joined
    cycles: int = 0  # step cycles counted
    cycles_total: int = 0  # step cycles seen
    worst_rank: Optional[int] = None
    worst_rank_input_pct: Optional[float] = None
    notes: list = field(default_factory=list)  # the evidence used and its coverage, exclusions, blind spots

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        return {"input_pct": self.input_pct, "verdict": out.pop("label"), **out}


def verdict(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None) -> Verdict:
    """Job-level input-bound verdict: Σ input wait ÷ Σ cycle time over the ranks' counted step cycles."""
    return _verdict(input_bound_df(frame, layers))


def _verdict(per: pd.DataFrame) -> Verdict:
    notes = _verdict_notes(per)
    per = per[per["basis"] != "run"] if len(per) else per
    seen = per[per["input_visible"].astype(bool)] if len(per) else per
    step = float(seen["step_s"].sum()) if len(seen) else 0.0
    out = Verdict(cycles=int(per["steps"].sum()) if len(per) else 0,
                  cycles_total=int(per["steps_total"].sum()) if len(per) else 0, notes=notes)
    if not len(seen) or step <= 0:
        return out
    pct = 100.0 * float(seen["input_wait_s"].sum()) / step
    au = 100.0 * float(seen["compute_s"].sum()) / step
    worst = seen.loc[seen["input_pct"].idxmax()]
    out = dataclasses.replace(out, input_pct=pct, label=_explained_label(pct, au), au_pct=au,
                              other_pct=max(0.0, 100.0 - pct - au), basis=",".join(sorted(set(seen["basis"]))),
                              worst_rank=int(worst["rank"]), worst_rank_input_pct=float(worst["input_pct"]))
    if out.label == "unknown":
        notes.append(f"unknown: input wait ({pct:.0f} %) and compute ({au:.0f} %) explain only {pct + au:.0f} % "
                     f"of the step cycles; the rest is neither (mark the fetch with tl.iterate(..., cat='wait') "
                     f"and the step's work with a compute phase, or profile it: {CAPTURE_HINT})")
    return out


def verdict_text(v: Verdict) -> str:
    """The verdict in one line with its numbers and evidence, as the CLI and the report show it."""
    if v.input_pct is None:
        why = ("no wait evidence inside the step cycles: see the blind spot below" if v.cycles_total
               else "no training steps or epochs tagged in the trace")
        return f"unknown ({why})"
    return (f"{v.label} ({v.input_pct:.1f} % of step-cycle time waiting for input, AU {v.au_pct:.1f} %, "
            f"other {v.other_pct:.1f} %; {v.cycles} of {v.cycles_total} cycles; basis {v.basis})")


def _ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(int(r)) for r in ranks)


def _verdict_notes(per: pd.DataFrame) -> list[str]:
    notes: list[str] = []
    if not len(per):
        return notes
    for basis, text in BASIS_TEXT.items():
        rows = per[per["basis"] == basis]
        if not len(rows):
            continue
        line = f"basis {basis} ({_ranks_text(rows['rank'])}): {text}"
        if basis in ("framework", "app"):
            line += f"; {int(rows['steps'].sum())} of {int(rows['steps_total'].sum())} cycles counted"
        notes.append(line)
    warm = per[per["excluded_s"] > 0]
    if len(warm):
        notes.append(f"excluded: the first step of each rank (pipeline warm-up: shuffle-buffer fill, graph "
                     f"tracing, first file opens; DLIO's rule), {float(warm['excluded_s'].sum()):.3g} s in all")
    blind = per[~per["input_visible"].astype(bool)]
    if len(blind):
        notes.append(f"blind spot on {_ranks_text(blind['rank'])}: no wait evidence inside the step cycles (the "
                     "app layer times whole steps, as a Keras TimeLoggerCallback batch that includes the fetch of "
                     "its batch, and no TF profile covers them), so input wait cannot be seen and the verdict is "
                     f"'unknown'. Capture it: {CAPTURE_HINT}, or time the fetch with tl.iterate(..., cat='wait')")
    return notes


def accelerator_utilisation(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None
                            ) -> Optional[float]:
    """DLIO's AU: union(compute) ÷ wall time of training steps, over all ranks, as a fraction (0..1).

    ``None`` when the frame has no steps to measure.
    """
    au = verdict(frame, layers).au_pct
    return None if au is None else au / 100.0




# ----------------------------------------------------------------------------------------------------------
# A fixed component view (the original study's table)
# ----------------------------------------------------------------------------------------------------------


def component_view_df(frame: pd.DataFrame, components: "Sequence[tuple[str, Sequence[str]]]",
                      total_phase: str, per_epoch: bool = False) -> pd.DataFrame:
    """Seconds and shares of named components of app phases per rank (and epoch), against a total phase.

    Each component is the union of its phases' intervals on the rank minus everything the components before it
    took, so ``[("Read", ["HDF5 File Read"]), ("Load", ["Load File"])]`` gives Load = Load File − Read, as the
    original study computed its table. ``other`` is the total phase's union minus all components. Components
    are clipped to the total phase; with ``per_epoch`` rows are per epoch and clipped to that epoch's part of it.
    A kernel: one rank's rows or many, rows per (rank[, epoch]).

    Returns
    -------
    pandas.DataFrame
        ``rank`` (, ``epoch``), ``total_s``, ``<component>_s`` for each component and ``other_s``, and
        ``<component>_pct`` / ``other_pct`` (% of ``total_s``, summing to 100).
    """
    labels = [label for label, _ in components]
    keys = ["rank", "epoch"] if per_epoch else ["rank"]
    app = frame[frame["layer"] == "app"] if len(frame) else frame
    rows = []
    if len(app):
        names = as_text(app["name"]).to_numpy()
        s, e = app["start_ns"].to_numpy(dtype=_I8), app["end_ns"].to_numpy(dtype=_I8)
        rank = app["rank"].to_numpy(dtype=_I8)
        epoch = app["epoch"].to_numpy(dtype=_I8, na_value=-1)
        is_total = names == total_phase
        of_component = [np.isin(names, list(phases)) for _, phases in components]
        for r in np.unique(rank):
            on_rank = rank == r
            total = merge_intervals(s[on_rank & is_total], e[on_rank & is_total])
            # each component's merged list once per rank; the windows below only clip it
            merged = [merge_intervals(s[on_rank & m], e[on_rank & m]) for m in of_component]
            windows = [(None, total)]
            if per_epoch:
                tagged = on_rank & (epoch >= 0)
                windows = []
                for ep in np.unique(epoch[tagged]):
                    m = tagged & (epoch == ep)
                    span = merge_intervals([s[m].min()], [e[m].max()])
                    windows.append((int(ep), intersect_intervals(*total, *span)))
            for ep, window in windows:
                taken = (_EMPTY, _EMPTY)
                row: dict = {"rank": int(r), **({"epoch": ep} if per_epoch else {}),
                             "total_s": float((window[1] - window[0]).sum()) / 1e9}
                for label, component in zip(labels, merged):
                    mine = subtract_intervals(*intersect_intervals(*component, *window), *taken)
                    row[f"{label}_s"] = float((mine[1] - mine[0]).sum()) / 1e9
                    taken = union_of(taken, mine)
                row["other_s"] = row["total_s"] - sum(row[f"{x}_s"] for x in labels)
                rows.append(row)
    cols = [*keys, "total_s", *(f"{x}_s" for x in labels), "other_s"]
    out = pd.DataFrame(rows, columns=cols)
    for x in [*labels, "other"]:
        t = out["total_s"].to_numpy(dtype=np.float64)
        out[f"{x}_pct"] = np.where(t > 0, 100.0 * out[f"{x}_s"].to_numpy(dtype=np.float64) / np.where(t > 0, t, 1),
                                   np.nan)
    return out
