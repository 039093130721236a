"""What the merged frame says, in one call: :func:`summarise` (and :func:`run_metrics`, :func:`compare_df`).

The kernels live beside this module, one room each: :mod:`trace_merge.intervals` (interval algebra),
:mod:`trace_merge.attribution` (breakdowns, layered attribution, exposed input, verdict, AU) and
:mod:`trace_merge.bandwidth` (bytes, bandwidth, access pattern). This module re-exports their public
functions, adds per-event statistics and comparisons, and assembles the summary the CLI, the HTML report
and notebooks show. Metric definitions for users: ``docs/metrics.md``.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge import kernels
from trace_merge.attribution import (COMPONENT_LABELS, COMPONENTS, LOWER_COMPONENTS, component_view_df,
                                     INPUT_BOUND_HIGH_PCT, INPUT_BOUND_MODERATE_PCT, PRIORITY, accelerator_utilisation,
                                     breakdown_df, exposed_io_df, input_bound_df, layered_breakdown_df,
                                     step_series_df, verdict, verdict_label, verdict_text)
from trace_merge.bandwidth import (READ_LAYER_ORDER, SIZE_BINS, access_pattern_df, bandwidth_df,
                                   bandwidth_totals, epoch_bandwidth_df, epoch_bandwidth_totals,
                                   job_wall_ns, read_rows)
from trace_merge.intervals import (covered_ns, grouped_union_ns, intersect_intervals, merge_intervals,
                                   subtract_intervals, union_ns)
from trace_merge.schema import as_text

logger = logging.getLogger(__name__)


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
    out["layer"] = as_text(out["layer"])
    out["busy_s"] = busy / 1e9
    out["busy_pct"] = 100.0 * busy / wall if wall else np.nan
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
    return kernels.event_stats_of([kernels.event_stat_parts(frame, by)], by)


def overall_breakdown(breakdown: pd.DataFrame) -> dict:
    """Whole-job exclusive shares from the per-rank total rows of :func:`breakdown_df`: Σ time ÷ Σ wall."""
    keys = [*(f"{c}_pct" for c in PRIORITY), "outside_epochs_pct"]
    tot = breakdown[breakdown["epoch"].isna()] if breakdown["epoch"].isna().any() else breakdown
    wall = float(tot["wall_s"].sum())
    if wall <= 0:
        return {k: None for k in keys}
    return {k: float((tot[k] * tot["wall_s"]).sum() / wall) for k in keys}


def run_metrics(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
                layers: "str | Sequence[str] | None" = None) -> dict:
    """The handful of scalars that characterise a run (used by :func:`compare_df` and summaries)."""
    return summarise(frame, counters, layers).metrics


#: The original study's table for its HEP-CNN phase taxonomy: components in order, each minus the ones before it
#: (Load = Load File − HDF5 File Read), as shares of ``Train Loop``.
STUDY_COMPONENTS = (("read", ("HDF5 File Read",)), ("load", ("Load File",)),
                    ("training", ("Train Step", "Compute Gradients", "Allreduce Gradients", "Apply Gradients")),
                    ("checkpoint", ("Checkpoint",)))
STUDY_TOTAL = "Train Loop"


def study_view_df(frame: pd.DataFrame, per_epoch: bool = False) -> pd.DataFrame:
    """The original study's view of a run with its phase taxonomy (:data:`STUDY_COMPONENTS` of
    :data:`STUDY_TOTAL`): per rank (and epoch) seconds and % of Read, Load − Read, Training, Checkpoint and other.
    Ranks without a ``Train Loop`` phase have no rows. See :func:`~trace_merge.attribution.component_view_df`."""
    app = frame[(frame["layer"] == "app").to_numpy()] if len(frame) else frame
    with_total = app["rank"][(app["name"] == STUDY_TOTAL).to_numpy()].unique() if len(app) else []
    return component_view_df(app[app["rank"].isin(with_total).to_numpy()] if len(app) else app, STUDY_COMPONENTS,
                             STUDY_TOTAL, per_epoch)


def _epoch_metrics(per_epoch: pd.DataFrame) -> dict:
    """Epoch 0 against the later epochs: aggregate read bandwidth and the slowest rank's read time per epoch."""
    out = {"epoch0_read_bw_MB_per_s": None, "later_read_bw_MB_per_s": None, "epoch0_read_time_s": None,
           "later_read_time_s_per_epoch": None}
    if not len(per_epoch):
        return out
    first, later = per_epoch[per_epoch["epoch"] == 0], per_epoch[per_epoch["epoch"] > 0]
    if len(first):
        out["epoch0_read_time_s"] = float(first["slowest_read_time_s"].iloc[0])
        out["epoch0_read_bw_MB_per_s"] = _none_if_nan(first["aggregate_bw_MB_per_s"].iloc[0])
    if len(later):
        t = float(later["slowest_read_time_s"].sum())
        out["later_read_time_s_per_epoch"] = t / len(later)
        out["later_read_bw_MB_per_s"] = float(later["read_bytes"].sum()) / 1e6 / t if t > 0 else None
    return out


