"""Attribution of wall time: breakdowns, exposed input, step cycles, the layered breakdown, the input-bound verdict
and accelerator utilisation -- the tables, made from the sweep of :mod:`trace_merge.attribution_engine`.

Phases nest: a step phase (compute) may contain the fetch of its batch (wait), which contains a file read (io). A
parent's category must not swallow what its children did, so on **one thread** each instant belongs to the
*innermost* active interval (its "self time", as in any profiler). Across the threads of a rank, each instant goes
to the highest-priority category any thread is in, in the order :data:`PRIORITY` (``io > comm > checkpoint >
preprocess > compute > wait > other``): a prefetch thread reading while the main thread computes shows as ``io``.
The exclusive shares of a row therefore never overlap; ``other`` takes whatever is left (uncovered time and explicit
``other`` phases) so a row sums to exactly 100 %. The per-category *union* time (``<cat>_s`` columns) is reported
beside the shares and is computed from the raw intervals (a parent's full length counts there).

By default the breakdown is made from the ``app`` layer, the user's own phase taxonomy; ``framework``,
``comm`` and ``posix`` rows are for drill-down (``layers=...`` or ``per_layer=True``). A frame without any
``app`` rows (a bare DFTracer or Darshan trace) falls back to all of its layers. Definitions for users:
``docs/metrics.md``.

Each table is a function of a frame (``*_df``) and of an :class:`~trace_merge.attribution_engine.Attribution`
(``*_of``: what the per-rank kernels of :mod:`trace_merge.kernels` use, one attribution for several tables);
:class:`~trace_merge.attribution_engine.SweepCuts` sets how the sweep cuts the rows (the tables do not depend on it).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.attribution_engine import (
    ATTRIBUTION_COLUMNS,
    COMPONENTS,
    DEFAULT_CUTS,
    LOWER_COMPONENTS,
    NO_EPOCH,
    PRIORITY,
    Attribution,
    SharedCollectives,
    SweepCuts,
    Windows,
    layers_for,
    layers_to_use,
    present_layers,
    shared_collectives,
)
from trace_merge.explain import verdict_notes
from trace_merge.intervals import combined_codes, covered_ns, first_rows
from trace_merge.schema import layer_order
from trace_merge.verdict import Verdict, judge, verdict_numbers

__all__ = [
    "ATTRIBUTION_COLUMNS", "COMPONENTS", "LOWER_COMPONENTS", "PRIORITY", "Attribution", "SharedCollectives",
    "SweepCuts", "layers_to_use", "present_layers", "shared_collectives", "attribution_of", "attribution_of_windows",
    "breakdown_df", "breakdown_of", "exposed_io_df", "exposed_of", "layered_breakdown_df", "layered_of",
    "step_series_df", "step_series_of", "step_marks_df", "input_bound_df", "input_bound_of", "STEP_AXIS_COLUMNS",
    "verdict", "verdict_of", "accelerator_utilisation",
]
_I8 = np.int64


def attribution_of(frame: pd.DataFrame, layers: "str | Sequence[str] | None", lower: bool = False,
                   shared: Optional[SharedCollectives] = None, sums: bool = True,
                   cuts: SweepCuts = DEFAULT_CUTS) -> Optional[Attribution]:
    """The attribution of the rows of ``layers`` (see :func:`breakdown_df`), ``None`` when there are none.
    ``lower``: also what the layers below did (steps, input wait, the layered breakdown); ``shared``: the job's
    executing collectives (:func:`shared_collectives`) when ``frame`` is one partition of it, by default
    ``frame``'s own; ``sums``: the facts only (the steps), not the tables' sums."""
    if not len(frame):
        return None
    use = layers_for(frame, layers)
    att = Attribution(Windows.of(frame, use, cuts), lower, shared, sums)
    return None if att.empty else att


def attribution_of_windows(source: "Callable[[], Iterable[pd.DataFrame]]", use: Sequence[str], lower: bool = False,
                           shared: Optional[SharedCollectives] = None,
                           cuts: SweepCuts = DEFAULT_CUTS) -> Optional[Attribution]:
    """:func:`attribution_of` of a rank given window by window (``source()``: its frames in time order, cut where the
    start changes, with the same categories; ``use``: the layers, a list)."""
    att = Attribution(Windows(source, list(use), cuts.slab_rows), lower, shared)
    return None if att.empty else att



def layered_breakdown_df(frame: pd.DataFrame, *, cuts: SweepCuts = DEFAULT_CUTS) -> pd.DataFrame:
    """What the lower layers of the same rank did inside each app phase, per rank × epoch × phase.

    Each app phase's time is its self time (innermost phase per thread, as in :func:`breakdown_df`), the
    union over the phase's intervals on the rank. Inside it, each instant goes to the first of
    :data:`COMPONENTS` whose :class:`_LowerSlab` list covers it (file system, then communication, then
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
    return layered_of(attribution_of(frame, ["app"], lower=True, cuts=cuts))


def _empty_layered() -> pd.DataFrame:
    cols = {"rank": "int64", "epoch": "Int64", "phase": "object", "cat": "object", "calls": "int64",
            "observed_calls": "int64", "time_s": "float64", **{f"{c}_s": "float64" for c in COMPONENTS},
            "layers": "object"}
    return pd.DataFrame({k: pd.Series(dtype=v) for k, v in cols.items()})


def layered_of(att: Optional[Attribution]) -> pd.DataFrame:
    if att is None:
        return _empty_layered()
    n = len(att.group_first)
    order = att.group_order
    first = np.asarray(att.group_first, dtype=_I8).reshape(n, 5)[order]
    r, ep, name, cat = first[:, 1], first[:, 2], first[:, 3], first[:, 4]
    time_ns = att.sum("phase_time", n)[order]
    parts = {c: att.sum(f"phase_{c}", n)[order] for c in (*LOWER_COMPONENTS, "python")}
    parts["not_observed"] = time_ns - sum(parts.values())
    ranks = att.ranks[r]
    out = pd.DataFrame({
        "rank": ranks,
        "epoch": pd.array(np.where(ep == NO_EPOCH, 0, ep), dtype="Int64"),
        "phase": np.asarray(att.names, dtype=object)[name],
        "cat": np.asarray(PRIORITY, dtype=object)[cat],
        "calls": att.sum("calls", n)[order].astype(_I8),
        "observed_calls": att.sum("observed_calls", n)[order].astype(_I8),
        "time_s": time_ns / 1e9,
        **{f"{c}_s": parts[c] / 1e9 for c in COMPONENTS},
        "layers": [",".join(att.layers.get(int(x), [])) or "-" for x in ranks],
    })
    out.loc[ep == NO_EPOCH, "epoch"] = pd.NA
    return out.sort_values(["rank", "epoch", "time_s"], ascending=[True, True, False], na_position="first",
                           kind="stable").reset_index(drop=True)


def breakdown_df(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None, *,
                 per_layer: bool = False, include_total: bool = True, cuts: SweepCuts = DEFAULT_CUTS) -> pd.DataFrame:
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
    cuts
        How the sweep cuts the rows (:class:`~trace_merge.attribution_engine.SweepCuts`; the table is the same).

    Returns
    -------
    pandas.DataFrame
        One row per ``(rank, epoch)`` (plus totals): ``rank``, ``epoch`` (Int64, missing = whole run),
        ``start_ns``, ``end_ns`` (the window: first start to last end of the rows tagged with that epoch),
        ``wall_s``; ``<cat>_pct`` for each cat of :data:`PRIORITY` -- the exclusive share of the window in
        percent (innermost phase per thread, priority across threads; ``other_pct`` is the rest, so the
        shares sum to 100); ``<cat>_s`` -- union time of that cat's raw intervals inside the window, seconds.
    """
    use = layers_for(frame, layers)
    if per_layer:  # the layers in the schema's order (a partitioned run's ranks can be joined in it)
        use = sorted(use, key=layer_order)
        parts = [breakdown_df(frame, [x], include_total=include_total, cuts=cuts).assign(layer=x) for x in use]
        parts = [p for p in parts if len(p)]
        if not parts:
            return _empty_breakdown().assign(layer=pd.Series(dtype="string"))
        out = pd.concat(parts, ignore_index=True)
        return out[["layer", *[c for c in out.columns if c != "layer"]]]
    return breakdown_of(attribution_of(frame, use, cuts=cuts), include_total)


def breakdown_of(att: Optional[Attribution], include_total: bool = True) -> pd.DataFrame:
    if att is None:
        return _empty_breakdown()
    return _shares(att, len(att.table_windows) if include_total else len(att.windows(["epoch"])))


def _empty_breakdown() -> pd.DataFrame:
    cols = {"rank": "int64", "epoch": "Int64", "start_ns": "int64", "end_ns": "int64", "wall_s": "float64"}
    cols.update({f"{c}_pct": "float64" for c in PRIORITY})
    cols["outside_epochs_pct"] = "float64"
    cols.update({f"{c}_s": "float64" for c in PRIORITY})
    return pd.DataFrame({k: pd.Series(dtype=v) for k, v in cols.items()})


def _shares(att: Attribution, rows: int) -> pd.DataFrame:
    """The breakdown of the first ``rows`` of the attribution's windows (the epochs, then the totals)."""
    w = att.table_windows.iloc[:rows]
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
    in_epochs = covered_ns(*att.epoch_cover(), ws, we)
    covered_before = np.zeros(len(w), dtype=_I8)
    shares = {}
    for c in PRIORITY[:-1]:  # the cumulative union of the categories before and this one, inside the epochs
        covered = att.sum(f"share_{c}", len(att.table_windows))[:rows]
        shares[f"{c}_pct"] = 100.0 * (covered - covered_before) / safe
        covered_before = covered
    for c in PRIORITY[:-1]:
        out[f"{c}_pct"] = np.nan_to_num(shares[f"{c}_pct"])
    out["outside_epochs_pct"] = np.nan_to_num(100.0 * (we - ws - in_epochs) / safe)
    out["other_pct"] = 100.0 - out[[f"{c}_pct" for c in PRIORITY[:-1]]].sum(axis=1) - out["outside_epochs_pct"]
    for c in PRIORITY:
        out[f"{c}_s"] = att.sum(f"raw_{c}", len(att.table_windows))[:rows] / 1e9
    return out.sort_values(["rank", "epoch"], na_position="last", kind="stable").reset_index(drop=True)


def exposed_io_df(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None, *,
                  cuts: SweepCuts = DEFAULT_CUTS) -> pd.DataFrame:
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
    return exposed_of(attribution_of(frame, layers, cuts=cuts))


def exposed_of(att: Optional[Attribution]) -> pd.DataFrame:
    cols = ["rank", "epoch", "wall_s", "input_s", "compute_s", "overlap_s", "exposed_s", "exposed_pct"]
    if att is None:
        return pd.DataFrame({c: pd.Series(dtype="Int64" if c == "epoch" else "float64") for c in cols})
    w = att.table_windows
    ws, we = w["_ws"].to_numpy(dtype=_I8), w["_we"].to_numpy(dtype=_I8)
    input_ns = att.sum("input", len(w))
    overlap_ns = att.sum("overlap", len(w))
    wall = (we - ws).astype(np.float64)
    out = pd.DataFrame({
        "rank": w["rank"].to_numpy(dtype=_I8),
        "epoch": pd.array(w["epoch"], dtype="Int64"),
        "wall_s": wall / 1e9,
        "input_s": input_ns / 1e9,
        "compute_s": att.sum("compute", len(w)) / 1e9,
        "overlap_s": overlap_ns / 1e9,
        "exposed_s": (input_ns - overlap_ns) / 1e9,
        "exposed_pct": np.nan_to_num(100.0 * (input_ns - overlap_ns) / np.where(wall > 0, wall, np.nan)),
    })
    return out.sort_values(["rank", "epoch"], na_position="last", kind="stable").reset_index(drop=True)



def input_bound_df(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None, *,
                   cuts: SweepCuts = DEFAULT_CUTS) -> pd.DataFrame:
    """Per rank: step-cycle time, input wait and compute inside the cycles, AU, verdict.

    Sums of :func:`step_series_df` over the rank's counted cycles (the first step of each epoch, pipeline warm-up,
    is left out when the rank has more; the rest of its cycle counts). A rank without step tags falls back to its
    epoch windows (``"epoch"``), then to its whole traced time (``"run"``, e.g. a bare Darshan log, verdict
    ``"unknown"``).

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``basis`` (``framework`` when cycles inside a TF profile window are counted, else ``app``,
        ``epoch`` or ``run``), ``steps`` (counted), ``steps_total``, ``step_s``, ``input_wait_s``,
        ``input_pct``, ``compute_s``, ``au_pct`` (= compute_s ÷ step_s × 100, or device_busy_s ÷ step_s × 100 where
        ``au_basis`` is ``kernels``), ``device_busy_s`` (the accelerator's compute kernels in the counted cycles, from
        its own timeline: the PyTorch profiler's device events), ``au_basis`` (``kernels`` where the rank has such a
        timeline, else ``compute``: the host's compute evidence), ``profiler`` (whose profile the framework layer is:
        ``PyTorch``, ``TF``, or empty without one), ``sync_wait_s`` and
        ``sync_wait_pct`` (waiting for other ranks, :func:`step_series_df`), ``others_wait_s`` (the other ranks
        waiting for this one: Horovod negotiations in which it was the last ready; not a term of the cycle, its
        own time there is its work), ``other_s`` (none of them),
        ``excluded_s`` (the warm-up step left out), ``input_visible`` (False: no counted cycle has any wait
        evidence -- Keras batches timed whole, no TF profile -- so input wait cannot be seen), ``verdict``.
    """
    return input_bound_of(attribution_of(frame, layers, lower=True, cuts=cuts))


#: the step series' columns on the attribution's rank axis: the kernel's own, left out of every table it gives
STEP_AXIS_COLUMNS = ["_r", "_ws", "_we"]


def step_series_df(frame: pd.DataFrame, *, cuts: SweepCuts = DEFAULT_CUTS) -> pd.DataFrame:
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
      threads, minus input wait (a Keras batch holds its fetch; the profile tells it apart) and sync wait;
    - **sync wait** = Horovod negotiations in which the rank waited for a later one (``cat`` ``wait``: the timeline
      reader's), less any lower-layer work of its own, minus input wait: a step phase around ``hvd.allreduce``
      holds it;
    - **other** = the rest (checkpoints, logging, Python between steps), its own term.

    A cycle is ``basis="framework"`` when a TF profile window covers at least half of it. Where a rank's
    app layer shows no wait evidence in any cycle (Keras batches timed whole), only its framework-covered cycles
    are evidence (``counted``).

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch``, ``step`` (Int64), ``start_ns``, ``end_ns`` (the cycle), ``step_s``,
        ``input_wait_s``, ``compute_s``, ``sync_wait_s``, ``other_s``, ``excluded_s``, ``basis``, ``warmup`` (first
        step of an epoch of the rank: the step itself is left out, ``excluded_s``, and its cycle starts where it
        ended), ``counted`` (used by the verdict).
    """
    return step_series_of(attribution_of(frame, None, lower=True, cuts=cuts)).drop(columns=STEP_AXIS_COLUMNS)


def step_marks_df(frame: pd.DataFrame, *, cuts: SweepCuts = DEFAULT_CUTS) -> pd.DataFrame:
    """One row per training step of every rank, as :func:`step_series_df` finds them (:meth:`Attribution.step_marks`:
    the step phase, else step-tagged compute rows, else step-tagged rows; consecutive ones with the same tags are one
    step): ``rank``, ``epoch``, ``step`` (Int64), ``start_ns``, ``end_ns`` (first start and last end of its rows)."""
    att = attribution_of(frame, None, lower=True, sums=False, cuts=cuts)
    if att is None:
        return pd.DataFrame({"rank": pd.Series(dtype="int64"), "epoch": pd.Series(dtype="Int64"),
                             "step": pd.Series(dtype="Int64"), "start_ns": pd.Series(dtype="int64"),
                             "end_ns": pd.Series(dtype="int64")})
    return att.step_marks()[["rank", "epoch", "step", "start_ns", "end_ns"]]


#: a step's basis, one object per value: a million steps hold two strings, not a million copies (and pickle them once)
_BASIS = np.array(["app", "framework"], dtype=object)


def step_series_of(att: Optional[Attribution]) -> pd.DataFrame:
    cols = {"_r": "int64", "rank": "int64", "epoch": "Int64", "step": "Int64", "start_ns": "int64",
            "end_ns": "int64", "_ws": "int64", "_we": "int64", "step_s": "float64", "input_wait_s": "float64",
            "compute_s": "float64", "sync_wait_s": "float64", "other_s": "float64", "excluded_s": "float64",
            "basis": "object", "warmup": "bool", "counted": "bool"}
    if att is None:
        return pd.DataFrame({k: pd.Series(dtype=v) for k, v in cols.items()})
    cy = att.cycles
    w, r, ws, we, warmup = cy["marks"], cy["r"], cy["ws"], cy["we"], cy["warmup"]
    length = we - ws
    by_fw = (att.present_framework & (2 * covered_ns(*att.covered, ws, we) >= length)) if len(w) \
        else np.zeros(0, dtype=bool)
    wait = att.sum("wait", len(w))
    comp = att.sum("busy", len(w))
    sync = att.sum("sync", len(w))
    # a rank whose app layer shows no wait in its cycles (Keras batches timed whole) can only be judged where a
    # profile window looked inside its steps; a rank with app wait evidence counts every cycle
    app_seen = np.bincount(r, weights=att.sum("loop_wait", len(w)), minlength=len(att.ranks)) > 0
    fw_ranks = np.unique(r[by_fw])
    counted = (length > 0) & (by_fw | app_seen[r] | ~np.isin(r, fw_ranks))
    start_ns = w["start_ns"].to_numpy(dtype=_I8) + (ws - cy["step_start"])
    excluded = np.where(warmup, ws - cy["step_start"], 0)
    return pd.DataFrame({
        "_r": r, "rank": att.ranks[r] if len(r) else r, "epoch": pd.array(w["epoch"], dtype="Int64"),
        "step": pd.array(w["step"], dtype="Int64"), "start_ns": start_ns, "end_ns": start_ns + length,
        "_ws": ws, "_we": we, "step_s": length / 1e9, "input_wait_s": wait / 1e9, "compute_s": comp / 1e9,
        "sync_wait_s": sync / 1e9, "other_s": (length - wait - comp - sync) / 1e9, "excluded_s": excluded / 1e9,
        "basis": _BASIS[by_fw.astype(np.int8)], "warmup": warmup, "counted": counted,
    })


def input_bound_of(att: Optional[Attribution], series: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Per-rank sums of :func:`_step_series` (``series`` when the caller has it already)."""
    cols = ["rank", "basis", "steps", "steps_total", "step_s", "input_wait_s", "framework_wait_s", "profiled_steps",
            "warmup_steps", "input_pct", "compute_s", "au_pct", "sync_wait_s", "sync_wait_pct", "others_wait_s",
            "other_s", "excluded_s", "input_visible", "verdict", "unexplained_phase", "unexplained_phase_s",
            "unexplained_gap_s", "between_epochs_s", "producer_s", "producer_in_wait_s", "producer_in_compute_s",
            "device_busy_s", "au_basis", "profiler"]
    if att is None:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("basis", "verdict", "unexplained_phase", "au_basis",
                                                                  "profiler") else "float64") for c in cols})
    if series is None:
        series = step_series_of(att)
    n = len(att.ranks)
    counted = series["counted"].to_numpy(dtype=bool)
    used = series[counted]
    r_used = used["_r"].to_numpy(dtype=_I8)

    def per_rank(values: np.ndarray, rows: np.ndarray = r_used) -> np.ndarray:
        return np.bincount(rows, weights=values, minlength=n).astype(np.float64)

    step_s = per_rank(used["step_s"].to_numpy())
    wait_s = per_rank(used["input_wait_s"].to_numpy())
    comp_s = per_rank(used["compute_s"].to_numpy())
    sync_s = per_rank(used["sync_wait_s"].to_numpy())
    fw_steps = per_rank((used["basis"] == "framework").to_numpy(dtype=float))
    steps = np.bincount(r_used, minlength=n)
    fw_wait_s = per_rank(att.sum("fw_wait", len(series))[counted] / 1e9)
    others_wait_s = per_rank(att.sum("others_wait", len(series))[counted] / 1e9)
    warmup_steps = per_rank(used["warmup"].to_numpy(dtype=float))
    steps_total = np.bincount(series["_r"].to_numpy(dtype=_I8), minlength=n)
    excluded_s = per_rank(series["excluded_s"].to_numpy(), series["_r"].to_numpy(dtype=_I8))
    # the framework is the basis where it looked inside most counted cycles (a profile of 4 of 96 steps is not)
    basis = _BASIS[((fw_steps > 0) & (2 * fw_steps > steps)).astype(np.int8)]
    # wait phases of the loop inside the counted cycles (hidden or not): input wait could have been seen
    seen = att.sum("loop_wait", len(series))[counted]
    # ... or the steps are compute events, not step phases: a step phase may hold the fetch of its batch (a Keras
    # batch, a step phase around fetch and step), a compute event does not (DLIO's compute, a hooked tf.function:
    # their fetches lie between them, in the cycle, where input wait can only show as wait or as unexplained time)
    visible = (basis == "framework") | (per_rank(seen.astype(np.float64)) > 0) | (att.mark_kind > 0)
    # ranks without steps: epoch windows, then the whole traced time (app evidence)
    for i, (label, ms, me, rr) in enumerate(att.fallback):
        step_s += per_rank((me - ms) / 1e9, rr)
        wait_s += per_rank(att.sum(f"fallback_wait_{i}", ms.size) / 1e9, rr)
        comp_s += per_rank(att.sum(f"fallback_compute_{i}", ms.size) / 1e9, rr)
        basis[np.unique(rr)] = label
        visible[np.unique(rr)] = True
    # the accelerator's own timeline (GPU kernels of a PyTorch profile) inside the counted cycles: where a rank has it,
    # its AU is kernel busy time, not the host's compute evidence (a host that only launches kernels looks idle)
    device_s = per_rank(att.sum("device_busy", len(series))[counted] / 1e9)
    kernels = device_s > 0
    au_basis = np.where(kernels, "kernels", "compute").astype(object)
    safe = np.where(step_s > 0, step_s, np.nan)
    input_pct = np.nan_to_num(100.0 * wait_s / safe)
    au_pct = np.nan_to_num(100.0 * np.where(kernels, device_s, comp_s) / safe)
    sync_pct = np.nan_to_num(100.0 * sync_s / safe)
    top_name, top_s = _largest_unexplained(att)
    return pd.DataFrame({
        "rank": att.ranks,
        "basis": basis,
        "steps": steps.astype(_I8),
        "steps_total": steps_total.astype(_I8),
        "step_s": step_s,
        "input_wait_s": wait_s,
        "framework_wait_s": fw_wait_s,
        "profiled_steps": fw_steps.astype(_I8),
        "warmup_steps": warmup_steps.astype(_I8),
        "input_pct": input_pct,
        "compute_s": comp_s,
        "au_pct": au_pct,
        "sync_wait_s": sync_s,
        "sync_wait_pct": sync_pct,
        "others_wait_s": others_wait_s,
        "other_s": step_s - wait_s - comp_s - sync_s,
        "excluded_s": excluded_s,
        "input_visible": visible,
        "verdict": [judge(p, a + w, b, v) for p, a, w, b, v in zip(input_pct, au_pct, sync_pct, basis, visible)],
        # where the step cycles' unexplained time is: the app phase holding most of it as self time, and the gap
        # outside every app phase
        "unexplained_phase": top_name,
        "unexplained_phase_s": top_s,
        "unexplained_gap_s": per_rank(att.sum("gap", len(series))[counted] / 1e9),
        "between_epochs_s": _between_epochs(series, n),
        # the input pipeline's work inside the counted cycles, and its parts during input wait and during compute
        **{f"{k}_s": per_rank(att.sum(k, len(series))[counted] / 1e9)
           for k in ("producer", "producer_in_wait", "producer_in_compute")},
        "device_busy_s": device_s,
        "au_basis": au_basis,
        # whose profile windows the rank's are: "PyTorch" (ProfilerStep markers), "TF", or "" (none)
        "profiler": _profilers(att),
    })


