"""Reader for TensorFlow profiler output (``<host>.xplane.pb``) — the ``framework`` layer.

Only the host plane (``/host:CPU``) is read: one row per TraceMe/op event, ``tid`` = the XLine id
(one line per thread), times absolute epoch ns.

Time base
---------
Line ``timestamp_ns`` values are relative to the profile start; each event adds ``offset_ps`` (ps).
Newer TensorFlow (seen in 2.21) stores the start in the ``Task Environment`` plane
(stat ``profile_start_time``, epoch ns). TensorFlow 2.15 stores no absolute time at all: the file is
shifted so that the ``timelogger_anchor`` TraceMe that ``TimeLogger.tf_profile`` emits starts at the
``marker_wall_ns`` recorded in the app file's ``tf_profile`` metadata (docs/wire-format.md). When both
exist the Task Environment wins and the marker is a cross-check (:attr:`XPlaneMeta.anchor_check_ns`).

Classification (``cat``)
------------------------
Threads whose line name starts with ``tf_data`` are tf.data producer threads, except
``tf_data_iterator_get_next``, where a ``tf.function`` such as Keras' ``train_function`` fetches its
batch: the consumer side, like the Python and ``tf_Compute`` threads.

* ``wait`` — the consumer side of tf.data: ``*IteratorGetNext*``, ``Iterator::*`` (the pipeline
  pulled inline by the consumer) and ``*Consume`` events on consumer threads. Other events on the
  get-next thread are the pipeline's functions run inline: ``preprocess`` (``io`` as below).
* ``io`` — on tf.data threads, iterators/ops that read data: leaf iterator names or ops matching
  ``TFRecord``, ``FixedLengthRecord``, ``TextLine``, ``ReadFile``, ``Generator`` (``from_generator``)
  and ``py_function``/``numpy_function`` (``EagerPyFunc``/``PyFunc``: in h5py pipelines that is where the
  file read happens; the POSIX layer shows how much of it really is I/O).
* ``preprocess`` — every other event on a tf.data thread (``Map``, ``ParallelMap``, ``MapAndBatch``,
  ``Batch``, ``Shuffle``, prefetch producers and the ops of map functions).
* ``comm`` — Horovod ops (``Horovod*``) and TF collectives (``Collective*``, ``Nccl*``).
* ``compute`` — everything else: ``EagerLocalExecute: <op>``, ``__inference_*`` train-step functions,
  kernels (``name:OpType``), executor events, user TraceMes such as Keras' ``train``.
* ``other`` — a compute/comm event that *contains* a ``wait`` event on any thread (e.g.
  ``EagerExecute`` around ``IteratorGetNext``, or a Keras ``train``/``train_function`` step that fetches
  its batch): such a wrapper is not compute for the time it waits, and its real work is covered by the
  kernel rows inside. The anchor marker itself is ``other`` too.

``step``/``epoch`` come from the ``step_num``/``epoch_num`` stats of the events that carry them (Keras'
``train`` TraceMe, ``tf.profiler.experimental.Trace(..., step_num=)``); other stats go to ``args``.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..errors import TraceInputError
from ..schema import SourceData, SourceMeta, to_frame
from . import rank_from_name

log = logging.getLogger(__name__)


@dataclass
class XPlaneMeta(SourceMeta):
    """What the reader found in a TensorFlow profile."""

    rank: int
    #: the profiled host
    host: str
    #: where its absolute time came from: ``"task_environment"``, ``"anchor"`` (the ``tf_profile`` marker) or
    #: ``"absolute_lines"``
    time_base: str
    #: tid (XLine id) -> thread name
    threads: dict[int, str]
    #: the ``Task Environment`` plane's profile start (epoch ns), None where there is none (TF 2.15)
    profile_start_ns: Optional[int]
    #: the profiled process, where the anchor carried it
    pid: Optional[int] = None
    #: the marker's distance from the profile's own start (ns), where both time sources exist
    anchor_check_ns: Optional[int] = None


KIND = "xplane"
HOST_PLANE = "/host:CPU"
TASK_ENV_PLANE = "Task Environment"
ANCHOR_MARKER = "timelogger_anchor"
GET_NEXT_LINE = "tf_data_iterator_get_next"
#: an anchor that disagrees with the Task Environment by more than this gets a warning
ANCHOR_TOLERANCE_NS = 1_000_000

# Bookkeeping events of newer TF's thread-pool listener: zero-work markers, not workload.
_SKIP_PREFIXES = ("ThreadpoolListener::",)
_IO_RE = re.compile(r"TFRecord|FixedLengthRecord|TextLine|ReadFile|Generator|PyFunc|NumpyFunction", re.I)
_COMM_RE = re.compile(r"Horovod|Collective|Nccl")
# Line timestamps above this (1973 in epoch ns) are already absolute, not relative to the profile start.
_ABSOLUTE_NS = 10**17


def _load_xplane_pb2() -> Any:
    """Import TensorFlow's XSpace protobuf module (lazily: TensorFlow is optional)."""
    # reading a profile needs TensorFlow's protobufs, not its start-up INFO lines on the user's stderr (oneDNN,
    # CPU features); a user's own setting wins
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # TF 2.21 logs its oneDNN notice before its log level applies; reading protobufs computes nothing with it
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2  # TF 2.15 .. 2.21
    except ImportError:
        try:
            from tsl.profiler.protobuf import xplane_pb2  # layouts that ship tsl top-level
        except ImportError as exc:
            raise ImportError(
                "reading TensorFlow profiles (xplane.pb) needs TensorFlow: pip install '.[tf]'"
            ) from exc
    return xplane_pb2


