"""A summary as per-rank kernels and their exact reductions: the one way :func:`trace_merge.analysis.summarise`
computes, whether the frame is in memory or partitioned by rank on disk (:mod:`trace_merge.partitioned`).

Every quantity of a summary is either a property of one rank's rows (attribution is per rank: unions and
priorities never cross ranks) or an exact reduction of such properties (sums, maxima, set unions). What a rank's
kernel needs from the rest of the job is small and computed first, from every rank's :class:`RankFacts`:

- which layers the job has (a breakdown uses ``app`` when *any* rank has it, see
  :func:`~trace_merge.attribution.layers_to_use`);
- the files the app layer names (:func:`~trace_merge.bandwidth.app_file_names`: which reads are of data files);
- Horovod's executing collectives, which its rank-0 timeline times for every rank
  (:class:`~trace_merge.attribution.SharedCollectives`);
- the job's first start and last end (its wall time).

A summary also holds a component view (:class:`~trace_merge.component_view.ComponentView`: a study's own phase
taxonomy as a table), the view given to the kernel; by default the original study's
(:data:`~trace_merge.study.ORIGINAL_STUDY`).

:func:`rank_parts` is the kernel (one rank's rows in, a :class:`RankParts` of small tables out) and
:func:`combine` the reduction. Both are plain functions of picklable values, so an engine can run the kernels
wherever the partitions are (a process pool, Dask workers).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge import attribution as att_
from trace_merge import bandwidth as bw_
from trace_merge.attribution import PRIORITY
from trace_merge.attribution_engine import collective_mask
from trace_merge.component_view import ComponentView, view_df
from trace_merge.explain import explain
from trace_merge.frameworks import framework_of, words_for
from trace_merge.schema import (
    LAYERS,
    SIDE_LAYERS,
    as_text,
    category_mask,
    concat_frames,
    empty_frame,
    only_columns,
)
from trace_merge.study import ORIGINAL_STUDY
from trace_merge.verdict import Verdict

_I8 = np.int64
#: the columns :func:`rank_parts` reads (a re-summary loads only these)
KERNEL_COLUMNS = ("layer", "cat", "name", "rank", "pid", "tid", "start_ns", "end_ns", "dur_ns", "bytes", "file",
                  "epoch", "step")


@dataclass
class RankFacts:
    """What the rest of the job needs to know about one rank's rows before any rank is analysed."""

    rank: int
    rows_per_layer: dict  # layer -> rows
    timed_layers: tuple  # layers with a row of positive duration (those an attribution sees)
    app_files: frozenset
    collective_starts: np.ndarray
    collective_ends: np.ndarray

    @property
    def rows(self) -> int:
        return int(sum(self.rows_per_layer.values()))


def rank_facts(frame: pd.DataFrame, rank: int) -> RankFacts:
    """:class:`RankFacts` of ``frame``, the rows of ``rank``."""
    return _facts(frame, np.zeros(len(frame), dtype=_I8), [rank])[0]


def ranks_facts(frame: pd.DataFrame) -> "list[RankFacts]":
    """:func:`rank_facts` of each rank of ``frame`` (ascending), every rank in one pass over the rows: a group of
    many small ranks (:func:`~trace_merge.schema.rank_groups`) pays the passes' fixed costs once."""
    if not len(frame):
        return []
    code, ranks = pd.factorize(frame["rank"].to_numpy(), sort=True)
    return _facts(frame, code.astype(_I8), [int(r) for r in ranks])


