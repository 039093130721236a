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
* the POSIX access pattern -- reads and writes against the sequential and the consecutive ones
  (:func:`access_pattern`);
* access sizes -- reads and writes per Darshan size bin (:func:`access_sizes`) and the four most common
  sizes (:func:`common_sizes`);
* file categories -- read-only / write-only / read-write files (by bytes moved, Darshan's rule), their bytes and
  their mean and largest size;
* data per mount point -- POSIX + STDIO files and bytes per mount of the log's mount table (:func:`_mounts`);
* time per rank -- the straggler evidence: slowest / fastest / median rank on own files, Darshan's
  slowest/fastest-rank counters on shared ones (:func:`rank_times`);
* a DXT heat map: bytes read and written per time bin × rank (:func:`plot_dxt_heatmap`).

The report draws the I/O cost, operation counts, access pattern, access sizes, mounts and time per rank too
(``plot_*``). Totals equal PyDarshan's (``tests/test_darshan_view.py`` checks every table against its API on its
example logs). What only this toolkit adds: when the run also has app phases, the DXT rows are on one clock with
them (``trace_merge.dxt_clock``), so the report's timeline and ``trace-merge export --perfetto`` show each segment
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
    access_sizes: pd.DataFrame = field(default_factory=pd.DataFrame)
    common_sizes: pd.DataFrame = field(default_factory=pd.DataFrame)
    mounts: pd.DataFrame = field(default_factory=pd.DataFrame)
    rank_times: pd.DataFrame = field(default_factory=pd.DataFrame)
    access_pattern: pd.DataFrame = field(default_factory=pd.DataFrame)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (``trace-merge summary --json``)."""
        from trace_merge.formatting import json_records as _records

        return {"job": self.job, "nprocs": self.nprocs, "runtime_s": self.runtime_s,
                "modules": _records(self.modules), "operations": _records(self.operations),
                "files": _records(self.files), "access_sizes": _records(self.access_sizes),
                "common_sizes": _records(self.common_sizes), "mounts": _records(self.mounts),
                "rank_times": _records(self.rank_times), "access_pattern": _records(self.access_pattern),
                "dxt_segments": self.dxt_segments, "notes": self.notes}


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
    c = long_counters(counters)
    if not len(c):
        return None
    headers = [_job_header(p) for p in _logs(run)]
    job = [j for j, _ in headers]
    mount_table = sorted({m for _, mounts in headers for m in mounts}, key=lambda m: -len(m[0]))
    mounts = _mounts(c, mount_table)
    for j, table in headers:  # each log's own mount table against all the run's files
        used = _mounts(c, table) if table else pd.DataFrame(columns=["mount", "fs_type"])
        named = [f"{m} ({t})" for m, t in zip(used["mount"], used["fs_type"]) if t]
        j["mounts used"] = ", ".join(named) or "none recorded"
    notes = []
    nprocs = sum(int(j["nprocs"]) for j in job if j.get("nprocs")) if job else 0
    if not nprocs:
        nprocs = max(1, int(counters["rank"].max()) + 1)
        notes.append(f"no job header (the .darshan log is not beside the run): nprocs {nprocs} is the highest "
                     "rank seen + 1")
    if not mount_table:
        notes.append("no mount table in the log: data per mount point is by top-level directory (PyDarshan's rule)")
    runtime = max((j["run time (s)"] for j in job if j.get("run time (s)") is not None), default=None)
    by = c.groupby(["module", "counter"], sort=False)["value"]
    sums, unknown = by.sum(), by.min() < 0
    return DarshanView(job=job, modules=_modules(c, sums, unknown, nprocs, runtime),
                       operations=_operations(sums, unknown),
                       files=_categories(c), nprocs=nprocs, runtime_s=runtime,
                       dxt_segments=run.dxt_segments(), notes=notes, access_sizes=access_sizes(c),
                       common_sizes=common_sizes(c), mounts=mounts, rank_times=rank_times(c, nprocs),
                       access_pattern=access_pattern(sums, unknown))


def long_counters(counters: pd.DataFrame) -> pd.DataFrame:
    """A counters table (:attr:`trace_merge.run.Run.counters`) as the view's tables read it: one row per
    record and counter, columns ``module`` (a key of :data:`MODULES`), ``counter`` (the name without the module),
    ``rank``, ``file``, ``value``; other modules' counters left out."""
    parts = as_text(counters["counter"]).str.split("_", n=1)
    c = pd.DataFrame({"module": parts.str[0].to_numpy(), "counter": parts.str[1].to_numpy(),
                      "rank": counters["rank"].to_numpy(), "file": as_text(counters["file"]).to_numpy(),
                      "value": counters["value"].to_numpy()})
    return c[c["module"].isin(list(MODULES))]


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


