"""Bytes: which rows read data, read bandwidth per rank and of the job, file access pattern.

Read bytes come from the lowest layer that measured them for that rank (:data:`READ_LAYER_ORDER`: posix/stdio,
then mpiio/hdf5, then framework, then app) and are never derived from sample counts. Definitions: docs/metrics.md.
"""
from __future__ import annotations

import logging
import re
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.intervals import grouped_union_ns

logger = logging.getLogger(__name__)
_I8 = np.int64

#: Where read bytes are taken from, lowest layer first.
READ_LAYER_ORDER: tuple[tuple[str, ...], ...] = (("posix", "stdio"), ("mpiio", "hdf5"), ("framework",), ("app",))
#: Darshan's read-size bins (``POSIX_SIZE_READ_*``), upper bounds inclusive, bytes.
SIZE_BINS: tuple[tuple[str, float], ...] = (
    ("0_100", 100), ("100_1K", 1024), ("1K_10K", 10 * 1024), ("10K_100K", 100 * 1024),
    ("100K_1M", 1024 ** 2), ("1M_4M", 4 * 1024 ** 2), ("4M_10M", 10 * 1024 ** 2),
    ("10M_100M", 100 * 1024 ** 2), ("100M_1G", 1024 ** 3), ("1G_PLUS", np.inf),
)
_READ_NAME = re.compile(r"read", re.IGNORECASE)
_NOT_READ_NAME = re.compile(r"readdir|readlink|thread|ready|spread|write", re.IGNORECASE)
_WRITE_NAME = re.compile(r"write", re.IGNORECASE)


def _category_mask(series: pd.Series, predicate) -> np.ndarray:
    """Evaluate ``predicate(str) -> bool`` once per category instead of once per row."""
    cats = series.cat.categories
    hit = np.fromiter((bool(predicate(str(c))) for c in cats), dtype=bool, count=len(cats))
    codes = series.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[np.maximum(codes, 0)] if len(cats) else False, False)


def _is_read_name(name: str) -> bool:
    return bool(_READ_NAME.search(name)) and not _NOT_READ_NAME.search(name)