def _none_if_nan(value: float) -> "float | None":
    return None if value is None or not np.isfinite(value) else float(value)


def _metrics(ranks: int, events: int, bd: pd.DataFrame, exp: pd.DataFrame, totals: dict, v: dict,
             per_epoch: pd.DataFrame, study: pd.DataFrame) -> dict:
    exp_tot = exp[exp["epoch"].isna()]
    wall = float(exp_tot["wall_s"].sum())
    out = {"ranks": int(ranks), "events": int(events),
           "job_wall_s": totals["job_wall_s"]}
    out.update(overall_breakdown(bd) if len(bd) else {**{f"{c}_pct": None for c in PRIORITY},
                                                     "outside_epochs_pct": None})
    out["exposed_io_pct"] = 100.0 * float(exp_tot["exposed_s"].sum()) / wall if wall > 0 else None
    out.update({k: totals[k] for k in ("read_bytes", "slowest_read_time_s", "aggregate_bw_MB_per_s",
                                       "bw_over_job_wall_MB_per_s")})
    out.update(_epoch_metrics(per_epoch))
    out["study_read_pct"] = float(study["read_pct"].mean()) if len(study) else None
    out.update({"input_pct": v["input_pct"], "au_pct": v["au_pct"], "verdict": v["verdict"],
                "verdict_basis": v["basis"]})
    return out


def compare_df(runs: Sequence[pd.DataFrame], labels: Sequence[str],
               counters: Optional[Sequence[Optional[pd.DataFrame]]] = None) -> pd.DataFrame:
    """Two or more runs side by side: one column per run, one row per metric of :func:`run_metrics`, then for
    every run after the first ``delta <label>`` (run − first) and ``ratio <label>`` (run ÷ first), in that order.

    Parameters
    ----------
    runs
        Merged frames.
    labels
        Column names, one per run (must be unique).
    counters
        Optional counters tables, one per run (``None`` entries allowed).

    Returns
    -------
    pandas.DataFrame
        Object columns: the runs' metrics, then the delta and ratio columns. Deltas and ratios are ``None`` for
        metrics that are not numbers (the verdict) or missing in either run; a ratio is ``None`` when the
        first run's value is 0.
    """
    if len(runs) != len(labels):
        raise ValueError("compare_df: one label per run")
    if len(set(labels)) != len(labels):
        raise ValueError("compare_df: labels must be unique")
    counters = list(counters) if counters is not None else [None] * len(runs)
    cols = {label: run_metrics(f, c) for f, c, label in zip(runs, counters, labels)}
    first = cols[labels[0]]
    for label in labels[1:]:
        cols[f"delta {label}"] = {k: _delta(cols[label].get(k), a) for k, a in first.items()}
        cols[f"ratio {label}"] = {k: _ratio(cols[label].get(k), a) for k, a in first.items()}
    return pd.DataFrame({c: pd.Series(v, dtype=object) for c, v in cols.items()})  # ints stay ints


