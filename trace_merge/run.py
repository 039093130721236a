"""A profiled run as one object: ``Run.open(path)`` → frame, counters, warnings, analyses.

``path`` may be a run directory (``merged.parquet`` is used when it was made from exactly the source files there
now, told by name, size and content fingerprint (:mod:`trace_merge.identity`), else the sources are merged again
and the reason is a warning), a bare directory of DFTracer ``.pfw[.gz]`` files, or a single trace file such as a
``.darshan`` log. How it is opened is :func:`trace_merge.opening.open_merge`'s one decision; a :class:`Run` holds
the :class:`~trace_merge.merged.Merge` it returns and asks the analysis of it.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge import analysis, cpu_use, kernels
from trace_merge.align import Residual
from trace_merge.formatting import json_plain as _plain
from trace_merge.formatting import json_records as _records
from trace_merge.merged import JSONValue, Merge
from trace_merge.opening import MergeOptions, open_merge
from trace_merge.readers.darshan import dxt_rows
from trace_merge.schema import FRAME_COLUMNS, Layers, concat_frames

if TYPE_CHECKING:  # pragma: no cover - typing only
    from trace_merge.findings import Finding

logger = logging.getLogger(__name__)


@dataclass
class Run:
    """One profiled run, merged onto one clock: what was opened (:attr:`path`) and its
    :class:`~trace_merge.merged.Merge` (:func:`trace_merge.opening.open_merge`), with the analyses as methods.

    Attributes
    ----------
    path
        What was opened.
    merge
        The merge: its rows (loaded as :attr:`frame` on first use when they are in partitions), counters and what
        the merge found (:attr:`warnings`, :attr:`residual`, ...).
    """

    path: Path
    merge: Merge

    @classmethod
    def open(cls, path: "str | os.PathLike[str]", scheduler: object = None, workers: Optional[int] = None,
             memory_bytes: Optional[int] = None, partitioned: Optional[bool] = None, layers: Layers = None,
             keep_rows: bool = True, options: Optional[MergeOptions] = None) -> "Run":
        """Open a run directory, a bare trace directory or a single trace file (:func:`trace_merge.opening.open_merge`).

        Sources larger than :data:`~trace_merge.engines.PARTITION_ABOVE_BYTES` (or any, with ``scheduler``) are
        merged partition by partition (:mod:`trace_merge.partitioned`): memory follows the largest rank, the summary
        is computed by the merge, and :attr:`frame` is loaded only when asked for.

        Parameters
        ----------
        scheduler, workers, memory_bytes, partitioned, layers, keep_rows
            As :class:`~trace_merge.opening.MergeOptions`' fields of those names.
        options
            All of them and the size thresholds as one :class:`~trace_merge.opening.MergeOptions` (the arguments
            above are then ignored).

        Raises
        ------
        TraceInputError
            Nothing usable at ``path`` (the message names the file and the cause), or ``path`` is a directory
            holding runs rather than a run (:func:`trace_merge.sources.refuse_runs_below`; runs are never pooled).
        """
        if options is None:
            options = MergeOptions(scheduler=scheduler, workers=workers, memory_bytes=memory_bytes,
                                   partitioned=partitioned, layers=layers, keep_rows=keep_rows)
        return cls(Path(path), open_merge(path, options))

    # what the merge found
    @property
    def frame(self) -> pd.DataFrame:
        """Interval rows (:mod:`trace_merge.schema`), absolute epoch ns (loaded on first use when partitioned)."""
        return self.merge.frame

    @property
    def counters(self) -> pd.DataFrame:
        """Counter rows (Darshan), possibly empty."""
        return self.merge.counters

    @property
    def warnings(self) -> list[str]:
        """One-line ``"<path>: <cause>"`` warnings from reading and aligning (skipped files, missing ranks)."""
        return self.merge.warnings

    @property
    def residual(self) -> Residual:
        """Alignment check (:class:`trace_merge.align.Residual`; nothing checked when there is nothing to check)."""
        return self.merge.residual

    @property
    def manifest(self) -> "Optional[dict[str, JSONValue]]":
        """The run's ``manifest.json``, or ``None``."""
        return self.merge.manifest

    @property
    def sources(self) -> list[str]:
        """The files that made it into the frame."""
        return self.merge.sources

    @property
    def cached(self) -> bool:
        """True when the frame came from a fresh ``merged.parquet``."""
        return self.merge.cached

    @property
    def dropped(self) -> dict[str, int]:
        """App file -> intervals its TimeLogger writer dropped."""
        return self.merge.dropped_intervals

    @property
    def dxt_clock(self) -> "list[dict[str, JSONValue]]":
        """Where each Darshan log's DXT segments were placed, per rank."""
        return self.merge.dxt_clock

    def ended_early(self) -> list[str]:
        """The warnings that say a rank ended early or lost intervals: every number of the run is partial."""
        return [w for w in self.warnings
                if w.startswith("rank ") and (" ended early: " in w or " lost intervals: " in w)]

    def rows_per_layer(self) -> dict[str, int]:
        """Rows per layer, most first (from the merge's counts when the frame is not loaded)."""
        return self.merge.rows_per_layer()

    def dxt_segments(self) -> int:
        """Darshan DXT segments among the rows (the merge's count when the frame is not loaded)."""
        if self.merge.rows_apart and self.merge.dxt_segments is not None:
            return int(self.merge.dxt_segments)
        return len(self.rows_where(dxt_rows, ("layer", "name", "pid", "tid")))

    @property
    def label(self) -> str:
        """Short name for tables: the directory or file name."""
        return self.path.name or str(self.path)

    def breakdown(self, layers: Layers = None, per_layer: bool = False) -> pd.DataFrame:
        """:func:`trace_merge.analysis.breakdown_df` of this run (rank by rank when partitioned: the same rows)."""
        return analysis.merge_breakdown(self.merge, layers, per_layer)

    def rows_where(self, keep: "Callable[[pd.DataFrame], np.ndarray]", columns: Sequence[str] = FRAME_COLUMNS
                   ) -> pd.DataFrame:
        """The rows (``columns``) for which ``keep(rows)`` is true, read a rank at a time when partitioned (a
        large run's rows are never all in memory); in rank order, each rank's in time order."""
        rows = concat_frames([f[keep(f)] for f in self.merge.rank_frames(columns)])
        return rows[[c for c in columns if c in rows.columns]]

    def steady_state_window(self, steps: int = 4) -> "Optional[tuple[int, int]]":
        """:func:`trace_merge.plots.steady_state_window` of this run, read a rank at a time when partitioned: the
        framework rows of every rank, the steps of the lowest rank that has any."""
        from trace_merge.attribution import step_marks_df
        from trace_merge.plots import window_of_steps

        fw = self.rows_where(lambda f: (f["layer"] == "framework").to_numpy(), ("layer", "start_ns", "end_ns"))
        # in rank order: the first part with steps has the lowest rank's
        for f in self.merge.rank_frames(kernels.KERNEL_COLUMNS):
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

        lo, hi, span = excerpt_window(self.merge.rank_frames, start_ns, end_ns, max_events, cut=True)
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
        return analysis.access_pattern(self.merge)

    def load(self, columns: Optional[Sequence[str]] = None, ranks: Optional[Sequence[int]] = None,
             epochs: Optional[Sequence[int]] = None) -> pd.DataFrame:
        """Part of the frame: only ``columns``, ``ranks`` and ``epochs`` (rows tagged with one of them). A
        partitioned run reads only those ranks' partitions and those columns, without loading :attr:`frame`."""
        want = None if columns is None else list(dict.fromkeys([*columns, *(["epoch"] if epochs is not None else [])]))
        frame = self.merge.load(want, ranks)
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
        a = analysis.summarise_merge(self.merge, layers)
        if a.cpu is None:
            a.cpu = self.cpu(a.steps)
        return a

    def cpu(self, steps: Optional[pd.DataFrame] = None) -> "Optional[cpu_use.CpuView]":
        """:func:`trace_merge.cpu_use.cpu_view` of this run (None without a cpu layer); without the summary's step
        cycles (``steps``) it has no per-epoch or while-computing figures."""
        if not self.rows_per_layer().get(cpu_use.LAYER):
            return None
        return cpu_use.cpu_view(self.merge.rank_frames(cpu_use.COLUMNS), pd.DataFrame() if steps is None else steps,
                                self.path if self.path.is_dir() else None)

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
        events, ranks = analysis.events_and_ranks(self.merge)
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
            **({"cpu": _plain(a.cpu.as_dict())} if a.cpu is not None else {}),
        }


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
