"""Reader for Horovod timelines (``HOROVOD_TIMELINE=<file>``) — the ``comm`` layer.

The file is a Chrome-trace JSON array written by rank 0 while the job runs: it is unterminated until
Horovod shuts down cleanly and holds several events per line. Each ``pid`` is one tensor, named by a
``process_name`` metadata event; the first ``process_name`` event carries
``args.start_time_since_epoch_in_micros``, the epoch time of ``ts == 0`` (µs). Activities are ``B``/``E``
pairs (nested per tensor: ``ALLREDUCE`` ⊃ ``MPI_ALLREDUCE``) and ``X`` events.

Rows: layer ``comm``, cat ``comm``, ``name`` = the activity (``NEGOTIATE_ALLREDUCE``, ``ALLREDUCE``,
``MPI_ALLREDUCE``, ...), ``tid`` = the timeline pid (tensor index), ``args`` = ``{"tensor": name, ...}`` plus
the ``E`` event's args (dtype, shape). Zero-length ``X`` events named by a rank number (``"0"``, ``"1"``:
"rank N is ready" ticks inside a negotiation) are counted per negotiation in ``args.ready_ranks``, not
made rows.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceInputError
from ..schema import SourceData, to_frame

log = logging.getLogger(__name__)

KIND = "horovod"


def iter_events(text: str) -> "tuple[list[dict[str, Any]], bool]":
    """Decode the events of a possibly unterminated or truncated Chrome-trace JSON array.

    Returns
    -------
    (events, complete)
        ``complete`` is False when the text ended inside an event (crash / still being written).
    """
    body = text.strip()
    if body.startswith("["):
        body = body[1:]
    try:  # fast path: a cleanly closed (or merely unclosed) array
        stripped = body.rstrip().rstrip(",").rstrip()
        if stripped.endswith("]"):
            stripped = stripped[:-1]
        return json.loads("[" + stripped + "]"), True
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    events: list[dict[str, Any]] = []
    pos, n = 0, len(body)
    while pos < n:
        while pos < n and body[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or body[pos] == "]":
            return events, True
        try:
            obj, pos = decoder.raw_decode(body, pos)
        except json.JSONDecodeError:
            return events, False
        if isinstance(obj, dict):
            events.append(obj)
    return events, True


def _read_text(path: Path) -> str:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except (OSError, EOFError) as exc:
        raise TraceInputError(path, f"cannot read: {exc}") from None


def read(path: "str | os.PathLike[str]", rank: int = 0) -> SourceData:
    """Read one Horovod timeline.

    Parameters
    ----------
    path
        The ``HOROVOD_TIMELINE`` file (``.json``, optionally gzipped).
    rank
        Rank that wrote it (Horovod: rank 0).

    Returns
    -------
    SourceData
        ``frame``: ``comm`` rows, absolute epoch ns. ``meta``: ``rank``, ``start_us`` (epoch µs of
        ``ts == 0``), ``tensors`` (pid -> tensor name), ``complete`` (False for a truncated file).
        ``warnings``: truncation, unmatched ``B`` events (activities still open at the end).

    Raises
    ------
    TraceInputError
        Not a JSON event array, no ``start_time_since_epoch_in_micros``, or no activity at all.
    """
    path = Path(path)
    text = _read_text(path)
    if not text.lstrip().startswith(("[", "{")):
        raise TraceInputError(path, "not a Horovod timeline (expected a JSON array of trace events)")
    events, complete = iter_events(text)
    warnings: list[str] = []
    if not complete:
        warnings.append(f"{path}: truncated timeline (file ends inside an event); read {len(events)} events")

    start_us: "int | None" = None
    tensors: dict[int, str] = {}
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            a = ev.get("args") or {}
            if "start_time_since_epoch_in_micros" in a and start_us is None:
                start_us = int(a["start_time_since_epoch_in_micros"])
            if "name" in a:
                tensors[int(ev.get("pid", 0))] = str(a["name"])
    if start_us is None:
        raise TraceInputError(
            path, "no start_time_since_epoch_in_micros in the process_name metadata (not a Horovod timeline?)"
        )

    names: list[str] = []
    tids: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    args: list[dict[str, Any]] = []  # serialised at the end, after ready ticks are counted
    stacks: dict[int, list[tuple[str, float]]] = {}
    ready: dict[tuple[int, int], int] = {}  # (pid, stack depth) of an open B -> rank-ready ticks inside it

    def add(name: str, pid: int, ts: float, te: float, extra: "dict[str, Any] | None") -> int:
        names.append(name)
        tids.append(pid)
        starts.append(ts)
        ends.append(te)
        a = {"tensor": tensors.get(pid, str(pid))}
        if extra:
            a.update(extra)
        args.append(a)
        return len(names) - 1

    for ev in events:
        ph = ev.get("ph")
        if ph not in ("B", "E", "X") or "ts" not in ev:
            continue
        pid = int(ev.get("pid", 0))
        ts = float(ev["ts"])
        stack = stacks.setdefault(pid, [])
        if ph == "B":
            stack.append((str(ev.get("name", "")), ts))
        elif ph == "E":
            if not stack:
                continue
            name, t0 = stack.pop()
            row = add(name, pid, t0, ts, ev.get("args"))
            ticks = ready.pop((pid, len(stack)), 0)
            if ticks:
                args[row]["ready_ranks"] = ticks
        else:  # X
            name = str(ev.get("name", ""))
            dur = float(ev.get("dur", 0))
            if dur == 0 and name.isdigit() and stack:
                k = (pid, len(stack) - 1)  # counted on the enclosing open activity
                ready[k] = ready.get(k, 0) + 1
                continue
            add(name, pid, ts, ts + dur, ev.get("args"))

    open_b = sum(len(s) for s in stacks.values())
    if open_b:
        # Horovod 0.28 can also lose the last E events at a clean shutdown
        warnings.append(f"{path}: {open_b} activities never ended (job stopped or file cut before they did); dropped")
    if not names:
        raise TraceInputError(path, "no Horovod activities (B/E or X events) in the timeline")

    base_ns = start_us * 1000
    start_ns = base_ns + np.rint(np.asarray(starts) * 1000).astype(np.int64)
    end_ns = base_ns + np.rint(np.asarray(ends) * 1000).astype(np.int64)
    frame = to_frame(
        {
            "layer": "comm",
            "cat": "comm",
            "name": names,
            "rank": np.full(len(names), int(rank), dtype=np.int64),
            "tid": np.asarray(tids, dtype=np.int64),
            "start_ns": start_ns,
            "end_ns": end_ns,
            "args": [json.dumps(a) for a in args],
        }
    )
    meta = {"rank": int(rank), "start_us": start_us, "tensors": tensors, "complete": complete}
    log.debug("%s: %d comm rows", path, len(frame))
    return SourceData(path=str(path), kind=KIND, frame=frame, meta=meta, warnings=warnings)

