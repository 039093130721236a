"""Reader for Horovod timelines (``HOROVOD_TIMELINE=<file>``) — the ``comm`` layer.

The file is a Chrome-trace JSON array written by rank 0 while the job runs: it is unterminated until
Horovod shuts down cleanly and holds several events per line. Each ``pid`` is one tensor, named by a
``process_name`` metadata event; the first ``process_name`` event carries
``args.start_time_since_epoch_in_micros``, the epoch time of ``ts == 0`` (µs). Activities are ``B``/``E``
pairs (nested per tensor: ``ALLREDUCE`` ⊃ ``MPI_ALLREDUCE``) and ``X`` events.

Rows: layer ``comm``, cat ``comm`` (a negotiation's: below), ``name`` = the activity (``NEGOTIATE_ALLREDUCE``,
``ALLREDUCE``, ``MPI_ALLREDUCE``, ...), ``tid`` = the timeline pid (tensor index), ``args`` =
``{"tensor": name, ...}`` plus the ``E`` event's args (dtype, shape). Zero-length ``X`` events named by a rank
number (``"0"``, ``"1"``: "rank N is ready" marks inside a negotiation) are no rows: a negotiation keeps them as
``args.ready_order`` (the ranks in the order Horovod saw them ready) and ``args.last_ready`` (the last of them: the
rank the others waited for). Horovod 0.28 marks only a tensor's uncached negotiations: its first, or every one with
``HOROVOD_CACHE_CAPACITY=0`` (``timelogger run --horovod-ready-marks``). One answered from its response cache has
no marks (measured: it still spans first to last ready) and takes ``last_ready`` from the tensor's latest marked
negotiation. A negotiation with neither has no ``last_ready``.

``cat`` is ``comm``, but a negotiation's says what it was for the rank that wrote the timeline (the only rank whose
time these rows are; the summary's pieces keep no ``args``): ``wait`` where another rank was the last ready (this
rank waited for it), ``other`` where this rank was (the others waited for it; it was busy elsewhere), ``comm``
where the timeline does not tell.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceInputError
from ..schema import MAX_EPOCH_NS, SourceData, SourceMeta, to_frame

log = logging.getLogger(__name__)

KIND = "horovod"


@dataclass
class HorovodMeta(SourceMeta):
    """What the reader found in a Horovod timeline."""

    rank: int
    #: epoch µs of the timeline's ``ts == 0``
    start_us: int
    #: timeline pid -> tensor name
    tensors: dict[int, str]
    #: False for a truncated file
    complete: bool


#: where the next event of the array starts after a corrupt one: the end of an event, a comma, and an object whose
#: first key is one Horovod writes first (keys inside ``args`` follow ``"args": ``, never a comma)
_NEXT_EVENT = re.compile(r'\}\s*,\s*(\{"(?:ph|name)")')


def iter_events(text: str) -> "tuple[list[dict[str, Any]], bool, list[tuple[int, str]]]":
    """Decode the events of a possibly unterminated, truncated or damaged Chrome-trace JSON array.

    Returns
    -------
    (events, complete, skipped)
        ``complete`` is False when the text ended inside an event (crash / still being written).
        ``skipped``: ``(line, cause)`` of each stretch that did not decode and was skipped up to the next event.
    """
    body = text.strip()
    if body.startswith("["):
        body = body[1:]
    try:  # fast path: a cleanly closed (or merely unclosed) array
        stripped = body.rstrip().rstrip(",").rstrip()
        if stripped.endswith("]"):
            stripped = stripped[:-1]
        return json.loads("[" + stripped + "]"), True, []
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    events: list[dict[str, Any]] = []
    skipped: list[tuple[int, str]] = []
    # line of body[counted] (body starts after the leading white space); newlines are counted once, forwards
    line, counted = 1 + text.count("\n", 0, len(text) - len(text.lstrip())), 0
    pos, n = 0, len(body)
    while pos < n:
        while pos < n and body[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or body[pos] == "]":
            return events, True, skipped
        try:
            obj, pos = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as err:
            nxt = _NEXT_EVENT.search(body, pos)
            if nxt is None:
                return events, False, skipped  # the file ends inside this event
            line += body.count("\n", counted, pos)
            counted = pos
            skipped.append((line, err.msg))
            pos = nxt.start(1)
            continue
        if isinstance(obj, dict):
            events.append(obj)
    return events, True, skipped


#: the start of an event of the array (after ``[`` or a comma; an object inside ``args`` follows a colon)
_EVENT_START = re.compile(r'(?:^|[\[,])\s*(\{"(?:ph|name)")')


def _event_line(text: str, index: int) -> "int | None":
    """Line of the start of event number ``index`` in the order :func:`iter_events` returns them (for warnings
    only: one scan, newlines counted once); None when the text has fewer events."""
    line, counted = 1, 0
    for k, m in enumerate(_EVENT_START.finditer(text)):
        line += text.count("\n", counted, m.start(1))
        counted = m.start(1)
        if k == index:
            return line
    return None


_MAX_US = MAX_EPOCH_NS // 1000


def _num(value: Any) -> "float | None":
    """A finite number of µs within :data:`_MAX_US` (bools and strings are not), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if -_MAX_US < value < _MAX_US else None