def _job_header(path: Path) -> "tuple[dict[str, Any], list[tuple[str, str]]]":
    """One log's job context and mount table (``(mount point, fs type)`` pairs), read with PyDarshan after the
    reader's structural check (PyDarshan's C code crashes on a broken log)."""
    from trace_merge.readers import darshan as reader

    reader.validate(path)
    try:
        import darshan
    except ImportError:
        raise TraceInputError(path, "reading Darshan logs needs PyDarshan: "
                              "pip install 'dlio-layers[darshan]'") from None
    try:
        report = darshan.DarshanReport(os.fspath(path), read_all=False)
    except Exception as err:  # PyDarshan raises bare RuntimeError/ValueError on bad logs
        raise TraceInputError(path, f"PyDarshan cannot read this log ({err})") from None
    meta = report.metadata
    job = meta.get("job", {})
    start, end = reader.job_time_ns(job, "start"), reader.job_time_ns(job, "end")
    runtime = job.get("run_time")
    if runtime is None and start is not None and end is not None:
        runtime = (end - start) / 1e9 + 1  # whole seconds in old logs: Darshan counts the last one
    exe = meta.get("exe") or ""
    mounts = [(str(point), str(fstype)) for point, fstype in (getattr(report, "mounts", None) or [])]
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
        "mounts used": None,  # filled by darshan_view from the per-mount table
    }, mounts


def _utc(ns: Optional[int]) -> Optional[str]:
    if ns is None:
        return None
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


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
        known = [t for t in times if t is not None]
        per_proc = sum(known) / nprocs if len(known) == len(times) else None
        rows.append({
            "module": label, "files": int(c.loc[c["module"] == key, "file"].nunique()),
            "bytes_read": _total(sums, unknown, key, ("BYTES_READ",)) if key != "H5F" else 0,
            "bytes_written": _total(sums, unknown, key, ("BYTES_WRITTEN",)) if key != "H5F" else 0,
            "read_time_s": times[0], "write_time_s": times[1], "meta_time_s": times[2],
            "io_time_per_proc_s": per_proc,
            "io_pct_of_runtime": 100 * per_proc / runtime if runtime and per_proc is not None else None,
            "MB_per_s_by_slowest": _rate_by_slowest(c[c["module"] == key]) if key != "H5F" else None,
        })
    df = pd.DataFrame(rows, columns=["module", "files", "bytes_read", "bytes_written", "read_time_s",
                                     "write_time_s", "meta_time_s", "io_time_per_proc_s", "io_pct_of_runtime",
                                     "MB_per_s_by_slowest"])
    return df.astype({"bytes_read": "Int64", "bytes_written": "Int64"})


def _rate_by_slowest(m: pd.DataFrame) -> Optional[float]:
    """Darshan's I/O performance estimate ("agg_perf_by_slowest", PyDarshan's per-module "I/O performance
    estimate") in MB/s: all bytes moved ÷ (the slowest rank's time on its own files + each shared file's
    slowest-rank time) -- what the job would reach if the slowest rank set the pace."""
    m = m[m["value"] >= 0]
    moved = m.loc[m["counter"].isin(["BYTES_READ", "BYTES_WRITTEN"]), "value"].sum()
    own = m[(m["rank"] >= 0) & m["counter"].isin(["F_READ_TIME", "F_WRITE_TIME", "F_META_TIME"])]
    slowest = own.groupby("rank")["value"].sum().max() if len(own) else 0.0
    slowest += m.loc[(m["rank"] < 0) & (m["counter"] == "F_SLOWEST_RANK_TIME"), "value"].sum()
    return float(moved / 1e6 / slowest) if slowest > 0 else None


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


def access_pattern(sums: pd.Series, unknown: pd.Series) -> pd.DataFrame:
    """PyDarshan's POSIX "Access Pattern": all reads and writes against the sequential ones (offset above the
    previous request's, ``POSIX_SEQ_*``) and the consecutive ones (offset right where the previous one ended,
    ``POSIX_CONSEC_*``, so also sequential), summed over all records; a share is of the total. Empty without
    POSIX records."""
    cols = ["op", "total", "sequential", "consecutive", "sequential_pct", "consecutive_pct"]
    rows = []
    if "POSIX" in sums.index.get_level_values(0):
        for op, name in (("reads", "READS"), ("writes", "WRITES")):
            total, seq, consec = (_total(sums, unknown, "POSIX", (n,)) for n in (name, f"SEQ_{name}", f"CONSEC_{name}"))
            rows.append({"op": op, "total": total, "sequential": seq, "consecutive": consec,
                         **{f"{k}_pct": 100 * n / total if total and n is not None else None
                            for k, n in (("sequential", seq), ("consecutive", consec))}})
    df = pd.DataFrame(rows, columns=cols)
    return df.astype({"total": "Int64", "sequential": "Int64", "consecutive": "Int64",
                      "sequential_pct": float, "consecutive_pct": float})


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
            # a file's size: its largest offset touched + 1 (PyDarshan's "File Count Summary" sizes)
            size = mx.reindex(files) + 1 if len(files) and len(mx) else pd.Series(dtype=float)
            known = len(size) and size.notna().all() and (size > 0).all()
            rows.append({"module": MODULES[key], "category": label, "files": int(sel.sum()),
                         "bytes_read": int(r[sel].sum()), "bytes_written": int(w[sel].sum()),
                         "mean_file_bytes": int(round(size.mean())) if known else None,
                         "largest_file_bytes": int(size.max()) if known else None})
        rows.append({"module": MODULES[key], "category": "neither (opened, stat'ed, ...)",
                     "files": int(nfiles - ((r > 0) | (w > 0)).sum()), "bytes_read": 0, "bytes_written": 0,
                     "mean_file_bytes": None, "largest_file_bytes": None})
    df = pd.DataFrame(rows, columns=["module", "category", "files", "bytes_read", "bytes_written",
                                     "mean_file_bytes", "largest_file_bytes"])
    return df.astype({"mean_file_bytes": "Int64", "largest_file_bytes": "Int64"})