def _number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_)) and x == x


def _delta(b, a):
    """``b - a`` of two numbers, else ``None``."""
    return b - a if _number(a) and _number(b) else None


def _ratio(b, a):
    """``b / a`` of two numbers when ``a`` is not 0, else ``None``."""
    return float(b) / float(a) if _number(a) and _number(b) and a != 0 else None


@dataclass
class Summary:
    """Everything a summary, report or benchmark shows about one run (see :func:`summarise`).

    Attributes
    ----------
    metrics
        Scalars of :func:`run_metrics` (shares in %, bytes, MB/s, seconds).
    verdict
        :func:`~trace_merge.attribution.verdict` (``input_pct``, ``verdict``, ``au_pct``, ``basis``, ``notes``).
    layered
        :func:`~trace_merge.attribution.layered_breakdown_df`: app phases split by what the lower layers did.
    breakdown
        :func:`~trace_merge.attribution.breakdown_df` of the chosen layers (app by default): drill-down.
    exposed_io, input_bound, steps
        :func:`exposed_io_df`, :func:`input_bound_df`, :func:`step_series_df`.
    bandwidth, bandwidth_totals
        :func:`bandwidth_df` and :func:`bandwidth_totals`.
    epoch_bandwidth, epoch_bandwidth_totals
        :func:`epoch_bandwidth_df` (per rank and epoch) and :func:`epoch_bandwidth_totals` (the job per epoch).
    study_view
        :func:`study_view_df` per rank (empty without the study's phase taxonomy).
    event_stats
        :func:`event_stats_df`.
    explanations
        One sentence for each place where the headline numbers seem to disagree, saying why.
    """

    metrics: dict
    verdict: dict
    layered: pd.DataFrame
    breakdown: pd.DataFrame
    exposed_io: pd.DataFrame
    input_bound: pd.DataFrame
    steps: pd.DataFrame
    bandwidth: pd.DataFrame
    bandwidth_totals: dict
    epoch_bandwidth: pd.DataFrame
    epoch_bandwidth_totals: pd.DataFrame
    study_view: pd.DataFrame
    event_stats: pd.DataFrame
    explanations: list[str] = field(default_factory=list)


def summarise(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
              layers: "str | Sequence[str] | None" = None) -> Summary:
    """Everything a summary or report shows: :func:`trace_merge.kernels.rank_parts` of each rank's rows, reduced
    by :func:`trace_merge.kernels.combine` (the same kernels a partitioned merge runs per partition)."""
    ranks = kernels.by_rank(frame) or [(0, frame)]  # no rows: the kernels' empty tables, with their columns
    job = kernels.JobFacts.of([kernels.rank_facts(rows, r) for r, rows in ranks])
    # ranks in parallel: pandas' group-by kernels, numpy's sorts and merges release the GIL
    with ThreadPoolExecutor(max_workers=max(1, min(len(ranks), os.cpu_count() or 1))) as pool:
        parts = list(pool.map(lambda item: kernels.rank_parts(item[1], job, layers), ranks))
    return kernels.combine(parts, job, counters)


def epochs_as_text(df: pd.DataFrame, missing: str) -> pd.DataFrame:
    """``df`` with ``epoch`` as text and ``missing`` for <NA>, its one meaning in that table: ``"all"`` in a
    breakdown (the whole-run row), ``"none"`` in the layered breakdown (outside any epoch)."""
    if not len(df):
        return df
    return df.assign(epoch=[missing if pd.isna(e) else str(int(e)) for e in df["epoch"]])


