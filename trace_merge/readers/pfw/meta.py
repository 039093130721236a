"""The metadata of a ``.pfw`` file: what both kinds say (:class:`PfwMeta`), and what a TimeLogger file
(:class:`TimeLoggerMeta`: its rank, clocks, profile anchors, how its process ended) or a DFTracer trace
(:class:`DFTracerMeta`: its hash tables) adds."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from ...schema import MAX_RANKS, SIDE_LAYERS, SourceMeta, checked_int
from .events import Json, State, as_int, as_str

#: a clock offset between two ranks beyond a day is a corrupt value (a day off is a different run, see align)
_MAX_OFFSET_NS = 24 * 3600 * 10**9


@dataclass
class PfwMeta(SourceMeta):
    """What the reader found in a ``.pfw`` file (or a block of one), whichever wrote it."""

    #: which parser read the events: ``scan``, ``duckdb``, ``arrow``, ``lines``, or ``none`` (no events)
    parser: str = "none"
    #: complete events read (the frame's rows)
    events: int = 0
    #: the processes the file names (its rows' and its metadata events'), ascending; the merge maps a file of
    #: unknown rank to ranks by them
    pids: list[int] = field(default_factory=list)
    #: the process that wrote the file, where it is one
    pid: Optional[int] = None
    #: the rank of the file's rows without their own (the TimeLogger header's, else from the file name)
    rank: Optional[int] = None
    host: Optional[str] = None
    #: a half-written last line was dropped (a live or crashed writer's)
    truncated_last_line: bool = False
    #: events of another phase than complete or metadata, by phase
    ignored_events: dict[str, int] = field(default_factory=dict)
    #: complete events without a numeric ``ts``, skipped
    events_without_ts: int = 0
    thread_names: dict[int, str] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    #: metadata events the reader does not interpret, by name
    other_metadata: dict[str, int] = field(default_factory=dict)


@dataclass
class TimeLoggerMeta(PfwMeta):
    """A TimeLogger app file's metadata: its header (docs/wire-format.md) and what its metadata events say."""

    world_size: Optional[int] = None
    #: the writer's parent process (a worker's parent wrote an app file of the same rank)
    ppid: Optional[int] = None
    versions: Json = None
    argv: Json = None
    #: the ``timelogger`` metadata event's args
    header: dict[str, Json] = field(default_factory=dict)
    #: the wall/perf clock anchors of the header and of the close record
    anchors: list[Json] = field(default_factory=list)
    #: the last ``clock_sync`` record, and its offset (this rank's clock minus rank 0's, ns)
    clock_sync: Optional[dict[str, Json]] = None
    clock_offset_ns: Optional[int] = None
    #: the ``tf_profile`` records (their markers anchor the rank's TensorFlow profiles in time)
    tf_anchors: list[dict[str, Json]] = field(default_factory=list)
    close: Optional[dict[str, Json]] = None
    #: intervals the writer could not write
    dropped: int = 0
    #: why the process ended early (None: it closed normally)
    ended_early: Optional[str] = None

    @property
    def side_layer(self) -> bool:
        """A file of a launcher's sidecar (noise generator, CPU sampler: its header's ``layer``), not the rank's own
        app layer: not a process of the rank, not a sign of the rank's files being there or complete."""
        return self.header.get("layer") in SIDE_LAYERS


@dataclass
class DFTracerMeta(PfwMeta):
    """A DFTracer trace's metadata: its hash tables (accumulated over the blocks read so far) and bookkeeping."""

    hosts: list[str] = field(default_factory=list)
    #: the unit of ``ts``/``dur``: ``US``, or what the ``CM``/``time_metric`` record says
    time_metric: str = "US"
    #: file hash -> path (``FH``), string hash -> string (``SH``)
    files: dict[str, str] = field(default_factory=dict)
    strings: dict[str, str] = field(default_factory=dict)
    #: DFTracer's own ``start``/``end`` events
    dftracer_events: list[str] = field(default_factory=list)


