"""File-system findings of a job without training steps, from its Darshan counters alone.

A plain Darshan log of an HPC job (IOR, MACSio, a simulation) has no step, no input wait and no data loader, so
the training rules of :mod:`trace_merge.findings` say nothing about it. These rules speak the field's terms, the
anchors Drishti checks: small requests, misaligned requests, random access, metadata time, imbalance across
ranks, shared files without collective MPI-IO, STDIO for bulk data. Each checks its premise against the counters
(``POSIX_SIZE_*``, ``POSIX_SEQ_*``/``CONSEC_*``, ``POSIX_F_META_TIME``, ``MPIIO_COLL_*``/``INDEP_*``,
``STDIO_BYTES_*``, the per-rank and slowest/fastest-rank times) and shows them as its evidence. Only records of
data files count (:func:`trace_merge.bandwidth.is_data_path`): an input deck or ``<STDOUT>`` is no bulk data.
Thresholds: Drishti's where it has one, with an absolute floor where its share alone would call a 59-request job.
Rules and thresholds are documented in docs/findings.md.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import pandas as pd

from trace_merge.bandwidth import is_data_path
from trace_merge.darshan_view import OWN_FILES, SHARED, long_counters, rank_times
from trace_merge.findings import Finding
from trace_merge.formatting import size_text as _size
from trace_merge.schema import as_text

#: requests below 1 MiB are small (Darshan's SIZE_* bins up to 100K_1M), called when this share of a direction's
#: requests and at least this many (Drishti's small_requests, small_requests_absolute)
SMALL_BINS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")
SMALL_SHARE, SMALL_MIN = 0.10, 1000
#: a direction (reads or writes) moving less than this share of the job's bytes is not its bulk: info only
BULK_SHARE = 0.10
#: misaligned (file or memory) requests' share above which alignment is called (Drishti's misaligned_requests),
#: with at least SMALL_MIN requests
MISALIGNED_SHARE = 0.10
#: non-sequential requests' share and count above which access is random (Drishti's random_operations)
RANDOM_SHARE, RANDOM_MIN = 0.20, 1000
#: metadata time of one rank above which it is high (Drishti's metadata_time_rank), or metadata's share of the
#: POSIX I/O time when it also costs this share of the run time per process
METADATA_RANK_S, METADATA_SHARE, METADATA_MIN_RUN_SHARE = 30.0, 0.30, 0.02
#: slowest rank's I/O time at least this much above the fastest's (share of the slowest) and this many seconds
IMBALANCE_SHARE, IMBALANCE_MIN_S = 0.15, 1.0
#: independent MPI-IO requests to shared files: share and count above which collective I/O is missing
INDEP_SHARE, INDEP_MIN = 0.50, 1000
#: STDIO's share of the bytes of data files above which it carries bulk data (Drishti's interface_stdio)
STDIO_SHARE = 0.10


def _wide(counters: pd.DataFrame, module: str) -> pd.DataFrame:
    """One row per (rank, file) record of ``module`` on data files, one column per counter (prefix dropped);
    Darshan's -1 (not recorded) becomes 0."""
    names = as_text(counters["counter"])
    sel = names.str.startswith(module + "_").to_numpy()
    if not sel.any():
        return pd.DataFrame()
    c = pd.DataFrame({"rank": counters["rank"].to_numpy()[sel], "file": as_text(counters["file"]).to_numpy()[sel],
                      "counter": names.to_numpy()[sel], "value": counters["value"].to_numpy()[sel]})
    c = c[c["file"].map(is_data_path).to_numpy(dtype=bool)]
    if not len(c):
        return pd.DataFrame()
    c["counter"] = c["counter"].str[len(module) + 1:]
    c["value"] = c["value"].clip(lower=0)
    return c.pivot_table(index=["rank", "file"], columns="counter", values="value", aggfunc="sum").fillna(0.0)


def _posix_rank_times(counters: pd.DataFrame, nprocs: int) -> pd.DataFrame:
    """The view's time per rank (:func:`trace_merge.darshan_view.rank_times`) over the POSIX records of data
    files: one computation for the table and the finding."""
    c = long_counters(counters)
    c = c[(c["module"] == "POSIX") & c["file"].map(is_data_path).to_numpy(dtype=bool)]
    return rank_times(c, nprocs)