# -- access sizes, mount points, time per rank --------------------------------------------------------

#: Darshan's access-size bins: counter suffix -> label (Darshan's K, M, G here are powers of 1024)
SIZE_BINS = {"0_100": "0-100", "100_1K": "100-1K", "1K_10K": "1K-10K", "10K_100K": "10K-100K",
             "100K_1M": "100K-1M", "1M_4M": "1M-4M", "4M_10M": "4M-10M", "10M_100M": "10M-100M",
             "100M_1G": "100M-1G", "1G_PLUS": "1G+"}
#: module -> infix of its size-histogram counters (MPI-IO and H5D bin the whole request of a call: ``_AGG_``)
_SIZE_INFIX = {"POSIX": "", "MPIIO": "AGG_", "H5D": "AGG_"}
#: the modules that keep the four most common access sizes (``<M>_ACCESS1..4_ACCESS`` / ``_COUNT``)
_COMMON_SIZED = ("POSIX", "MPIIO", "H5D")
COMMON_SIZES_SHOWN = 4  # as PyDarshan's table
#: the mount of a name that is no path (``<STDOUT>``, an anonymized number)
NO_MOUNT = "(no path: <STDIN>, <STDOUT>, ...)"
#: the modules whose per-rank I/O time is compared, and the shared files shown per module (largest gap first)
_RANKED = ("POSIX", "MPIIO", "STDIO", "H5D")
SHARED_FILES_SHOWN = 5
#: :func:`rank_times`' ``files``: the row over each rank's own files, and the prefix of a shared file's name
OWN_FILES, SHARED = "own files", "shared: "


def _wide(c: pd.DataFrame, key: str, counters: "list[str]") -> pd.DataFrame:
    """``key``'s records, one row per (rank, file), one column per counter of ``counters`` it has."""
    m = c[(c["module"] == key) & c["counter"].isin(counters)]
    if not len(m):
        return pd.DataFrame()
    return m.pivot_table(index=["rank", "file"], columns="counter", values="value", aggfunc="sum")


def access_sizes(c: pd.DataFrame) -> pd.DataFrame:
    """Reads and writes per access-size bin and module, over all records (PyDarshan's "Access Sizes"); a
    counter left at -1 (not recorded) adds nothing."""
    rows = []
    for key, infix in _SIZE_INFIX.items():
        m = c[(c["module"] == key) & (c["value"] >= 0)]
        total = m.groupby("counter")["value"].sum()
        counts = {op: [int(total.get(f"SIZE_{op.upper()}_{infix}{b}", 0)) for b in SIZE_BINS]
                  for op in ("read", "write")}
        if not any(counts["read"]) and not any(counts["write"]):
            continue
        rows += [{"module": MODULES[key], "access_size": label, "reads": r, "writes": w}
                 for label, r, w in zip(SIZE_BINS.values(), counts["read"], counts["write"])]
    return pd.DataFrame(rows, columns=["module", "access_size", "reads", "writes"])


def common_sizes(c: pd.DataFrame, top: int = COMMON_SIZES_SHOWN) -> pd.DataFrame:
    """The ``top`` most common access sizes per module, counts summed over all records' ACCESS1..4 slots
    (PyDarshan's "Common Access Sizes"); ties by the smaller size first."""
    rows = []
    for key in _COMMON_SIZED:
        names = [f"ACCESS{i}_{k}" for i in range(1, 5) for k in ("ACCESS", "COUNT")]
        w = _wide(c, key, names)
        if not len(w):
            continue
        slots = pd.concat([pd.DataFrame({"size": w.get(f"ACCESS{i}_ACCESS"), "count": w.get(f"ACCESS{i}_COUNT")})
                           for i in range(1, 5)]).dropna()
        per = slots[slots["count"] > 0].groupby("size")["count"].sum().reset_index()
        per = per.sort_values(["count", "size"], ascending=[False, True]).head(top)
        rows += [{"module": MODULES[key], "access_bytes": int(s), "access_size": int(s), "count": int(n)}
                 for s, n in zip(per["size"], per["count"])]
    return pd.DataFrame(rows, columns=["module", "access_bytes", "access_size", "count"])


