"""Bytes: which rows read data, read bandwidth per rank and of the job, file access pattern.

Read bytes come from the lowest layer that measured them for that rank (:data:`READ_LAYER_ORDER`: posix/stdio,
then mpiio/hdf5, then framework, then app) and are never derived from sample counts. Definitions: docs/metrics.md.

Data files and other files
--------------------------
A POSIX preload sees every read of the process: Python imports, shared libraries, configuration. Bytes and
bandwidth are therefore split by :func:`data_file_mask`, the one place that decides; a read is of a *data file*

1. when it is an app-layer row (the app timed it as reading its data), else
2. when the app layer names files (``file`` of app-layer read rows, see :func:`app_file_names`): when its path,
   normalised (``os.path.normpath``), equals one of those names or lies under one of them (a named directory),
   or, for a relative name, ends with it (``data/x.h5`` names ``/scratch/data/x.h5``); else
3. when no app-layer read row names a file: when its path does not look like code, a library or a system file
   (:func:`is_data_path`): suffix ``.py .pyc .pyo .pyd .so .so.<n> .pth .json .cfg .txt .yaml .yml .toml .ini
   .conf .in .csv .xml .log``, ``hwloc`` in the path, a standard stream (``<STDOUT>``), a ``*.dist-info`` or
   ``*.egg-info`` directory, under ``/proc /sys /dev /etc /lib /lib64 /usr/lib /usr/lib64 /usr/share``, or a
   path component ``site-packages``, ``dist-packages``, ``__pycache__`` or ``lib/python3.<n>``.

A non-app read without a file name is *other*. The headline numbers (:func:`bandwidth_totals`) and the access
pattern describe data files; :func:`bandwidth_df` has one row per rank and kind (``files`` = data/other).
"""
from __future__ import annotations

import logging
import os
import re
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.intervals import distinct_rows, grouped_union_ns, merge_intervals
from trace_merge.schema import as_text, category_mask, present_codes

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
#: Paths of code, libraries, configuration, logs and system files: not data when the app layer names no files
#: (:func:`data_file_mask`). Config and small text outputs (``.yaml``, ``history.csv``, hwloc's topology ``.xml``,
#: IOR's ``.in`` input deck) are read or written beside the data and would pass for tiny "data reads".
NOT_DATA_PATH = re.compile(r"""
      \.(py|pyc|pyo|pyd|so|pth|json|cfg|txt|yaml|yml|toml|ini|conf|in|csv|xml|log)$
    | \.so\.\d[\d.]*$
    | hwloc
    | ^<(STDIN|STDOUT|STDERR)>$
    | \.(dist|egg)-info(/|$)
    | ^/(proc|sys|dev|etc|lib|lib64)(/|$)
    | ^/usr/(lib|lib64|share)(/|$)
    | (^|/)(site-packages|dist-packages|__pycache__)(/|$)
    | (^|/)lib/python3(\.\d+)?(/|$)
""", re.VERBOSE)


def _is_read_name(name: str) -> bool:
    return bool(_READ_NAME.search(name)) and not _NOT_READ_NAME.search(name)


def _read_mask(frame: pd.DataFrame) -> np.ndarray:
    """Rows named like a read, or app-layer ``io`` rows not named like a write (bytes known or not)."""
    named = category_mask(frame["name"], _is_read_name)
    app_io = ((frame["layer"] == "app") & (frame["cat"] == "io")).to_numpy(dtype=bool, na_value=False)
    app_io &= ~category_mask(frame["name"], lambda n: bool(_WRITE_NAME.search(n)))
    return named | app_io


def app_file_names(frame: pd.DataFrame) -> frozenset:
    """Normalised ``file`` names of the app layer's read rows (:func:`read_rows`' test, bytes known or not)."""
    return app_file_names_by(frame, np.zeros(len(frame), dtype=np.int64), 1)[0]