def _profilers(att: Attribution) -> np.ndarray:
    """Per rank code: whose profile windows cover some of its time: "PyTorch" (its framework rows have
    ``ProfilerStep#N`` markers), "TF" (other framework rows), "" (no framework layer)."""
    n = len(att.ranks)
    profiled = np.zeros(n, dtype=bool)
    if att.present_framework:
        profiled[np.unique(att.axis.group_of(att.covered[0]))] = True
    return np.where(profiled, np.where(att.torch_profile, "PyTorch", "TF"), "").astype(object)


def _between_epochs(series: pd.DataFrame, n: int) -> np.ndarray:
    """Per rank code: the time between one epoch's last cycle and the next epoch's first (outside every epoch's
    iteration: validation, checkpoints, callbacks, a profiler starting), s."""
    r = series["_r"].to_numpy(dtype=_I8)
    if r.size < 2:
        return np.zeros(n)
    ep = series["epoch"].to_numpy(dtype=_I8, na_value=NO_EPOCH)
    ws, we = series["_ws"].to_numpy(dtype=_I8), series["_we"].to_numpy(dtype=_I8)
    edge = (r[1:] == r[:-1]) & (ep[1:] != ep[:-1])
    gap = np.where(edge, np.maximum(ws[1:] - we[:-1], 0), 0)
    return np.bincount(r[1:], weights=gap / 1e9, minlength=n)


