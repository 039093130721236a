"""Reader for Darshan logs (``*.darshan``) through PyDarshan.

* Counters of the POSIX, STDIO, MPI-IO, H5F and H5D modules (integer and floating-point) become
  rows of the ``counters`` table (``layer, rank, file, counter, value``); layers ``posix``,
  ``stdio``, ``mpiio``, ``hdf5``. ``rank`` is ``-1`` for a shared record (one record reduced over
  all ranks). Lustre striping (``LUSTRE_*``: stripe size, count, pattern, ... and one
  ``LUSTRE_OST_ID_<k>`` row per OST) goes under layer ``posix``: it describes the files the POSIX
  layer touched, and the frame has no Lustre layer.
* DXT_POSIX / DXT_MPIIO segments become intervals: ``layer`` ``posix``/``mpiio``, ``cat`` ``io``,
  ``name`` ``read``/``write``, ``bytes`` = length, ``offset``, ``file``, ``rank``, ``host`` (the DXT
  record's hostname). Segment times are seconds since Darshan started; they are made absolute
  with the job start (``start_time_sec`` + ``start_time_nsec`` of the job header; logs older than
  3.41 only have whole seconds). Each rank's Darshan start may differ from the job start by
  milliseconds (init skew): :mod:`trace_merge.dxt_clock` moves each rank's segments onto the app clock
  by their content during alignment.
* A module the header lists but PyDarshan read no records of (it skips a module whose version field
  it does not know, saying so only on stderr) gives a warning
  ``"<file>: module <NAME> not read (PyDarshan dropped it: ...)"``.

PyDarshan's C library can crash the interpreter (abort or segfault) on a truncated or corrupted
log, so :func:`read` first checks the log's structure in Python: magic number, version, that
every region named by the header lies inside the file, and that every compressed region
decompresses completely. Only a log that passes is handed to PyDarshan.
"""
from __future__ import annotations

import bz2
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from ..errors import TraceInputError
from ..schema import SourceData, SourceMeta, category_mask, empty_counters, empty_frame, to_counters, to_frame

log = logging.getLogger(__name__)

DARSHAN_MAGIC_NR = 6567223
#: PyDarshan module name -> frame layer, for counter modules.
COUNTER_LAYERS = {"POSIX": "posix", "STDIO": "stdio", "MPI-IO": "mpiio", "H5F": "hdf5", "H5D": "hdf5"}
#: DXT module -> frame layer.
DXT_LAYERS = {"DXT_POSIX": "posix", "DXT_MPIIO": "mpiio"}
_ZLIB, _BZIP2, _NONE = 0, 1, 2


@dataclass
class DarshanMeta(SourceMeta):
    """What the reader found in a Darshan log."""

    #: PyDarshan's job header
    job: dict[str, object]
    exe: Optional[str]
    nprocs: Optional[int]
    jobid: Optional[int]
    #: the job's start and end (epoch ns)
    start_ns: Optional[int]
    end_ns: Optional[int]
    #: the modules that recorded anything
    modules: list[str]
    #: the log format's version
    version: str
    #: Darshan ran out of instrumentation memory: counters are incomplete
    partial: bool
    #: the hosts of the DXT segments
    hosts: list[str]
    host: Optional[str]
    #: 0 for a one-process job, else None (the log's rows carry their ranks)
    rank: Optional[int]
    dxt_segments: int


