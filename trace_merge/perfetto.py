"""Export a merged frame to Chrome-trace JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open.

Layout: one *process* per rank × layer, named ``rank 0 · posix`` through ``process_name`` metadata and
ordered by rank then layer (``process_sort_index``); one *thread* per original ``(pid, tid)``, named
``pid 1234 · tid 5678``. Every interval is a complete event (``"ph": "X"``).

Time: ``ts`` and ``dur`` are microseconds (3 decimals, i.e. ns resolution) **relative to the first event of the
run**, because absolute epoch microseconds (~1.7e15) in a double lose sub-µs precision; the absolute start is
kept in ``otherData.run_start_epoch_ns`` (and ``run_start_utc``).

``args`` carries ``bytes``, ``offset``, ``file``, ``epoch``, ``step`` where known, and the source's own
arguments under ``source`` when they are a valid JSON object.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import json
import logging
import os
from pathlib import Path
from typing import IO, Any, Optional

import numpy as np
import pandas as pd

from trace_merge.outputs import atomic_output
from trace_merge.schema import LAYERS

logger = logging.getLogger(__name__)

_CHUNK = 50_000


def _quoted(series: pd.Series) -> np.ndarray:
    """JSON-quoted string of each row's category, escaped once per category; ``None`` for missing."""
    cats = np.array([json.dumps(str(c)) for c in series.cat.categories] + [None], dtype=object)
    return cats[series.cat.codes.to_numpy()]  # code -1 (missing) picks the trailing None


def _source_args(raw: Any) -> Optional[str]:
    if raw is None or raw is pd.NA or not isinstance(raw, str) or not raw.startswith("{"):
        return None
    try:
        json.loads(raw)
    except ValueError:
        return None
    return None if raw == "{}" else raw


def _open(path: Path, compress: bool) -> IO[str]:
    if compress:
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=3)
    return open(path, "w", encoding="utf-8")


def export_perfetto(frame: pd.DataFrame, path: "str | os.PathLike[str]", *, force: bool = False,
                    meta: Optional[dict[str, Any]] = None) -> Path:
    """Write ``frame`` as a Chrome-trace JSON object (``.json``, or gzip-compressed ``.json.gz``).

    Parameters
    ----------
    frame
        Merged frame (:mod:`trace_merge.schema`).
    path
        Output file; a name ending in ``.gz`` is gzip-compressed.
    force
        Overwrite an existing file.
    meta
        Extra JSON-able entries for ``otherData`` (e.g. the run path).

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is False.
    """
    path = Path(path)
    t0 = int(frame["start_ns"].min()) if len(frame) else 0
    other = {"run_start_epoch_ns": t0, "time_unit": "us since run_start_epoch_ns", "events": int(len(frame))}
    if len(frame):
        other["run_start_utc"] = _dt.datetime.fromtimestamp(t0 / 1e9, _dt.timezone.utc).isoformat()
    other.update(meta or {})
    with atomic_output(path, force) as tmp, _open(tmp, path.name.endswith(".gz")) as out:
        out.write('{"traceEvents":[\n')
        first = True
        ids = _with_ids(frame) if len(frame) else None
        for line in _metadata_events(frame, ids):
            out.write(line if first else ",\n" + line)
            first = False
        for chunk in _interval_events(frame, ids, t0):
            if chunk:
                out.write(("" if first else ",\n") + ",\n".join(chunk))
                first = False
        out.write('\n],\n"displayTimeUnit":"ms",\n"otherData":')
        out.write(json.dumps(other, default=str))
        out.write("}\n")
    logger.info("wrote %s (%d events)", path, len(frame))
    return path


def _process_ids(frame: pd.DataFrame) -> pd.DataFrame:
    """One Chrome-trace pid per (rank, layer), ordered by rank then layer order of the schema."""
    keys = frame[["rank", "layer"]].drop_duplicates().astype({"layer": str})
    keys["_order"] = keys["layer"].map(lambda x: LAYERS.index(x) if x in LAYERS else len(LAYERS))
    keys = keys.sort_values(["rank", "_order", "layer"]).reset_index(drop=True)
    keys["trace_pid"] = np.arange(1, len(keys) + 1)
    return keys[["rank", "layer", "trace_pid"]]


def _with_ids(frame: pd.DataFrame) -> pd.DataFrame:
    procs = _process_ids(frame)
    f = frame[["rank", "layer", "pid", "tid"]].astype({"layer": str}).merge(procs, on=["rank", "layer"],
                                                                             how="left", sort=False)
    threads = f[["trace_pid", "pid", "tid"]].drop_duplicates().sort_values(["trace_pid", "pid", "tid"])
    threads["trace_tid"] = threads.groupby("trace_pid").cumcount() + 1
    return f.merge(threads, on=["trace_pid", "pid", "tid"], how="left", sort=False)


def _metadata_events(frame: pd.DataFrame, ids: Optional[pd.DataFrame]) -> list[str]:
    if ids is None:
        return []
    procs = _process_ids(frame)
    f = ids
    lines = []
    for rank, layer, pid in procs.itertuples(index=False):
        name = json.dumps(f"rank {rank} · {layer}")
        lines.append(f'{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{name}}}}}')
        lines.append(f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}')
    for tpid, pid, tid, ttid in f[["trace_pid", "pid", "tid", "trace_tid"]].drop_duplicates().itertuples(index=False):
        name = json.dumps(f"pid {pid} · tid {tid}")
        lines.append(f'{{"ph":"M","name":"thread_name","pid":{tpid},"tid":{ttid},"args":{{"name":{name}}}}}')
    return lines


def _interval_events(frame: pd.DataFrame, ids: Optional[pd.DataFrame], t0: int):
    """Yield lists of event lines, ``_CHUNK`` rows at a time (the frame may hold millions of rows)."""
    if ids is None:
        return
    names, cats, files = _quoted(frame["name"]), _quoted(frame["cat"]), _quoted(frame["file"])
    for lo in range(0, len(frame), _CHUNK):
        part = frame.iloc[lo:lo + _CHUNK]
        pid = ids["trace_pid"].to_numpy()[lo:lo + _CHUNK]
        tid = ids["trace_tid"].to_numpy()[lo:lo + _CHUNK]
        name, cat, file = names[lo:lo + _CHUNK], cats[lo:lo + _CHUNK], files[lo:lo + _CHUNK]
        ts = (part["start_ns"].to_numpy() - t0) / 1e3
        dur = part["dur_ns"].to_numpy() / 1e3
        extras = {col: part[col].to_numpy(dtype=object, na_value=None)
                  for col in ("bytes", "offset", "epoch", "step")}
        raw_args = part["args"].to_numpy(dtype=object, na_value=None)
        lines = []
        for i in range(len(part)):
            args = []
            for col, values in extras.items():
                if values[i] is not None:
                    args.append(f'"{col}":{int(values[i])}')
            if file[i] is not None:
                args.append(f'"file":{file[i]}')
            src = _source_args(raw_args[i])
            if src is not None:
                args.append(f'"source":{src}')
            lines.append(f'{{"ph":"X","name":{name[i] or chr(34) * 2},"cat":{cat[i] or chr(34) * 2},'
                         f'"ts":{ts[i]:.3f},"dur":{dur[i]:.3f},"pid":{pid[i]},"tid":{tid[i]},'
                         f'"args":{{{",".join(args)}}}}}')
        yield lines