def _facts(frame: pd.DataFrame, code: np.ndarray, ranks: "list[int]") -> "list[RankFacts]":
    """:class:`RankFacts` of ``ranks``, each row's rank given by ``code`` (its index in ``ranks``)."""
    n = len(ranks)
    if not len(frame):
        return [RankFacts(int(r), {}, (), frozenset(), np.zeros(0, _I8), np.zeros(0, _I8)) for r in ranks]
    layer = frame["layer"].astype("category").array
    width = len(layer.categories) + 1  # missing (-1) as 0, left out below
    key = code * width + layer.codes + 1
    counts = np.bincount(key, minlength=n * width).reshape(n, width)[:, 1:]
    timed = frame["end_ns"].to_numpy() > frame["start_ns"].to_numpy()
    timed_counts = np.bincount(key[timed], minlength=n * width).reshape(n, width)[:, 1:]
    app_files = bw_.app_file_names_by(frame, code, n)
    collective = collective_mask(frame)
    # each rank's collectives in the frame's order: a stable sort by rank, cut where the rank changes
    order = np.argsort(code[collective], kind="stable")
    cuts = np.cumsum(np.bincount(code[collective], minlength=n))[:-1]
    starts = np.split(frame["start_ns"].to_numpy(dtype=_I8)[collective][order], cuts)
    ends = np.split(frame["end_ns"].to_numpy(dtype=_I8)[collective][order], cuts)
    names = [str(c) for c in layer.categories]
    return [RankFacts(
        rank=int(r),
        rows_per_layer={names[c]: int(v) for c, v in enumerate(counts[i].tolist()) if v},
        timed_layers=tuple(names[c] for c in np.flatnonzero(timed_counts[i])),
        app_files=app_files[i],
        collective_starts=starts[i], collective_ends=ends[i],
    ) for i, r in enumerate(ranks)]


@dataclass
class JobFacts:
    """The reduction of every rank's :class:`RankFacts`: what a rank's kernel needs from the others."""

    ranks: list
    present: list  # layers with rows, job order (LAYERS first)
    timed: dict  # rank -> layers with timed rows
    app_files: frozenset
    collectives: dict  # rank -> (starts, ends) of its executing collectives
    rows_per_layer: dict
    events: int

    @classmethod
    def of(cls, facts: Sequence[RankFacts]) -> "JobFacts":
        """The job's facts from its ranks' (a rank may come in several parts: one per source it has rows in)."""
        facts = [f for f in facts if f.rows]
        present: dict = {}
        per_layer: dict = {}
        timed: dict = {}
        collectives: dict = {}
        for f in facts:
            for layer, n in f.rows_per_layer.items():
                present.setdefault(layer, None)
                per_layer[layer] = per_layer.get(layer, 0) + n
            timed.setdefault(f.rank, set()).update(f.timed_layers)
            if f.collective_starts.size:
                collectives.setdefault(f.rank, []).append((f.collective_starts, f.collective_ends))
        ordered = [x for x in LAYERS if x in present] + [x for x in present if x not in LAYERS]
        return cls(
            ranks=sorted(timed),
            present=ordered,
            timed=timed,
            app_files=frozenset().union(*(f.app_files for f in facts)),
            collectives={r: (np.concatenate([s for s, _ in v]), np.concatenate([e for _, e in v]))
                         for r, v in collectives.items()},
            rows_per_layer=per_layer,
            events=sum(f.rows for f in facts),
        )

    @property
    def has_app(self) -> bool:
        return "app" in self.present

    def use(self, layers: "str | Sequence[str] | None") -> list:
        """The layers a breakdown attributes (:func:`~trace_merge.attribution.layers_to_use`)."""
        return att_.layers_to_use(self.present, layers)

    def base(self, layers: "str | Sequence[str] | None") -> list:
        """The layers steps and the layered breakdown are read from: the app layer when the job has one."""
        use = self.use(layers)
        return ["app"] if self.has_app and use != ["app"] else use

    def shared(self, layers: "str | Sequence[str] | None") -> att_.SharedCollectives:
        """The collectives of the ranks the base attribution sees, and how many ranks it sees."""
        base = set(self.base(layers))
        seen = [r for r in self.ranks if self.timed.get(r, set()) & base]
        parts = [self.collectives[r] for r in seen if r in self.collectives]
        starts = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, _I8)
        ends = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, _I8)
        return att_.SharedCollectives(starts, ends, len(seen))


#: by default, a step series of this many rows or more is packed when its :class:`RankParts` is pickled: several
#: times smaller, for some of the worker's and the driver's time; below it the driver's memory is not at stake
#: (measurements: docs/partitioned.md, "A rank's step series crosses to the driver packed")
PACK_STEPS_FROM = 1 << 16


