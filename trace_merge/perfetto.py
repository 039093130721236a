"""Export a merged frame to Chrome-trace JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open.

Layout: one *process* per rank × layer, named ``rank 0 · <host> · posix`` (the host when the frame knows the
rank's host) through ``process_name`` metadata and ordered by rank then layer (``process_sort_index``); one
*thread* per original ``(pid, tid)``, named by its role, always with the rank (:func:`lane_names`):

* ``main`` -- the rank's main thread: the pid of its training steps (:data:`~trace_merge.schema.STEP_PHASE`) or
  of its first app row, and the thread whose tid is that pid (else the one running the steps);
* ``reader worker k (pid P)`` -- another process of the rank (a reader pool's worker), numbered in order of
  first appearance; its threads other than the first are ``reader worker k · thread j``;
* ``tf.data``, ``TF eager (Python main)``, ``TF executor``, ``Horovod background (op completions)`` -- framework
  (TF profiler) threads, by what they ran;
* ``PyTorch main``, ``PyTorch thread`` -- the PyTorch profiler's threads (the one with its steps and DataLoader
  waits, others: autograd, Gloo's); ``PyTorch collectives (gloo)`` -- its collectives; ``GPU d stream s`` -- its
  device timeline (layer ``device``);
* ``Horovod <op> lane k: <tensor>`` -- a Horovod timeline lane (one per tensor);
* ``waitpid polling thread``, ``forked child: execv``, ``reader thread j`` -- other threads, by their calls;
* ``Darshan DXT (all threads)`` -- DXT segments, which carry no pid or tid;
* otherwise ``thread j (tid T)``.

Polling: a thread that polls its children (a ``multiprocessing.Pool``'s handler calls ``waitpid(WNOHANG)``
thousands of times; 83 % of one climate trace) would bury everything else. Such calls (:data:`POLL_CALLS` of a
file-system layer, no bytes, shorter than :data:`POLL_MAX_NS`, at least :data:`POLL_MIN_CALLS` in the thread)
are folded by default: each burst (gaps under :data:`POLL_GAP_NS`) becomes one slice ``waitpid polling ×N``
whose ``args`` hold the call count and the time spent inside the calls. ``otherData.polling_folded`` counts
what was folded; ``keep_polling=True`` (``trace-merge export --keep-polling``) keeps every call.

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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Optional

import numpy as np
import pandas as pd

from trace_merge.outputs import atomic_output
from trace_merge.schema import FS_LAYERS, STEP_PHASE, category_mask, concat_frames, layer_order, to_frame

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


#: process-control calls by which a parent polls its children (``waitpid(WNOHANG)`` in a loop): no file work
POLL_CALLS = frozenset({"wait", "waitpid", "wait3", "wait4", "waitid", "poll", "ppoll", "select", "pselect",
                        "pselect6", "epoll_wait", "epoll_pwait"})
#: a poll returns at once; a longer call is a real wait (a join) and is kept
POLL_MAX_NS = 1_000_000
#: a thread with fewer such calls is waiting for a child now and then, not polling
POLL_MIN_CALLS = 100
#: polls closer together than this are one burst (one folded slice)
POLL_GAP_NS = 10_000_000
#: process-control calls that only start a child: a thread making nothing else is a forked child
_SPAWN_CALLS = frozenset({"fork", "vfork", "clone", "clone3", "execv", "execve", "execvp", "execvpe", "execl",
                          "execlp", "execle", "execveat", "fexecve", "posix_spawn", "posix_spawnp", "exit", "_exit"})
_LANE = ["rank", "layer", "pid", "tid"]


@dataclass(frozen=True)
class PerfettoExport:
    """What :func:`export_perfetto` wrote: the file, its event count and what polling it folded."""

    path: Path
    events: int
    #: ``{"calls", "slices", "by_name"}``: poll calls folded into ``slices`` slices (zeros when kept or none)
    polling_folded: dict


def export_perfetto(frame: pd.DataFrame, path: "str | os.PathLike[str]", *, force: bool = False,
                    meta: Optional[dict[str, Any]] = None, keep_polling: bool = False) -> PerfettoExport:
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
    keep_polling
        Keep every process-control poll instead of folding each burst into one slice (module docstring).

    Returns
    -------
    PerfettoExport
        The file written, the number of interval events in it and the polling folded.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is False.
    """
    path = Path(path)
    # the cpu layer's rows are CPU time per sample window, placed to within a period: no slices of work on a timeline
    if len(frame):
        frame = frame[~category_mask(frame["layer"], lambda x: x == "cpu")]
    t0 = int(frame["start_ns"].min()) if len(frame) else 0
    # roles from the calls as made, before polls are folded away
    lanes = lane_names(frame) if len(frame) else None
    folded = {"calls": 0, "slices": 0, "by_name": {}}
    if not keep_polling and len(frame):
        frame, folded = fold_polling(frame)
    other = {"run_start_epoch_ns": t0, "time_unit": "us since run_start_epoch_ns", "events": int(len(frame)),
             "polling_folded": folded}
    if len(frame):
        other["run_start_utc"] = _dt.datetime.fromtimestamp(t0 / 1e9, _dt.timezone.utc).isoformat()
    other.update(meta or {})
    with atomic_output(path, force) as tmp, _open(tmp, path.name.endswith(".gz")) as out:
        out.write('{"traceEvents":[\n')
        first = True
        ids = _with_ids(frame, lanes) if lanes is not None else None
        for line in _metadata_events(lanes):
            out.write(line if first else ",\n" + line)
            first = False
        for chunk in _interval_events(frame, ids, t0):
            if chunk:
                out.write(("" if first else ",\n") + ",\n".join(chunk))
                first = False
        out.write('\n],\n"displayTimeUnit":"ms",\n"otherData":')
        out.write(json.dumps(other, default=str))
        out.write("}\n")
    logger.info("wrote %s (%d events, %d polls folded)", path, len(frame), folded["calls"])
    return PerfettoExport(path, int(len(frame)), folded)