def app_file_names_by(frame: pd.DataFrame, group: np.ndarray, groups: int) -> "list[frozenset]":
    """:func:`app_file_names` of each group of ``frame``'s rows (``group``: each row's, 0 to ``groups - 1``), in
    one pass over the rows (a frame of many small ranks)."""
    out: "list[frozenset]" = [frozenset()] * groups
    if not len(frame):
        return out
    app = (frame["layer"] == "app").to_numpy(dtype=bool, na_value=False)
    if not app.any():
        return out
    files = frame["file"].astype("category").array
    read = app & _read_mask(frame)
    code, at = files.codes[read].astype(np.int64), group[read]
    known = code >= 0  # missing (-1) left out
    width = len(files.categories)
    pairs = np.unique(at[known] * width + code[known])  # (group, file) pairs, each once
    name = {int(c): os.path.normpath(str(files.categories[c])) for c in np.unique(pairs % width)}
    named: dict = {}
    for g, c in zip((pairs // width).tolist(), (pairs % width).tolist()):
        if name[c] not in (".", "/"):
            named.setdefault(g, set()).add(name[c])
    for g, names in named.items():
        out[g] = frozenset(names)
    return out


def _named_by_app(path: str, names: frozenset) -> bool:
    parts = os.path.normpath(path).split("/")
    # the path or a directory above it is named (absolute names), or a trailing part of it is (relative names)
    return any("/".join(parts[:i]) in names for i in range(1, len(parts) + 1)) or any(
        "/".join(parts[i:]) in names for i in range(1, len(parts)))


def is_data_path(path: str) -> bool:
    """Whether a file path looks like data rather than code, a library, configuration, a log or a system file
    (:data:`NOT_DATA_PATH`): the rule every view and finding uses when the app layer names no files."""
    return not NOT_DATA_PATH.search(str(path))


def data_file_mask(rows: pd.DataFrame, frame: Optional[pd.DataFrame] = None,
                   names: Optional[frozenset] = None) -> np.ndarray:
    """Which of ``rows`` read a data file (the rule of the module docstring; the one place that decides).

    Parameters
    ----------
    rows
        Rows with ``layer`` and ``file`` (read rows of a frame, or a counters table).
    frame
        The run the rows belong to, whose app layer names the data files (default: ``rows``).
    names
        :func:`app_file_names` of the whole job when already known (a partition sees one rank's app layer only).
    """
    if names is None:
        names = app_file_names(rows if frame is None else frame)
    if names:
        data = category_mask(rows["file"], lambda p: _named_by_app(p, names))
    else:
        data = category_mask(rows["file"], is_data_path)
    return data | (rows["layer"] == "app").to_numpy(dtype=bool, na_value=False)


def read_rows(frame: pd.DataFrame, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Rows that read data and carry the number of bytes, from the lowest layer that measured them per rank.

    A row is a read when its name contains ``read`` (``read``, ``pread64``, ``fread``, ``H5Dread``,
    ``MPI_File_read_at``, an app phase ``File Read``; not ``readdir``/``readlink``/``thread``) or, in the app layer,
    when its cat is ``io`` and its name does not say ``write``; and ``bytes`` is known. For each rank only the
    first layer group of :data:`READ_LAYER_ORDER` that has such rows is kept, so a read counted by both
    DFTracer and the app's own timer is counted once. ``columns`` limits the columns copied out.
    """
    if not len(frame):
        return frame
    at = np.flatnonzero(_read_mask(frame) & frame["bytes"].notna().to_numpy())
    cols = list(frame.columns) if columns is None else list(dict.fromkeys(["layer", "rank", *columns]))
    if at.size:  # each rank's best layer chosen before any row is copied: the rows are copied once, only those
        level_of = {layer: i for i, group in enumerate(READ_LAYER_ORDER) for layer in group}
        layer = frame["layer"].astype("category").array
        level = np.array([level_of.get(str(x), len(READ_LAYER_ORDER)) for x in layer.categories]
                         + [len(READ_LAYER_ORDER)])[layer.codes[at]]
        rank, ranks = pd.factorize(frame["rank"].to_numpy()[at])
        best = np.full(len(ranks), len(READ_LAYER_ORDER))
        np.minimum.at(best, rank, level)
        at = at[level == best[rank]]
    # ``Index.take``, not ``index[at]``: on a RangeIndex the latter builds and caches every label of the frame, held
    # as long as the frame
    return pd.DataFrame({c: frame[c].array.take(at) for c in cols}, index=frame.index.take(at), columns=cols,
                        copy=False)


#: ``files`` values of :func:`bandwidth_df`, data first.
FILE_KINDS = ("data", "other")


def _kind_codes(mask: np.ndarray) -> np.ndarray:
    """0 (data) / 1 (other) per row, indexes :data:`FILE_KINDS`."""
    return np.where(mask, 0, 1).astype(_I8)


def _counter_bandwidth(counters: Optional[pd.DataFrame], skip_ranks: set, names: frozenset) -> pd.DataFrame:
    """Darshan counters for ranks without interval rows: bytes and cumulative (sum, not union) read time, per
    rank and kind of file (the counters' per-file records go through :func:`data_file_mask` like reads)."""
    if counters is None or not len(counters):
        return pd.DataFrame()
    rows = []
    for prefix, layer in (("POSIX", "posix"), ("STDIO", "stdio"), ("MPIIO", "mpiio"), ("H5D", "hdf5")):
        sub = counters[counters["counter"].isin([f"{prefix}_BYTES_READ", f"{prefix}_F_READ_TIME",
                                                 f"{prefix}_READS"]).to_numpy()]
        if not len(sub):
            continue
        sub = sub.assign(_kind=_kind_codes(data_file_mask(sub, names=names)))
        wide = sub.pivot_table(index=["rank", "_kind"], columns="counter", values="value", aggfunc="sum",
                               observed=True)
        done = set()
        for (rank, kind), rec in wide.iterrows():
            nbytes = rec.get(f"{prefix}_BYTES_READ", np.nan)
            if rank in skip_ranks or not nbytes > 0:
                continue
            rows.append({"rank": int(rank), "files": FILE_KINDS[kind], "layer": layer, "basis": "counters",
                         "read_bytes": int(nbytes), "reads": int(rec.get(f"{prefix}_READS", 0) or 0),
                         "read_time_s": float(rec.get(f"{prefix}_F_READ_TIME", np.nan)),
                         "read_sum_s": float(rec.get(f"{prefix}_F_READ_TIME", np.nan))})
            done.add(rank)
        skip_ranks = skip_ranks | done
    return pd.DataFrame(rows)


def classified_reads(frame: pd.DataFrame, names: Optional[frozenset] = None) -> "tuple[pd.DataFrame, np.ndarray]":
    """:func:`read_rows` (with ``start_ns, end_ns, bytes, file, epoch``) and their :func:`data_file_mask` (``names``:
    the job's :func:`app_file_names`, default ``frame``'s): what :func:`bandwidth_df`, :func:`epoch_bandwidth_df` and
    :func:`data_file_names` start from, computed once when given to all."""
    rows = read_rows(frame, ["start_ns", "end_ns", "bytes", "file", "epoch"])
    return rows, (data_file_mask(rows, frame, names) if len(rows) else np.zeros(0, dtype=bool))


def data_file_names(reads: "tuple[pd.DataFrame, np.ndarray]") -> frozenset:
    """The distinct data files among :func:`classified_reads` (a per-partition set; the job's is their union)."""
    rows, data = reads
    if not len(rows):
        return frozenset()
    files = rows["file"]
    if isinstance(files.dtype, pd.CategoricalDtype):  # the categories present, not a string per read
        cats = files.cat.categories
        return frozenset(str(c) for c in cats[present_codes(files.cat.codes.to_numpy()[data], len(cats))])
    return frozenset(as_text(files[data].dropna()))


def bandwidth_df(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
                 reads: "Optional[tuple[pd.DataFrame, np.ndarray]]" = None) -> pd.DataFrame:
    """Read bandwidth per rank and kind of file: bytes read ÷ union of read time.

    Parameters
    ----------
    frame
        Merged frame; reads are selected by :func:`read_rows` and split by :func:`data_file_mask`.
    counters
        Optional counters table; Darshan ``<MOD>_BYTES_READ`` / ``<MOD>_F_READ_TIME`` are used for ranks that
        have no read intervals (``basis="counters"``; the time is then Darshan's cumulative read time).
    reads
        :func:`classified_reads` of ``frame`` when already computed.

    Returns
    -------
    pandas.DataFrame
        One row per rank and kind that has reads: ``rank``, ``files`` (``data``/``other``), ``layer`` (where
        the bytes came from), ``basis`` (``intervals``/``counters``), ``read_bytes``, ``reads``,
        ``read_time_s`` (union), ``read_sum_s`` (plain sum), ``read_bw_MB_per_s`` (10^6 bytes per second).
    """
    names = app_file_names(frame)
    reads = classified_reads(frame, names) if reads is None else reads
    return finish_bandwidth([interval_bandwidth(reads)], counters, names)


def interval_bandwidth(reads: "tuple[pd.DataFrame, np.ndarray]") -> pd.DataFrame:
    """The interval part of :func:`bandwidth_df` from :func:`classified_reads`: a kernel, rows per (rank, kind)."""
    rows, data = reads
    if not len(rows):
        return pd.DataFrame()
    rank_codes, ranks = pd.factorize(rows["rank"], sort=True)
    codes = rank_codes.astype(_I8) * len(FILE_KINDS) + _kind_codes(data)
    groups, codes = np.unique(codes, return_inverse=True)
    s = rows["start_ns"].to_numpy(dtype=_I8)
    e = rows["end_ns"].to_numpy(dtype=_I8)
    union = grouped_union_ns(codes.astype(_I8), s, e, len(groups))
    g = pd.DataFrame({"bytes": rows["bytes"], "_dur": e - s}, copy=False).groupby(codes)  # not a copy of every column
    pairs = pd.DataFrame({"r": codes, "layer": rows["layer"].cat.codes.to_numpy()}).drop_duplicates()
    names = rows["layer"].cat.categories
    layer = pairs.groupby("r")["layer"].agg(lambda x: ",".join(sorted(str(names[i]) for i in x)))
    return pd.DataFrame({
        "rank": np.asarray(ranks, dtype=_I8)[groups // len(FILE_KINDS)],
        "files": np.asarray(FILE_KINDS, dtype=object)[groups % len(FILE_KINDS)],
        "layer": layer.to_numpy(),
        "basis": "intervals",
        "read_bytes": g["bytes"].sum().to_numpy(dtype=_I8),
        "reads": g.size().to_numpy(dtype=_I8),
        "read_time_s": union / 1e9,
        "read_sum_s": g["_dur"].sum().to_numpy(dtype=np.float64) / 1e9,
    })


def finish_bandwidth(parts: "list[pd.DataFrame]", counters: Optional[pd.DataFrame], names: frozenset) -> pd.DataFrame:
    """:func:`bandwidth_df` from its per-partition :func:`interval_bandwidth` tables, the counters and the job's
    :func:`app_file_names`."""
    parts = [p for p in parts if len(p)]
    # Darshan's rank -1 records are shared files reduced over all ranks: with per-rank intervals they would
    # count the same bytes twice.
    with_intervals = set(int(r) for p in parts for r in p["rank"])
    extra = _counter_bandwidth(counters, with_intervals | {-1} if parts else set(), names)
    if len(extra):
        parts.append(extra)
    cols = ["rank", "files", "layer", "basis", "read_bytes", "reads", "read_time_s", "read_sum_s",
            "read_bw_MB_per_s"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("files", "layer", "basis") else "float64")
                             for c in cols})
    out = pd.concat(parts, ignore_index=True).sort_values(["rank", "files"], kind="stable").reset_index(drop=True)
    t = out["read_time_s"].to_numpy(dtype=np.float64)
    out["read_bw_MB_per_s"] = np.where(t > 0, out["read_bytes"].to_numpy(dtype=np.float64) / 1e6 / np.where(
        t > 0, t, 1.0), np.nan)
    return out[cols]


def epoch_bandwidth_df(frame: pd.DataFrame, reads: "Optional[tuple[pd.DataFrame, np.ndarray]]" = None
                       ) -> pd.DataFrame:
    """Data-file reads per rank and epoch: how many, how many bytes, their union time and bandwidth.

    The reads are those of :func:`bandwidth_df` (:func:`read_rows` of data files, :func:`data_file_mask`), by the
    epoch the app layer propagated onto them; reads outside every epoch (file checks, validation) are left out.
    A kernel of one rank's rows or many: rows come out per (rank, epoch), so partitions concatenate.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch``, ``files`` (distinct data files), ``reads``, ``read_bytes``, ``read_time_s`` (union),
        ``read_bw_MB_per_s`` (10^6 bytes per second of union read time), ``layer``.
    """
    cols = ["rank", "epoch", "files", "reads", "read_bytes", "read_time_s", "read_bw_MB_per_s", "layer"]
    rows, data = classified_reads(frame) if reads is None else reads
    at = np.flatnonzero(data & rows["epoch"].notna().to_numpy()) if len(rows) else np.zeros(0, dtype=_I8)
    if not at.size:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "layer" else "int64") for c in cols})
    # column by column at the selected rows, not a copy of the rows (a lower peak); groups numbered in (rank,
    # epoch) order
    rank_codes, ranks = pd.factorize(rows["rank"].to_numpy()[at], sort=True)
    epoch_codes, epochs = pd.factorize(rows["epoch"].array[at].to_numpy(dtype=_I8), sort=True)
    keys, packed = pd.factorize(rank_codes.astype(_I8) * len(epochs) + epoch_codes, sort=True)
    n = len(packed)
    union = grouped_union_ns(keys, rows["start_ns"].to_numpy(dtype=_I8)[at], rows["end_ns"].to_numpy(dtype=_I8)[at], n)
    read_bytes = np.zeros(n, dtype=_I8)
    np.add.at(read_bytes, keys, rows["bytes"].array[at].to_numpy(dtype=_I8))
    file_codes = rows["file"].astype("category").cat.codes.to_numpy()[at].astype(_I8)
    named = file_codes >= 0  # nunique: a missing file is not one
    files = np.bincount(distinct_rows(keys[named], file_codes[named])[0], minlength=n).astype(_I8)
    layer = rows["layer"].astype("category")
    k, lay = distinct_rows(keys, layer.cat.codes.to_numpy()[at].astype(_I8) + 1)
    names = np.asarray([str(np.nan)] + [str(x) for x in layer.cat.categories], dtype=object)  # code -1: missing
    layers: list[set] = [set() for _ in range(n)]
    for g, x in zip(k.tolist(), lay.tolist()):
        layers[g].add(names[x])
    out = pd.DataFrame({
        "rank": np.asarray(ranks, dtype=_I8)[packed // len(epochs)],
        "epoch": np.asarray(epochs, dtype=_I8)[packed % len(epochs)],
        "files": files,
        "reads": np.bincount(keys, minlength=n).astype(_I8),
        "read_bytes": read_bytes,
        "read_time_s": union / 1e9,
        "layer": np.asarray([",".join(sorted(x)) for x in layers], dtype=object),
    })
    t = out["read_time_s"].to_numpy()
    out["read_bw_MB_per_s"] = np.where(t > 0, out["read_bytes"] / 1e6 / np.where(t > 0, t, 1.0), np.nan)
    return out[cols]


class ReadSums:
    """:func:`interval_bandwidth`, :func:`epoch_bandwidth_df` and :func:`data_file_names` of one rank's
    :func:`classified_reads`, given the rank's rows window by window in time order (:meth:`add`): sums per layer
    level of :data:`READ_LAYER_ORDER`, each group's union time with its last merged interval carried to the next
    window; the rank's level (:func:`read_rows`: the first with reads) is chosen at the end (:meth:`tables`).
    ``names``: the job's :func:`app_file_names`."""

    def __init__(self, names: frozenset) -> None:
        self._names = names
        self._level_of = {layer: i for i, group in enumerate(READ_LAYER_ORDER) for layer in group}
        self._kinds: dict = {}  # (level, rank, kind) -> [union, last start, last end, bytes, reads, dur, layers]
        self._epochs: dict = {}  # (level, rank, epoch) -> [union, last start, last end, bytes, reads, files, layers]
        self._files: dict = {}  # (level, rank) -> data file names

    @staticmethod
    def _union(acc: list, s: np.ndarray, e: np.ndarray) -> None:
        """Adds the union time of ``[s, e)`` (in start order) beyond what ``acc`` already counted."""
        if acc[1] is not None:
            s, e = np.r_[acc[1], s], np.r_[acc[2], e]
        ms, me = merge_intervals(s, e)
        if not ms.size:
            return
        acc[0] += int((me - ms).sum()) - (acc[2] - acc[1] if acc[1] is not None else 0)
        acc[1], acc[2] = int(ms[-1]), int(me[-1])

    def add(self, frame: pd.DataFrame) -> None:
        if not len(frame):
            return
        at = np.flatnonzero(_read_mask(frame) & frame["bytes"].notna().to_numpy())
        if not at.size:
            return
        rows = frame.take(at)
        data = data_file_mask(rows, frame, self._names)
        layer = as_text(rows["layer"]).fillna(str(np.nan)).to_numpy()
        codes, names = pd.factorize(layer)  # a level per distinct layer name, not per row
        level = np.asarray([self._level_of.get(x, len(READ_LAYER_ORDER)) for x in names], dtype=_I8)[codes]
        rank = rows["rank"].to_numpy(dtype=_I8)
        s, e = rows["start_ns"].to_numpy(dtype=_I8), rows["end_ns"].to_numpy(dtype=_I8)
        nbytes = rows["bytes"].to_numpy(dtype=_I8)
        epoch = rows["epoch"].to_numpy(dtype=_I8, na_value=-1)
        has_epoch = rows["epoch"].notna().to_numpy()
        files = as_text(rows["file"]).to_numpy(dtype=object)
        # the distinct keys by hashing their codes, not a set of every row's tuple
        for lv, r, kind in zip(*(k.tolist() for k in distinct_rows(level, rank, np.where(data, 0, 1)))):
            m = (level == lv) & (rank == r) & (data == (kind == 0))
            acc = self._kinds.setdefault((lv, r, kind), [0, None, None, 0, 0, 0, set()])
            self._union(acc, s[m], e[m])
            acc[3] += int(nbytes[m].sum())
            acc[4] += int(m.sum())
            acc[5] += int((e[m] - s[m]).sum())
            acc[6].update(pd.unique(layer[m]).tolist())
        for lv, r in zip(*(k.tolist() for k in distinct_rows(level[data], rank[data]))):
            m = data & (level == lv) & (rank == r)
            self._files.setdefault((lv, r), set()).update(f for f in pd.unique(files[m]) if isinstance(f, str))
        ep = data & has_epoch
        for lv, r, epo in zip(*(k.tolist() for k in distinct_rows(level[ep], rank[ep], epoch[ep]))):
            m = ep & (level == lv) & (rank == r) & (epoch == epo)
            acc = self._epochs.setdefault((lv, r, epo), [0, None, None, 0, 0, set(), set()])
            self._union(acc, s[m], e[m])
            acc[3] += int(nbytes[m].sum())
            acc[4] += int(m.sum())
            acc[5].update(f for f in pd.unique(files[m]) if isinstance(f, str))  # distinct first: rows are many
            acc[6].update(pd.unique(layer[m]).tolist())

    def tables(self) -> "tuple[pd.DataFrame, pd.DataFrame, frozenset]":
        """``(interval_bandwidth, epoch_bandwidth_df, data_file_names)`` of the rank's reads."""
        best: dict = {}
        for lv, r, _ in self._kinds:
            best[r] = min(best.get(r, lv), lv)
        kinds = sorted((r, kind, acc) for (lv, r, kind), acc in self._kinds.items() if best[r] == lv)
        bandwidth = pd.DataFrame() if not kinds else pd.DataFrame({
            "rank": np.asarray([r for r, _, _ in kinds], dtype=_I8),
            "files": np.asarray([FILE_KINDS[k] for _, k, _ in kinds], dtype=object),
            "layer": np.asarray([",".join(sorted(a[6])) for _, _, a in kinds], dtype=object),
            "basis": "intervals",
            "read_bytes": np.asarray([a[3] for _, _, a in kinds], dtype=_I8),
            "reads": np.asarray([a[4] for _, _, a in kinds], dtype=_I8),
            "read_time_s": np.asarray([a[0] for _, _, a in kinds], dtype=_I8) / 1e9,
            "read_sum_s": np.asarray([a[5] for _, _, a in kinds], dtype=np.float64) / 1e9,
        })
        epochs = sorted((r, epo, acc) for (lv, r, epo), acc in self._epochs.items() if best.get(r) == lv)
        cols = ["rank", "epoch", "files", "reads", "read_bytes", "read_time_s", "read_bw_MB_per_s", "layer"]
        if not epochs:
            per_epoch = pd.DataFrame({c: pd.Series(dtype="object" if c == "layer" else "int64") for c in cols})
        else:
            per_epoch = pd.DataFrame({
                "rank": np.asarray([r for r, _, _ in epochs], dtype=_I8),
                "epoch": np.asarray([epo for _, epo, _ in epochs], dtype=_I8),
                "files": np.asarray([len(a[5]) for _, _, a in epochs], dtype=_I8),
                "reads": np.asarray([a[4] for _, _, a in epochs], dtype=_I8),
                "read_bytes": np.asarray([a[3] for _, _, a in epochs], dtype=_I8),
                "read_time_s": np.asarray([a[0] for _, _, a in epochs], dtype=_I8) / 1e9,
                "layer": np.asarray([",".join(sorted(a[6])) for _, _, a in epochs], dtype=object),
            })
            t = per_epoch["read_time_s"].to_numpy()
            per_epoch["read_bw_MB_per_s"] = np.where(t > 0, per_epoch["read_bytes"] / 1e6 / np.where(t > 0, t, 1.0),
                                                     np.nan)
            per_epoch = per_epoch[cols]
        files = frozenset(f for r, lv in best.items() for f in self._files.get((lv, r), ()))
        return bandwidth, per_epoch, files


def epoch_bandwidth_totals(per_rank_epoch: pd.DataFrame) -> pd.DataFrame:
    """The job's aggregate per epoch from :func:`epoch_bandwidth_df` (exact reduction of per-rank rows):
    ``epoch``, ``ranks``, ``read_bytes`` (Σ), ``slowest_read_time_s`` (max), ``aggregate_bw_MB_per_s``
    (Σ bytes ÷ slowest rank's union read time, as :func:`bandwidth_totals`)."""
    cols = ["epoch", "ranks", "read_bytes", "slowest_read_time_s", "aggregate_bw_MB_per_s"]
    if not len(per_rank_epoch):
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    g = per_rank_epoch.groupby("epoch", sort=True)
    out = pd.DataFrame({"ranks": g["rank"].nunique(), "read_bytes": g["read_bytes"].sum(),
                        "slowest_read_time_s": g["read_time_s"].max()}).reset_index()
    t = out["slowest_read_time_s"].to_numpy(dtype=np.float64)
    out["aggregate_bw_MB_per_s"] = np.where(t > 0, out["read_bytes"] / 1e6 / np.where(t > 0, t, 1.0), np.nan)
    return out[cols]


def job_wall_ns(frame: pd.DataFrame) -> int:
    """First start to last end over every row of the frame, ns (0 for an empty frame)."""
    if not len(frame):
        return 0
    return int(frame["end_ns"].max()) - int(frame["start_ns"].min())


def _counter_file_names(counters: Optional[pd.DataFrame], per_rank: pd.DataFrame, names: frozenset) -> set:
    """The data files behind the ``basis="counters"`` rows of :func:`bandwidth_df`."""
    from_counters = per_rank[(per_rank["basis"] == "counters") & (per_rank["files"] == "data")]
    if counters is None or not len(counters) or not len(from_counters):
        return set()
    c = counters[as_text(counters["counter"]).str.endswith("_BYTES_READ").to_numpy()
                 & (counters["value"] > 0).to_numpy()]
    c = c[data_file_mask(c, names=names)]
    used = set(zip(from_counters["rank"].astype(int), as_text(from_counters["layer"])))
    keep = [(int(r), str(layer)) in used for r, layer in zip(c["rank"], c["layer"])]
    return set(as_text(c["file"][np.asarray(keep, dtype=bool)].dropna()))


def bandwidth_totals(frame: pd.DataFrame, counters: Optional[pd.DataFrame] = None,
                     per_rank: Optional[pd.DataFrame] = None) -> dict:
    """Aggregate read bandwidth of the job, of data files (:func:`data_file_mask`).

    Returns
    -------
    dict
        Of data-file reads: ``read_bytes`` (Σ over ranks), ``ranks`` (ranks that read data files),
        ``slowest_rank``, ``slowest_read_time_s`` (largest union read time), ``aggregate_bw_MB_per_s`` (Σ bytes
        ÷ slowest rank's union read time), ``job_wall_s``, ``bw_over_job_wall_MB_per_s`` (Σ bytes ÷ job wall
        time), ``data_files`` (distinct data files read). Of the other reads: ``other_read_bytes`` (Σ over
        ranks) and ``other_read_time_s`` (largest union read time of a rank, like ``slowest_read_time_s``).
    """
    names = app_file_names(frame)
    reads = classified_reads(frame, names)  # once for the per-rank table and the data files
    bw = finish_bandwidth([interval_bandwidth(reads)], counters, names) if per_rank is None else per_rank
    return totals_of(bw, job_wall_ns(frame), data_file_names(reads), counters, names)


def totals_of(bw: pd.DataFrame, wall_ns: int, data_files: "set | frozenset", counters: Optional[pd.DataFrame],
              names: frozenset) -> dict:
    """:func:`bandwidth_totals` from the job's :func:`bandwidth_df`, wall time (ns), the union of the partitions'
    :func:`data_file_names`, the counters and the job's :func:`app_file_names`."""
    wall = wall_ns / 1e9
    other = bw[bw["files"] == "other"]
    out = {"read_bytes": 0, "ranks": 0, "slowest_rank": None, "slowest_read_time_s": None,
           "aggregate_bw_MB_per_s": None, "job_wall_s": wall, "bw_over_job_wall_MB_per_s": None,
           "data_files": len(set(data_files) | _counter_file_names(counters, bw, names)),
           "other_read_bytes": int(other["read_bytes"].sum()),
           "other_read_time_s": float(other["read_time_s"].max()) if len(other) else None}
    data = bw[bw["files"] == "data"]
    if not len(data):
        return out
    total = int(data["read_bytes"].sum())
    slow = data.loc[data["read_time_s"].fillna(-1).idxmax()]
    t = float(slow["read_time_s"])
    out.update({
        "read_bytes": total,
        "ranks": int(len(data)),
        "slowest_rank": int(slow["rank"]),
        "slowest_read_time_s": t,
        "aggregate_bw_MB_per_s": total / 1e6 / t if t > 0 else None,
        "bw_over_job_wall_MB_per_s": total / 1e6 / wall if wall > 0 else None,
    })
    return out


def access_pattern_df(frame: pd.DataFrame, names: Optional[frozenset] = None) -> pd.DataFrame:
    """File access pattern of the reads of data files (:func:`read_rows`, :func:`data_file_mask`) per rank and
    epoch; reads of other files (imports, libraries, configuration) are left out.

    Sequentiality is Darshan's (``POSIX_CONSEC_READS``, ``POSIX_SEQ_READS``), per (rank, file) in time order
    with ``last = offset + length - 1`` of the previous read (0 before the first): a read is *consecutive*
    when its offset is ``last + 1``, *sequential* when it is beyond ``last`` (consecutive included), *random*
    otherwise. Reads without an offset (``read()`` calls) and reads right after one are not classified.

    Returns
    -------
    pandas.DataFrame
        ``rank``, ``epoch`` (Int64, may be missing), ``files``, ``reads``, ``read_bytes``, ``classified``,
        ``consecutive``, ``sequential``, ``random``, and ``size_<bin>`` read counts for Darshan's size bins
        (:data:`SIZE_BINS`). ``names``: the job's :func:`app_file_names` when ``frame`` is one partition of it.
    """
    rows = read_rows(frame, ["start_ns", "bytes", "offset", "file", "epoch"])
    if len(rows):
        rows = rows[data_file_mask(rows, frame, names)]
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