def _mount_of(name: str, table: "list[tuple[str, str]]") -> "tuple[str, str]":
    """The mount point (longest prefix) and fs type of one file name; without a mount table the top-level
    directory (PyDarshan's "Data Access by Category" rule) and type "?"."""
    if not name.startswith("/"):
        return NO_MOUNT, ""
    for point, fstype in table:
        if point == "/" or name.startswith(point.rstrip("/") + "/"):
            return point, fstype
    return ("/" + name.split("/")[1], "?") if not table else ("(on no listed mount)", "")


def _mounts(c: pd.DataFrame, table: "list[tuple[str, str]]") -> pd.DataFrame:
    """Files and bytes per mount point from the POSIX and STDIO records (the levels that reach the file system;
    MPI-IO and HDF5 go through POSIX). ``table``: the job's mounts, longest point first."""
    cols = ["mount", "fs_type", "files", "files_read", "files_written", "bytes_read", "bytes_written"]
    m = c[c["module"].isin(["POSIX", "STDIO"])]
    if not len(m):
        return pd.DataFrame(columns=cols)
    moved = m[m["counter"].isin(["BYTES_READ", "BYTES_WRITTEN"]) & (m["value"] >= 0)]
    per = moved.pivot_table(index="file", columns="counter", values="value", aggfunc="sum")
    per = per.reindex(index=m["file"].unique(), columns=["BYTES_READ", "BYTES_WRITTEN"]).fillna(0.0)
    where = [_mount_of(str(f), table) for f in per.index]
    per["mount"], per["fs_type"] = [w[0] for w in where], [w[1] for w in where]
    out = per.groupby(["mount", "fs_type"]).agg(
        files=("BYTES_READ", "size"), files_read=("BYTES_READ", lambda v: int((v > 0).sum())),
        files_written=("BYTES_WRITTEN", lambda v: int((v > 0).sum())),
        bytes_read=("BYTES_READ", "sum"), bytes_written=("BYTES_WRITTEN", "sum")).reset_index()
    out = out.astype({"files": int, "files_read": int, "files_written": int, "bytes_read": "int64",
                      "bytes_written": "int64"})
    order = (out["bytes_read"] + out["bytes_written"]).sort_values(ascending=False, kind="stable").index
    return out.loc[order, cols].reset_index(drop=True)


def rank_times(c: pd.DataFrame, nprocs: int) -> pd.DataFrame:
    """Straggler evidence: I/O time (read + write + metadata) per rank, per module, from ``c``
    (:func:`long_counters`). The one computation of it: the view shows it for every file, the
    ``rank_io_imbalance`` finding (:mod:`trace_merge.darshan_findings`) reads it for the POSIX records of data files.

    Two kinds of rows: ``own files`` -- each rank's time summed over its per-rank records (slowest, fastest,
    median, mean over the ranks that have such records); and per shared file (one record reduced over all
    ranks by Darshan) its ``F_SLOWEST_RANK_TIME`` / ``F_FASTEST_RANK_TIME`` with their ranks, the mean (the
    summed times ÷ nprocs) and ``sqrt(F_VARIANCE_RANK_TIME)``. ``slowest_over_mean`` is the straggler ratio:
    1 when every rank took as long."""
    rows = []
    times = ["F_READ_TIME", "F_WRITE_TIME", "F_META_TIME"]
    for key in _RANKED:
        m = c[(c["module"] == key) & (c["rank"] >= 0) & c["counter"].isin(times) & (c["value"] >= 0)]
        own = m.groupby("rank")["value"].sum()
        if len(own):
            rows.append({"module": MODULES[key], "files": OWN_FILES, "ranks": len(own),
                         "slowest_rank": int(own.idxmax()), "slowest_s": own.max(), "fastest_rank": int(own.idxmin()),
                         "fastest_s": own.min(), "median_s": own.median(), "mean_s": own.mean(),
                         "stdev_s": own.std(ddof=0)})
        shared = _wide(c[c["rank"] < 0], key, [*times, "F_SLOWEST_RANK_TIME", "F_FASTEST_RANK_TIME",
                                               "SLOWEST_RANK", "FASTEST_RANK", "F_VARIANCE_RANK_TIME"])
        if not len(shared) or "F_SLOWEST_RANK_TIME" not in shared:
            continue
        shared = shared[shared["F_SLOWEST_RANK_TIME"] >= 0]
        gap = shared["F_SLOWEST_RANK_TIME"] - shared.get("F_FASTEST_RANK_TIME", 0.0)
        # stable: of equal gaps the first file in the table comes first, for whoever reads the top row
        top = gap.sort_values(ascending=False, kind="stable").index[:SHARED_FILES_SHOWN]
        for (_, name), r in shared.loc[top].iterrows():
            total = sum(max(float(r.get(t, 0.0)), 0.0) for t in times)
            rows.append({"module": MODULES[key], "files": f"{SHARED}{str(name).rsplit('/', 1)[-1]}", "ranks": nprocs,
                         "slowest_rank": int(r.get("SLOWEST_RANK", -1)), "slowest_s": r["F_SLOWEST_RANK_TIME"],
                         "fastest_rank": int(r.get("FASTEST_RANK", -1)), "fastest_s": r.get("F_FASTEST_RANK_TIME"),
                         "median_s": np.nan, "mean_s": total / nprocs,
                         "stdev_s": float(np.sqrt(max(r.get("F_VARIANCE_RANK_TIME", np.nan), 0.0)))})
    df = pd.DataFrame(rows, columns=["module", "files", "ranks", "slowest_rank", "slowest_s", "fastest_rank",
                                     "fastest_s", "median_s", "mean_s", "stdev_s"])
    df["slowest_over_mean"] = df["slowest_s"] / df["mean_s"].where(df["mean_s"] > 0)
    return df


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

    from trace_merge.plots import IO_COLOURS, new_figure

    df, module = heatmap_df(frame, bins)
    if not len(df):
        raise ValueError("no DXT segments in this run (Darshan ran without DXT_ENABLE_IO_TRACE=1)")
    ranks = np.sort(df["rank"].unique())
    span = float(df["t1_s"].max())
    fig = new_figure((9, 2.6 + 2 * min(0.18 * len(ranks), 3.0)))
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