def read(path: "str | os.PathLike[str]") -> SourceData:
    """Read one Darshan log.

    Parameters
    ----------
    path
        A ``.darshan`` log.

    Returns
    -------
    SourceData
        ``kind="darshan"``; ``frame`` holds DXT segments (empty without DXT), ``counters`` the
        module counters; ``meta`` a :class:`DarshanMeta`.

    Raises
    ------
    TraceInputError
        Not a Darshan log, truncated or corrupted, or PyDarshan is not installed.
    """
    path = os.fspath(path)
    header = validate(path)
    try:
        import darshan
    except ImportError:
        raise TraceInputError(
            path, "reading Darshan logs needs PyDarshan: pip install 'dlio-layers[darshan]'"
        ) from None
    warnings: list[str] = []
    if header["partial"]:
        warnings.append(
            f"{path}: Darshan marked this log partial (it ran out of instrumentation memory); counters are incomplete"
        )
    try:
        report = darshan.DarshanReport(path, read_all=True)
    except Exception as err:  # PyDarshan raises bare RuntimeError/ValueError on bad logs
        raise TraceInputError(path, f"PyDarshan cannot read this log ({err})") from None

    warnings += _dropped_modules(path, report)
    job = dict(report.metadata.get("job", {}))
    start_ns = job_time_ns(job, "start")
    names = {int(k): str(v) for k, v in report.name_records.items()}
    counters = _counters(report, names)
    frame, hosts = _dxt(report, names, start_ns)
    meta = DarshanMeta(
        job=job,
        exe=report.metadata.get("exe"),
        nprocs=job.get("nprocs"),
        jobid=job.get("jobid"),
        start_ns=start_ns,
        end_ns=job_time_ns(job, "end"),
        modules=sorted(report.records),
        version=header["version"],
        partial=header["partial"],
        hosts=hosts,
        host=hosts[0] if len(hosts) == 1 else None,
        rank=0 if job.get("nprocs") == 1 else None,
        dxt_segments=len(frame),
    )
    return SourceData(path=path, kind="darshan", frame=frame, counters=counters, meta=meta, warnings=warnings)


# ----------------------------------------------------------------------------------------------
# structural check before PyDarshan