def file_meta(path: str, state: State, event_pids: np.ndarray, kind: str, parser: str, rank: Optional[int],
              warnings: list[str]) -> PfwMeta:
    """The metadata of a file (or block) whose events have the processes ``event_pids`` (one per event); ``rank``
    is its rows' default rank."""
    frame_pids = pd.unique(event_pids).tolist() if len(event_pids) else []  # hashed, not sorted: sorted below
    pids = sorted(set(int(p) for p in frame_pids) | state.meta_pids)
    pid = pids[0] if len(pids) == 1 else None
    if state.no_ts:
        warnings.append(f"{path}: {state.no_ts} complete events without a numeric ts skipped")
    meta = _timelogger(path, state, pid, warnings) if kind == "timelogger" else _dftracer(state, pid)
    meta.parser, meta.events, meta.pids, meta.rank = parser, len(event_pids), pids, rank
    meta.truncated_last_line, meta.ignored_events = state.truncated_last_line, dict(state.ignored)
    meta.events_without_ts, meta.other_metadata = state.no_ts, dict(state.other_meta)
    meta.thread_names, meta.process_names = state.thread_names, state.process_names
    return meta


def _timelogger(path: str, state: State, pid: Optional[int], warnings: list[str]) -> TimeLoggerMeta:
    header = state.header or {}
    close = state.close or {}
    sync = state.clock_sync[-1] if state.clock_sync else None
    meta = TimeLoggerMeta(
        world_size=checked_int(header, "world_size", 1, MAX_RANKS, path, warnings),
        host=as_str(header.get("hostname")),
        pid=as_int(header.get("pid")) if header.get("pid") is not None else pid,
        ppid=as_int(header.get("ppid")),
        versions=header.get("versions"),
        argv=header.get("argv"),
        header=header,
        anchors=[a for a in (header.get("anchor"), close.get("anchor")) if a],
        clock_sync=sync,
        clock_offset_ns=checked_int(sync, "clock_offset_ns", -_MAX_OFFSET_NS, _MAX_OFFSET_NS, path, warnings,
                                    "clock_sync ") if sync is not None else None,
        tf_anchors=state.tf_profile,
        close=state.close,
        dropped=state.dropped,
        ended_early=_ended_early(state.close),
    )
    if state.write_failed:
        meta.ended_early = (f"lost intervals: its writes failed ({state.write_failed}: disk full or a file-size "
                            f"limit?), {state.dropped:,} intervals never reached the file")
    warnings += [f"{path}: {x}" for x in state.evidence_missing]
    if state.dropped:
        warnings.append(f"{path}: {state.dropped} intervals dropped by the writer (it could not keep up, or a write "
                        "failed); the app layer is incomplete")
    return meta


def _dftracer(state: State, pid: Optional[int]) -> DFTracerMeta:
    hosts = sorted(set(state.maps["HH"].values()))
    return DFTracerMeta(pid=pid, host=hosts[0] if len(hosts) == 1 else None, hosts=hosts,
                        time_metric=state.time_metric, files=dict(state.maps["FH"]), strings=dict(state.maps["SH"]),
                        dftracer_events=list(state.bookkeeping))


def _ended_early(close: Optional[dict[str, Json]]) -> Optional[str]:
    """Why a TimeLogger file's process ended early, from its close record (None: it closed normally)."""
    if close is None:
        return "ended early: no close record (killed, crashed, or still running)"
    exit_ = close.get("exit")
    if not isinstance(exit_, dict):
        return None
    if exit_.get("reason") == "exception":
        return (f"ended early: uncaught {exit_.get('type')}"
                + (" (SIGINT)" if exit_.get("type") == "KeyboardInterrupt" else ""))
    if exit_.get("reason") == "signal":
        return f"ended early: stopped by {exit_.get('signal')}"
    return None