def _col(w: pd.DataFrame, name: str) -> pd.Series:
    return w[name] if name in w else pd.Series(0.0, index=w.index)


def _top_file(per_file: pd.Series) -> str:
    per_file = per_file.groupby(level="file").sum()
    if not len(per_file) or per_file.max() <= 0:
        return ""
    name = per_file.idxmax()
    return f"; most in {name.rsplit('/', 1)[-1]!r} ({int(per_file.max()):,})"


def _small_requests(posix: pd.DataFrame, moved: float, per_proc: Callable[[str], float]) -> list[Finding]:
    out = []
    for op, verb in (("READ", "read"), ("WRITE", "write")):
        total = float(_col(posix, f"{op}S").sum())
        small_per = sum(_col(posix, f"SIZE_{op}_{b}") for b in SMALL_BINS)
        small = float(small_per.sum())
        if total <= 0 or small < SMALL_MIN or small / total < SMALL_SHARE:
            continue
        nbytes = float(_col(posix, f"BYTES_{'READ' if op == 'READ' else 'WRITTEN'}").sum())
        bulk = moved > 0 and nbytes / moved >= BULK_SHARE
        hist = ", ".join(f"{b.replace('_', '-')} B {int(_col(posix, f'SIZE_{op}_{b}').sum()):,}" for b in SMALL_BINS
                         if _col(posix, f"SIZE_{op}_{b}").sum() > 0)
        out.append(Finding(
            f"small_{verb}_requests", "high" if bulk else "info",
            f"Most POSIX {verb}s are small (under 1 MiB)" if bulk else
            f"Many small POSIX {verb}s, but {verb}s are a small part of this job's I/O",
            f"{int(small):,} of {int(total):,} {verb}s ({100 * small / total:.0f} %) under 1 MiB (POSIX_SIZE_{op}_*: "
            f"{hist}){_top_file(small_per)}; {verb}s moved {_size(nbytes)} of the {_size(moved)} the job moved",
            "posix (Darshan counters)",
            f"aggregate them into larger, contiguous requests (1 MiB or more, a multiple of the stripe size): buffer "
            f"in the application, collective MPI-IO (`MPI_File_{verb}_all`) to let aggregators combine them, HDF5 "
            "chunks and `H5Pset_alignment` sized to the stripe", per_proc(f"F_{op}_TIME")))
    return out


def _misaligned(posix: pd.DataFrame) -> Optional[Finding]:
    ops = float(_col(posix, "READS").sum() + _col(posix, "WRITES").sum())
    if ops < SMALL_MIN:
        return None
    parts = []
    for kind, label in (("FILE", "file offsets"), ("MEM", "memory buffers")):
        bad = float(_col(posix, f"{kind}_NOT_ALIGNED").sum())
        if bad / ops >= MISALIGNED_SHARE:
            align = _col(posix, f"{kind}_ALIGNMENT")
            parts.append(f"{int(bad):,} of {int(ops):,} requests ({100 * bad / ops:.0f} %) misaligned in {label} "
                         f"(POSIX_{kind}_NOT_ALIGNED; alignment {int(align.max()):,} B)")
    if not parts:
        return None
    return Finding(
        "misaligned_requests", "medium", "Requests are not aligned to the file system's blocks", "; ".join(parts),
        "posix (Darshan counters)",
        "align requests and file offsets to the block / stripe size (HDF5 `H5Pset_alignment`, MPI-IO "
        "`striping_unit` hint, Lustre `lfs setstripe -S` matching the request size)")


def _random_access(posix: pd.DataFrame, per_proc: Callable[[str], float]) -> list[Finding]:
    out = []
    for op, verb in (("READ", "read"), ("WRITE", "write")):
        if f"SEQ_{op}S" not in posix:
            continue  # no sequence counters recorded: nothing says the access is random
        total = float(_col(posix, f"{op}S").sum())
        seq, consec = float(_col(posix, f"SEQ_{op}S").sum()), float(_col(posix, f"CONSEC_{op}S").sum())
        rand = total - seq
        if total <= 0 or rand < RANDOM_MIN or rand / total < RANDOM_SHARE:
            continue
        out.append(Finding(
            f"random_{verb}s", "high", f"Most POSIX {verb}s jump backwards in the file (random access)",
            f"{int(rand):,} of {int(total):,} {verb}s ({100 * rand / total:.0f} %) not sequential (POSIX_{op}S − "
            f"POSIX_SEQ_{op}S; consecutive {int(consec):,}, sequential {int(seq):,})", "posix (Darshan counters)",
            f"{verb} in file order: sort requests by offset, or gather scattered pieces with collective MPI-IO or "
            "HDF5 hyperslab selections so that the library issues large sequential requests",
            per_proc(f"F_{op}_TIME")))
    return out