@dataclass
class RankParts:
    """One rank's small tables (:func:`rank_parts`)."""

    breakdown: pd.DataFrame
    exposed_io: pd.DataFrame
    steps: pd.DataFrame  # step series (:func:`~trace_merge.attribution.step_series_df` columns)
    input_bound: pd.DataFrame
    layered: pd.DataFrame
    bandwidth: pd.DataFrame  # interval part (:func:`~trace_merge.bandwidth.interval_bandwidth`)
    epoch_bandwidth: pd.DataFrame
    study_view: pd.DataFrame
    event_stats: pd.DataFrame  # exact partial sums (:func:`event_stat_parts`)
    data_files: frozenset = field(default_factory=frozenset)
    span: Optional[tuple] = None  # (first start, last end) of the rank's rows, None when it has none
    pack_steps_from: int = PACK_STEPS_FROM  # pickled with a step series this long or longer: packed

    # Crossing processes, a long step series (a row per step: most of a big rank's parts, pickled) travels as zstd
    # Arrow IPC, several times smaller, and stays so in the driver until it is read: the ranks' series otherwise
    # held much of the driver's memory while the rank wave ran

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        steps = state.get("steps")
        if isinstance(steps, pd.DataFrame) and len(steps) >= self.pack_steps_from:
            state["_packed_steps"] = ipc_bytes(state.pop("steps"))
        return state

    def __getattr__(self, name: str) -> Any:  # only for attributes not set: ``steps`` while packed
        packed = self.__dict__.get("_packed_steps") if name == "steps" else None
        if packed is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        steps = self.__dict__["steps"] = ipc_frame(packed)  # set before the packed form goes: a second reader
        self.__dict__.pop("_packed_steps", None)  # finds one of the two
        return steps


def ipc_bytes(frame: "pd.DataFrame | Any") -> bytes:
    """``frame`` (a DataFrame or an Arrow table) as an Arrow IPC file compressed with zstd (:func:`ipc_frame`
    reads it back, dtypes and all)."""
    import io

    import pyarrow as pa

    table = pa.Table.from_pandas(frame) if isinstance(frame, pd.DataFrame) else frame
    sink = io.BytesIO()
    # level 3, not Arrow's default 1: a step series a third smaller, for a little more time
    options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=3))
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def ipc_frame(data: bytes) -> pd.DataFrame:
    """The DataFrame :func:`ipc_bytes` wrote."""
    import pyarrow as pa

    return pa.ipc.open_file(pa.BufferReader(data)).read_all().to_pandas()


# -- the summary: what it holds and its scalars ----------------------------------------------------------------------


def overall_breakdown(breakdown: pd.DataFrame) -> dict:
    """Whole-job exclusive shares from the per-rank total rows of :func:`breakdown_df`: Σ time ÷ Σ wall."""
    keys = [*(f"{c}_pct" for c in PRIORITY), "outside_epochs_pct"]
    tot = breakdown[breakdown["epoch"].isna()] if breakdown["epoch"].isna().any() else breakdown
    wall = float(tot["wall_s"].sum())
    if wall <= 0:
        return {k: None for k in keys}
    return {k: float((tot[k] * tot["wall_s"]).sum() / wall) for k in keys}


def _epoch_metrics(per_epoch: pd.DataFrame) -> dict:
    """Epoch 0 against the later epochs: aggregate read bandwidth and the slowest rank's read time per epoch."""
    out: dict[str, Optional[float]] = {"epoch0_read_bw_MB_per_s": None, "later_read_bw_MB_per_s": None,
                                       "epoch0_read_time_s": None, "later_read_time_s_per_epoch": None}
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