def parse_xspace(path: "str | os.PathLike[str]") -> Any:
    """Parse one ``xplane.pb`` into an ``XSpace`` message.

    Raises
    ------
    TraceInputError
        Unreadable, corrupt or truncated file, or no host plane.
    """
    xplane_pb2 = _load_xplane_pb2()
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not data:
        raise TraceInputError(path, "empty file (the profiler did not finish writing it)")
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError, differs by protobuf version
        raise TraceInputError(path, f"not a valid xplane.pb (corrupt or truncated): {exc}") from None
    if not any(p.name == HOST_PLANE for p in space.planes):
        names = ", ".join(repr(p.name) for p in space.planes) or "none"
        raise TraceInputError(path, f"no {HOST_PLANE} plane (planes: {names}); corrupt or truncated profile")
    return space


def _stat_value(stat: Any, stat_meta: Mapping[int, Any]) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "ref_value":
        ref = stat_meta.get(value)
        return ref.name if ref is not None else value
    if kind == "bytes_value":
        return value.hex()
    return value


def _stats(stats: Iterable[Any], stat_meta: Mapping[int, Any]) -> dict[str, Any]:
    out = {}
    for st in stats:
        meta = stat_meta.get(st.metadata_id)
        if meta is not None:
            out[meta.name] = _stat_value(st, stat_meta)
    return out


def profile_start_ns(space: Any) -> "int | None":
    """``profile_start_time`` (epoch ns) of the ``Task Environment`` plane, or None (TF 2.15)."""
    for plane in space.planes:
        if plane.name == TASK_ENV_PLANE:
            value = _stats(plane.stats, plane.stat_metadata).get("profile_start_time")
            if value:
                return int(value)
    return None


def _classify(name: str, line_kind: str) -> str:
    """``cat`` of one event; ``line_kind`` is ``"producer"`` (tf.data threads), ``"get_next"`` or ``"main"``."""
    if name == ANCHOR_MARKER:
        return "other"
    if line_kind == "producer":
        leaf = name.rsplit("::", 1)[-1]
        return "io" if _IO_RE.search(leaf) else "preprocess"
    if "IteratorGetNext" in name or name.startswith("Iterator::") or name.endswith("Consume"):
        return "wait"
    if line_kind == "get_next":  # map functions run inline by the fetch: input work
        return "io" if _IO_RE.search(name) else "preprocess"
    if _COMM_RE.search(name):
        return "comm"
    return "compute"