def validate(path: "str | os.PathLike[str]") -> dict:
    """Check a Darshan log's structure so PyDarshan never sees a broken one.

    Returns ``{"version", "partial", "compression", "regions", "maps_at", "versions_at"}``: the last two are
    byte offsets of the region maps (``(offset, length)`` uint64 pairs, name records first, then one per
    module id) and of the per-module version array (uint32, one per module id).

    Raises
    ------
    TraceInputError
        Unreadable, too short, wrong magic, unknown version, a region outside the file, or a
        region that does not decompress completely.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise TraceInputError(path, f"cannot read: {err.strerror or err}") from None
    if not data:
        raise TraceInputError(path, "empty file (not a Darshan log)")
    if len(data) < 40:
        raise TraceInputError(path, f"not a Darshan log (only {len(data)} bytes)")
    version = data[:8].split(b"\0", 1)[0].decode("ascii", "replace")
    for endian in ("<", ">"):
        if struct.unpack_from(endian + "q", data, 8)[0] == DARSHAN_MAGIC_NR:
            break
    else:
        raise TraceInputError(path, "not a Darshan log (bad magic number)")
    try:
        major, minor = (int(x) for x in version.split("."))
    except ValueError:
        raise TraceInputError(path, f"not a Darshan log (version string {version!r})") from None
    if major != 3:
        raise TraceInputError(path, f"Darshan log version {version} is not supported (need 3.x)")
    comp = data[16]
    if (major, minor) >= (3, 41):  # 64 modules and a 64-bit partial flag since 3.41
        n_mods, partial, maps_at = 64, struct.unpack_from(endian + "Q", data, 24)[0], 32
    else:
        n_mods, partial, maps_at = 16, struct.unpack_from(endian + "I", data, 20)[0], 24
    header_size = maps_at + 16 * (1 + n_mods) + 4 * n_mods
    if len(data) < header_size:
        raise TraceInputError(path, f"truncated Darshan log ({len(data)} bytes, header needs {header_size})")
    maps = [struct.unpack_from(endian + "QQ", data, maps_at + 16 * i) for i in range(1 + n_mods)]
    name_off, name_len = maps[0]
    regions = [("job", header_size, name_off - header_size), ("name records", name_off, name_len)]
    regions += [(f"module {i}", off, length) for i, (off, length) in enumerate(maps[1:]) if length]
    for label, off, length in regions:
        if off < header_size or length <= 0 or off + length > len(data):
            raise TraceInputError(
                path,
                f"truncated or corrupted Darshan log ({label} region {off}+{length} is outside the "
                f"{len(data)}-byte file)",
            )
        _check_region(path, label, data[off : off + length], comp)
    return {"version": version, "partial": bool(partial), "compression": comp, "regions": len(regions),
            "maps_at": maps_at, "versions_at": maps_at + 16 * (1 + n_mods)}


def _dropped_modules(path: str, report: Any) -> list[str]:
    """Modules the header says hold data but PyDarshan read nothing from.

    PyDarshan's C library skips a module whose version field it does not know (printing to stderr only) and
    keeps the module in ``report.modules`` with no records; its counters would silently be missing.
    """
    wanted = set(COUNTER_LAYERS) | set(DXT_LAYERS) | {"LUSTRE"}
    out = []
    for name, info in report.modules.items():
        if not info.get("len"):
            continue
        recs = report.records.get(name) if hasattr(report.records, "get") else None
        if (recs is not None and len(recs)) or (recs is None and name not in wanted):
            continue  # read, or a module PyDarshan never reads (nor do we)
        cause = (f"version {info.get('ver')} in the log header, {info['len']}-byte region, no records read")
        out.append(f"{path}: module {name} not read (PyDarshan dropped it: {cause})")
    return out


def _check_region(path: str, label: str, blob: bytes, comp: int) -> None:
    """Every region is one or more complete compressed streams."""
    if comp == _NONE:
        return
    if comp not in (_ZLIB, _BZIP2):
        raise TraceInputError(path, f"not a Darshan log (unknown compression type {comp})")
    try:
        while blob:
            dec = zlib.decompressobj() if comp == _ZLIB else bz2.BZ2Decompressor()
            dec.decompress(blob)
            if not dec.eof:
                raise TraceInputError(path, f"truncated or corrupted Darshan log ({label} region ends mid-stream)")
            blob = dec.unused_data
    except (zlib.error, OSError, ValueError) as err:
        raise TraceInputError(path, f"corrupted Darshan log ({label} region: {err})") from None


# ----------------------------------------------------------------------------------------------
# tables


def job_time_ns(job: dict, which: str) -> Optional[int]:
    """The job's ``start`` or ``end`` (``which``) in epoch ns from PyDarshan's job header (seconds and, in newer
    logs, nanoseconds), None where the header has no such time."""
    sec = job.get(f"{which}_time_sec", job.get(f"{which}_time"))
    if sec is None:
        return None
    return int(sec) * 1_000_000_000 + int(job.get(f"{which}_time_nsec") or 0)


def _counters(report: Any, names: dict) -> pd.DataFrame:
    parts = []
    for module, layer in COUNTER_LAYERS.items():
        if module not in report.records or not len(report.records[module]):
            continue
        tables = report.records[module].to_df()
        for kind in ("counters", "fcounters"):
            wide = tables.get(kind)
            if wide is None or not len(wide):
                continue
            parts.append(_melt(wide, layer, names))
    if "LUSTRE" in report.records and len(report.records["LUSTRE"]):
        parts.extend(_lustre(report.records["LUSTRE"].to_df(), names))
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_counters()
    long = pd.concat(parts, ignore_index=True)
    return to_counters({c: long[c].to_numpy() for c in ("layer", "rank", "file", "counter", "value")})


def _melt(wide: pd.DataFrame, layer: str, names: dict) -> pd.DataFrame:
    """``rank, id, C1, C2, ...`` -> one row per (record, counter)."""
    value_cols = [c for c in wide.columns if c not in ("rank", "id") and pd.api.types.is_numeric_dtype(wide[c])]
    values = wide[value_cols].to_numpy(dtype=np.float64)
    n, k = values.shape
    ids = wide["id"].to_numpy()
    files = np.array([names.get(int(i), str(int(i))) for i in ids], dtype=object)
    return pd.DataFrame(
        {
            "layer": layer,
            "rank": np.repeat(wide["rank"].to_numpy(dtype=np.int64), k),
            "file": np.repeat(files, k),
            "counter": np.tile(np.array(value_cols, dtype=object), n),
            "value": values.reshape(-1),
        }
    )


def _lustre(tables: dict, names: dict) -> list:
    """Lustre striping per file, under layer ``posix`` with Darshan's ``LUSTRE_*`` names."""
    parts = []
    for wide in tables.values():
        if wide is None or not len(wide):
            continue
        parts.append(_melt(wide, "posix", names))
        if "LUSTRE_OST_IDS" in wide.columns:
            rows = []
            for rank, rid, osts in zip(wide["rank"], wide["id"], wide["LUSTRE_OST_IDS"]):
                for k, ost in enumerate(list(osts) if osts is not None else []):
                    rows.append(("posix", int(rank), names.get(int(rid), str(int(rid))), f"LUSTRE_OST_ID_{k}",
                                 float(ost)))
            if rows:
                parts.append(pd.DataFrame(rows, columns=["layer", "rank", "file", "counter", "value"]))
    return parts