@dataclass
class Metrics:
    """The scalars that characterise a run (:func:`trace_merge.analysis.run_metrics`): shares in %, bytes, MB/s,
    seconds; None where the run has no such number. ``as_dict`` is the flat form ``summary --json`` and
    :func:`~trace_merge.analysis.compare_df` show (``component_pct`` as ``<component>_pct``). docs/metrics.md
    defines each."""

    ranks: int
    events: int
    job_wall_s: Optional[float]
    component_pct: dict  # exclusive share of the ranks' wall time per component of PRIORITY (io, comm, ...)
    outside_epochs_pct: Optional[float]
    exposed_io_pct: Optional[float]
    read_bytes: Optional[int]
    slowest_read_time_s: Optional[float]
    aggregate_bw_MB_per_s: Optional[float]
    bw_over_job_wall_MB_per_s: Optional[float]
    epoch0_read_bw_MB_per_s: Optional[float]
    later_read_bw_MB_per_s: Optional[float]
    epoch0_read_time_s: Optional[float]
    later_read_time_s_per_epoch: Optional[float]
    study_read_pct: Optional[float]
    input_pct: Optional[float]  # the verdict's numbers, repeated for tables of runs
    au_pct: Optional[float]
    verdict: str
    verdict_basis: Optional[str]

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        shares = {f"{c}_pct": v for c, v in out.pop("component_pct").items()}
        head = {k: out.pop(k) for k in ("ranks", "events", "job_wall_s")}
        return {**head, **shares, **out}


def _metrics(ranks: int, events: int, bd: pd.DataFrame, exp: pd.DataFrame, totals: dict, v: Verdict,
             per_epoch: pd.DataFrame, study: pd.DataFrame, view: Optional[ComponentView]) -> Metrics:
    exp_tot = exp[exp["epoch"].isna()]
    wall = float(exp_tot["wall_s"].sum())
    shares = overall_breakdown(bd) if len(bd) else {**{f"{c}_pct": None for c in PRIORITY},
                                                   "outside_epochs_pct": None}
    return Metrics(
        ranks=int(ranks), events=int(events), job_wall_s=totals["job_wall_s"],
        component_pct={c: shares[f"{c}_pct"] for c in PRIORITY}, outside_epochs_pct=shares["outside_epochs_pct"],
        exposed_io_pct=100.0 * float(exp_tot["exposed_s"].sum()) / wall if wall > 0 else None,
        **{k: totals[k] for k in ("read_bytes", "slowest_read_time_s", "aggregate_bw_MB_per_s",
                                  "bw_over_job_wall_MB_per_s")},
        **_epoch_metrics(per_epoch),
        study_read_pct=float(study[f"{view.headline}_pct"].mean()) if len(study) and view else None,
        input_pct=v.input_pct, au_pct=v.au_pct, verdict=v.label, verdict_basis=v.basis)


@dataclass
class Summary:
    """Everything a summary, report or benchmark shows about one run (see :func:`summarise`).

    Attributes
    ----------
    metrics
        :class:`Metrics`.
    verdict
        :class:`~trace_merge.verdict.Verdict`.
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
        :func:`~trace_merge.component_view.view_df` of ``view`` per rank (empty without its total phase).
    event_stats
        :func:`event_stats_df`.
    explanations
        One sentence for each place where the headline numbers seem to disagree, saying why.
    view
        The component view of ``study_view`` (:data:`~trace_merge.study.ORIGINAL_STUDY` by default).
    framework
        :func:`~trace_merge.frameworks.framework_of` the run (its event names and profilers), found once: every
        finding's advice takes its words.
    """

    metrics: Metrics
    verdict: Verdict
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
    view: Optional[ComponentView] = None
    framework: Optional[str] = None
    #: the cpu layer's tables (:func:`trace_merge.cpu_use.cpu_view`), set by :meth:`trace_merge.run.Run.analyse`
    cpu: Optional[Any] = None


def job_span(frame: pd.DataFrame) -> Optional[tuple]:
    """(first start, last end) of the job's own rows in ``frame``: the sidecars' layers (the noise generators, the
    CPU sampler, which starts before the program does) are measurements beside the job, not its time."""
    if not len(frame):
        return None
    own = ~category_mask(frame["layer"], lambda x: x in SIDE_LAYERS)
    if own.all():  # no copy of a big rank's columns for a mask that keeps them all
        return int(frame["start_ns"].min()), int(frame["end_ns"].max())
    if not own.any():
        return None
    return int(frame["start_ns"].to_numpy()[own].min()), int(frame["end_ns"].to_numpy()[own].max())


