"""The Darshan-log view: what ``python -m darshan summary`` shows a cluster user, from a run's own tables.

Made from the run's counters table (:attr:`trace_merge.run.Run.counters`: Darshan counters per rank, module and
file), its DXT rows (frame rows of layer ``posix``/``mpiio`` named ``read``/``write`` with no pid or tid) and the
job header of each ``.darshan`` log among the run's sources:

* job context -- job id, uid, nprocs, start/end, run time, command line, log and library versions, the mounts
  the job's files lie on;
* per module (POSIX, MPI-IO, STDIO, H5F, H5D; LUSTRE holds striping only) -- files, bytes read and written, the
  cumulative read / write / metadata time over all ranks, and the I/O cost: that time per process (sum ÷
  nprocs, as PyDarshan's "I/O Cost" figure) and its share of the run time. Modules nest (H5D over MPI-IO over
  POSIX): their times overlap and are not added up;
* operation counts per module (opens, reads, writes, seeks, stats, mmaps, fsyncs, flushes; MPI-IO's reads,
  writes and opens are independent + collective (+ non-blocking), with the collective ones apart too);
* file categories -- read-only / write-only / read-write files (by bytes moved, Darshan's rule) and their bytes;
* a DXT heat map: bytes read and written per time bin × rank (:func:`plot_dxt_heatmap`).

Totals equal PyDarshan's (``tests/test_darshan_view.py`` checks bytes and operation counts on its example
logs). What only this toolkit adds: when the run also has app phases, the DXT rows are on one clock with them
(``trace_merge.dxt_clock``), so the report's timeline and ``trace-merge export --perfetto`` show each segment
inside the phase that caused it.
"""
from __future__ import annotations

import datetime as _dt
import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import pandas as pd

from trace_merge.errors import TraceInputError
from trace_merge.formatting import size_text
from trace_merge.readers.darshan import dxt_rows
from trace_merge.schema import as_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

    from trace_merge.run import Run

#: counter-name prefix -> module name as Darshan prints it, in Darshan's order
MODULES = {"POSIX": "POSIX", "MPIIO": "MPI-IO", "STDIO": "STDIO", "H5F": "H5F", "H5D": "H5D"}
#: operation -> counters summed for it, per module (what PyDarshan's operation-count figure draws)
OPERATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "POSIX": {"opens": ("OPENS",), "reads": ("READS",), "writes": ("WRITES",), "seeks": ("SEEKS",),
              "stats": ("STATS",), "mmaps": ("MMAPS",), "fsyncs": ("FSYNCS", "FDSYNCS")},
    "MPIIO": {"opens": ("INDEP_OPENS", "COLL_OPENS"), "reads": ("INDEP_READS", "COLL_READS", "NB_READS"),
              "writes": ("INDEP_WRITES", "COLL_WRITES", "NB_WRITES"), "fsyncs": ("SYNCS",),
              "collective opens": ("COLL_OPENS",), "collective reads": ("COLL_READS",),
              "collective writes": ("COLL_WRITES",)},
    "STDIO": {"opens": ("OPENS",), "reads": ("READS",), "writes": ("WRITES",), "seeks": ("SEEKS",),
              "flushes": ("FLUSHES",)},
    "H5F": {"opens": ("OPENS",), "flushes": ("FLUSHES",)},
    "H5D": {"opens": ("OPENS",), "reads": ("READS",), "writes": ("WRITES",), "flushes": ("FLUSHES",)},
}
#: the modules whose files Darshan sorts into read-only / write-only / read-write
_CATEGORISED = ("POSIX", "MPIIO", "STDIO")
_HEATMAP_BINS = 100


@dataclass
class DarshanView:
    """The view's tables (module docstring); ``job`` has one dict per ``.darshan`` log found."""

    job: list[dict[str, Any]]
    modules: pd.DataFrame
    operations: pd.DataFrame
    files: pd.DataFrame
    nprocs: int
    runtime_s: Optional[float]
    dxt_segments: int
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (``trace-merge summary --json``)."""
        from trace_merge.formatting import json_records as _records

        return {"job": self.job, "nprocs": self.nprocs, "runtime_s": self.runtime_s,
                "modules": _records(self.modules), "operations": _records(self.operations),
                "files": _records(self.files), "dxt_segments": self.dxt_segments, "notes": self.notes}


def has_training(run: "Run") -> bool:
    """True when the run has an app or framework layer (training phases), not only file-system traces. From the
    row counts, so that a partitioned run's frame is never loaded whole."""
    per_layer = run.rows_per_layer()
    return bool(per_layer.get("app", 0) or per_layer.get("framework", 0))