def _metadata(posix: pd.DataFrame, nprocs: int, runtime: Optional[float]) -> Optional[Finding]:
    meta = _col(posix, "F_META_TIME")
    data = float(_col(posix, "F_READ_TIME").sum() + _col(posix, "F_WRITE_TIME").sum())
    total_meta = float(meta.sum())
    ranks = meta.groupby(level="rank").sum()
    per_rank = ranks[ranks.index >= 0]  # shared-file records (rank -1) are summed over ranks: no one rank's
    worst = float(per_rank.max()) if len(per_rank) else total_meta / nprocs
    share = total_meta / (total_meta + data) if total_meta + data > 0 else 0.0
    costly = runtime is not None and runtime > 0 and total_meta / nprocs >= METADATA_MIN_RUN_SHARE * runtime
    if worst < METADATA_RANK_S and not (share >= METADATA_SHARE and costly):
        return None
    # times are summed over a rank's files: operations that overlapped (threads, opens blocking on a pipe) add up
    over = (f" (summed over its files, whose operations overlapped: the run took {runtime:.4g} s)"
            if runtime and worst > runtime else "")
    ops = ", ".join(f"{int(_col(posix, c).sum()):,} {c.lower()}" for c in ("OPENS", "STATS", "SEEKS")
                    if _col(posix, c).sum() > 0)
    return Finding(
        "metadata_time", "high" if worst >= METADATA_RANK_S else "medium",
        "Metadata operations (open, stat, seek) take a large share of the I/O time",
        f"POSIX_F_META_TIME {total_meta:.3g} s over all ranks, {100 * share:.0f} % of POSIX I/O time (read + write "
        f"{data:.3g} s); up to {worst:.3g} s on one rank{over}; {ops}", "posix (Darshan counters)",
        "open each file once and keep it open, avoid per-request stat/seek, fewer larger files (or a shared file "
        "with MPI-IO) instead of many small ones; on Lustre each is a metadata-server round trip",
        total_meta / nprocs)


def _imbalance(times: pd.DataFrame, runtime: Optional[float]) -> Optional[Finding]:
    """The slowest rank against the fastest, from the view's time per rank (:func:`trace_merge.darshan_view.
    rank_times`) of the POSIX records of data files: per rank over its own files, and the shared file (a rank -1
    record, POSIX_F_SLOWEST/FASTEST_RANK_TIME) with the largest gap."""
    cases = []
    own = times[times["files"] == OWN_FILES]
    if len(own) and own["ranks"].iloc[0] >= 2:
        r = own.iloc[0]
        cases.append((r["slowest_s"] - r["fastest_s"], f"rank {r['slowest_rank']} spent {r['slowest_s']:.3g} s in "
                      f"POSIX I/O on its own files, rank {r['fastest_rank']} {r['fastest_s']:.3g} s (median "
                      f"{r['median_s']:.3g} s over {r['ranks']:,} ranks)", r["slowest_s"]))
    shared = times[times["files"].str.startswith(SHARED)]
    fastest = shared["fastest_s"].astype(float).fillna(0.0)  # a record without F_FASTEST_RANK_TIME
    gap = shared["slowest_s"] - fastest
    if len(gap) and gap.max() > 0:
        i = gap.idxmax()
        r = shared.loc[i]
        cases.append((gap[i], f"shared file {r['files'].removeprefix(SHARED)!r}: slowest rank {r['slowest_rank']} "
                      f"{r['slowest_s']:.3g} s, fastest rank {r['fastest_rank']} {fastest[i]:.3g} s",
                      r["slowest_s"]))
    cases = [c for c in cases if c[0] >= IMBALANCE_MIN_S and c[0] >= IMBALANCE_SHARE * c[2]]
    if not cases:
        return None
    gap, evidence, _ = max(cases, key=lambda c: c[0])
    return Finding(
        "rank_io_imbalance", "high" if runtime and gap >= 0.10 * runtime else "medium",
        "Some ranks spend much longer in I/O than others: the job waits for the slowest",
        "; ".join(c[1] for c in cases), "posix (Darshan counters)",
        "give ranks equal shares of the data; look at the slow ranks' storage targets (a slow or full OST: "
        "`lfs df`, the Darshan LUSTRE module's OST list) and their nodes; restripe the files over more OSTs",
        float(gap))