def read_rows(frame: pd.DataFrame, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Rows that read data and carry the number of bytes, from the lowest layer that measured them per rank.

    A row is a read when its name contains ``read`` (``read``, ``pread64``, ``fread``, ``H5Dread``,
    ``MPI_File_read_at``, ``HDF5 File Read``; not ``readdir``/``readlink``/``thread``) or, in the app layer,
    when its cat is ``io`` and its name does not say ``write``; and ``bytes`` is known. For each rank only the
    first layer group of :data:`READ_LAYER_ORDER` that has such rows is kept, so a read counted by both
    DFTracer and the app's own timer is counted once. ``columns`` limits the columns copied out.
    """
    if not len(frame):
        return frame
    named = _category_mask(frame["name"], _is_read_name)
    app_io = ((frame["layer"] == "app") & (frame["cat"] == "io")).to_numpy(dtype=bool, na_value=False)
    app_io &= ~_category_mask(frame["name"], lambda n: bool(_WRITE_NAME.search(n)))
    mask = (named | app_io) & frame["bytes"].notna().to_numpy()
    cols = list(frame.columns) if columns is None else list(dict.fromkeys(["layer", "rank", *columns]))
    rows = frame.loc[mask, cols]
    if not len(rows):
        return rows
    level_of = {layer: i for i, group in enumerate(READ_LAYER_ORDER) for layer in group}
    level = rows["layer"].map(lambda x: level_of.get(str(x), len(READ_LAYER_ORDER))).astype("int64")
    best = level.groupby(rows["rank"].to_numpy()).transform("min")
    return rows[(level == best).to_numpy()]


def _counter_bandwidth(counters: Optional[pd.DataFrame], skip_ranks: set) -> pd.DataFrame:
    """Darshan counters for ranks without interval rows: bytes and cumulative (sum, not union) read time."""
    if counters is None or not len(counters):
        return pd.DataFrame()
    rows = []
    for prefix, layer in (("POSIX", "posix"), ("STDIO", "stdio"), ("MPIIO", "mpiio"), ("H5D", "hdf5")):
        sub = counters[counters["counter"].isin([f"{prefix}_BYTES_READ", f"{prefix}_F_READ_TIME",
                                                 f"{prefix}_READS"]).to_numpy()]
        if not len(sub):
            continue
        wide = sub.pivot_table(index="rank", columns="counter", values="value", aggfunc="sum", observed=True)
        for rank, rec in wide.iterrows():
            nbytes = rec.get(f"{prefix}_BYTES_READ", np.nan)
            if rank in skip_ranks or not nbytes > 0:
                continue
            rows.append({"rank": int(rank), "layer": layer, "basis": "counters", "read_bytes": int(nbytes),
                         "reads": int(rec.get(f"{prefix}_READS", 0) or 0),
                         "read_time_s": float(rec.get(f"{prefix}_F_READ_TIME", np.nan)),
                         "read_sum_s": float(rec.get(f"{prefix}_F_READ_TIME", np.nan))})
            skip_ranks = skip_ranks | {rank}
    return pd.DataFrame(rows)


def bandwidth_df(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Read bandwidth per rank: bytes read ÷ union of read time.

    Parameters
    ----------
    frame
        Merged frame; reads are selected by :func:`read_rows`.
    counters
        Optional counters table; Darshan ``<MOD>_BYTES_READ`` / ``<MOD>_F_READ_TIME`` are used for ranks that
        have no read intervals (``basis="counters"``; the time is then Darshan's cumulative read time).

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``layer`` (where the bytes came from), ``basis`` (``intervals``/``counters``),
        ``read_bytes``, ``reads``, ``read_time_s`` (union), ``read_sum_s`` (plain sum),
        ``read_bw_MB_per_s`` (10^6 bytes per second).
    """
    rows = read_rows(frame, ["start_ns", "end_ns", "bytes"])
    parts = []
    if len(rows):
        codes, ranks = pd.factorize(rows["rank"], sort=True)
        codes = codes.astype(_I8)
        s = rows["start_ns"].to_numpy(dtype=_I8)
        e = rows["end_ns"].to_numpy(dtype=_I8)
        union = grouped_union_ns(codes, s, e, len(ranks))
        g = rows.assign(_dur=e - s).groupby(codes)
        pairs = pd.DataFrame({"r": codes, "layer": rows["layer"].cat.codes.to_numpy()}).drop_duplicates()
        names = rows["layer"].cat.categories
        layer = pairs.groupby("r")["layer"].agg(lambda x: ",".join(sorted(str(names[i]) for i in x)))
        parts.append(pd.DataFrame({
            "rank": np.asarray(ranks, dtype=_I8),
            "layer": layer.to_numpy(),
            "basis": "intervals",
            "read_bytes": g["bytes"].sum().to_numpy(dtype=_I8),
            "reads": g.size().to_numpy(dtype=_I8),
            "read_time_s": union / 1e9,
            "read_sum_s": g["_dur"].sum().to_numpy(dtype=np.float64) / 1e9,
        }))
    # Darshan's rank -1 records are shared files reduced over all ranks: with per-rank intervals they would
    # count the same bytes twice.
    extra = _counter_bandwidth(counters, set(int(r) for r in parts[0]["rank"]) | {-1} if parts else set())
    if len(extra):
        parts.append(extra)
    cols = ["rank", "layer", "basis", "read_bytes", "reads", "read_time_s", "read_sum_s", "read_bw_MB_per_s"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("layer", "basis") else "float64")
                             for c in cols})
    out = pd.concat(parts, ignore_index=True).sort_values("rank", kind="stable").reset_index(drop=True)
    t = out["read_time_s"].to_numpy(dtype=np.float64)
    out["read_bw_MB_per_s"] = np.where(t > 0, out["read_bytes"].to_numpy(dtype=np.float64) / 1e6 / np.where(
        t > 0, t, 1.0), np.nan)
    return out[cols]


def job_wall_ns(frame: pd.DataFrame) -> int:
    """First start to last end over every row of the frame, ns (0 for an empty frame)."""
    if not len(frame):
        return 0
    return int(frame["end_ns"].max()) - int(frame["start_ns"].min())