# -- polling -------------------------------------------------------------------------------------------


def fold_polling(frame: pd.DataFrame) -> "tuple[pd.DataFrame, dict]":
    """``frame`` with each burst of process-control polls (module docstring) replaced by one slice.

    Returns the new frame and ``{"calls": folded calls, "slices": slices made, "by_name": {call: calls}}``.
    A folded slice spans its burst (first call's start to last call's end) and is named ``<call> polling ×N``
    with cat ``other``; ``args`` hold ``folded_calls`` and ``busy_us`` (time inside the calls).
    """
    none = {"calls": 0, "slices": 0, "by_name": {}}
    dur = frame["dur_ns"].to_numpy()
    cand = (category_mask(frame["layer"], lambda s: s in FS_LAYERS)
            & category_mask(frame["name"], lambda s: s in POLL_CALLS)
            & (frame["bytes"].fillna(0).to_numpy(dtype=np.int64) == 0) & (dur < POLL_MAX_NS))
    if not cand.any():
        return frame, none
    rows = frame.loc[cand, [*_LANE, "name", "host", "start_ns", "end_ns", "dur_ns"]].astype(
        {"layer": str, "name": str})
    per_lane = rows.groupby(_LANE + ["name"], sort=False)["start_ns"].transform("size").to_numpy()
    polled = np.zeros(len(frame), dtype=bool)
    polled[np.flatnonzero(cand)[per_lane >= POLL_MIN_CALLS]] = True
    if not polled.any():
        return frame, none
    rows = rows[per_lane >= POLL_MIN_CALLS].sort_values([*_LANE, "name", "start_ns"], kind="stable")
    key = rows[[*_LANE, "name"]]
    new_lane = (key != key.shift()).any(axis=1).to_numpy()
    gap = rows["start_ns"].to_numpy() - np.maximum.accumulate(rows["end_ns"].to_numpy())[np.r_[0, :len(rows) - 1]]
    burst = np.cumsum(new_lane | (gap > POLL_GAP_NS))
    g = rows.assign(_burst=burst).groupby("_burst", sort=True)
    agg = g.agg(rank=("rank", "first"), layer=("layer", "first"), pid=("pid", "first"), tid=("tid", "first"),
                call=("name", "first"), host=("host", "first"), start_ns=("start_ns", "min"),
                end_ns=("end_ns", "max"), calls=("start_ns", "size"), busy_ns=("dur_ns", "sum"))
    slices = to_frame({
        "layer": agg["layer"].to_numpy(), "cat": "other",
        "name": [f"{c} polling ×{n:,}" for c, n in zip(agg["call"], agg["calls"])],
        "rank": agg["rank"].to_numpy(), "pid": agg["pid"].to_numpy(), "tid": agg["tid"].to_numpy(),
        "host": agg["host"].astype(object).where(agg["host"].notna(), None).to_numpy(),
        "start_ns": agg["start_ns"].to_numpy(), "end_ns": agg["end_ns"].to_numpy(),
        "args": [json.dumps({"folded_calls": int(n), "busy_us": round(b / 1e3, 3)})
                 for n, b in zip(agg["calls"], agg["busy_ns"])],
    })
    by_name = {str(k): int(v) for k, v in rows["name"].value_counts().items()}
    kept = frame.loc[~polled]
    return concat_frames([kept, slices]), {"calls": int(polled.sum()), "slices": len(slices), "by_name": by_name}


