"""What the merged frame says, in one call: :func:`summarise` (and :func:`run_metrics`, :func:`compare_df`).

The kernels live beside this module, one room each: :mod:`trace_merge.intervals` (interval algebra),
:mod:`trace_merge.attribution` (breakdowns, layered attribution, exposed input, verdict, AU) and
:mod:`trace_merge.bandwidth` (bytes, bandwidth, access pattern). This module re-exports their public
functions and the :class:`~trace_merge.kernels.Summary` the CLI, the HTML report and notebooks show (built by
the per-rank kernels of :mod:`trace_merge.kernels`), and adds per-event statistics and comparisons. Metric
definitions for users: ``docs/metrics.md``.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge import kernels, partitioned
from trace_merge.attribution import (
    COMPONENTS,
    LOWER_COMPONENTS,
    PRIORITY,
    accelerator_utilisation,
    breakdown_df,
    exposed_io_df,
    input_bound_df,
    layered_breakdown_df,
    step_series_df,
    verdict,
)
from trace_merge.bandwidth import (
    READ_LAYER_ORDER,
    SIZE_BINS,
    access_pattern_df,
    bandwidth_df,
    bandwidth_totals,
    epoch_bandwidth_df,
    epoch_bandwidth_totals,
    job_wall_ns,
    read_rows,
)
from trace_merge.component_view import ComponentView, component_view_df
from trace_merge.engines import Engine
from trace_merge.explain import COMPONENT_LABELS, component_labels, coverage_notes, explain, verdict_text
from trace_merge.intervals import (
    covered_ns,
    grouped_union_ns,
    intersect_intervals,
    merge_intervals,
    subtract_intervals,
    union_ns,
)

# the summary lives beside the kernels that build it; re-exported here, where users look for it
from trace_merge.kernels import Metrics, Summary, overall_breakdown
from trace_merge.merged import Merge, Partition
from trace_merge.schema import RANK_GROUP_ROWS, Layers, as_text, empty_frame, layer_order, layers_key, rank_groups
from trace_merge.study import ORIGINAL_STUDY, study_view_df
from trace_merge.threads import thread_map
from trace_merge.verdict import INPUT_BOUND_HIGH_PCT, INPUT_BOUND_MODERATE_PCT, Verdict, verdict_label

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


def run_metrics(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
                layers: "str | Sequence[str] | None" = None) -> "kernels.Metrics":
    """The handful of scalars that characterise a run (used by :func:`compare_df` and summaries)."""
    return summarise(frame, counters, layers).metrics


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
    cols = {label: run_metrics(f, c).as_dict() for f, c, label in zip(runs, counters, labels)}
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


def summarise(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
              layers: "str | Sequence[str] | None" = None) -> Summary:
    """Everything a summary or report shows: :func:`trace_merge.kernels.rank_parts` of each rank's rows, reduced
    by :func:`trace_merge.kernels.combine` (the same kernels a partitioned merge runs per partition)."""
    # small ranks a group to a kernel call (the kernels take one rank's rows or several's: their fixed costs are paid
    # once per group); no rows: the kernels' empty tables, with their columns
    groups = rank_groups(frame, RANK_GROUP_ROWS) or [([0], frame)]
    job = kernels.JobFacts.of([f for _, rows in groups for f in kernels.ranks_facts(rows)])
    # groups in parallel: pandas' group-by kernels, numpy's sorts and merges release the GIL
    parts = thread_map(lambda item: kernels.rank_parts(item[1], job, layers), groups,
                       rows=max(len(rows) for _, rows in groups))
    return kernels.combine(parts, job, counters)


# -- a merge whose rows are apart, partition by partition (:mod:`trace_merge.merged`) ----------------------------


def _partition_facts(item: "tuple[Partition]") -> kernels.RankFacts:
    """:class:`~trace_merge.kernels.RankFacts` of a stored partition ``(where,)`` (the first pass of a re-summary)."""
    frame = item[0].load(("layer", "cat", "name", "rank", "start_ns", "end_ns", "file", "bytes"))
    return kernels.rank_facts(frame, int(frame["rank"].iloc[0]) if len(frame) else 0)


def _summarise_partition(item: "tuple[Partition, kernels.JobFacts, Layers]") -> kernels.RankParts:
    """The summary kernels on one rank partition ``(where, job, layers)``, reading only the columns they need."""
    where, job, layers = item
    return kernels.rank_parts(where.load(kernels.KERNEL_COLUMNS), job, layers)


def _access_pattern_of(item: "tuple[Partition, frozenset[str]]") -> pd.DataFrame:
    where, names = item
    return access_pattern_df(where.load(("layer", "name", "cat", "rank", "start_ns", "bytes", "offset", "file",
                                         "epoch")), names)


def summarise_stored(pm: Merge, engine: "Optional[Engine]" = None,
                     stored: "Optional[tuple[kernels.JobFacts, list[kernels.RankParts]]]" = None
                     ) -> "tuple[kernels.JobFacts, Summary]":
    """A stored merge's job facts and summary (:func:`trace_merge.store.stored_partitions`): from the parts the
    merge kept (``stored``, :func:`trace_merge.stored_summary.read`) when it did, else a pass over a few columns for
    the job's facts, then the summary kernels partition by partition."""
    if stored is not None:
        job, parts = stored
    else:
        with partitioned.engine_for_rows(engine, pm.rank_rows) as eng:
            job = kernels.JobFacts.of(partitioned.over_ranks(eng, _partition_facts, pm.partitions, pm.rank_rows))
            parts = partitioned.over_ranks(eng, _summarise_partition, pm.partitions, pm.rank_rows, job, None)
    return job, kernels.SummaryHook().combine(parts, job, pm.counters)