# -- charts of the tables ------------------------------------------------------------------------------


def plot_io_cost(view: DarshanView) -> "Figure":
    """PyDarshan's "I/O Cost" bar: read / write / metadata time per process for each module, stacked, with the
    share of the run time on the right axis when the run time is known."""
    from trace_merge.plots import CAT_COLOURS, IO_COLOURS, new_figure

    df = view.modules.dropna(subset=["read_time_s", "write_time_s", "meta_time_s"])
    if not len(df):
        raise ValueError("no module records its read, write and metadata times")
    fig = new_figure((6.5, 3.2))
    ax = fig.add_subplot()
    bottom = np.zeros(len(df))
    for part, colour in (("read", IO_COLOURS["read"]), ("write", IO_COLOURS["write"]), ("meta", CAT_COLOURS["comm"])):
        height = df[f"{part}_time_s"].to_numpy(float) / view.nprocs
        ax.bar(df["module"], height, bottom=bottom, color=colour, label=part)
        bottom += height
    ax.set_ylabel("seconds per process")
    ax.legend(fontsize="small", loc="upper left")
    runtime = view.runtime_s
    if runtime:
        top = ax.secondary_yaxis("right", functions=(lambda s: np.divide(np.multiply(100, s), runtime),
                                                     lambda p: np.divide(np.multiply(p, runtime), 100)))
        top.set_ylabel("% of the run time")
    ax.set_title(f"I/O cost: time per process (summed over ranks ÷ {view.nprocs:,})", fontsize="medium", loc="left")
    return fig


#: the ``collective <op>`` columns of the operation counts: a part of ``<op>``, drawn inside its bar
_COLLECTIVE = "collective "


def plot_operations(view: DarshanView) -> "Figure":
    """PyDarshan's "Operation Counts" bars, one panel per module: each operation of :attr:`DarshanView.operations`
    (MPI-IO's collective part hatched inside its bar); a count Darshan did not record is named, not drawn as 0."""
    from trace_merge.plots import CAT_COLOURS, new_figure

    df = view.operations
    if not len(df):
        raise ValueError("no operation counters")
    fig = new_figure((9, 2.3 * len(df)))
    key_of = {label: key for key, label in MODULES.items()}
    for i, (_, row) in enumerate(df.iterrows()):
        ax = fig.add_subplot(len(df), 1, i + 1)
        # the module's own operations (another module's column is NA here); a column all NA is not in the table
        own = [op for op in OPERATIONS[key_of[row["module"]]] if not op.startswith(_COLLECTIVE)]
        ops = [op for op in own if not pd.isna(row.get(op, np.nan))]
        missing = [op for op in own if op not in ops]
        counts = [int(row[op]) for op in ops]
        bars = ax.bar(ops, counts, color=CAT_COLOURS["io"], alpha=0.45, label="all")
        ax.bar_label(bars, labels=[f"{n:,}" for n in counts], fontsize="x-small")
        coll = [(op, int(row[_COLLECTIVE + op])) for op in ops if not pd.isna(row.get(_COLLECTIVE + op, np.nan))]
        if coll:
            ax.bar([op for op, _ in coll], [n for _, n in coll], color="none", edgecolor=CAT_COLOURS["io"],
                   hatch="///", label="collective")
            ax.legend(fontsize="small")
        ax.set_title(f"{row['module']} operations" + (f" (not recorded: {', '.join(missing)})" if missing else ""),
                     fontsize="medium", loc="left")
        ax.set_ylabel("count")
        ax.margins(y=0.15)
    return fig