def rank_parts(frame: pd.DataFrame, job: JobFacts, layers: "str | Sequence[str] | None" = None,
               view: Optional[ComponentView] = ORIGINAL_STUDY) -> RankParts:
    """The kernel: one rank's rows (``frame``) in, its share of every summary table out (``view``: the component
    view of its ``study_view``). The tables of rows come first, then the attribution's; the rows are let go in
    between (freed when the caller kept no reference)."""
    use, base_layers = job.use(layers), job.base(layers)
    # the tables of the frame's own rows before the read rows are copied out, so their peaks do not add up
    of_rows = dict(study_view=view_df(frame, view), event_stats=event_stat_parts(frame),
                   span=job_span(frame))
    reads = bw_.classified_reads(frame, job.app_files)
    # the columns only the tables of rows read (durations, bytes, offsets, files) are let go once the reads have
    # their copies, before the bandwidths' and the attribution's peaks, when the caller holds no other reference to
    # the frame
    frame = only_columns(frame, att_.ATTRIBUTION_COLUMNS)
    of_rows.update(bandwidth=bw_.interval_bandwidth(reads), epoch_bandwidth=bw_.epoch_bandwidth_df(frame, reads),
                   data_files=bw_.data_file_names(reads))
    del reads
    base = att_.attribution_of(frame, base_layers, lower=True, shared=job.shared(layers))
    att = base if base_layers == use else att_.attribution_of(frame, use)
    del frame
    return _parts_of(base, att, job, of_rows)


def _parts_of(base: Optional[att_.Attribution], att: Optional[att_.Attribution], job: JobFacts,
              of_rows: dict) -> RankParts:
    """A rank's :class:`RankParts` from its attributions (``base``: of the base layers; ``att``: of the layers
    asked for) and its tables of rows."""
    return RankParts(**_attribution_tables(base, att, job), **of_rows)


def _attribution_tables(base: Optional[att_.Attribution], att: Optional[att_.Attribution], job: JobFacts) -> dict:
    """The fields of :class:`RankParts` made from a rank's attributions."""
    series = att_.step_series_of(base)
    return dict(
        breakdown=att_.breakdown_of(att),
        exposed_io=att_.exposed_of(att),
        # dropped here, not in the reduction: a fifth less to send and for the driver to hold
        steps=series.drop(columns=att_.STEP_AXIS_COLUMNS),
        input_bound=att_.input_bound_of(base, series),
        layered=att_.layered_of(base if job.has_app else None),
    )


def rank_parts_of_windows(windows: "Callable[[Sequence[str]], Iterable[pd.DataFrame]]", job: JobFacts,
                          layers: "str | Sequence[str] | None" = None,
                          view: Optional[ComponentView] = ORIGINAL_STUDY) -> RankParts:
    """:func:`rank_parts` of a rank given window by window: ``windows(columns)`` gives the rank's rows (only
    ``columns``) as consecutive frames in time order, cut where the start changes, with the same categories in each,
    every time it is called. A window is held at a time. Its two halves, each its own passes over the windows
    (:func:`rows_tables_of_windows`, :func:`attribution_tables_of_windows`), run as tasks of their own in a merge
    (:meth:`SummaryHook.rank_halves`)."""
    return RankParts(**rows_tables_of_windows(windows, job, view),
                     **attribution_tables_of_windows(windows, job, layers))


def rows_tables_of_windows(windows: "Callable[[Sequence[str]], Iterable[pd.DataFrame]]", job: JobFacts,
                           view: Optional[ComponentView] = ORIGINAL_STUDY) -> dict:
    """The tables of rows of :func:`rank_parts_of_windows`, in one pass: sums carried from window to window
    (:class:`~trace_merge.bandwidth.ReadSums`)."""
    events, study, lo, hi = [], [], None, None
    reads = bw_.ReadSums(job.app_files)
    view_phases = view.phases() if view is not None else []
    for frame in windows(KERNEL_COLUMNS):
        if not len(frame):
            continue
        events.append(event_stat_parts(frame))
        span = job_span(frame)
        if span is not None:
            lo, hi = (span if lo is None else (min(lo, span[0]), max(hi, span[1])))
        study.append(frame[((frame["layer"] == "app") & frame["name"].isin(view_phases)).to_numpy()])
        reads.add(frame)
    bandwidth, epoch_bandwidth, data_files = reads.tables()
    return dict(study_view=view_df(concat_frames(study) if study else empty_frame(), view),
                event_stats=_event_parts_reduced(events), span=(lo, hi) if lo is not None else None,
                bandwidth=bandwidth, epoch_bandwidth=epoch_bandwidth, data_files=data_files)