def _dxt(report: Any, names: dict, start_ns: Optional[int]) -> "tuple[pd.DataFrame, list[str]]":
    cols: dict = {k: [] for k in ("layer", "name", "rank", "host", "file", "start", "end", "bytes", "offset")}
    hosts: set = set()
    for module, layer in DXT_LAYERS.items():
        if module not in report.records:
            continue
        for rec in report.records[module].to_df():
            host = rec.get("hostname")
            if host:
                hosts.add(str(host))
            fname = names.get(int(rec["id"]), str(int(rec["id"])))
            for op in ("read", "write"):
                seg = rec.get(f"{op}_segments")
                if seg is None or not len(seg) or "start_time" not in seg:
                    continue
                n = len(seg)
                cols["layer"].append(np.full(n, layer, dtype=object))
                cols["name"].append(np.full(n, op, dtype=object))
                cols["rank"].append(np.full(n, int(rec["rank"]), dtype=np.int64))
                cols["host"].append(np.full(n, host, dtype=object))
                cols["file"].append(np.full(n, fname, dtype=object))
                cols["start"].append(seg["start_time"].to_numpy(dtype=np.float64))
                cols["end"].append(seg["end_time"].to_numpy(dtype=np.float64))
                cols["bytes"].append(seg["length"].to_numpy(dtype=np.int64))
                offset = seg["offset"].to_numpy(dtype=np.int64) if "offset" in seg else np.full(n, -1, dtype=np.int64)
                cols["offset"].append(offset)
    if not cols["start"]:
        return empty_frame(), sorted(hosts)
    cat = {k: np.concatenate(v) for k, v in cols.items()}
    base = 0 if start_ns is None else start_ns
    # seconds (float, µs resolution in the log) -> ns; rounding keeps the µs digits exact
    start = base + np.round(cat["start"] * 1e9).astype(np.int64)
    end = base + np.round(cat["end"] * 1e9).astype(np.int64)
    offset = cat["offset"]
    frame = to_frame(
        {
            "layer": cat["layer"],
            "cat": "io",
            "name": cat["name"],
            "rank": cat["rank"],
            "host": cat["host"],
            "start_ns": start,
            "end_ns": end,
            "bytes": cat["bytes"],
            "offset": pd.arrays.IntegerArray(offset, offset < 0),
            "file": cat["file"],
        }
    )
    order = np.lexsort((frame["start_ns"].to_numpy(), frame["rank"].to_numpy()))
    return frame.iloc[order].reset_index(drop=True), sorted(hosts)


def dxt_rows(frame: pd.DataFrame) -> np.ndarray:
    """Mask of a merged frame's DXT segments: file-system rows named read/write that carry no pid or tid (DFTracer's
    rows always do)."""
    return (category_mask(frame["layer"], lambda s: s in ("posix", "mpiio"))
            & category_mask(frame["name"], lambda s: s in ("read", "write"))
            & (frame["pid"].to_numpy() == 0) & (frame["tid"].to_numpy() == 0))