def darshan_view(run: "Run") -> Optional[DarshanView]:
    """The view of ``run``'s Darshan data, or None when it has no Darshan counters."""
    counters = run.counters
    if not len(counters):
        return None
    names = as_text(counters["counter"])
    module = names.str.split("_", n=1).str[0]
    c = pd.DataFrame({"module": module.to_numpy(), "counter": names.str.split("_", n=1).str[1].to_numpy(),
                      "rank": counters["rank"].to_numpy(), "file": as_text(counters["file"]).to_numpy(),
                      "value": counters["value"].to_numpy()})
    c = c[c["module"].isin(list(MODULES))]
    if not len(c):
        return None
    files = set(c["file"].unique())
    job = [_job_header(p, files) for p in _logs(run)]
    notes = []
    nprocs = sum(int(j["nprocs"]) for j in job if j.get("nprocs")) if job else 0
    if not nprocs:
        nprocs = max(1, int(counters["rank"].max()) + 1)
        notes.append(f"no job header (the .darshan log is not beside the run): nprocs {nprocs} is the highest "
                     "rank seen + 1")
    runtime = max((j["run time (s)"] for j in job if j.get("run time (s)") is not None), default=None)
    by = c.groupby(["module", "counter"], sort=False)["value"]
    sums, unknown = by.sum(), by.min() < 0
    return DarshanView(job=job, modules=_modules(c, sums, unknown, nprocs, runtime),
                       operations=_operations(sums, unknown),
                       files=_categories(c), nprocs=nprocs, runtime_s=runtime,
                       dxt_segments=run.dxt_segments(), notes=notes)


def _logs(run: "Run") -> list[Path]:
    """The run's ``.darshan`` logs that still exist (sources are stored as given at merge time)."""
    found = []
    for src in run.sources:
        if not str(src).endswith(".darshan"):
            continue
        p = Path(src)
        if not p.is_file() and run.path.is_dir():
            p = run.path / "darshan" / p.name
        if p.is_file():
            found.append(p)
    return found


def _job_header(path: Path, files: set) -> dict[str, Any]:
    """One log's job context, read with PyDarshan after the reader's structural check (PyDarshan's C code
    crashes on a broken log)."""
    from trace_merge.readers import darshan as reader

    reader.validate(path)
    try:
        import darshan
    except ImportError:
        raise TraceInputError(path, "reading Darshan logs needs PyDarshan: pip install 'dlio-layers[darshan]'") from None
    try:
        report = darshan.DarshanReport(os.fspath(path), read_all=False)
    except Exception as err:  # PyDarshan raises bare RuntimeError/ValueError on bad logs
        raise TraceInputError(path, f"PyDarshan cannot read this log ({err})") from None
    meta = report.metadata
    job = meta.get("job", {})
    start, end = reader._job_time_ns(job, "start"), reader._job_time_ns(job, "end")
    runtime = job.get("run_time")
    if runtime is None and start is not None and end is not None:
        runtime = (end - start) / 1e9 + 1  # whole seconds in old logs: Darshan counts the last one
    exe = meta.get("exe") or ""
    return {
        "log": path.name,
        # identifiers, not quantities: no thousands separators in the report
        "job id": None if job.get("jobid") is None else str(job["jobid"]),
        "uid": None if job.get("uid") is None else str(job["uid"]),
        "nprocs": job.get("nprocs"),
        "start (UTC)": _utc(start),
        "end (UTC)": _utc(end),
        "run time (s)": float(runtime) if runtime is not None else None,
        "command line": "anonymized" if exe.isdigit() else (exe or "not recorded"),
        "log format": job.get("log_ver"),
        "Darshan library": (job.get("metadata") or {}).get("lib_ver"),
        "modules": ", ".join(report.modules),
        "partial": any(m.get("partial_flag") for m in report.modules.values()),
        "mounts used": _mounts_used(report, files),
    }