def attribution_tables_of_windows(windows: "Callable[[Sequence[str]], Iterable[pd.DataFrame]]", job: JobFacts,
                                  layers: "str | Sequence[str] | None" = None) -> dict:
    """The attribution's tables of :func:`rank_parts_of_windows`: its sweeps of the windows
    (:func:`~trace_merge.attribution.attribution_of_windows`)."""
    use, base_layers = job.use(layers), job.base(layers)

    def source() -> Iterable[pd.DataFrame]:
        return windows(att_.ATTRIBUTION_COLUMNS)

    base = att_.attribution_of_windows(source, base_layers, lower=True, shared=job.shared(layers))
    att = base if base_layers == use else att_.attribution_of_windows(source, use)
    return _attribution_tables(base, att, job)


def _event_parts_reduced(parts: Sequence[pd.DataFrame], by: Sequence[str] = ("layer", "cat", "name"),
                         sort: bool = False) -> pd.DataFrame:
    """:func:`event_stat_parts` of several frames (windows of a rank, or ranks) as one part (exact: counts, sums,
    least, greatest); groups in order of first appearance, or sorted."""
    parts = [p for p in parts if len(p)]
    if not parts or (len(parts) == 1 and not sort):
        return parts[0] if parts else event_stat_parts(empty_frame(), by)
    g = pd.concat(parts, ignore_index=True).groupby(list(by), sort=sort)
    out = pd.DataFrame({"count": g["count"].sum(), "sum_ns": g["sum_ns"].sum(), "min_ns": g["min_ns"].min(),
                        "max_ns": g["max_ns"].max(), "bytes": g["bytes"].sum(min_count=1)}).reset_index()
    out["bytes"] = pd.array(out["bytes"], dtype="Int64")
    return out


#: combinations of categorical keys up to which :func:`event_stat_parts` reduces over a dense code (beyond: a group-by)
_DENSE_GROUPS = 1 << 22


def event_stat_parts(frame: pd.DataFrame, by: Sequence[str] = ("layer", "cat", "name")) -> pd.DataFrame:
    """Per group of ``by``: ``count``, ``sum_ns``, ``min_ns``, ``max_ns`` (integers, so sums reduce exactly) and
    ``bytes`` (Σ of the known bytes, missing when no row has any)."""
    by = list(by)
    if not len(frame):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in by} |
                            {c: pd.Series(dtype="int64") for c in ("count", "sum_ns", "min_ns", "max_ns")} |
                            {"bytes": pd.Series(dtype="Int64")})
    keys = [frame[c].array for c in by]
    if all(isinstance(k, pd.Categorical) for k in keys) and \
            np.prod([len(k.categories) + 1 for k in keys], dtype=np.float64) <= _DENSE_GROUPS:
        return _dense_event_stats(frame, by, keys)
    g = frame.groupby(by, sort=False, observed=True)
    dur = g["dur_ns"]
    out = pd.DataFrame({"count": g.size(), "sum_ns": dur.sum(), "min_ns": dur.min(), "max_ns": dur.max(),
                        "bytes": g["bytes"].sum(min_count=1)}).reset_index()
    for c in by:
        out[c] = as_text(out[c])
    out["bytes"] = pd.array(out["bytes"], dtype="Int64")
    return out