# -- lane names ----------------------------------------------------------------------------------------


def lane_names(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per lane (``rank, layer, pid, tid``) with its process and thread names and Chrome-trace ids.

    Columns: ``rank, layer, pid, tid, trace_pid, trace_tid, process_name, thread_name, thread_sort``. Roles come
    from what the frame holds (module docstring): the layer, the calls and their categories, and the pid
    against the rank's main pid.
    """
    f = frame[[*_LANE, "name", "cat", "start_ns"]]
    lanes = (f.groupby(_LANE, observed=True, sort=False)["start_ns"].agg(["min", "size"])
             .rename(columns={"min": "first", "size": "rows"}).reset_index().astype({"layer": str}))
    # the calls and categories of each lane, as sets (few distinct names per lane, however many rows)
    names = {(r, str(layer), p, t): frozenset(map(str, v)) for (r, layer, p, t), v in
             f.groupby(_LANE, observed=True, sort=False)["name"].unique().items()}
    cat_n: dict = {}
    for (r, layer, p, t, c), n in f.groupby([*_LANE, "cat"], observed=True, sort=False).size().items():
        cat_n.setdefault((r, str(layer), p, t), {})[str(c)] = int(n)
    # one row's args per lane: a Horovod lane's tensor, a framework thread's kernel type
    sample = {(r, str(layer), p, t): a for r, layer, p, t, a in
              frame.drop_duplicates(_LANE)[[*_LANE, "args"]].itertuples(index=False, name=None)}
    lanes["_names"] = [names[k] for k in lanes[_LANE].itertuples(index=False, name=None)]
    hosts = _rank_hosts(frame)
    mains = _main_threads(frame)
    lanes["process_name"] = [_process_name(r, layer, hosts.get(r)) for r, layer in zip(lanes["rank"], lanes["layer"])]
    lanes["_order"] = lanes["layer"].map(layer_order)
    lanes = lanes.sort_values(["rank", "_order", "layer", "first", "pid", "tid"], kind="stable").reset_index(drop=True)
    roles = _roles(lanes, cat_n, sample, mains)
    lanes["thread_name"] = [f"{_rank_label(r)} · {role}" for r, role in zip(lanes["rank"], roles)]
    lanes["thread_sort"] = [0 if role == "main" else i + 1 for i, role in enumerate(roles)]
    procs = lanes[["rank", "layer"]].drop_duplicates().reset_index(drop=True)
    procs["trace_pid"] = np.arange(1, len(procs) + 1)
    lanes = lanes.merge(procs, on=["rank", "layer"], how="left", sort=False)
    lanes["trace_tid"] = lanes.groupby("trace_pid").cumcount() + 1
    return lanes[[*_LANE, "trace_pid", "trace_tid", "process_name", "thread_name", "thread_sort"]]


def _rank_label(rank: int) -> str:
    return f"rank {rank}" if rank >= 0 else "all ranks (shared)"


def _process_name(rank: int, layer: str, host: Optional[str]) -> str:
    return " · ".join([_rank_label(rank), *([host] if host else []), layer])


def _rank_hosts(frame: pd.DataFrame) -> dict[int, str]:
    """Each rank's host (the most frequent one in any layer): Horovod's rows carry none."""
    known = frame.loc[frame["host"].notna().to_numpy(), ["rank", "host"]]
    if not len(known):
        return {}
    counts = known.groupby(["rank", "host"], observed=True).size().reset_index(name="n")
    best = counts.sort_values("n", ascending=False, kind="stable").drop_duplicates("rank")
    return {int(r): str(h) for r, h in zip(best["rank"], best["host"])}


def _main_threads(frame: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """rank -> (main pid, main tid): the pid and thread of the training steps; else the pid of the first app row
    and its busiest app thread; else the pid and thread with most rows. The thread whose tid is the pid wins
    when the pid has one (Linux numbers the main thread so)."""
    out: dict[int, tuple[int, int]] = {}
    keep = ~category_mask(frame["layer"], lambda s: s in ("framework", "comm", "device"))  # pid/tid not the OS's
    app = category_mask(frame["layer"], lambda s: s == "app")[keep]
    step = app & category_mask(frame["name"], lambda s: s == STEP_PHASE)[keep]
    part = frame.loc[keep, ["rank", "pid", "tid", "start_ns"]].reset_index(drop=True)
    part["_app"], part["_step"] = app, step
    for rank, rows in part.groupby("rank", sort=False):
        if rows["_step"].any():
            first = rows[rows["_step"]].sort_values("start_ns", kind="stable").iloc[0]
            pid, tid = int(first["pid"]), int(first["tid"])
        elif rows["_app"].any():  # the process that logged first; in it the thread that logged most
            app_rows = rows[rows["_app"]]
            pid = int(app_rows.sort_values("start_ns", kind="stable").iloc[0]["pid"])
            tid = int(app_rows.loc[app_rows["pid"] == pid, "tid"].value_counts().index[0])
        else:
            pid = int(rows["pid"].value_counts().index[0])
            tid = int(rows.loc[rows["pid"] == pid, "tid"].value_counts().index[0])
        if ((rows["pid"] == pid) & (rows["tid"] == pid)).any():
            tid = pid
        out[int(rank)] = (pid, tid)
    return out


def _roles(lanes: pd.DataFrame, cat_n: dict, sample: dict, mains: dict) -> list[str]:
    """The role of each lane, in ``lanes`` order."""
    threads = _os_threads(lanes, cat_n, mains)
    hvd: dict[int, int] = {}
    base = []
    for r, layer, p, t, calls in lanes[[*_LANE, "_names"]].itertuples(index=False, name=None):
        cats = cat_n.get((r, layer, p, t), {})
        args = sample.get((r, layer, p, t))
        if layer == "comm" and all(_TORCH_COMM.match(c) for c in calls):
            base.append("PyTorch collectives (" + "/".join(sorted({c.split(":")[0] for c in calls})) + ")")
        elif layer == "comm":
            hvd[r] = hvd.get(r, 0) + 1
            base.append(_horovod_role(calls, args, hvd[r]))
        elif layer == "device":
            base.append(f"GPU {t >> 20} stream {t & ((1 << 20) - 1)}")
        elif layer == "framework" and any(c.startswith(("aten::", "ProfilerStep#", "enumerate(DataLoader)#"))
                                          for c in calls):
            base.append("PyTorch main" if cats.get("wait", 0) or any(c.startswith("ProfilerStep#") for c in calls)
                        else "PyTorch thread")
        elif layer == "framework":
            base.append(_framework_role(calls, cats, args))
        elif (r, p, t) in threads:
            base.append(threads[(r, p, t)])
        else:
            base.append("Darshan DXT (all threads)")  # DXT segments name no process or thread
    # several framework lanes of one role in one process: number them
    seen: dict[tuple, int] = {}
    total: dict[tuple, int] = {}
    for r, layer, role in zip(lanes["rank"], lanes["layer"], base):
        total[(r, layer, role)] = total.get((r, layer, role), 0) + 1
    out = []
    for r, layer, role in zip(lanes["rank"], lanes["layer"], base):
        if total[(r, layer, role)] > 1 and layer == "framework":
            seen[(r, layer, role)] = seen.get((r, layer, role), 0) + 1
            role = f"{role} {seen[(r, layer, role)]}"
        out.append(role)
    return out


def _os_threads(lanes: pd.DataFrame, cat_n: dict, mains: dict) -> dict[tuple[int, int, int], str]:
    """``(rank, pid, tid) -> role`` of every OS thread (app and file-system layers; a thread is one role in
    all of them): ``main``, ``reader worker k (pid P)`` and its threads, else the thread by its calls, numbered
    per kind within its process in order of first appearance."""
    calls: dict[tuple, set] = {}
    cats: dict[tuple, dict] = {}
    app_cats: dict[tuple, dict] = {}
    order = lanes.sort_values("first", kind="stable")
    for r, layer, p, t, names in order[[*_LANE, "_names"]].itertuples(index=False, name=None):
        if layer in ("framework", "comm", "device") or (p == 0 and t == 0 and layer in FS_LAYERS):
            continue  # not OS threads; (0, 0) in a file-system layer is Darshan DXT
        key = (r, p, t)
        calls.setdefault(key, set()).update(names)
        for c, n in cat_n.get((r, layer, p, t), {}).items():
            cats.setdefault(key, {})[c] = cats.get(key, {}).get(c, 0) + n
            if layer == "app":
                app_cats.setdefault(key, {})[c] = app_cats.get(key, {}).get(c, 0) + n
    workers: dict[tuple[int, int], int] = {}
    counters: dict[tuple, int] = {}
    out = {}
    for key in calls:  # dicts keep insertion order: first appearance
        r, p, t = key
        main = mains.get(r, (None, None))
        if p != main[0] and (r, p) not in workers:
            workers[(r, p)] = sum(1 for k in workers if k[0] == r) + 1
        if (p, t) == main:
            out[key] = "main"
            continue
        prefix = "" if p == main[0] else f"reader worker {workers[(r, p)]} (pid {p})"
        if p != main[0] and t == p:
            out[key] = prefix
            continue
        kind = _thread_kind(calls[key], cats.get(key, {}), app_cats.get(key))
        if kind in ("thread", "reader thread", "I/O thread"):
            counters[(r, p, kind)] = counters.get((r, p, kind), 0) + 1
            kind = f"{kind} {counters[(r, p, kind)]}"
        out[key] = f"{prefix + ' · ' if prefix else ''}{kind} (tid {t})"
    return out


def _thread_kind(calls: set, cats: dict, app_cats: "dict | None") -> str:
    """What an OS thread other than a process's main one does, from its calls and their categories."""
    if calls and calls <= POLL_CALLS:
        return f"{'/'.join(sorted(calls))} polling thread"
    if calls and calls <= _SPAWN_CALLS:
        # DFTracer keeps the parent's pid in a child forked before exec: the "thread" is that child
        return f"forked child: {'/'.join(sorted(calls))}"
    if app_cats:
        return "reader thread" if app_cats.get("io", 0) * 2 >= sum(app_cats.values()) else "thread"
    return "I/O thread" if cats.get("io", 0) * 2 >= (sum(cats.values()) or 1) else "thread"


#: collectives of the PyTorch profiler's trace (the process group's backend and its op: ``gloo:all_reduce``)
_TORCH_COMM = re.compile(r"^(?:(?:gloo|nccl|mpi|ucc|xccl|hccl):|record_param_comms$)")


def _horovod_role(calls: frozenset, args: Optional[str], k: int) -> str:
    """A Horovod timeline lane is one tensor: ``Horovod allreduce lane 13: <tensor>``."""
    ops = {c.removeprefix("NEGOTIATE_").removeprefix("MPI_").removeprefix("NCCL_") for c in calls}
    op = next((o.lower() for o in ("ALLREDUCE", "BROADCAST", "ALLGATHER", "ALLTOALL", "REDUCESCATTER")
               if o in ops), "op")
    tensor = ""
    try:
        tensor = str(json.loads(args).get("tensor", "")) if isinstance(args, str) else ""
    except (ValueError, AttributeError):
        pass
    # TF names the tensor by its graph path and the Horovod op: the last part without the op says what it is
    short = re.sub(r"^Horovod[A-Za-z]+_?", "", tensor.rsplit("/", 1)[-1])
    if len(short) > 48:
        short = short[:47] + "…"
    return f"Horovod {op} lane {k}" + (f": {short}" if short else "")


def _framework_role(calls: frozenset, cats: dict, args: Optional[str]) -> str:
    n = sum(cats.values()) or 1
    if (cats.get("io", 0) + cats.get("preprocess", 0)) * 2 >= n:
        return "tf.data"
    if calls <= {"ExecutorState::ProcessAsync::Done"} and isinstance(args, str) and "Horovod" in args:
        # the async op's done callback runs on the thread that finished the op: Horovod's background thread
        return "Horovod background (op completions)"
    if any(c.startswith(("EagerExecute", "EagerKernelExecute", "TFE_", "EagerLocalExecute")) for c in calls):
        return "TF eager (Python main)"
    if any(c.startswith("ExecutorState::") for c in calls):
        return "TF executor"
    if cats.get("wait", 0) * 2 >= n:
        return "tf.data consumer"
    return "TF thread"


def _with_ids(frame: pd.DataFrame, lanes: pd.DataFrame) -> pd.DataFrame:
    f = frame[_LANE].astype({"layer": str})
    return f.merge(lanes[[*_LANE, "trace_pid", "trace_tid"]], on=_LANE, how="left", sort=False)


def _metadata_events(lanes: Optional[pd.DataFrame]) -> list[str]:
    if lanes is None:
        return []
    lines = []
    for pid, name in lanes[["trace_pid", "process_name"]].drop_duplicates().itertuples(index=False):
        lines.append(f'{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{json.dumps(name)}}}}}')
        lines.append(f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}')
    for tpid, ttid, name, order in lanes[["trace_pid", "trace_tid", "thread_name", "thread_sort"]].itertuples(
            index=False):
        lines.append(f'{{"ph":"M","name":"thread_name","pid":{tpid},"tid":{ttid},'
                     f'"args":{{"name":{json.dumps(name)}}}}}')
        lines.append(f'{{"ph":"M","name":"thread_sort_index","pid":{tpid},"tid":{ttid},'
                     f'"args":{{"sort_index":{order}}}}}')
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