def _utc(ns: Optional[int]) -> Optional[str]:
    if ns is None:
        return None
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _mounts_used(report: Any, files: set) -> str:
    """The mount points (with file-system type) the job's files lie on: the longest mount prefix of each name."""
    mounts = sorted(getattr(report, "mounts", None) or [], key=lambda m: -len(m[0]))
    used: dict[str, str] = {}
    for name in files:
        for point, fstype in mounts:
            # names such as <STDOUT> are no paths and lie on no mount
            if str(name).startswith(point.rstrip("/") + "/"):
                used[point] = fstype
                break
    return ", ".join(f"{p} ({t})" for p, t in sorted(used.items())) or "none recorded"


def _modules(c: pd.DataFrame, sums: pd.Series, unknown: pd.Series, nprocs: int,
             runtime: Optional[float]) -> pd.DataFrame:
    rows = []
    for key, label in MODULES.items():
        if key not in sums.index.get_level_values(0):
            continue
        s = sums.loc[key]
        # a -1 in any record means "not recorded": the time is unknown, not a negative number of seconds
        times = [None if unknown.get((key, f"F_{k}_TIME"), False) else float(s.get(f"F_{k}_TIME", 0.0))
                 for k in ("READ", "WRITE", "META")]
        per_proc = None if None in times else sum(times) / nprocs
        rows.append({
            "module": label, "files": int(c.loc[c["module"] == key, "file"].nunique()),
            "bytes_read": _total(sums, unknown, key, ("BYTES_READ",)) if key != "H5F" else 0,
            "bytes_written": _total(sums, unknown, key, ("BYTES_WRITTEN",)) if key != "H5F" else 0,
            "read_time_s": times[0], "write_time_s": times[1], "meta_time_s": times[2],
            "io_time_per_proc_s": per_proc,
            "io_pct_of_runtime": 100 * per_proc / runtime if runtime and per_proc is not None else None,
        })
    df = pd.DataFrame(rows, columns=["module", "files", "bytes_read", "bytes_written", "read_time_s",
                                     "write_time_s", "meta_time_s", "io_time_per_proc_s", "io_pct_of_runtime"])
    return df.astype({"bytes_read": "Int64", "bytes_written": "Int64"})


def _operations(sums: pd.Series, unknown: pd.Series) -> pd.DataFrame:
    ops = ["opens", "reads", "writes", "seeks", "stats", "mmaps", "fsyncs", "flushes", "collective opens",
           "collective reads", "collective writes"]
    rows = []
    for key, table in OPERATIONS.items():
        if key not in sums.index.get_level_values(0):
            continue
        row: dict[str, Any] = {"module": MODULES[key]}
        for op, names in table.items():
            row[op] = _total(sums, unknown, key, names)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["module", *ops]).dropna(axis=1, how="all")
    return df.astype({op: "Int64" for op in ops if op in df.columns})


def _total(sums: pd.Series, unknown: pd.Series, key: str, names: "tuple[str, ...]") -> Optional[int]:
    """The sum of ``key``'s counters ``names`` over all records; None when the module lacks them or a record
    holds Darshan's -1 (not recorded, e.g. POSIX_MMAPS when mmap is not instrumented)."""
    present = [n for n in names if (key, n) in sums.index]
    if not present or any(unknown.get((key, n), False) for n in present):
        return None
    return int(sum(sums[(key, n)] for n in present))