def _dense_event_stats(frame: pd.DataFrame, by: list, keys: "list[pd.Categorical]") -> pd.DataFrame:
    """:func:`event_stat_parts` over categorical keys: one dense code per combination of their codes, reduced with
    ``bincount`` and ``ufunc.at`` (no group-by's sort and copies of every row), the same table as the group-by's
    (test: tests/test_analysis.py)."""
    key = np.zeros(len(frame), dtype=np.int64)
    size = 1
    for k in keys:  # missing (code -1) -> 0: dropped below, as a group-by drops missing keys
        key *= len(k.categories) + 1
        key += k.codes + 1
        size *= len(k.categories) + 1
    count = np.bincount(key, minlength=size)
    dur = frame["dur_ns"].to_numpy(dtype=np.int64)
    sums = np.zeros(size, dtype=np.int64)
    np.add.at(sums, key, dur)
    lo = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lo, key, dur)
    hi = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(hi, key, dur)
    del dur
    nbytes = frame["bytes"].array
    known = ~np.asarray(nbytes.isna(), dtype=bool)
    byte_sum = np.zeros(size, dtype=np.int64)
    np.add.at(byte_sum, key[known], np.asarray(nbytes[known], dtype=np.int64))
    has_bytes = np.bincount(key[known], minlength=size) > 0
    del key, known
    group = np.flatnonzero(count)
    codes, names = group.copy(), {}
    for c, k in reversed(list(zip(by, keys))):  # the code's digits, last key first
        digit = codes % (len(k.categories) + 1) - 1
        codes //= len(k.categories) + 1
        names[c] = (np.array([str(x) for x in k.categories] + [None], dtype=object)[digit], digit >= 0)
    present = np.all([known for _, known in names.values()], axis=0)
    group = group[present]
    byte_col = pd.array(byte_sum[group], dtype="Int64")
    byte_col[~has_bytes[group]] = pd.NA
    return pd.DataFrame({**{c: names[c][0][present] for c in by}, "count": count[group],
                         "sum_ns": sums[group], "min_ns": lo[group], "max_ns": hi[group], "bytes": byte_col})


def event_stats_of(parts: Sequence[pd.DataFrame], by: Sequence[str] = ("layer", "cat", "name")) -> pd.DataFrame:
    """:func:`trace_merge.analysis.event_stats_df` from the :func:`event_stat_parts` of the partitions."""
    by = list(by)
    cols = [*by, "count", "sum_us", "min_us", "max_us", "mean_us", "bytes"]
    if not any(len(p) for p in parts):
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    out = _event_parts_reduced(parts, by, sort=True)
    res = out[by].copy()
    res["count"] = out["count"].astype("int64")
    res["sum_us"] = out["sum_ns"].astype(np.float64) / 1e3
    res["min_us"] = out["min_ns"].astype(np.float64) / 1e3
    res["max_us"] = out["max_ns"].astype(np.float64) / 1e3
    res["mean_us"] = res["sum_us"] / res["count"]
    res["bytes"] = pd.array(out["bytes"], dtype="Int64")
    return res[cols]


def concat_tables(tables: Sequence[pd.DataFrame], sort: Sequence[str] = ("rank",)) -> pd.DataFrame:
    """Partitions' tables as one, in rank order (each partition's own order kept)."""
    tables = [t for t in tables if t is not None]
    full = [t for t in tables if len(t)]
    if not full:
        return tables[0].iloc[:0].reset_index(drop=True) if tables else pd.DataFrame()
    out = pd.concat(full, ignore_index=True) if len(full) > 1 else full[0].reset_index(drop=True)
    if len(full) > 1 and sort and not (len(sort) == 1 and _ascending(out[sort[0]])):
        # (the partitions come in rank order: a stable sort by rank alone would leave them as they are, at a cost
        # to the driver's reduction of a long step series)
        out = out.sort_values(list(sort), kind="stable").reset_index(drop=True)
    return out


def _ascending(col: pd.Series) -> bool:
    """Whether ``col`` is in ascending order, with no missing value (values that do not compare: not)."""
    try:
        return bool(col.is_monotonic_increasing)
    except TypeError:
        return False