def bandwidth_totals(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
                     per_rank: Optional[pd.DataFrame] = None) -> dict:
    """Aggregate read bandwidth of the job.

    Returns
    -------
    dict
        ``read_bytes`` (Σ over ranks), ``ranks``, ``slowest_rank``, ``slowest_read_time_s`` (largest union
        read time), ``aggregate_bw_MB_per_s`` (Σ bytes ÷ slowest rank's union read time), ``job_wall_s``,
        ``bw_over_job_wall_MB_per_s`` (Σ bytes ÷ job wall time).
    """
    bw = bandwidth_df(frame, counters) if per_rank is None else per_rank
    wall = job_wall_ns(frame) / 1e9
    if not len(bw):
        return {"read_bytes": 0, "ranks": 0, "slowest_rank": None, "slowest_read_time_s": None,
                "aggregate_bw_MB_per_s": None, "job_wall_s": wall, "bw_over_job_wall_MB_per_s": None}
    total = int(bw["read_bytes"].sum())
    slow = bw.loc[bw["read_time_s"].fillna(-1).idxmax()]
    t = float(slow["read_time_s"])
    return {
        "read_bytes": total,
        "ranks": int(len(bw)),
        "slowest_rank": int(slow["rank"]),
        "slowest_read_time_s": t,
        "aggregate_bw_MB_per_s": total / 1e6 / t if t > 0 else None,
        "job_wall_s": wall,
        "bw_over_job_wall_MB_per_s": total / 1e6 / wall if wall > 0 else None,
    }


def access_pattern_df(frame: pd.DataFrame) -> pd.DataFrame:
    """File access pattern of the reads (:func:`read_rows`) per rank and epoch.

    Sequentiality is Darshan's (``POSIX_CONSEC_READS``, ``POSIX_SEQ_READS``), per (rank, file) in time order
    with ``last = offset + length - 1`` of the previous read (0 before the first): a read is *consecutive*
    when its offset is ``last + 1``, *sequential* when it is beyond ``last`` (consecutive included), *random*
    otherwise. Reads without an offset (``read()`` calls) and reads right after one are not classified.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch`` (Int64, may be missing), ``files``, ``reads``, ``read_bytes``, ``classified``,
        ``consecutive``, ``sequential``, ``random``, and ``size_<bin>`` read counts for Darshan's size bins
        (:data:`SIZE_BINS`).
    """
    rows = read_rows(frame, ["start_ns", "bytes", "offset", "file", "epoch"])
    size_cols = [f"size_{b}" for b, _ in SIZE_BINS]
    cols = ["rank", "epoch", "files", "reads", "read_bytes", "classified", "consecutive", "sequential",
            "random", *size_cols]
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype="Int64" if c == "epoch" else "int64") for c in cols})
    rows = rows.sort_values(["rank", "file", "start_ns"], kind="stable")
    rank = rows["rank"].to_numpy(dtype=_I8)
    file_code = rows["file"].cat.codes.to_numpy(dtype=_I8)
    nbytes = rows["bytes"].to_numpy(dtype=_I8, na_value=0)
    off = rows["offset"]
    has_off = off.notna().to_numpy()
    off = off.to_numpy(dtype=_I8, na_value=0)
    same = np.r_[False, (rank[1:] == rank[:-1]) & (file_code[1:] == file_code[:-1])] & (file_code >= 0)
    # Darshan keeps last_byte_read = offset + length - 1 of the previous read of the file, starting at 0
    last_byte = np.where(same, np.r_[0, off[:-1] + nbytes[:-1] - 1], 0)
    classified = has_off & (file_code >= 0) & np.where(same, np.r_[False, has_off[:-1]], True)
    consec = classified & (off == last_byte + 1)
    seq = classified & (off > last_byte)
    edges = np.array([b for _, b in SIZE_BINS], dtype=np.float64)
    size_bin = np.searchsorted(edges, nbytes, side="left")  # Darshan: size <= upper bound
    data = pd.DataFrame({
        "rank": rank, "epoch": pd.array(rows["epoch"], dtype="Int64"), "file": rows["file"].to_numpy(),
        "read_bytes": nbytes, "classified": classified, "consecutive": consec, "sequential": seq,
        "random": classified & ~seq,
    })
    for i, c in enumerate(size_cols):
        data[c] = size_bin == i
    g = data.groupby(["rank", "epoch"], sort=True, dropna=False)
    out = g.agg(files=("file", "nunique"), reads=("read_bytes", "size"), read_bytes=("read_bytes", "sum"),
                **{c: (c, "sum") for c in ["classified", "consecutive", "sequential", "random", *size_cols]})
    out = out.reset_index()
    out["epoch"] = pd.array(out["epoch"], dtype="Int64")
    for c in cols[2:]:
        out[c] = out[c].astype("int64")
    return out[cols]