def coverage_notes(layered: pd.DataFrame) -> list[str]:
    """Where the framework layer sampled only part of a phase's calls: the sample behind its python/compute
    split, e.g. "framework profile: 8 of 192 calls of 'Train Step' (rank 0)" -- one sentence per phase."""
    if not len(layered) or not (layered["not_observed_s"] > 0).any():
        return []
    g = layered.groupby("phase", sort=False)[["calls", "observed_calls", "time_s", "not_observed_s"]].sum()
    # a sample: some calls inside a window, some not (a container such as Train Loop is no sample of anything)
    g = g[(g["not_observed_s"] > 0) & (g["observed_calls"] > 0) & (g["observed_calls"] < g["calls"])]
    g = g.sort_values("time_s", ascending=False)
    return [f"framework profile: {int(row['observed_calls'])} of {int(row['calls'])} calls of '{phase}' "
            f"(all ranks); its python/compute split is from those, {100 * row['not_observed_s'] / row['time_s']:.0f}"
            f" % of its time was not observed" for phase, row in g.head(2).iterrows()]


def explain(metrics: dict, verdict: dict, layered: pd.DataFrame) -> list[str]:
    """Sentences for where io %, exposed %, the layered split and the verdict seem to disagree."""
    out: list[str] = []
    io, exposed, wait = metrics.get("io_pct"), metrics.get("exposed_io_pct"), verdict.get("input_pct")
    if verdict.get("basis") == "framework" and wait is not None and exposed is not None \
            and verdict_label(wait) != verdict_label(exposed):
        out.append(f"the verdict uses the framework's input wait inside the profiled steps ({wait:.1f} % of step "
                   f"time), not the app layer's exposed I/O ({exposed:.1f} % of all wall time, start-up included), "
                   "which also cannot see a wait inside a step phase that contains it (a Keras batch)")
    if io is not None and exposed is not None and io >= 1.0 and io >= 2 * exposed:
        out.append(f"io phases take {io:.1f} % of wall time but only {exposed:.1f} % is exposed: the rest ran "
                   "while another thread computed (prefetching hid it)")
    if exposed is not None and wait is not None and verdict.get("basis") == "app" and abs(exposed - wait) >= 5:
        out.append(f"exposed I/O ({exposed:.1f} %) is a share of all wall time, start-up and epochs' edges "
                   f"included; the input wait of the verdict ({wait:.1f} %) is a share of step time only")
    if len(layered):
        io_phases = layered[layered["cat"] == "io"].groupby("phase")[["time_s", "fs_s", "python_s",
                                                                       "not_observed_s"]].sum()
        for phase, row in io_phases.iterrows():
            rest = row["python_s"] + row["not_observed_s"]
            if row["time_s"] > 0 and rest >= 0.5 * row["time_s"] and "posix" in ",".join(
                    layered.loc[layered["phase"] == phase, "layers"]):
                out.append(f"'{phase}' is an io phase, but only {100 * row['fs_s'] / row['time_s']:.0f} % of its "
                           f"{row['time_s']:.3g} s is file-system time; the rest is Python / decode / IPC "
                           f"({100 * row['python_s'] / row['time_s']:.0f} % seen inside a TF profile) or not "
                           f"observed ({100 * row['not_observed_s'] / row['time_s']:.0f} %)")
        out.extend(coverage_notes(layered))
    return out


__all__ = [
    "INPUT_BOUND_HIGH_PCT", "INPUT_BOUND_MODERATE_PCT", "layer_activity_df", "COMPONENTS", "LOWER_COMPONENTS",
    "COMPONENT_LABELS",
    "layered_breakdown_df", "step_series_df", "Summary", "explain", "coverage_notes", "epochs_as_text",
    "PRIORITY", "READ_LAYER_ORDER", "SIZE_BINS",
    "merge_intervals", "union_ns", "intersect_intervals", "subtract_intervals", "covered_ns",
    "grouped_union_ns", "read_rows", "breakdown_df", "exposed_io_df", "input_bound_df", "verdict",
    "verdict_label", "verdict_text", "accelerator_utilisation", "bandwidth_df", "bandwidth_totals", "job_wall_ns",
    "epoch_bandwidth_df", "epoch_bandwidth_totals", "component_view_df", "study_view_df",
    "access_pattern_df", "event_stats_df", "overall_breakdown", "run_metrics", "compare_df", "summarise",
]