def combine(parts: Sequence[RankParts], job: JobFacts, counters: Optional[pd.DataFrame] = None,
            view: Optional[ComponentView] = ORIGINAL_STUDY) -> Summary:
    """The reduction: every rank's :class:`RankParts` into one :class:`Summary` (``view``: the component view the
    kernels computed). The job's wall time is the span of the ranks' rows as the kernels saw them (placing DXT
    segments moves rows after the facts were taken)."""
    parts = list(parts)
    spans = [p.span for p in parts if p.span is not None]
    wall_ns = max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0
    bd = concat_tables([p.breakdown for p in parts])
    exp = concat_tables([p.exposed_io for p in parts])
    series = concat_tables([p.steps for p in parts])
    per = concat_tables([p.input_bound for p in parts])
    layered = concat_tables([p.layered for p in parts])
    bw = bw_.finish_bandwidth([p.bandwidth for p in parts], counters, job.app_files)
    per_epoch = concat_tables([p.epoch_bandwidth for p in parts], ("rank", "epoch"))
    study = concat_tables([p.study_view for p in parts])
    stats = event_stats_of([p.event_stats for p in parts])
    data_files = frozenset().union(*(p.data_files for p in parts)) if parts else frozenset()
    totals = bw_.totals_of(bw, wall_ns, data_files, counters, job.app_files)
    epoch_totals = bw_.epoch_bandwidth_totals(per_epoch)
    framework = framework_of(stats, per)
    v = att_.verdict_of(per, framework)
    metrics = _metrics(len(job.ranks), job.events, bd, exp, totals, v, epoch_totals, study, view)
    return Summary(metrics=metrics, verdict=v, layered=layered, breakdown=bd, exposed_io=exp, input_bound=per,
                   steps=series, bandwidth=bw, bandwidth_totals=totals, epoch_bandwidth=per_epoch,
                   epoch_bandwidth_totals=epoch_totals, study_view=study, event_stats=stats,
                   explanations=explain(metrics, v, layered, words_for(framework)), view=view, framework=framework)


class SummaryHook:
    """The summary as the merge pipeline's analysis hook (:class:`trace_merge.partitioned.Analysis`): the merge
    takes each piece's :func:`rank_facts`, reduces them to the :class:`JobFacts` every rank's kernel needs, runs
    :func:`rank_parts` on each rank's partition and :func:`combine` on their parts. Picklable: engines send it to
    their workers. ``view``: the component view of the summary (:class:`~trace_merge.component_view.ComponentView`,
    None for none)."""

    def __init__(self, layers: "str | Sequence[str] | None" = None,
                 view: Optional[ComponentView] = ORIGINAL_STUDY) -> None:
        self.layers = layers
        self.view = view

    def facts(self, frame: pd.DataFrame, rank: int) -> RankFacts:
        return rank_facts(frame, rank)

    def job(self, facts: Sequence[RankFacts], names: dict) -> JobFacts:
        """The job's facts; ``names`` (DFTracer file hash -> path, the run's tables) resolves app file names a
        trace wrote as hashes."""
        if names:
            facts = [dataclasses.replace(f, app_files=frozenset(names.get(n, n) for n in f.app_files))
                     if f.app_files else f for f in facts]
        return JobFacts.of(facts)

    def rank(self, rows: Any, job: JobFacts) -> RankParts:
        """``rows``: :class:`trace_merge.partitioned.RankRows`, taken here so that the kernel holds the only
        reference."""
        return rank_parts(rows.take(), job, self.layers, self.view)

    def rank_halves(self, windows: Callable, job: JobFacts) -> "list[Callable[[], dict]]":
        """:meth:`rank` of a rank given window by window (``windows``, picklable) as its two independent halves
        (:func:`rank_parts_of_windows`), tasks an engine can run side by side; :meth:`joined` makes their results
        the rank's parts."""
        return [functools.partial(rows_tables_of_windows, windows, job, self.view),
                functools.partial(attribution_tables_of_windows, windows, job, self.layers)]

    def joined(self, halves: Sequence[dict]) -> RankParts:
        return RankParts(**{k: v for half in halves for k, v in half.items()})

    def combine(self, parts: Sequence[RankParts], job: JobFacts, counters: pd.DataFrame) -> Summary:
        return combine(list(parts) or [rank_parts(empty_frame(), job, self.layers, self.view)], job, counters,
                       self.view)