def _categories(c: pd.DataFrame) -> pd.DataFrame:
    """Files per category by bytes moved over all ranks (Darshan's rule), with their bytes and the largest
    offset touched + 1 (POSIX and STDIO record it)."""
    rows = []
    for key in _CATEGORISED:
        m = c[(c["module"] == key) & c["counter"].isin(["BYTES_READ", "BYTES_WRITTEN", "MAX_BYTE_READ",
                                                          "MAX_BYTE_WRITTEN"])]
        if not len(m):
            continue
        per = m.pivot_table(index="file", columns="counter", values="value", aggfunc="sum", fill_value=0)
        mx = m[m["counter"].str.startswith("MAX_")].groupby("file")["value"].max()
        nfiles = c.loc[c["module"] == key, "file"].nunique()
        r = per.get("BYTES_READ", pd.Series(0.0, index=per.index))
        w = per.get("BYTES_WRITTEN", pd.Series(0.0, index=per.index))
        for label, sel in (("read-only", (r > 0) & (w == 0)), ("write-only", (r == 0) & (w > 0)),
                           ("read-write", (r > 0) & (w > 0))):
            files = per.index[sel]
            size = mx.reindex(files).max() if len(files) and len(mx) else None
            rows.append({"module": MODULES[key], "category": label, "files": int(sel.sum()),
                         "bytes_read": int(r[sel].sum()), "bytes_written": int(w[sel].sum()),
                         "largest_file_bytes": int(size) + 1 if size is not None and size == size and size >= 0
                         else None})
        rows.append({"module": MODULES[key], "category": "neither (opened, stat'ed, ...)",
                     "files": int(nfiles - ((r > 0) | (w > 0)).sum()), "bytes_read": 0, "bytes_written": 0,
                     "largest_file_bytes": None})
    df = pd.DataFrame(rows, columns=["module", "category", "files", "bytes_read", "bytes_written",
                                     "largest_file_bytes"])
    return df.astype({"largest_file_bytes": "Int64"})


# -- heat map ------------------------------------------------------------------------------------------


#: the columns :func:`heatmap_df` reads
_HEATMAP_COLUMNS = ("layer", "name", "pid", "tid", "rank", "start_ns", "end_ns", "bytes")


def heatmap_df(frame: pd.DataFrame, bins: int = _HEATMAP_BINS) -> "tuple[pd.DataFrame, str]":
    """Bytes moved per time bin × rank, for reads and writes, from the DXT segments of one module (POSIX when
    present, else MPI-IO; the two count the same bytes at two levels).

    Each segment's bytes are spread over the bins it spans in proportion to the time it spent in each (so a long
    write does not pile up in its first bin). Returns ``(df, module)``; ``df`` has columns ``op`` (read/write),
    ``rank``, ``bin``, ``t0_s``/``t1_s`` (bin edges, s since the first segment) and ``bytes``.
    """
    mask = dxt_rows(frame)
    layers = set(as_text(frame.loc[mask, "layer"]).unique())
    layer = "posix" if "posix" in layers else "mpiio"
    seg = frame.loc[mask & (frame["layer"] == layer).to_numpy(), ["name", "rank", "start_ns", "end_ns", "bytes"]]
    cols = ["op", "rank", "bin", "t0_s", "t1_s", "bytes"]
    if not len(seg):
        return pd.DataFrame(columns=cols), "POSIX"
    t0 = int(seg["start_ns"].min())
    span = max(int(seg["end_ns"].max()) - t0, 1)
    edges = t0 + np.linspace(0, span, bins + 1)
    start, end = seg["start_ns"].to_numpy(np.float64), seg["end_ns"].to_numpy(np.float64)
    nbytes = seg["bytes"].fillna(0).to_numpy(np.float64)
    dur = np.maximum(end - start, 0.0)
    ranks = np.sort(seg["rank"].unique())
    rank_ix = np.searchsorted(ranks, seg["rank"].to_numpy())
    out = []
    for op in ("read", "write"):
        sel = (seg["name"] == op).to_numpy()
        grid = np.zeros((len(ranks), bins))
        first = np.clip(np.searchsorted(edges, start[sel], side="right") - 1, 0, bins - 1)
        last = np.clip(np.searchsorted(edges, end[sel], side="left") - 1, 0, bins - 1)
        one = (first == last) | (dur[sel] == 0)  # most segments: inside one bin
        np.add.at(grid, (rank_ix[sel][one], first[one]), nbytes[sel][one])
        for s, e, d, b, fb, lb, ri in zip(start[sel][~one], end[sel][~one], dur[sel][~one], nbytes[sel][~one],
                                          first[~one], last[~one], rank_ix[sel][~one]):
            lo, hi = np.maximum(edges[fb:lb + 1], s), np.minimum(edges[fb + 1:lb + 2], e)
            grid[ri, fb:lb + 1] += b * np.maximum(hi - lo, 0) / d
        r_ix, b_ix = np.nonzero(grid >= 0)
        out.append(pd.DataFrame({"op": op, "rank": ranks[r_ix], "bin": b_ix, "t0_s": (edges[b_ix] - t0) / 1e9,
                                 "t1_s": (edges[b_ix + 1] - t0) / 1e9, "bytes": grid[r_ix, b_ix]}))
    return pd.concat(out, ignore_index=True), {"posix": "POSIX", "mpiio": "MPI-IO"}[layer]