def plot_access_pattern(view: DarshanView) -> "Figure":
    """PyDarshan's POSIX "Access Pattern": for reads and for writes, all of them, the sequential and the
    consecutive ones, side by side."""
    from trace_merge.plots import IO_COLOURS, new_figure

    df = view.access_pattern.dropna(subset=["total"])
    if not len(df):
        raise ValueError("no POSIX read and write counters")
    fig = new_figure((6.5, 3.2))
    ax = fig.add_subplot()
    x = np.arange(len(df))
    for shift, kind, alpha in ((-0.27, "total", 1.0), (0, "sequential", 0.6), (0.27, "consecutive", 0.3)):
        counts = df[kind].astype("Float64").fillna(0).to_numpy(float)
        bars = ax.bar(x + shift, counts, width=0.27, alpha=alpha, label=kind, edgecolor="black", linewidth=0.3,
                      color=[IO_COLOURS[op[:-1]] for op in df["op"]])
        ax.bar_label(bars, labels=["not recorded" if pd.isna(n) else f"{n:,}" for n in df[kind]], fontsize="x-small")
    ax.set_xticks(x, list(df["op"]))
    ax.set_ylabel("operations")
    ax.margins(y=0.15)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title("POSIX access pattern (consecutive ⊂ sequential ⊂ total)", fontsize="medium", loc="left")
    return fig


def plot_access_sizes(view: DarshanView) -> "Figure":
    """PyDarshan's "Access Sizes": reads and writes per Darshan size bin, one panel per module."""
    from trace_merge.plots import IO_COLOURS, new_figure

    df = view.access_sizes
    if not len(df):
        raise ValueError("no access-size counters (POSIX_SIZE_*, MPIIO_SIZE_*_AGG_*, H5D_SIZE_*_AGG_*)")
    mods = list(dict.fromkeys(df["module"]))
    fig = new_figure((9, 2.4 * len(mods)))
    x = np.arange(len(SIZE_BINS))
    for i, mod in enumerate(mods):
        ax = fig.add_subplot(len(mods), 1, i + 1)
        part = df[df["module"] == mod]
        for shift, op in ((-0.2, "reads"), (0.2, "writes")):
            bars = ax.bar(x + shift, part[op].to_numpy(), width=0.4, color=IO_COLOURS[op[:-1]], label=op)
            ax.bar_label(bars, labels=[f"{v:,}" if v else "" for v in part[op]], fontsize="x-small")
        ax.set_xticks(x, list(SIZE_BINS.values()), fontsize="small")
        ax.set_ylabel("operations")
        ax.set_title(f"{mod} access sizes (bytes; Darshan's bins, K = 1024)", fontsize="medium", loc="left")
        ax.legend(fontsize="small")
    return fig


