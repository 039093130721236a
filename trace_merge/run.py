"""A profiled run as one object: ``Run.open(path)`` → frame, counters, warnings, analyses.

``path`` may be a run directory (``merged.parquet`` is used when it was made from exactly the source files there
now, told by name, size and content fingerprint (:mod:`trace_merge.identity`), else the sources are merged in
memory and the reason is a warning), a bare directory of DFTracer ``.pfw[.gz]`` files, or a single trace file
such as a ``.darshan`` log.
"""
from __future__ import annotations

import json
import logging
import math
import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import numpy as np
import pandas as pd

from timelogger.layout import COUNTERS, MERGED
from trace_merge import analysis, kernels, sources, store, stored_summary
from trace_merge.align import Residual
from trace_merge.engines import PARTITION_ABOVE_BYTES
from trace_merge.errors import TraceInputError
from trace_merge.readers.darshan import dxt_rows
from trace_merge.formatting import json_records as _records
from trace_merge.schema import COUNTER_DTYPES, FRAME_COLUMNS, concat_frames, empty_frame, layer_order

if TYPE_CHECKING:  # pragma: no cover - typing only
    from trace_merge.findings import Finding

logger = logging.getLogger(__name__)


def _plain(obj: Any) -> Any:
    """Make nested dicts/lists of scalars JSON-able (numpy scalars → numbers, NaN/NA → None)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if obj is pd.NA or (isinstance(obj, float) and not math.isfinite(obj)):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


@dataclass
class Run:
    """One profiled run, merged onto one clock.

    Attributes
    ----------
    path
        What was opened.
    frame
        Interval rows (:mod:`trace_merge.schema`), absolute epoch ns.
    counters
        Counter rows (Darshan), possibly empty.
    warnings
        One-line ``"<path>: <cause>"`` warnings from reading and aligning (skipped files, missing ranks).
    residual
        Alignment check (:class:`trace_merge.align.Residual`; nothing checked when there is nothing to check).
    manifest
        The run's ``manifest.json``, or ``None``.
    sources
        The files that made it into the frame.
    cached
        True when the frame came from a fresh ``merged.parquet``.
    dropped
        app file -> intervals its TimeLogger writer dropped (:attr:`trace_merge.partitioned.Merge.dropped`).
    dxt_clock
        Where each Darshan log's DXT segments were placed, per rank (see
        :attr:`trace_merge.partitioned.Merge.dxt_clock`).
    """

    path: Path
    frame: pd.DataFrame
    counters: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    residual: Residual = field(default_factory=Residual)
    manifest: Optional[dict[str, Any]] = None
    sources: list[str] = field(default_factory=list)
    cached: bool = False
    dropped: dict[str, int] = field(default_factory=dict)
    dxt_clock: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._partitioned = None
        self._summaries: dict = {}
        if self.frame is _LAZY:
            del self.frame  # loaded on first use (__getattr__)

    def __getattr__(self, name: str) -> Any:
        if name == "frame" and self.__dict__.get("_partitioned") is not None:
            self.frame = self._partitioned.frame
            return self.frame
        raise AttributeError(name)

    @classmethod
    def open(cls, path: "str | os.PathLike[str]", scheduler: Any = None, workers: Optional[int] = None,
             memory_bytes: Optional[int] = None, partitioned: Optional[bool] = None,
             layers: "str | Sequence[str] | None" = None, keep_rows: bool = True) -> "Run":
        """Open a run directory, a bare trace directory or a single trace file.

        Sources larger than :data:`PARTITION_ABOVE_BYTES` (or any, with ``scheduler``) are merged partition by
        partition (:mod:`trace_merge.partitioned`): memory follows the largest rank, the summary is computed by
        the merge, and :attr:`frame` is loaded only when asked for.

        Parameters
        ----------
        scheduler
            A Dask distributed scheduler address (or ``Client``/``LocalCluster``) to run the merge's tasks on.
        workers, memory_bytes
            The local pool's processes and memory budget (:class:`trace_merge.engines.LocalPool`).
        partitioned
            Force (True) or refuse (False) the partitioned path; default: by size, or when ``scheduler`` is given.
        layers
            The layers the partitioned merge summarises (as :meth:`analyse`'s; its summary is then at hand).
        keep_rows
            False: a partitioned merge keeps only the summary of ``layers``, not the rows (no partition is written:
            1.8 GB for 20 M events, 7 % of the merge's time); reading rows (:attr:`frame`, :meth:`load`, another
            layer choice) then raises :class:`~trace_merge.partitioned.RowsNotKept`. For a summary, nothing else.

        Raises
        ------
        TraceInputError
            Nothing usable at ``path`` (the message names the file and the cause), or ``path`` is a directory
            holding runs rather than a run (:func:`trace_merge.sources.refuse_runs_below`; runs are never pooled).
        """
        from trace_merge import merge

        p = Path(path)
        if not p.exists():
            raise TraceInputError(p, "no such file or directory")
        notes: list[str] = []

        def remerge(why: str, command: str) -> None:  # derived data to make again, never an error
            notes.append(f"{why}; merged again from the sources ({command} stores the new merge)")
            logger.warning("%s", notes[-1])

        info, why, command = store.trusted(p) if p.is_dir() else (None, None, "")
        if why:
            remerge(why, command)
        if info is not None:
            big = info.partitions is not None and info.rows >= PARTITION_ABOVE_ROWS
            if info.partitions is not None and partitioned is not False and (scheduler is not None or partitioned
                                                                               or big):
                stored_run = cls._open_stored(p, info, scheduler, workers, memory_bytes)
                if stored_run is not None:
                    return stored_run
            try:
                frame, counters, info = store.read_merged(p, info)
            except TraceInputError as exc:
                remerge(str(exc), store.FORCE)
            else:
                logger.info("%s: using %s", p, MERGED)
                return cls(path=p, frame=frame, counters=counters, warnings=list(info.warnings),
                           residual=info.residual, manifest=sources.load_manifest(p)[0],
                           sources=list(info.sources), cached=True, dropped=dict(info.dropped_intervals),
                           dxt_clock=list(info.dxt_clock))
        size = partitioned_input(p, scheduler, partitioned)
        if size is not None:
            return cls._open_partitioned(p, notes, size, scheduler, workers, memory_bytes, layers, keep_rows)
        res = merge.merge_path(p)
        return cls(path=p, frame=res.frame, counters=res.counters, warnings=notes + list(res.warnings),
                   residual=res.residual, manifest=res.manifest, sources=list(res.sources),
                   dropped=dict(res.dropped), dxt_clock=list(res.dxt_clock))

    @classmethod
    def _open_stored(cls, p: Path, info: "store.MergeInfo", scheduler: Any, workers: Optional[int],
                     memory_bytes: Optional[int]) -> "Optional[Run]":
        """A trusted stored merge with a partition layout, summarised rank by rank (its frame loaded on demand);
        None when its counters cannot be read (the whole-frame path then says why)."""
        from trace_merge import engines

        try:
            counters = pd.read_parquet(p / COUNTERS).astype(COUNTER_DTYPES)
        except (OSError, ValueError):
            return None
        pm = store.stored_partitions(p, info, counters)
        kept = stored_summary.read(p, (info.outputs or {}).get(MERGED))
        if kept is not None:
            analysis.summarise_stored(pm, stored=kept)
        else:
            engine = engines.engine_for(scheduler, sum(pm.rows.values()) * 100, workers, memory_bytes)
            try:
                analysis.summarise_stored(pm, engine)
            finally:
                engine.close()
        return cls._of_partitions(p, pm, list(pm.warnings), sources.load_manifest(p)[0], cached=True,
                                  dropped=dict(info.dropped_intervals))

    @classmethod
    def _open_partitioned(cls, p: Path, notes: list[str], size: int, scheduler: Any, workers: Optional[int],
                          memory_bytes: Optional[int], layers: "str | Sequence[str] | None" = None,
                          keep_rows: bool = True) -> "Run":
        from trace_merge import engines, partitioned

        engine = engines.engine_for(scheduler, size, workers, memory_bytes)
        try:
            pm = partitioned.merge_partitioned(p, engine=engine, analysis=kernels.SummaryHook(layers),
                                               keep_rows=keep_rows)
        finally:
            engine.close()
        return cls._of_partitions(p, pm, notes + list(pm.warnings), pm.manifest, cached=False,
                                  dropped=dict(pm.dropped), layers=layers)

    @classmethod
    def _of_partitions(cls, p: Path, pm: Any, warnings: list[str], manifest: Optional[dict], cached: bool,
                       dropped: dict[str, int], layers: "str | Sequence[str] | None" = None) -> "Run":
        """A run whose frame stays in ``pm``'s partitions until asked for, with the summary the merge computed."""
        run = cls(path=p, frame=_LAZY, counters=pm.counters, warnings=warnings, residual=pm.residual,
                  manifest=manifest, sources=list(pm.sources), cached=cached, dropped=dropped,
                  dxt_clock=list(pm.dxt_clock))
        run._partitioned = pm
        run._summaries[_key(layers)] = pm.summary
        weakref.finalize(run, pm.cleanup)  # the partitions live as long as the run
        return run

    def ended_early(self) -> list[str]:
        """The warnings that say a rank ended early or lost intervals: every number of the run is partial."""
        return [w for w in self.warnings
                if w.startswith("rank ") and (" ended early: " in w or " lost intervals: " in w)]

    def rows_per_layer(self) -> dict[str, int]:
        """Rows per layer, most first (from the merge's counts when the frame is not loaded)."""
        if self._rows_apart():
            return self._partitioned.rows_per_layer()
        counts = self.frame["layer"].value_counts()
        return {str(k): int(v) for k, v in counts.items() if v}

    def dxt_segments(self) -> int:
        """Darshan DXT segments among the rows (the merge's count when the frame is not loaded)."""
        if self._rows_apart() and self._partitioned.dxt_segments is not None:
            return int(self._partitioned.dxt_segments)
        return len(self.rows_where(dxt_rows, ("layer", "name", "pid", "tid")))

    @property
    def label(self) -> str:
        """Short name for tables: the directory or file name."""
        return self.path.name or str(self.path)

    def breakdown(self, layers: "str | Sequence[str] | None" = None, per_layer: bool = False) -> pd.DataFrame:
        """:func:`trace_merge.analysis.breakdown_df` of this run (rank by rank when partitioned: the same rows)."""
        if not self._rows_apart():
            return analysis.breakdown_df(self.frame, layers, per_layer=per_layer)
        use = self._partitioned.job.use(layers)  # the job's layers, as the whole frame would choose them
        parts = [analysis.breakdown_df(f, use, per_layer=per_layer) for f in self._parts(kernels.KERNEL_COLUMNS)]
        out = kernels.concat_tables(parts, sort=())
        if not len(out):
            return analysis.breakdown_df(empty_frame(), use, per_layer=per_layer)
        if not per_layer:
            return out
        # the whole frame's order: per layer (the schema's order), its rows rank by rank
        key = pd.Series([layer_order(x) for x in out["layer"]])
        return out.loc[key.sort_values(kind="stable").index].reset_index(drop=True)

    def _rows_apart(self) -> bool:
        """The rows are in the partitions, not loaded as :attr:`frame`."""
        return self._partitioned is not None and "frame" not in self.__dict__

    def _parts(self, columns: Sequence[str]) -> "Iterator[pd.DataFrame]":
        """The rows (``columns``) a rank at a time when partitioned, else the frame's."""
        if not self._rows_apart():
            yield self.frame[list(columns)]
            return
        for rank in sorted(self._partitioned.partitions):
            yield self._partitioned.load(columns, ranks=[rank])

    def rows_where(self, keep: "Callable[[pd.DataFrame], np.ndarray]", columns: Sequence[str] = FRAME_COLUMNS
                   ) -> pd.DataFrame:
        """The rows (``columns``) for which ``keep(rows)`` is true, read a rank at a time when partitioned (a
        large run's rows are never all in memory); in rank order, each rank's in time order."""
        rows = concat_frames([f[keep(f)] for f in self._parts(columns)])
        return rows[[c for c in columns if c in rows.columns]]

    def steady_state_window(self, steps: int = 4) -> "Optional[tuple[int, int]]":
        """:func:`trace_merge.plots.steady_state_window` of this run, read a rank at a time when partitioned: the
        framework rows of every rank, the steps of the lowest rank that has any."""
        from trace_merge.attribution import step_marks_df
        from trace_merge.plots import window_of_steps

        fw = self.rows_where(lambda f: (f["layer"] == "framework").to_numpy(), ("layer", "start_ns", "end_ns"))
        for f in self._parts(kernels.KERNEL_COLUMNS):  # in rank order: the first part with steps has the lowest's
            marks = step_marks_df(f)
            if len(marks):
                return window_of_steps(marks, fw, steps)
        return None

    def excerpt(self, start_ns: Optional[int] = None, end_ns: Optional[int] = None, max_events: int = 3000
                ) -> "tuple[pd.DataFrame, int, int, tuple[int, int]]":
        """A timeline excerpt: its rows, bounds (:func:`trace_merge.plots.excerpt_window`; a given window holding
        over ten times ``max_events`` events is cut to about ``max_events``) and the run's first start and last
        end; for ``plots.plot_timeline(rows, start_ns=lo, end_ns=hi, span=span)``."""
        from trace_merge.plots import excerpt_window

        lo, hi, span = excerpt_window(self._parts, start_ns, end_ns, max_events, cut=True)
        rows = self.rows_where(lambda f: ((f["end_ns"] >= lo) & (f["start_ns"] <= hi)).to_numpy(),
                               ("rank", "layer", "cat", "name", "start_ns", "end_ns", "dur_ns", "bytes", "file"))
        return rows, lo, hi, span

    def exposed_io(self, layers: "str | Sequence[str] | None" = None) -> pd.DataFrame:
        """:func:`trace_merge.analysis.exposed_io_df` of this run."""
        return analysis.exposed_io_df(self.frame, layers)

    def bandwidth(self) -> pd.DataFrame:
        """:func:`trace_merge.analysis.bandwidth_df` of this run (Darshan counters included)."""
        return analysis.bandwidth_df(self.frame, self.counters)

    def epoch_bandwidth(self) -> pd.DataFrame:
        """:func:`trace_merge.analysis.epoch_bandwidth_df` of this run: data-file reads per rank and epoch."""
        return analysis.epoch_bandwidth_df(self.frame)

    def study_view(self, per_epoch: bool = False) -> pd.DataFrame:
        """:func:`trace_merge.analysis.study_view_df`: the original study's components per rank (and epoch)."""
        return analysis.study_view_df(self.frame, per_epoch)

    def access_pattern(self) -> pd.DataFrame:
        """:func:`trace_merge.analysis.access_pattern_df` of this run (partition by partition when partitioned)."""
        if self._rows_apart():
            return analysis.access_pattern(self._partitioned)
        return analysis.access_pattern_df(self.frame)

    def load(self, columns: Optional[Sequence[str]] = None, ranks: Optional[Sequence[int]] = None,
             epochs: Optional[Sequence[int]] = None) -> pd.DataFrame:
        """Part of the frame: only ``columns``, ``ranks`` and ``epochs`` (rows tagged with one of them). A
        partitioned run reads only those ranks' partitions and those columns, without loading :attr:`frame`."""
        want = None if columns is None else list(dict.fromkeys([*columns, *(["epoch"] if epochs is not None else [])]))
        if self._rows_apart():
            frame = self._partitioned.load(want, ranks)
        else:
            frame = self.frame
            if ranks is not None:
                frame = frame[frame["rank"].isin(list(ranks)).to_numpy()]
            if want is not None:
                frame = frame[want]
        if epochs is not None:
            frame = frame[frame["epoch"].isin(list(epochs)).fillna(False).to_numpy(dtype=bool)]
        return frame[list(columns)].reset_index(drop=True) if columns is not None else frame.reset_index(drop=True)

    def event_stats(self) -> pd.DataFrame:
        """:func:`trace_merge.analysis.event_stats_df` of this run."""
        return analysis.event_stats_df(self.frame)

    def verdict(self) -> "analysis.Verdict":
        """:func:`trace_merge.analysis.verdict` of this run."""
        return analysis.verdict(self.frame)

    def layered_breakdown(self) -> pd.DataFrame:
        """:func:`trace_merge.analysis.layered_breakdown_df`: each app phase split by what the lower layers did."""
        return analysis.layered_breakdown_df(self.frame)

    def step_series(self) -> pd.DataFrame:
        """:func:`trace_merge.analysis.step_series_df`: per rank and step, its time and the input wait inside."""
        return analysis.step_series_df(self.frame)

    def compare(self, *others: "Run") -> pd.DataFrame:
        """This run and ``others`` side by side (:func:`trace_merge.analysis.compare_df`)."""
        runs = (self, *others)
        return analysis.compare_df([r.frame for r in runs], _unique_labels(runs), [r.counters for r in runs])

    def analyse(self, layers: "str | Sequence[str] | None" = None) -> "analysis.Summary":
        """:func:`trace_merge.analysis.summarise` of this run (an :class:`~trace_merge.analysis.Summary`).

        Parameters
        ----------
        layers
            Layers the breakdown, exposed I/O and verdict are made from (default: ``app`` when present).
        """
        if _key(layers) not in self._summaries:
            if self._partitioned is not None:
                self._summaries[_key(layers)] = analysis.summarise_again(self._partitioned, layers)
            else:
                return analysis.summarise(self.frame, self.counters, layers)
        return self._summaries[_key(layers)]

    def findings(self, parts: "Optional[analysis.Summary]" = None) -> "list[Finding]":
        """:func:`trace_merge.findings.findings` of this run: what to change, most important first."""
        from trace_merge import darshan_view, findings

        a = parts if parts is not None else self.analyse()
        view = None if darshan_view.has_training(self) else darshan_view.darshan_view(self)
        if view is None:
            return findings.findings(a)
        # a plain Darshan log: the HPC I/O rules of its counters instead of training advice
        from trace_merge.darshan_findings import darshan_findings

        return findings.findings(a, darshan_findings(self.counters, view.nprocs, view.runtime_s))

    def summary(self, parts: "Optional[analysis.Summary]" = None) -> dict:
        """Everything about the run as plain JSON-able data.

        Parameters
        ----------
        parts
            A result of :meth:`analyse` to reuse instead of computing it again.

        Returns
        -------
        dict
            ``path``, ``events``, ``ranks``, ``rows_per_layer``, ``sources``, ``metrics``, ``verdict``,
            ``explanations``, ``layered_breakdown``, ``breakdown``, ``exposed_io``, ``input_bound`` (the per-step
            series is :meth:`step_series`: one row per step is too long for a summary),
            ``bandwidth`` (``per_rank``, ``totals``, ``per_epoch``, ``per_rank_epoch``), ``study_view`` (the
            original study's components per rank, empty without its phases), ``event_stats`` (records), ``warnings``,
            ``alignment_residual``, ``dropped_app_intervals`` (intervals the TimeLogger writers dropped, total),
            ``dxt_clock``, ``findings`` (:meth:`findings`, as dicts), ``next_step`` and ``idle`` (the share of
            step-cycle time the compute side waited, with its causes: :func:`trace_merge.findings.idle`).
        """
        from trace_merge.findings import idle, next_step

        a = parts if parts is not None else self.analyse()
        found = self.findings(a)
        if self._partitioned is not None:
            events, ranks = self._partitioned.job.events, list(self._partitioned.job.ranks)
        else:
            events = len(self.frame)
            ranks = sorted(int(r) for r in self.frame["rank"].unique()) if len(self.frame) else []
        per_layer = self.rows_per_layer()
        return {
            "path": str(self.path),
            "events": int(events),
            "ranks": ranks,
            "rows_per_layer": per_layer,
            "counter_rows": int(len(self.counters)),
            "sources": len(self.sources),
            "metrics": _plain(a.metrics.as_dict()),
            "verdict": _plain(a.verdict.as_dict()),
            "explanations": list(a.explanations),
            "layered_breakdown": _records(a.layered),
            "breakdown": _records(a.breakdown),
            "exposed_io": _records(a.exposed_io),
            "input_bound": _records(a.input_bound),
            "bandwidth": {"per_rank": _records(a.bandwidth), "totals": _plain(a.bandwidth_totals),
                          "per_epoch": _records(a.epoch_bandwidth_totals),
                          "per_rank_epoch": _records(a.epoch_bandwidth)},
            "study_view": _records(a.study_view),
            "event_stats": _records(a.event_stats),
            "warnings": list(self.warnings),
            "alignment_residual": _plain(self.residual.as_dict()),
            "dropped_app_intervals": sum(self.dropped.values()),
            "dxt_clock": _plain(self.dxt_clock),
            "findings": [_plain(f.as_dict()) for f in found],
            "next_step": next_step(found),
            "idle": _plain(idle(a)),
        }


#: a stored merge of at least this many rows is summarised partition by partition (:meth:`Run.open`)
PARTITION_ABOVE_ROWS = 1_000_000


def partitioned_input(p: Path, scheduler: Any = None, partitioned: Optional[bool] = None) -> Optional[int]:
    """The bytes of ``p``'s sources when they are to be merged partition by partition, else None: forced by
    ``partitioned``, or a ``scheduler`` given, or at least :data:`PARTITION_ABOVE_BYTES` (``Run.open``, ``merge``)."""
    if partitioned is False:
        return None
    size = sources.source_bytes(p)
    return size if scheduler is not None or partitioned or size >= PARTITION_ABOVE_BYTES else None


_LAZY = object()


def _key(layers: Any) -> Any:
    return tuple(layers) if isinstance(layers, list) else layers


def _unique_labels(runs: Sequence[Run]) -> list[str]:
    """Column labels for :meth:`Run.compare`: the run's name, its path where names clash, and ``#2``, ``#3`` for
    a run given more than once (compared with itself, with a warning: every delta is 0)."""
    # the same name for different paths (a/run, b/run): the paths tell them apart
    labels = [str(r.path) if len({str(o.path) for o in runs if o.label == r.label}) > 1 else r.label for r in runs]
    out: list[str] = []
    for label in labels:
        n = sum(x == label for x in labels[:len(out) + 1])
        out.append(label if n == 1 else f"{label} #{n}")
    resolved = [r.path.resolve() for r in runs]
    for path in dict.fromkeys(p for p in resolved if resolved.count(p) > 1):
        logger.warning("%s: given %d times, compared with itself", path, resolved.count(path))
    return out