def summarise_merge(pm: Merge, layers: Layers = None, engine: "Optional[Engine]" = None) -> Summary:
    """:func:`summarise` of a merge: of its frame when the merge ran no summary (a run merged in memory), else its
    summary of ``layers``, computed partition by partition for other ``layers`` than the merge's and kept."""
    if pm.job is None:
        return summarise(pm.frame, pm.counters, layers)
    key = layers_key(layers)
    if key not in pm.summaries:
        with partitioned.engine_for_rows(engine, pm.rank_rows) as eng:
            parts = partitioned.over_ranks(eng, _summarise_partition, pm.partitions, pm.rank_rows, pm.job, layers)
        pm.summaries[key] = kernels.SummaryHook(layers).combine(parts, pm.job, pm.counters)
    return pm.summaries[key]


def access_pattern(pm: Merge, engine: "Optional[Engine]" = None) -> pd.DataFrame:
    """:func:`access_pattern_df` of a merge, partition by partition while its rows are apart (rows are per rank and
    epoch)."""
    if not pm.rows_apart or pm.job is None:
        return access_pattern_df(pm.frame)
    with partitioned.engine_for_rows(engine, pm.rank_rows) as eng:
        parts = partitioned.over_ranks(eng, _access_pattern_of, pm.partitions, pm.rank_rows, pm.job.app_files)
    return kernels.concat_tables(parts) if parts else access_pattern_df(empty_frame())


def merge_breakdown(pm: Merge, layers: Layers = None, per_layer: bool = False) -> pd.DataFrame:
    """:func:`breakdown_df` of a merge (rank by rank while its rows are apart: the same rows)."""
    if not pm.rows_apart or pm.job is None:
        return breakdown_df(pm.frame, layers, per_layer=per_layer)
    use = pm.job.use(layers)  # the job's layers, as the whole frame would choose them
    parts = [breakdown_df(f, use, per_layer=per_layer) for f in pm.rank_frames(kernels.KERNEL_COLUMNS)]
    out = kernels.concat_tables(parts, sort=())
    if not len(out):
        return breakdown_df(empty_frame(), use, per_layer=per_layer)
    if not per_layer:
        return out
    # the whole frame's order: per layer (the schema's order), its rows rank by rank
    key = pd.Series([layer_order(x) for x in out["layer"]])
    return out.loc[key.sort_values(kind="stable").index].reset_index(drop=True)


def events_and_ranks(pm: Merge) -> "tuple[int, list[int]]":
    """The merge's events and ranks: from its job facts when it has them, else from its frame."""
    if pm.job is not None:
        return int(pm.job.events), list(pm.job.ranks)
    frame = pm.frame
    return len(frame), sorted(int(r) for r in frame["rank"].unique()) if len(frame) else []


#: the PyTorch DataLoader's wait in the PyTorch profiler's trace (:mod:`trace_merge.readers.torch_trace`)
DATALOADER_WAIT = "enumerate(DataLoader)#"


def _framework_waits(event_stats: pd.DataFrame, dataloader: bool) -> bool:
    if not len(event_stats):
        return False
    # the framework layer's wait rows first: the names of every row (one per distinct name) are not needed
    fw = event_stats[((event_stats["layer"].astype(object) == "framework")
                      & (event_stats["cat"].astype(object) == "wait")).to_numpy(dtype=bool)]
    torch = as_text(fw["name"]).str.startswith(DATALOADER_WAIT, na=False).to_numpy(dtype=bool)
    return bool(fw.loc[torch if dataloader else ~torch, "count"].sum() > 0)


def has_tfdata(event_stats: pd.DataFrame) -> bool:
    """Whether the run has tf.data events: framework ``wait`` rows (the consumer side of tf.data,
    ``IteratorGetNext`` and ``Iterator::*``; :mod:`trace_merge.readers.xplane`) other than a PyTorch DataLoader's.
    ``event_stats``: :func:`event_stats_df` (``Summary.event_stats``)."""
    return _framework_waits(event_stats, dataloader=False)


def has_dataloader(event_stats: pd.DataFrame) -> bool:
    """Whether the run's PyTorch profile saw its DataLoader wait (framework ``wait`` rows named
    ``enumerate(DataLoader)#...``; :mod:`trace_merge.readers.torch_trace`)."""
    return _framework_waits(event_stats, dataloader=True)