def _no_collective(mpiio: pd.DataFrame) -> list[Finding]:
    if not len(mpiio):
        return []
    shared = mpiio[mpiio.index.get_level_values("rank") < 0]  # a shared file, reduced over its ranks
    out = []
    for op, verb, done in (("READS", "read", "read"), ("WRITES", "write", "written")):
        indep, coll = float(_col(shared, f"INDEP_{op}").sum()), float(_col(shared, f"COLL_{op}").sum())
        if indep < INDEP_MIN or indep / (indep + coll) < INDEP_SHARE:
            continue
        out.append(Finding(
            f"no_collective_{verb}s", "high", f"Shared files are {done} with independent MPI-IO calls",
            f"{int(indep):,} independent vs {int(coll):,} collective MPI-IO {verb}s (MPIIO_INDEP_{op}, "
            f"MPIIO_COLL_{op}) on {shared.index.get_level_values('file').nunique()} shared file(s)",
            "mpiio (Darshan counters)",
            f"use collective calls (`MPI_File_{verb}_all`, `MPI_File_{verb}_at_all`; HDF5 "
            "`H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE)`) so that aggregators issue few large requests"))
    return out


def _stdio_bulk(posix: pd.DataFrame, stdio: pd.DataFrame) -> Optional[Finding]:
    def moved(w: pd.DataFrame) -> float:
        return float(_col(w, "BYTES_READ").sum() + _col(w, "BYTES_WRITTEN").sum()) if len(w) else 0.0

    s, total = moved(stdio), moved(stdio) + moved(posix)
    if total <= 0 or s / total < STDIO_SHARE:
        return None
    files = stdio.index.get_level_values("file").nunique()
    return Finding(
        "stdio_bulk_data", "high", "Bulk data goes through STDIO (fopen/fread/fwrite), a low-performance interface",
        f"STDIO moved {_size(s)} of the {_size(total)} read and written on data files ({100 * s / total:.0f} %; "
        f"STDIO_BYTES_READ + STDIO_BYTES_WRITTEN, {files} file(s))", "stdio (Darshan counters)",
        "move bulk data with POSIX read/write of large buffers, MPI-IO or HDF5/NetCDF; keep STDIO for text and logs",
        0.0)


def darshan_findings(counters: pd.DataFrame, nprocs: int = 1, runtime_s: Optional[float] = None) -> list[Finding]:
    """The file-system findings of ``counters`` (a run's Darshan counter table), unordered (``nprocs`` and the
    run time come from the log's job header: :class:`trace_merge.darshan_view.DarshanView`)."""
    if counters is None or not len(counters):
        return []
    posix, mpiio, stdio = (_wide(counters, m) for m in ("POSIX", "MPIIO", "STDIO"))
    nprocs = max(int(nprocs or 1), 1)
    found: list[Optional[Finding]] = []
    if len(posix):
        moved = float(_col(posix, "BYTES_READ").sum() + _col(posix, "BYTES_WRITTEN").sum())
        moved += float(_col(stdio, "BYTES_READ").sum() + _col(stdio, "BYTES_WRITTEN").sum()) if len(stdio) else 0.0

        def per_proc(col: str) -> float:
            return float(_col(posix, col).sum()) / nprocs

        found += _small_requests(posix, moved, per_proc)
        found += [_misaligned(posix), _metadata(posix, nprocs, runtime_s),
                  _imbalance(_posix_rank_times(counters, nprocs), runtime_s)]
        found += _random_access(posix, per_proc)
    found += _no_collective(mpiio)
    found.append(_stdio_bulk(posix, stdio) if len(stdio) else None)
    return [f for f in found if f is not None and np.isfinite(f.impact_s)]


__all__ = ["darshan_findings"]