def plot_dxt_heatmap(frame: pd.DataFrame, bins: int = _HEATMAP_BINS) -> "Figure":
    """Heat maps of bytes read (top) and written (bottom) per time bin × rank from the DXT segments, each with
    the total per bin above it; colours from :data:`trace_merge.plots.IO_COLOURS`."""
    from matplotlib.colors import LinearSegmentedColormap

    from trace_merge.plots import IO_COLOURS, _new_figure

    df, module = heatmap_df(frame, bins)
    if not len(df):
        raise ValueError("no DXT segments in this run (Darshan ran without DXT_ENABLE_IO_TRACE=1)")
    ranks = np.sort(df["rank"].unique())
    span = float(df["t1_s"].max())
    fig = _new_figure((9, 2.6 + 2 * min(0.18 * len(ranks), 3.0)))
    grid = fig.add_gridspec(4, 2, height_ratios=[1, 3, 1, 3], width_ratios=[40, 1])
    for row, (op, colour) in enumerate(IO_COLOURS.items()):
        part = df[df["op"] == op]
        z = np.zeros((len(ranks), bins))
        z[np.searchsorted(ranks, part["rank"].to_numpy()), part["bin"].to_numpy()] = part["bytes"].to_numpy()
        top = fig.add_subplot(grid[2 * row, 0])
        ax = fig.add_subplot(grid[2 * row + 1, 0], sharex=top)
        cax = fig.add_subplot(grid[2 * row + 1, 1])
        cmap = LinearSegmentedColormap.from_list(op, ["#ffffff", colour])
        mesh = ax.pcolormesh(np.linspace(0, span, bins + 1), np.arange(len(ranks) + 1), z / 1e6, cmap=cmap,
                             vmin=0, shading="flat")
        top.bar(np.linspace(0, span, bins + 1)[:-1], z.sum(axis=0) / 1e6, width=span / bins, align="edge",
                color=colour)
        top.set_ylabel("MB", fontsize="small")
        top.tick_params(labelbottom=False, labelsize="small")
        top.set_title(f"{module} bytes {'read' if op == 'read' else 'written'}: {size_text(z.sum())}",
                      fontsize="medium", loc="left")
        step = max(1, len(ranks) // 16)
        ax.set_yticks(np.arange(len(ranks))[::step] + 0.5, [str(r) for r in ranks[::step]], fontsize="small")
        ax.set_ylabel("rank")
        fig.colorbar(mesh, cax=cax).set_label("MB per bin", fontsize="small")
        if row == 1:
            ax.set_xlabel(f"time since the first DXT segment (s); {bins} bins of {span / bins:.3g} s")
        else:
            ax.tick_params(labelbottom=False)
    fig.suptitle("DXT heat map: bytes moved per rank over time")
    return fig


# -- text and HTML -------------------------------------------------------------------------------------


def _job_lines(view: DarshanView) -> list[str]:
    if not view.job:
        return ["  (no job header)"]
    lines = []
    for job in view.job:
        width = max(len(k) for k in job)
        lines += [f"  {k:<{width}}  {'-' if v is None else v}" for k, v in job.items()]
    return lines


def _shown(df: pd.DataFrame) -> pd.DataFrame:
    """Integer columns as text with thousands separators, "-" for unknown (pandas prints <NA>)."""
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_integer_dtype(out[col].dtype):
            out[col] = [f"{v:,}" if v is not pd.NA else "-" for v in out[col]]
    return out


def view_text(view: DarshanView, *, aligned: bool = False) -> str:
    """The view as text tables (``trace-merge summary``)."""
    from trace_merge.formatting import frame_text

    def _frame_text(df: pd.DataFrame) -> str:
        return frame_text(_shown(df))

    lines = ["job context:", *_job_lines(view)]
    lines += [f"note: {n}" for n in view.notes]
    lines += ["", f"I/O per module (times: summed over ranks; I/O cost = read + write + metadata time ÷ "
                  f"{view.nprocs} process(es), as % of the run time; modules nest, so their times overlap):",
              _frame_text(view.modules)]
    lines += ["", "operation counts (MPI-IO: independent + collective + non-blocking):",
              _frame_text(view.operations)]
    lines += ["", "file categories (by bytes moved, all ranks together):", _frame_text(view.files)]
    dxt = (f"DXT: {view.dxt_segments:,} segments; the heat map of bytes per rank over time is in "
           "`trace-merge report`") if view.dxt_segments else "DXT: none (Darshan ran without DXT_ENABLE_IO_TRACE=1)"
    lines += ["", dxt]
    if aligned and view.dxt_segments:
        lines.append("the DXT segments are on one clock with the app phases: `trace-merge report` (timeline) and "
                     "`trace-merge export --perfetto` show each inside the phase that made it")
    return "\n".join(lines)


def html_sections(run: "Run", view: DarshanView, *, aligned: bool = False) -> list[str]:
    """The view as HTML sections of the report (:mod:`trace_merge.report`)."""
    from trace_merge.html_parts import figure as _figure, key_values as _kv, table as _table

    level = "h3" if aligned else "h2"
    out = [] if not aligned else ["<h2>Drill-down: the Darshan log</h2>"]
    for job in view.job:
        out += [f"<{level}>Job context: {html.escape(str(job['log']))}</{level}>", _kv(job)]
    out += [f'<p class="warn">{html.escape(n)}</p>' for n in view.notes]
    out += [f"<{level}>I/O per module</{level}>",
            f"<p>Bytes and cumulative times over all ranks; I/O cost = read + write + metadata time ÷ {view.nprocs} "
            "process(es), as a share of the run time (PyDarshan's “I/O Cost”). Modules nest (H5D over MPI-IO over "
            "POSIX), so their times overlap.</p>", _table(view.modules),
            f"<{level}>Operation counts</{level}>",
            "<p>MPI-IO reads, writes and opens are independent + collective (+ non-blocking); the collective ones "
            "are also shown apart.</p>", _table(view.operations),
            f"<{level}>File categories</{level}>",
            "<p>Files by bytes moved over all ranks (Darshan's rule); “neither”: opened or stat'ed only.</p>",
            _table(view.files),
            f"<{level}>DXT heat map</{level}>"]
    if view.dxt_segments:
        if aligned:
            out.append("<p>The DXT segments are on one clock with the app phases (docs/frame.md, clocks): the "
                       "timeline excerpt above and <code>trace-merge export --perfetto</code> show each one inside "
                       "the phase that made it.</p>")
        out.append(_figure("DXT heat map", lambda: plot_dxt_heatmap(run.rows_where(dxt_rows, _HEATMAP_COLUMNS))))
    else:
        out.append("<p><i>No DXT segments: Darshan ran without DXT_ENABLE_IO_TRACE=1.</i></p>")
    return out


def _headline(run: "Run", view: DarshanView) -> str:
    logs = len(view.job)
    return (f"{run.path}: Darshan log{'s' if logs > 1 else ''} of {view.nprocs:,} process(es), "
            f"{len(run.counters):,} counter rows, {view.dxt_segments:,} DXT segments; no training phases "
            "(no app or framework layer), so no training breakdown or verdict")


def summary_text(run: "Run", view: DarshanView) -> str:
    """``trace-merge summary`` of a run that is only Darshan data: a headline, the warnings and the view."""
    lines = [_headline(run, view)]
    found = run.findings()
    lines.append(f"findings ({len(found)}; rules: docs/findings.md, file-system findings):")
    lines += [f"  {i}. {f.text()}" for i, f in enumerate(found, 1)]
    if run.warnings:
        lines.append(f"warnings ({len(run.warnings)}):")
        lines += [f"  - {w}" for w in run.warnings]
    return "\n".join([*lines, "", view_text(view)])


def report_sections(run: "Run", view: DarshanView) -> list[str]:
    """The whole report body of a run that is only Darshan data (:func:`trace_merge.report.render_report`)."""
    from trace_merge import __version__

    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in run.warnings) or "<li>none</li>"
    return [f"<h1>trace-merge report — {html.escape(run.label)}</h1>",
            f'<p class="sub">generated {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC} by trace_merge '
            f"{__version__}: the Darshan log view</p>",
            f"<p>{html.escape(_headline(run, view))}.</p>",
            f"<h2>Warnings ({len(run.warnings)})</h2><ul class='warn'>{warnings}</ul>",
            *html_sections(run, view)]