#: the bar that holds the phases beyond ``top`` in :func:`where_time_goes_df` and the layered figure
OTHER_PHASES = "other phases"
#: the first screen's segments, in drawing order: the layers that watch the whole run, the framework split (only
#: where a TF profile looked), then ``cat`` -- the rest, known only as the app phase's own category
WHERE_SEGMENTS: tuple[str, ...] = ("fs", "comm", "input_wait", "compute", "python", "cat")


def where_time_goes_df(layered: pd.DataFrame, event_stats: pd.DataFrame, top: int = 6) -> pd.DataFrame:
    """The first screen's "where the time goes": one row per app phase, summed over ranks and epochs.

    A phase's bar is its **self time** (its nested phases' time is theirs), split into what is known about it
    everywhere it ran: the file-system and communication layers' time (traced over the whole run), the framework
    split (input wait, compute, Python) where a TF profile covered it, and the rest as ``cat_s``: time only the app
    layer saw, known by the phase's own category (the layered breakdown's "not observed" with what *is* known
    about it). ``inclusive_s`` is the phase's Σ duration with its nested phases (from ``event_stats``): an input
    wait whose reads are phases of their own has little self time but all of the wait inclusive.

    The ``top`` phases by self time get a row each, and so does every ``wait`` (input wait) phase however short its
    self time; the rest are one :data:`OTHER_PHASES` row (category ``""``), last.

    Returns
    -------
    pandas.DataFrame
        ``phase``, ``cat``, ``self_s``, ``inclusive_s`` (NaN for :data:`OTHER_PHASES`), ``<segment>_s`` for each of
        :data:`WHERE_SEGMENTS` (summing to ``self_s``).
    """
    cols = ["phase", "cat", "self_s", "inclusive_s", *(f"{c}_s" for c in WHERE_SEGMENTS)]
    if not len(layered):
        return pd.DataFrame(columns=cols)
    df = layered.assign(phase=as_text(layered["phase"]), cat=as_text(layered["cat"]).fillna(""),
                        cat_s=layered["not_observed_s"], self_s=layered["time_s"])
    per = df.groupby("phase", sort=False).agg(cat=("cat", "first"), **{c: (c, "sum") for c in cols[2:] if c !=
                                                                       "inclusive_s"})
    per = per.sort_values("self_s", ascending=False, kind="stable")
    keep = per.index[:top].union(per.index[per["cat"] == "wait"], sort=False)
    shown = per.loc[[p for p in per.index if p in keep]]
    rest = per.drop(index=shown.index)
    if len(rest):
        other = rest.drop(columns="cat").sum().to_frame(OTHER_PHASES).T.assign(cat="")
        shown = pd.concat([shown, other[shown.columns]])
    app = event_stats[(as_text(event_stats["layer"]) == "app").to_numpy()] if len(event_stats) else event_stats
    inclusive = (app.assign(name=as_text(app["name"])).groupby("name")["sum_us"].sum() / 1e6 if len(app)
                 else pd.Series(dtype=float))
    out = shown.rename_axis("phase").reset_index()
    out["inclusive_s"] = out["phase"].map(inclusive).astype(float)
    out.loc[out["phase"] == OTHER_PHASES, "inclusive_s"] = np.nan
    return out[cols].astype({c: float for c in cols[2:]})


def epochs_as_text(df: pd.DataFrame, missing: str) -> pd.DataFrame:
    """``df`` with ``epoch`` as text and ``missing`` for <NA>, its one meaning in that table: ``"all"`` in a
    breakdown (the whole-run row), ``"none"`` in the layered breakdown (outside any epoch)."""
    if not len(df):
        return df
    codes, epochs = pd.factorize(df["epoch"])  # a few epochs for many rows: each written once; missing: -1
    return df.assign(epoch=np.array([str(int(e)) for e in epochs] + [missing], dtype=object)[codes])


__all__ = [
    "INPUT_BOUND_HIGH_PCT", "INPUT_BOUND_MODERATE_PCT", "layer_activity_df", "COMPONENTS", "LOWER_COMPONENTS",
    "COMPONENT_LABELS", "has_tfdata", "has_dataloader", "component_labels", "where_time_goes_df", "OTHER_PHASES",
    "WHERE_SEGMENTS",
    "layered_breakdown_df", "step_series_df", "Summary", "explain", "coverage_notes", "epochs_as_text",
    "PRIORITY", "READ_LAYER_ORDER", "SIZE_BINS",
    "merge_intervals", "union_ns", "intersect_intervals", "subtract_intervals", "covered_ns",
    "grouped_union_ns", "read_rows", "breakdown_df", "exposed_io_df", "input_bound_df", "Verdict", "verdict",
    "verdict_label", "verdict_text", "accelerator_utilisation", "bandwidth_df", "bandwidth_totals", "job_wall_ns",
    "epoch_bandwidth_df", "epoch_bandwidth_totals", "component_view_df", "study_view_df",
    "access_pattern_df", "event_stats_df", "overall_breakdown", "Metrics", "run_metrics", "compare_df", "summarise",
    "summarise_stored", "summarise_merge", "access_pattern", "merge_breakdown", "events_and_ranks",
    "ORIGINAL_STUDY", "ComponentView",
]