def _int(value: Any, lo: int = -(2**63), hi: int = 2**63) -> "int | None":
    """An int in ``[lo, hi)`` (bools and floats are not), else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if lo <= value < hi else None


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
        ``frame``: ``comm`` rows, absolute epoch ns. ``meta``: a :class:`HorovodMeta`.
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
    events, complete, skipped = iter_events(text)
    warnings: list[str] = []
    if skipped:
        line, cause = skipped[0]
        warnings.append(f"{path}:{line}: {len(skipped)} corrupt event(s) skipped (first: {cause}); read the rest")
    if not complete:
        warnings.append(f"{path}: truncated timeline (file ends inside an event); read {len(events)} events")

    start_us: "int | None" = None
    tensors: dict[int, str] = {}
    bad: list[tuple[int, str]] = []  # (index in events, cause)
    for i, ev in enumerate(events):
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            given = ev.get("args")
            a = given if isinstance(given, dict) else {}
            if "start_time_since_epoch_in_micros" in a and start_us is None:
                start_us = _int(a["start_time_since_epoch_in_micros"], 0, _MAX_US)
                if start_us is None:
                    bad.append((i, f"start_time_since_epoch_in_micros {a['start_time_since_epoch_in_micros']!r}"))
            pid = _int(ev.get("pid", 0))
            if "name" in a and pid is not None:
                tensors[pid] = str(a["name"])
    if start_us is None:
        raise TraceInputError(
            path, "no start_time_since_epoch_in_micros in the process_name metadata (not a Horovod timeline?)"
        )

    names: list[str] = []
    cats: list[str] = []
    tids: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    args: list[dict[str, Any]] = []  # serialised at the end, after ready marks are gathered
    stacks: dict[int, list[tuple[str, float]]] = {}
    ready: dict[tuple[int, int], list[int]] = {}  # (pid, stack depth) of an open B -> ranks marked ready inside it
    last_ready: dict[int, int] = {}  # pid -> last ready rank of the tensor's latest marked negotiation

    def add(name: str, pid: int, ts: float, te: float, extra: "dict[str, Any] | None") -> int:
        names.append(name)
        cats.append("comm")
        tids.append(pid)
        starts.append(ts)
        ends.append(te)
        a = {"tensor": tensors.get(pid, str(pid))}
        if extra:
            a.update(extra)
        args.append(a)
        return len(names) - 1

    for i, ev in enumerate(events):
        ph = ev.get("ph")
        if ph not in ("B", "E", "X") or "ts" not in ev:
            continue
        pid = _int(ev.get("pid", 0))
        ts = _num(ev["ts"])
        dur = _num(ev.get("dur", 0)) if ph == "X" else 0.0
        if pid is None or ts is None or dur is None or dur < 0:
            bad.append((i, "bad pid, ts or dur (" + ", ".join(f"{k} {ev.get(k)!r}" for k in ("pid", "ts", "dur")
                                                             if k in ev) + ")"))
            continue
        stack = stacks.setdefault(pid, [])
        if ph == "B":
            stack.append((str(ev.get("name", "")), ts))
        elif ph == "E":
            if not stack:
                continue
            name, t0 = stack.pop()
            row = add(name, pid, t0, ts, ev.get("args"))
            order = ready.pop((pid, len(stack)), None)
            if order:
                args[row]["ready_order"] = order
                last_ready[pid] = order[-1]
            if name.startswith("NEGOTIATE_") and pid in last_ready:
                # a cached negotiation has no marks: the tensor's last marked one tells who was last
                args[row]["last_ready"] = last_ready[pid]
                cats[row] = "other" if last_ready[pid] == rank else "wait"
        else:  # X
            name = str(ev.get("name", ""))
            if dur == 0 and name.isdigit() and stack:
                # kept on the enclosing open activity, in file order (= time order: Horovod writes them as it goes)
                ready.setdefault((pid, len(stack) - 1), []).append(int(name))
                continue
            add(name, pid, ts, ts + dur, ev.get("args"))

    if bad:
        first, cause = bad[0]
        at = _event_line(text, first)
        where = "" if at is None else f":{at}"
        warnings.append(f"{path}{where}: {len(bad)} event(s) with bad values skipped (first: {cause})")
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
            "cat": cats,
            "name": names,
            "rank": np.full(len(names), int(rank), dtype=np.int64),
            "tid": np.asarray(tids, dtype=np.int64),
            "start_ns": start_ns,
            "end_ns": end_ns,
            "args": [json.dumps(a) for a in args],
        }
    )
    meta = HorovodMeta(rank=int(rank), start_us=start_us, tensors=tensors, complete=complete)
    log.debug("%s: %d comm rows", path, len(frame))
    return SourceData(path=str(path), kind=KIND, frame=frame, meta=meta, warnings=warnings)