def _pick_anchor(path: Path, anchors: Sequence[Mapping[str, Any]]) -> "Mapping[str, Any] | None":
    """The ``tf_profile`` metadata that belongs to this file.

    Prefer anchors whose ``logdir`` contains the file; among several sessions of one logdir take the
    latest one that started before the file was written (the file is written when profiling stops).
    """
    usable = [a for a in anchors if a and a.get("marker_wall_ns") is not None]
    if not usable:
        return None
    resolved = path.resolve()

    def inside(anchor: Mapping[str, Any]) -> bool:
        logdir = anchor.get("logdir")
        if not logdir:
            return False
        try:
            resolved.relative_to(Path(logdir).resolve())
            return True
        except ValueError:
            return False

    candidates = [a for a in usable if inside(a)] or usable
    if len(candidates) == 1:
        return candidates[0]
    written_ns = path.stat().st_mtime_ns
    before = [a for a in candidates if int(a.get("start_wall_ns") or a["marker_wall_ns"]) <= written_ns]
    pool = before or candidates
    return max(pool, key=lambda a: int(a.get("start_wall_ns") or a["marker_wall_ns"]))


def read(
    path: "str | os.PathLike[str]",
    anchors: "Sequence[Mapping[str, Any]] | None" = None,
    rank: "int | None" = None,
) -> SourceData:
    """Read the host plane of one TensorFlow ``xplane.pb``.

    Parameters
    ----------
    path
        ``.../plugins/profile/<run>/<host>.xplane.pb``.
    anchors
        ``tf_profile`` metadata dicts (``marker``, ``marker_wall_ns`` in epoch ns, ``logdir``,
        ``start_wall_ns``; optional ``pid``) from the app files of the rank that wrote this profile.
        Required on TensorFlow versions without a ``Task Environment`` plane (2.15).
    rank
        Rank of the profiled process; default: from a ``rank-<r>`` directory in ``path``, else 0.

    Returns
    -------
    SourceData
        ``frame``: layer ``framework`` rows with absolute epoch-ns ``start_ns``/``end_ns``,
        ``tid`` = XLine id, ``host`` = the profiled host, ``step``/``epoch`` where the event carries
        ``step_num``/``epoch_num``, other event stats in ``args`` (JSON).
        ``meta``: an :class:`XPlaneMeta` (``rank``, ``host``, ``time_base``, ``threads``, ``anchor_check_ns`` when
        both time sources exist, ``pid`` when the anchor carried one).

    Raises
    ------
    TraceInputError
        Corrupt/truncated file, no host plane, or no absolute time (TF 2.15 profile without a
        ``timelogger_anchor`` marker and its ``tf_profile`` metadata).
    """
    path = Path(path)
    space = parse_xspace(path)
    host_plane = next(p for p in space.planes if p.name == HOST_PLANE)
    ev_meta = host_plane.event_metadata
    stat_meta = host_plane.stat_metadata
    warnings: list[str] = []

    names: list[str] = []
    cats: list[str] = []
    tids: list[int] = []
    rel_start: list[int] = []
    durs: list[int] = []
    steps: list[Any] = []
    epochs: list[Any] = []
    args: list[Any] = []
    threads: dict[int, str] = {}
    cat_cache: dict[tuple[str, str], str] = {}
    anchor = _pick_anchor(path, anchors or [])
    marker_name = (anchor or {}).get("marker") or ANCHOR_MARKER
    marker_rel: "int | None" = None  # start of the anchor marker, ns relative to the profile start

    for line in host_plane.lines:
        line_name = line.display_name or line.name
        threads[int(line.id)] = line_name
        # tf.data producer threads; the get-next thread is the consumer side (Keras' input fetch)
        if line_name.startswith(GET_NEXT_LINE):
            line_kind = "get_next"
        elif line_name.startswith("tf_data"):
            line_kind = "producer"
        else:
            line_kind = "main"
        base_ns = int(line.timestamp_ns)
        for ev in line.events:
            meta = ev_meta.get(ev.metadata_id)
            name = meta.name if meta is not None else str(ev.metadata_id)
            if name.startswith(_SKIP_PREFIXES):
                continue
            key = (name, line_kind)
            cat = cat_cache.get(key)
            if cat is None:
                cat = cat_cache[key] = _classify(name, line_kind)
            start = base_ns + ev.offset_ps // 1000
            if name == marker_name and (marker_rel is None or start < marker_rel):
                marker_rel = start
            names.append(name)
            cats.append(cat)
            tids.append(int(line.id))
            rel_start.append(start)
            durs.append(ev.duration_ps // 1000)
            st = _stats(ev.stats, stat_meta) if len(ev.stats) else {}
            step = st.pop("step_num", None)
            epoch = st.pop("epoch_num", None)
            steps.append(None if step is None else int(step))
            epochs.append(None if epoch is None else int(epoch))
            args.append(json.dumps(st, default=str) if st else None)

    start_arr = np.asarray(rel_start, dtype=np.int64)
    dur_arr = np.asarray(durs, dtype=np.int64)
    mark_wrappers(cats, start_arr, start_arr + dur_arr)
    task_start = profile_start_ns(space)
    pid = int(anchor["pid"]) if anchor is not None and anchor.get("pid") is not None else None

    if len(start_arr) and int(start_arr.min()) > _ABSOLUTE_NS:
        offset = 0
        time_base = "absolute_lines"
    elif task_start is not None:
        offset = task_start
        time_base = "task_environment"
    elif anchor is not None and marker_rel is not None:
        offset = int(anchor["marker_wall_ns"]) - marker_rel
        time_base = "anchor"
    else:
        why = (
            f"no {marker_name!r} marker event in the host plane"
            if anchor is not None
            else "no tf_profile anchor given"
        )
        raise TraceInputError(
            path,
            f"no absolute time: this TensorFlow writes no 'Task Environment' plane and {why}; "
            "profile with timelogger tf_profile (TimeLogger.tf_profile) so the marker anchors the file",
        )
    anchor_check_ns = None
    if anchor is not None and marker_rel is not None and time_base != "anchor":
        check = offset + marker_rel - int(anchor["marker_wall_ns"])
        anchor_check_ns = int(check)
        if abs(check) > ANCHOR_TOLERANCE_NS:
            warnings.append(
                f"{path}: timelogger_anchor marker is {check / 1e6:.3f} ms away from the profile's own "
                "start time; using the profile's Task Environment time"
            )

    host = space.hostnames[0] if len(space.hostnames) else path.name.split(".xplane.pb")[0]
    if rank is None:
        rank = rank_from_name(path)
    rank = 0 if rank is None else int(rank)
    start_abs = start_arr + offset
    frame = to_frame(
        {
            "layer": "framework",
            "cat": cats,
            "name": names,
            "rank": np.full(len(names), rank, dtype=np.int64),
            "pid": pid if pid is not None else 0,
            "tid": np.asarray(tids, dtype=np.int64),
            "host": host,
            "start_ns": start_abs,
            "dur_ns": dur_arr,
            "epoch": epochs,
            "step": steps,
            "args": args,
        }
    )
    log.debug("%s: %d framework rows, time base %s", path, len(frame), time_base)
    return SourceData(path=str(path), kind=KIND, frame=frame, warnings=warnings,
                      meta=XPlaneMeta(rank=rank, host=host, time_base=time_base, threads=threads,
                                      profile_start_ns=task_start, pid=pid, anchor_check_ns=anchor_check_ns))


def mark_wrappers(cats: list[str], starts: np.ndarray, ends: np.ndarray) -> None:
    """Turn compute/comm events that wrap a ``wait`` event into ``other`` (in place).

    A wrapper is an event inside which a wait both starts and ends, on any thread (Keras runs
    ``IteratorGetNext`` on the ``tf_data_iterator_get_next`` thread while ``train_function`` waits on
    the Python thread). Only the first wait starting inside each event is tested, which keeps this
    O(n log n): waits of one consumer do not overlap, so that is the one that matters.
    """
    cat_arr = np.asarray(cats, dtype=object)
    is_wait = cat_arr == "wait"
    if not is_wait.any():
        return
    order = np.argsort(starts[is_wait], kind="stable")
    w_start = starts[is_wait][order]
    w_end = ends[is_wait][order]
    candidates = np.flatnonzero((cat_arr == "compute") | (cat_arr == "comm"))
    first = np.searchsorted(w_start, starts[candidates], "left")
    has = first < len(w_start)
    first = np.minimum(first, len(w_start) - 1)
    wraps = has & (w_start[first] < ends[candidates]) & (w_end[first] <= ends[candidates])
    for i in candidates[wraps]:
        cats[i] = "other"