def plot_mounts(view: DarshanView) -> "Figure":
    """PyDarshan's "Data Access by Category": bytes and files read / written per mount point."""
    from trace_merge.plots import IO_COLOURS, new_figure

    df = view.mounts
    if not len(df):
        raise ValueError("no POSIX or STDIO records")
    fig = new_figure((9, 1.0 + 0.7 * len(df)))
    y = np.arange(len(df))[::-1]
    labels = [f"{m} ({t})" if t else m for m, t in zip(df["mount"], df["fs_type"])]
    for i, (what, unit) in enumerate((("bytes", "MB"), ("files", "files"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for shift, op in ((0.2, "read"), (-0.2, "written")):
            col = f"{what}_{op}"
            vals = df[col].to_numpy(float) / (1e6 if what == "bytes" else 1)
            bars = ax.barh(y + shift, vals, height=0.4, color=IO_COLOURS["read" if op == "read" else "write"],
                           label=f"{what} {op}")
            texts = [size_text(v) if what == "bytes" else f"{int(v):,}" for v in df[col]]
            ax.bar_label(bars, labels=texts, fontsize="x-small", padding=2)
        ax.set_yticks(y, labels if i == 0 else [""] * len(y), fontsize="small")
        ax.set_xlabel(unit)
        ax.margins(x=0.25)
        ax.legend(fontsize="small", loc="lower left", bbox_to_anchor=(0, 1), ncol=2, frameon=False)
    fig.suptitle("Data per mount point (POSIX + STDIO)", fontsize="medium")
    return fig


def plot_rank_times(view: DarshanView) -> "Figure":
    """Time per rank: for each row of :attr:`DarshanView.rank_times`, the fastest-to-slowest range of the ranks'
    I/O time, with the mean (and, for own files, the median) marked."""
    from trace_merge.plots import CAT_COLOURS, new_figure

    df = view.rank_times
    if not len(df):
        raise ValueError("no read/write/metadata times per rank")
    fig = new_figure((9, 1.0 + 0.45 * len(df)))
    ax = fig.add_subplot()
    y = np.arange(len(df))[::-1]
    ax.hlines(y, df["fastest_s"], df["slowest_s"], color=CAT_COLOURS["io"], linewidth=6, alpha=0.35)
    ax.plot(df["slowest_s"], y, "|", color=CAT_COLOURS["io"], markersize=14, label="slowest rank")
    ax.plot(df["fastest_s"], y, "|", color=CAT_COLOURS["compute"], markersize=14, label="fastest rank")
    ax.plot(df["mean_s"], y, "o", color="black", markersize=4, label="mean")
    ax.plot(df["median_s"], y, "D", color="#7f7f7f", markersize=4, label="median")
    for yy, (_, r) in zip(y, df.iterrows()):
        ax.annotate(f"rank {r['slowest_rank']}", (r["slowest_s"], yy), xytext=(6, -3),
                    textcoords="offset points", fontsize="x-small")
    ax.set_yticks(y, [f"{m}: {f}" for m, f in zip(df["module"], df["files"])], fontsize="small")
    ax.set_xlabel("I/O time per rank (read + write + metadata, s)")
    ax.margins(x=0.12)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title("Time per rank: the spread between the fastest and the slowest rank", fontsize="medium",
                 loc="left")
    return fig


# -- text and HTML -------------------------------------------------------------------------------------


def _job_lines(view: DarshanView, width: int) -> "list[str]":
    """The job headers as key-value lines within ``width``, a long value (a command line) wrapped in its own
    column; a path too long for the column starts under its key instead of past the width beside it."""
    import textwrap

    from trace_merge.formatting import Preformatted

    if not view.job:
        return ["  (no job header)"]
    lines: list[str] = []
    for job in view.job:
        keys = max(len(k) for k in job)
        pad = " " * (keys + 4)
        for k, v in job.items():
            value = textwrap.wrap("-" if v is None else str(v), max(width - len(pad), 20), break_long_words=False,
                                  break_on_hyphens=False) or [""]
            head = f"  {k:<{keys}}  "
            if len(head) + len(value[0]) <= width:
                head, value = head + value[0], value[1:]
            lines.append(Preformatted("\n".join([head.rstrip(), *(pad + x for x in value)])))
    return lines


def _ids(df: pd.DataFrame) -> pd.DataFrame:
    """Rank columns as identifiers (no thousands separators)."""
    return df.astype({c: str for c in ("slowest_rank", "fastest_rank") if c in df.columns})


def _access_size_lines(view: DarshanView) -> list[str]:
    """One line per module and direction: the non-empty bins and the total."""
    lines = []
    for mod, part in view.access_sizes.groupby("module", sort=False):
        for op in ("reads", "writes"):
            bins = ", ".join(f"{b} {n:,}" for b, n in zip(part["access_size"], part[op]) if n)
            lines.append(f"  {mod} {op}: {bins or 'none'} ({int(part[op].sum()):,} in all)")
    return lines or ["  (none)"]


#: the notes under each table, shared by the text and the HTML
_ABOUT = {
    "modules": "times summed over ranks; I/O cost = read + write + metadata time ÷ {nprocs} process(es), as % of "
               "the run time (PyDarshan's “I/O Cost”); MB_per_s_by_slowest = all bytes ÷ the slowest rank's I/O "
               "time (Darshan's performance estimate); modules nest (H5D over MPI-IO over POSIX), so their times "
               "overlap",
    "operations": "MPI-IO reads, writes and opens are independent + collective (+ non-blocking); the collective "
                  "ones are also shown apart",
    "access_pattern": "POSIX reads and writes, summed over all records: sequential = at an offset above the previous "
                      "one's (POSIX_SEQ_*), consecutive = right where the previous one ended (POSIX_CONSEC_*), so "
                      "also sequential; total − sequential is what the random-access finding counts",
    "access_sizes": "operations per request size, Darshan's bins (K, M, G = 1024, 1024², 1024³ bytes); MPI-IO and "
                    "H5D bin the whole request of a call",
    "common_sizes": "the four most frequent request sizes per module (ACCESS1..4 counters summed over records)",
    "files": "files by bytes moved over all ranks (Darshan's rule); a file's size is its largest offset touched + 1; "
             "“neither”: opened or stat'ed only",
    "mounts": "POSIX and STDIO files and bytes per mount point (the longest mount-table prefix of each name)",
    "rank_times": "I/O time (read + write + metadata) per rank: “own files” over each rank's per-rank records; a "
                  "shared file from Darshan's slowest/fastest-rank counters, mean = summed time ÷ nprocs, "
                  "stdev = √F_VARIANCE_RANK_TIME; slowest_over_mean ≫ 1 marks a straggler",
}


def view_text(view: DarshanView, width: int, *, aligned: bool = False) -> str:
    """The view as text tables (``trace-merge summary``), every line within ``width`` but a token longer than it
    (:func:`trace_merge.formatting.wrap`)."""
    from trace_merge.formatting import frame_text, wrap

    def table(df: pd.DataFrame) -> str:
        return frame_text(_ids(df), width=width)

    lines = ["job context:", *_job_lines(view, width)]
    lines += [f"note: {n}" for n in view.notes]
    lines += ["", f"I/O per module ({_ABOUT['modules'].format(nprocs=view.nprocs)}):", table(view.modules)]
    lines += ["", f"operation counts ({_ABOUT['operations']}):", table(view.operations)]
    lines += ["", f"access pattern ({_ABOUT['access_pattern']}):", table(view.access_pattern)]
    lines += ["", f"access sizes ({_ABOUT['access_sizes']}):", *_access_size_lines(view)]
    lines += ["", f"common access sizes ({_ABOUT['common_sizes']}):", table(view.common_sizes)]
    lines += ["", f"file categories ({_ABOUT['files']}):", table(view.files)]
    lines += ["", f"data per mount point ({_ABOUT['mounts']}):", table(view.mounts)]
    lines += ["", f"time per rank ({_ABOUT['rank_times']}):", table(view.rank_times)]
    dxt = (f"DXT: {view.dxt_segments:,} segments; the heat map of bytes per rank over time is in "
           "`trace-merge report`") if view.dxt_segments else "DXT: none (Darshan ran without DXT_ENABLE_IO_TRACE=1)"
    lines += ["", dxt]
    if aligned and view.dxt_segments:
        lines.append("the DXT segments are on one clock with the app phases: `trace-merge report` (timeline) and "
                     "`trace-merge export --perfetto` show each inside the phase that made it")
    return wrap(lines, width)


def html_sections(run: "Run", view: DarshanView, *, aligned: bool = False) -> list[str]:
    """The view as HTML sections of the report (:mod:`trace_merge.report`)."""
    from trace_merge.html_parts import figure as _figure
    from trace_merge.html_parts import key_values as _kv
    from trace_merge.html_parts import table as _table

    level = "h3" if aligned else "h2"

    def section(title: str, about: str, *body: str) -> list[str]:
        return [f"<{level}>{title}</{level}>", f"<p>{html.escape(about[:1].upper() + about[1:])}.</p>", *body]

    sizes = view.access_sizes.pivot_table(index="module", columns="access_size", values=["reads", "writes"],
                                          sort=False) if len(view.access_sizes) else pd.DataFrame()
    if len(sizes):  # one row per module and direction, the bins as columns
        sizes = sizes.stack(level=0, future_stack=True)[list(SIZE_BINS.values())].astype(int)
        sizes = sizes.rename_axis(["module", "op"]).reset_index()
    out = [] if not aligned else ["<h2>Drill-down: the Darshan log</h2>"]
    for job in view.job:
        out += [f"<{level}>Job context: {html.escape(str(job['log']))}</{level}>", _kv(job)]
    out += [f'<p class="warn">{html.escape(n)}</p>' for n in view.notes]
    out += section("I/O per module", _ABOUT["modules"].format(nprocs=view.nprocs), _table(view.modules),
                   _figure("I/O cost", lambda: plot_io_cost(view)))
    out += section("Operation counts", _ABOUT["operations"], _table(view.operations),
                   _figure("Operation counts", lambda: plot_operations(view)))
    out += section("Access pattern", _ABOUT["access_pattern"], _table(view.access_pattern),
                   _figure("Access pattern", lambda: plot_access_pattern(view)) if len(view.access_pattern) else "")
    out += section("Access sizes", _ABOUT["access_sizes"], _table(sizes),
                   _figure("Access sizes", lambda: plot_access_sizes(view)) if len(view.access_sizes) else "")
    out += section("Common access sizes", _ABOUT["common_sizes"], _table(view.common_sizes))
    out += section("File categories", _ABOUT["files"], _table(view.files))
    out += section("Data per mount point", _ABOUT["mounts"], _table(view.mounts),
                   _figure("Data per mount point", lambda: plot_mounts(view)) if len(view.mounts) else "")
    out += section("Time per rank", _ABOUT["rank_times"], _table(_ids(view.rank_times)),
                   _figure("Time per rank", lambda: plot_rank_times(view)) if len(view.rank_times) else "")
    out.append(f"<{level}>DXT heat map</{level}>")
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


def summary_text(run: "Run", view: DarshanView, width: int) -> str:
    """``trace-merge summary`` of a run that is only Darshan data: a headline, the warnings and the view, at
    ``width`` as :func:`view_text`."""
    from trace_merge.formatting import wrap

    lines = [_headline(run, view)]
    found = run.findings()
    lines.append(f"findings ({len(found)}; rules: docs/findings.md, file-system findings):")
    lines += [f"  {i}. {f.text()}" for i, f in enumerate(found, 1)]
    if run.warnings:
        lines.append(f"warnings ({len(run.warnings)}):")
        lines += [f"  - {w}" for w in run.warnings]
    return "\n".join([wrap(lines, width), "", view_text(view, width)])  # the view's lines are fitted already


def report_sections(run: "Run", view: DarshanView, findings: str = "") -> list[str]:
    """The whole report body of a run that is only Darshan data (:func:`trace_merge.report.render_report`);
    ``findings``: the findings section's HTML (the report renders it, as for a training run)."""
    from trace_merge import __version__

    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in run.warnings) or "<li>none</li>"
    return [f"<h1>trace-merge report — {html.escape(run.label)}</h1>",
            f'<p class="sub">generated {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC} by trace_merge '
            f"{__version__}: the Darshan log view</p>",
            f"<p>{html.escape(_headline(run, view))}.</p>",
            findings, f"<h2>Warnings ({len(run.warnings)})</h2><ul class='warn'>{warnings}</ul>",
            *html_sections(run, view)]