def _largest_unexplained(att: Attribution) -> tuple[np.ndarray, np.ndarray]:
    """Per rank code: the app phase whose self time holds most of the step cycles' unexplained time (None: none
    holds any), and those seconds (all epochs)."""
    n = len(att.ranks)
    names = np.full(n, None, dtype=object)
    secs = np.zeros(n, dtype=np.float64)
    groups = len(att.group_first)
    if not groups:
        return names, secs
    first = np.asarray(att.group_first, dtype=_I8).reshape(groups, 5)
    un = att.sum("phase_unexplained", groups)
    g_r, g_name = first[:, 1], first[:, 3]
    key = combined_codes(g_r, g_name)
    total = np.bincount(key, weights=un.astype(np.float64))  # per (rank code, phase name) over the epochs
    at = first_rows(key)
    k_r, k_name, k_s = g_r[at], g_name[at], total[key[at]]
    order = np.lexsort((-k_s, k_r))  # per rank, the largest first
    top = order[np.r_[True, k_r[order][1:] != k_r[order][:-1]]]
    top = top[k_s[top] > 0]
    names[k_r[top]] = np.asarray(att.names, dtype=object)[k_name[top]]
    secs[k_r[top]] = k_s[top] / 1e9
    return names, secs


def verdict(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None) -> Verdict:
    """Job-level input-bound verdict: Σ input wait ÷ Σ cycle time over the ranks' counted step cycles."""
    return verdict_of(input_bound_df(frame, layers))



def verdict_of(per: pd.DataFrame, framework: Optional[str] = None) -> Verdict:
    """The job's verdict (:func:`~trace_merge.verdict.verdict_numbers`) of the per-rank table ``per``
    (:func:`input_bound_df`, or the ranks' :func:`input_bound_of` joined), with its notes (in the words of the
    run's ``framework``, :func:`trace_merge.frameworks.framework_of`, where the caller knows it)."""
    v = verdict_numbers(per)
    return dataclasses.replace(v, notes=verdict_notes(per, v, framework))


def accelerator_utilisation(frame: pd.DataFrame, layers: "str | Sequence[str] | None" = None
                            ) -> Optional[float]:
    """DLIO's AU: union(compute) ÷ wall time of training steps, over all ranks, as a fraction (0..1).

    ``None`` when the frame has no steps to measure.
    """
    au = verdict(frame, layers).au_pct
    return None if au is None else au / 100.0

