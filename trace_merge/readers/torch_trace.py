"""Reader for the PyTorch profiler's Chrome trace (Kineto, ``*.pt.trace.json[.gz]``) — the ``framework`` layer, with
the collectives as the ``comm`` layer and the accelerator's own timeline as the ``device`` layer.

``torch.profiler.tensorboard_trace_handler(dir)`` writes one file per profiled cycle, named
``<host>_<pid>.<ns>.pt.trace.json`` (``.gz`` with ``use_gzip=True``); ``timelogger run --torch-profile`` puts rank
r's in ``RUN/torch/rank-<r>/``. The reader imports no torch.

Time base
---------
Events' ``ts``/``dur`` are µs (three decimals: ns); ``ts`` is relative to the top-level ``baseTimeNanoseconds``
(epoch ns; torch 2.x, measured on 2.13: the profiler's clock converted to the host's ``CLOCK_REALTIME``, so the same
clock as TimeLogger's ``time_ns`` anchor). Traces without it (older Kineto) hold epoch µs in ``ts`` itself
(:attr:`TorchTraceMeta.time_base` ``"absolute"``); one with neither is refused. Alignment with the app layer is
the rank's clock offset like every other layer's, checked by the alignment residual (``docs/metrics.md``).

Rows
----
Only complete events (``ph: X``) on a numbered process are rows; flow (``s``/``f``), instant, counter and
metadata events are not (``thread_name`` metadata names the threads: :attr:`TorchTraceMeta.threads`).

* ``ProfilerStep#N`` (``user_annotation``; and TimeLogger's ``timelogger_anchor`` where a ``record_function`` of that
  name marks a profile's start): the profiler's step N, from one ``prof.step()`` to the next. Layer
  ``framework``, cat ``other``; no ``step`` tag of its own (it holds the fetch of the step's batch, which the loop
  does before its step starts): like TimeLogger's anchor marker it is bookkeeping, not work, and each one opens a
  profile window (the attribution's coverage, ``docs/metrics.md``).
* ``enumerate(DataLoader)#...__next__`` (``user_annotation``): the training loop waiting for its batch: cat
  ``wait`` (a single-process loader loads the batch inline, in it: still the loop waiting for its input).
* ``gloo:*``, ``nccl:*``, ``mpi:*``, ``ucc:*``, ``xccl:*`` annotations and ``record_param_comms``: the collectives
  as the backend runs them, layer ``comm``, cat ``comm`` (on a ``gloo`` thread they run beside the backward pass).
* ``c10d::*`` operators (the collective's launch on the calling thread): framework ``comm``.
* other operators (``cpu_op``), CUDA runtime and driver calls (``cuda_runtime``, ``cuda_driver``: launches, and
  synchronisations in which the host waits for the device) and other annotations (``Optimizer.step#SGD.step``,
  ``DistributedDataParallel.forward``, a user's ``record_function``): framework ``compute``; one that holds a
  DataLoader wait is ``other`` (as in the TF reader: it is not compute while it waits).
* GPU ``kernel`` events: layer ``device``, cat ``compute`` (``nccl*`` kernels: ``comm``); ``gpu_memcpy`` and
  ``gpu_memset``: ``device`` ``other``. ``tid`` = ``device << 20 | stream`` (one lane per stream), ``pid`` = the
  profiled process, ``args`` keep ``device``, ``stream`` and ``bytes``.
* ``python_function`` (``with_stack=True``: the Python call stack, one event per frame), ``gpu_user_annotation``
  (annotations repeated on the device timeline) and the profiler's own spans are no rows; they are counted in
  :attr:`TorchTraceMeta.skipped`. Events of any other category are counted there too and named in a warning.

``step``: framework and comm rows that start inside ``ProfilerStep#N`` (any thread of the process) carry step ``N``,
except the DataLoader waits, what they hold and what starts before the step's last fetch ends (the fetch that found
an epoch's data exhausted, the next epoch's iterator starting): the step's fetch lies before the step the loop
times. Device rows carry none (kernels run after the step
that launched them).

Memory
------
The file is decoded event by event from a sliding buffer (a gzip file as it inflates): memory is the columns of
the rows, not the text. An event longer than :data:`MAX_EVENT_CHARS` or a gzip file inflating to more than
:data:`~trace_merge.readers.pfw.MAX_TEXT_RATIO` times its size (at least ``MIN_TEXT_LIMIT``) is refused.
"""
from __future__ import annotations

import codecs
import json
import logging
import os
import re
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Optional

import numpy as np
import pandas as pd

from ..errors import TraceInputError
from ..schema import MAX_EPOCH_NS, MAX_RANKS, SourceData, SourceMeta, to_frame
from . import rank_from_name
from .pfw.options import MAX_TEXT_RATIO, MIN_TEXT_LIMIT
from .xplane import mark_wrappers

log = logging.getLogger(__name__)

KIND = "torch"
#: the file names ``tensorboard_trace_handler`` writes
PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz")
#: the profiler's step annotation: ``ProfilerStep#<N>``
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
#: TimeLogger's anchor marker (a ``record_function`` of that name opens a profile window, as in a TF profile)
ANCHOR_MARKER = "timelogger_anchor"
#: the DataLoader iterator's ``__next__`` (``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``)
DATALOADER_PREFIX = "enumerate(DataLoader)#"
#: collectives as the process-group backend runs them
COMM_RE = re.compile(r"^(?:(?:gloo|nccl|mpi|ucc|xccl|hccl):|record_param_comms$)")
#: a collective's launch on the calling thread
LAUNCH_RE = re.compile(r"^c10d::")
#: the host-side categories that are framework work
HOST_CATS = frozenset({"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "xpu_runtime",
                       "privateuse1_runtime", "mtia_runtime"})
#: the device timeline's categories
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events"})
#: categories that are no rows by design (counted in :attr:`TorchTraceMeta.skipped`, no warning)
KNOWN_SKIPPED = frozenset({"python_function", "gpu_user_annotation", "Trace", "fwdbwd", "ac2g", "cpu_instant_event",
                           "overhead", "Overhead", "cuda_profiler_range", "cuda_sync"})
#: one event's text beyond this is refused (Kineto's events are < 4 KiB; ``record_shapes`` of a many-input op more)
MAX_EVENT_CHARS = 16 << 20
#: text read at a time
_CHUNK = 1 << 20
#: ``ts`` beyond this (µs) is epoch time already: a trace without ``baseTimeNanoseconds`` (2001 in µs)
_ABSOLUTE_US = 10**15
#: bookkeeping args of every host event, left out of ``args``
_ARGS_DROPPED = frozenset({"External id", "Record function id", "Ev Idx", "Fwd thread id", "Sequence number"})
#: the device lane's tid: the device index above the stream
DEVICE_SHIFT = 20


@dataclass
class TorchTraceMeta(SourceMeta):
    """What the reader found in a PyTorch profiler trace."""

    rank: int
    #: where ``rank`` came from: ``"argument"``, ``"path"`` (``rank-<r>`` in the path), ``"distributedInfo"`` (the
    #: trace's process group) or ``"default"`` (0)
    rank_source: str
    #: the profiled host (``host_name``, else the file name's ``<host>_<pid>``)
    host: Optional[str]
    #: the profiled process (the pid of its host events)
    pid: Optional[int]
    #: ``"base_time"`` (``ts`` relative to ``baseTimeNanoseconds``) or ``"absolute"`` (epoch µs in ``ts``)
    time_base: str
    base_time_ns: Optional[int]
    #: the trace's process group: rank, world size and backend (``distributedInfo``), where it has one
    dist_rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None
    #: tid -> thread name (``thread_name`` metadata)
    threads: dict[int, str] = field(default_factory=dict)
    #: the profiler's steps in the file (``ProfilerStep#N``)
    steps: list[int] = field(default_factory=list)
    #: the accelerators whose timeline the trace holds (``deviceProperties`` names, else ``GPU <d>``)
    devices: list[str] = field(default_factory=list)
    #: device events (kernels, copies) read: 0 on a CPU-only trace
    device_events: int = 0
    #: events that are no rows, by category (``python_function``, flow events, ...)
    skipped: dict[str, int] = field(default_factory=dict)
    #: the profiled span (epoch ns: first start, last end of the rows), None for a trace without rows
    span_ns: Optional[tuple[int, int]] = None


# -- the streaming decoder -------------------------------------------------------------------------------------


class _Text:
    """The decoded text of a (gzip) file, read in chunks into a sliding buffer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._raw: IO[bytes] = open(path, "rb")
        except OSError as exc:
            raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None
        head = self._raw.read(2)
        self._raw.seek(0)
        self._inflate: "Optional[Any]" = None
        self._limit = -1
        self._pending = b""
        self._member_open = False
        if head == b"\x1f\x8b":
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            size = os.fstat(self._raw.fileno()).st_size
            self._limit = max(MIN_TEXT_LIMIT, MAX_TEXT_RATIO * size)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._out = 0
        self.eof = False
        self.buf = ""
        self.pos = 0

    def close(self) -> None:
        self._raw.close()

    def _more_bytes(self) -> bytes:
        """The next piece of the file's (inflated) bytes; sets :attr:`eof` at its end."""
        if self._inflate is None:
            data = self._raw.read(_CHUNK)
            self.eof = not data
            return data
        try:
            while True:
                if self._inflate.unconsumed_tail:
                    data = self._inflate.unconsumed_tail
                else:
                    data, self._pending = self._pending or self._raw.read(_CHUNK), b""
                    if not data:
                        if self._member_open:
                            raise TraceInputError(self.path, "truncated gzip data (the profiler did not finish "
                                                             "writing it?)")
                        self.eof = True
                        return b""
                self._member_open = True
                out = self._inflate.decompress(data, _CHUNK)
                if self._inflate.eof:  # this member ends; another may follow
                    self._pending = self._inflate.unused_data
                    self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    self._member_open = False
                if out:
                    break
        except zlib.error as exc:
            raise TraceInputError(self.path, f"corrupt gzip data ({exc})") from None
        self._out += len(out)
        if self._out > self._limit:
            raise TraceInputError(self.path, f"decompresses to more than {self._limit / 1e6:,.0f} MB "
                                             f"({MAX_TEXT_RATIO}x its size): not a trace (a gzip bomb?)")
        return out

    def more(self) -> bool:
        """Read another chunk into the buffer (what was consumed is let go); False at the end of the file."""
        if self.eof:
            return False
        data = self._more_bytes()
        try:
            text = self._utf8.decode(data, final=self.eof)
        except UnicodeDecodeError as exc:
            raise TraceInputError(self.path, f"not UTF-8 text ({exc.reason}): not a PyTorch profiler trace") from None
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        return bool(text) or not self.eof

    def skip_ws(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            buf, n = self.buf, len(self.buf)
            while self.pos < n and buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < n:
                return buf[self.pos]
            if not self.more():
                return ""

    def expect(self, char: str, where: str) -> None:
        got = self.skip_ws()
        if got != char:
            found = repr(got) if got else "the end of the file"
            raise TraceInputError(self.path, f"not a PyTorch profiler trace: expected {char!r} {where}, found {found}"
                                  + (" (truncated?)" if not got else ""))
        self.pos += 1

    def value(self, decoder: json.JSONDecoder, what: str) -> Any:
        """Decode the JSON value at the position, reading more text until it is whole."""
        self.skip_ws()
        while True:
            try:
                obj, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as err:
                # an error well before the end of the text read is in the file; one at its end may be text not
                # read yet (an unterminated string names its start)
                if err.pos < len(self.buf) - 8 and not err.msg.startswith("Unterminated"):
                    raise TraceInputError(self.path, f"invalid JSON in {what}: {err.msg} (character "
                                                     f"{err.pos - self.pos} of it)") from None
                if len(self.buf) - self.pos > MAX_EVENT_CHARS:
                    raise TraceInputError(self.path, f"{what} of more than {MAX_EVENT_CHARS:,} characters: not a "
                                                     "PyTorch profiler trace (or a damaged one)") from None
                if not self.more():
                    raise TraceInputError(self.path, f"truncated inside {what} (the profiler did not finish "
                                                     "writing it?)") from None
                continue
            # a number at the end of the text read may go on in the next chunk
            if end == len(self.buf) and not isinstance(obj, (dict, list, str)) and self.more():
                continue
            self.pos = end
            return obj


#: white space, the separator after an event (``,`` or the array's ``]``) and the white space after it
_SEP = re.compile(r"[ \t\r\n]*([,\]])[ \t\r\n]*")


def _events(text: _Text, decoder: json.JSONDecoder) -> "Iterator[Any]":
    """The events of ``traceEvents`` from just after its ``[`` to its ``]``: the C scanner on the buffer while the
    events and their separators lie whole in it, :meth:`_Text.value` (more text, errors) where they do not."""
    # the scanner raw_decode calls (C where available); the stubs do not declare it
    scan = decoder.scan_once  # type: ignore[attr-defined]
    path = text.path
    if text.skip_ws() == "]":
        text.pos += 1
        return
    while True:
        buf, pos = text.buf, text.pos
        try:
            obj, end = scan(buf, pos)
        except (StopIteration, json.JSONDecodeError):
            obj, end = None, -1
        m = _SEP.match(buf, end) if end >= 0 else None
        if m is None or m.end() == len(buf):  # at the end of the text read, or an error: the careful path
            obj = text.value(decoder, "an event") if end < 0 else obj
            text.pos = max(text.pos, end)
            sep = text.skip_ws()
            text.pos += 1
            if sep not in (",", "]"):
                raise TraceInputError(path, "truncated inside traceEvents (the profiler did not finish writing it?)"
                                      if sep == "" else f"invalid JSON in traceEvents: {sep!r} between events")
            yield obj
            if sep == "]" or text.skip_ws() == "]":  # the end, or a trailing comma before it
                if sep == ",":
                    text.pos += 1
                return
            continue
        text.pos = m.end()
        yield obj
        if m.group(1) == "]":
            return


def iter_trace(path: Path) -> "Iterator[tuple[str, Any]]":
    """The top-level fields of a Chrome trace object in file order, ``("traceEvents", event)`` once per event:
    decoded one value at a time, so that memory holds one event, not the file."""
    text = _Text(path)
    decoder = json.JSONDecoder()
    try:
        first = text.skip_ws()
        if first == "":
            raise TraceInputError(path, "empty file (the profiler did not finish writing it)")
        if first == "[":
            raise TraceInputError(path, "a JSON array of events, not a PyTorch profiler trace (no "
                                        "baseTimeNanoseconds object around its traceEvents)")
        text.expect("{", "at the start")
        if text.skip_ws() == "}":
            return
        while True:
            key = text.value(decoder, "a field name")
            if not isinstance(key, str):
                raise TraceInputError(path, "not a PyTorch profiler trace: a field name that is not a string")
            text.expect(":", f"after {key!r}")
            if key == "traceEvents":
                text.expect("[", "to start traceEvents")
                for event in _events(text, decoder):
                    yield key, event
            else:
                yield key, text.value(decoder, f"field {key!r}")
            sep = text.skip_ws()
            text.pos += 1
            if sep == "}":
                return
            if sep != ",":
                raise TraceInputError(path, "truncated (the profiler did not finish writing it?)" if sep == "" else
                                      f"invalid JSON: {sep!r} after field {key!r}")
    finally:
        text.close()


# -- the reader --------------------------------------------------------------------------------------------------


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _us(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def _device_name(props: Any, index: int) -> str:
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and p.get("id") == index and isinstance(p.get("name"), str):
                return f"GPU {index} ({p['name']})"
    return f"GPU {index}"


class _Rows:
    """The rows' columns as they are read: compact arrays, and per row the code of its ``(layer, cat, name)`` (each
    distinct kind of event is classified once: an operator's name repeats thousands of times)."""

    def __init__(self) -> None:
        self.kind: "array[int]" = array("q")
        self.pid: "array[int]" = array("q")
        self.tid: "array[int]" = array("q")
        self.start: "array[float]" = array("d")  # µs as written
        self.dur: "array[float]" = array("d")
        self.bytes: "array[int]" = array("q")  # -1: none
        self.args: list[Optional[str]] = []
        #: (trace cat, name) -> code; per code its layer, cat, name
        self.codes: dict[tuple[str, str], int] = {}
        self.kinds: list[tuple[str, str, str]] = []

    def code(self, cat: str, name: str) -> int:
        key = (cat, name)
        code = self.codes.get(key)
        if code is None:
            code = self.codes[key] = len(self.kinds)
            self.kinds.append((*_classify(cat, name), name))
        return code

    def add(self, code: int, pid: int, tid: int, ts: float, dur: float, nbytes: int, args: Optional[str]) -> None:
        self.kind.append(code)
        self.pid.append(pid)
        self.tid.append(tid)
        self.start.append(ts)
        self.dur.append(dur)
        self.bytes.append(nbytes)
        self.args.append(args)


def _classify(cat: str, name: str) -> "tuple[str, str]":
    """(layer, cat) of an event of trace category ``cat``."""
    if cat == "kernel":
        return "device", "comm" if name.lower().startswith("nccl") else "compute"
    if cat in DEVICE_CATS:
        return "device", "other"
    return _host_cat(cat, name)


def _host_cat(cat: str, name: str) -> "tuple[str, str]":
    """(layer, cat) of a host event."""
    if cat == "user_annotation":
        if STEP_RE.match(name) or name == ANCHOR_MARKER:
            return "framework", "other"
        if name.startswith(DATALOADER_PREFIX):
            return "framework", "wait"
    if COMM_RE.match(name):
        return "comm", "comm"
    if LAUNCH_RE.match(name):
        return "framework", "comm"
    return "framework", "compute"


def _args(args: Any, keep: "tuple[str, ...] | None" = None) -> Optional[str]:
    if not isinstance(args, dict) or (keep is None and args.keys() <= _ARGS_DROPPED):
        return None
    out = {k: v for k, v in args.items() if k not in _ARGS_DROPPED and (keep is None or k in keep)}
    return json.dumps(out, default=str) if out else None


def read(path: "str | os.PathLike[str]", rank: "int | None" = None) -> SourceData:
    """Read one PyTorch profiler trace (``.pt.trace.json`` or ``.json.gz``).

    Parameters
    ----------
    path
        The trace file.
    rank
        Rank of the profiled process; default: a ``rank-<r>`` directory in ``path``, else the trace's
        ``distributedInfo.rank``, else 0.

    Returns
    -------
    SourceData
        ``frame``: ``framework``, ``comm`` and ``device`` rows with absolute epoch-ns times (module docstring);
        ``meta``: a :class:`TorchTraceMeta`.

    Raises
    ------
    TraceInputError
        Unreadable, empty, truncated or corrupt file, not a trace object, or no absolute time.
    """
    path = Path(path)
    warnings: list[str] = []
    base_ns: Optional[int] = None
    host: Optional[str] = None
    dist: dict[str, Any] = {}
    props: Any = None
    rows = _Rows()
    threads: dict[int, str] = {}
    skipped: dict[str, int] = {}
    unknown: dict[str, int] = {}
    bad = 0
    pids: dict[int, int] = {}  # host pid -> events
    devices: set[int] = set()
    n_device = 0
    saw_events = False
    for key, value in iter_trace(path):
        if key != "traceEvents":
            if key == "baseTimeNanoseconds":
                base_ns = _int(value)
                if base_ns is None or not 0 <= base_ns < MAX_EPOCH_NS:
                    raise TraceInputError(path, f"baseTimeNanoseconds {value!r} is not an epoch time in ns")
            elif key == "host_name" and isinstance(value, str):
                host = value
            elif key == "distributedInfo" and isinstance(value, dict):
                dist = value
            elif key == "deviceProperties":
                props = value
            continue
        saw_events = True
        ev = value
        if not isinstance(ev, dict):
            bad += 1
            continue
        ph = ev.get("ph")
        if ph == "M":
            if ev.get("name") == "thread_name" and isinstance(ev.get("args"), dict):
                tid = _int(ev.get("tid"))
                name = ev["args"].get("name")
                if tid is not None and isinstance(name, str):
                    threads[tid] = name
            continue
        cat = ev.get("cat")
        cat = cat if isinstance(cat, str) else ""
        if ph != "X" or cat in KNOWN_SKIPPED:
            label = cat or f"ph {ph}"
            skipped[label] = skipped.get(label, 0) + 1
            continue
        name, ts, dur, pid, tid = ev.get("name"), ev.get("ts"), ev.get("dur"), ev.get("pid"), ev.get("tid")
        if type(ts) is not float or type(dur) is not float:  # the common case first, checked fast
            ts, dur = _us(ts), _us(dur)
        if type(pid) is not int or type(tid) is not int:
            pid, tid = _int(pid), _int(tid)
        if not isinstance(name, str) or ts is None or dur is None or not dur >= 0 or pid is None or tid is None:
            bad += 1
            continue
        if cat in DEVICE_CATS:
            a: dict[str, Any] = ev["args"] if isinstance(ev.get("args"), dict) else {}
            device = _int(a.get("device"))
            device = pid if device is None else device
            stream = _int(a.get("stream"))
            stream = tid if stream is None else stream
            devices.add(device)
            n_device += 1
            nbytes = _int(a.get("bytes"))
            rows.add(rows.code(cat, name), 0, (device << DEVICE_SHIFT) | (stream & ((1 << DEVICE_SHIFT) - 1)), ts,
                     dur, nbytes if nbytes is not None and nbytes >= 0 else -1,
                     _args(a, ("device", "stream", "bytes", "correlation")))
            continue
        if cat not in HOST_CATS:
            unknown[cat] = unknown.get(cat, 0) + 1
            skipped[cat] = skipped.get(cat, 0) + 1
            continue
        pids[pid] = pids.get(pid, 0) + 1
        rows.add(rows.code(cat, name), pid, tid, ts, dur, -1, _args(ev.get("args")))
    if not saw_events and base_ns is None:
        raise TraceInputError(path, "not a PyTorch profiler trace (no traceEvents, no baseTimeNanoseconds)")
    if bad:
        warnings.append(f"{path}: {bad:,} events without a name, a numeric ts/dur or numeric pid/tid; skipped")
    if unknown:
        listing = ", ".join(f"{k} ({v:,})" for k, v in sorted(unknown.items()))
        warnings.append(f"{path}: events of categories this reader does not know were left out: {listing}")

    start_us = np.frombuffer(rows.start, dtype=np.float64) if len(rows.start) else np.zeros(0)
    if base_ns is not None:
        time_base = "base_time"
        start = np.rint(start_us * 1000.0).astype(np.int64) + base_ns
    elif not len(start_us) or float(start_us.min()) > _ABSOLUTE_US:
        time_base = "absolute"
        start = np.rint(start_us * 1000.0).astype(np.int64)
    else:
        raise TraceInputError(path, "no absolute time: no baseTimeNanoseconds and its ts are not epoch µs")
    dur = np.rint(np.frombuffer(rows.dur, dtype=np.float64) * 1000.0).astype(np.int64) if len(rows.dur) else \
        np.zeros(0, dtype=np.int64)
    out_of_range = (start < 0) | (start + dur >= MAX_EPOCH_NS)
    if out_of_range.any():
        warnings.append(f"{path}: {int(out_of_range.sum()):,} events whose time is not an epoch time; skipped")

    main_pid = max(pids, key=lambda p: pids[p]) if pids else None
    code = _ints(rows.kind)
    kinds = rows.kinds
    layer_of = np.asarray([k[0] for k in kinds] + ["framework"], dtype=object)[code]
    pid_arr = _ints(rows.pid)
    pid_arr[layer_of == "device"] = main_pid if main_pid is not None else 0  # the profiled process's lanes
    tid_arr = _ints(rows.tid)
    end = start + dur
    is_fw = layer_of == "framework"
    cats = np.asarray([k[1] for k in kinds] + ["other"], dtype=object)[code].tolist()
    mark_wrappers(cats, np.where(is_fw, start, 0), np.where(is_fw, end, 0))
    step_no = np.asarray([_step_number(k) for k in kinds] + [-1], dtype=np.int64)[code]
    step_of, steps = _profiler_steps(step_no, layer_of, np.asarray(cats, dtype=object), pid_arr, tid_arr, start,
                                     end)

    dist_rank = _int(dist.get("rank"))
    dist_rank = dist_rank if dist_rank is not None and 0 <= dist_rank < MAX_RANKS else None
    world = _int(dist.get("world_size"))
    world = world if world is not None and 0 < world <= MAX_RANKS else None
    named = rank_from_name(path)
    if rank is not None:
        rank_source = "argument"
    elif named is not None:
        rank, rank_source = named, "path"
        if dist_rank is not None and dist_rank != named:
            warnings.append(f"{path}: its directory says rank {named}, its process group rank {dist_rank}; "
                            f"read as rank {named} (the launcher's)")
    elif dist_rank is not None:
        rank, rank_source = dist_rank, "distributedInfo"
    else:
        rank, rank_source = 0, "default"
    if host is None:
        m = re.match(r"^(.+)_(\d+)\.\d+\.pt\.trace\.json", path.name)
        host = m.group(1) if m else None
    keep = np.flatnonzero(~out_of_range)
    size = _ints(rows.bytes)[keep]
    names = pd.Categorical.from_codes(code[keep], categories=pd.Index([k[2] for k in kinds], dtype=object)) \
        if kinds else []
    frame = to_frame({
        "layer": layer_of[keep],
        "cat": np.asarray(cats, dtype=object)[keep],
        "name": names,
        "rank": np.full(keep.size, int(rank), dtype=np.int64),
        "pid": pid_arr[keep],
        "tid": tid_arr[keep],
        "host": host,
        "start_ns": start[keep],
        "dur_ns": dur[keep],
        "bytes": _nullable(size),
        "step": _nullable(step_of[keep]),
        "args": [rows.args[i] for i in keep.tolist()] if keep.size < len(rows.args) else rows.args,
    })
    span = (int(frame["start_ns"].min()), int(frame["end_ns"].max())) if len(frame) else None
    backend = dist.get("backend") if isinstance(dist.get("backend"), str) else None
    meta = TorchTraceMeta(rank=int(rank), rank_source=rank_source, host=host, pid=main_pid, time_base=time_base,
                          base_time_ns=base_ns, dist_rank=dist_rank, world_size=world, backend=backend,
                          threads=threads, steps=steps, devices=[_device_name(props, d) for d in sorted(devices)],
                          device_events=n_device, skipped=skipped, span_ns=span)
    log.debug("%s: %d rows (%d device), time base %s", path, len(frame), n_device, time_base)
    return SourceData(path=str(path), kind=KIND, frame=frame, warnings=warnings, meta=meta)


def _nullable(values: np.ndarray) -> "pd.arrays.IntegerArray":
    """``values`` as an ``Int64`` array, negative ones missing."""
    return pd.arrays.IntegerArray(np.maximum(values, 0), values < 0)


def _ints(values: "array[int]") -> np.ndarray:
    """An ``array('q')`` as a writable int64 numpy array."""
    return np.array(values, dtype=np.int64) if len(values) else np.zeros(0, dtype=np.int64)


def _step_number(kind: "tuple[str, str, str]") -> int:
    """The profiler step a kind of event marks (``ProfilerStep#N`` of the framework layer), else -1."""
    m = STEP_RE.match(kind[2]) if kind[0] == "framework" else None
    return int(m.group(1)) if m else -1


def _profiler_steps(mark: np.ndarray, layer: np.ndarray, cat: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                    start: np.ndarray, end: np.ndarray) -> "tuple[np.ndarray, list[int]]":
    """Each row's profiler step (-1: none; ``mark``: the step each ``ProfilerStep#N`` row marks, -1 for other rows):
    framework and comm rows of the step's process starting inside it, but not DataLoader waits, what they hold, nor
    what starts before the step's last fetch ends; and the steps of the file."""
    n = mark.size
    tags = np.full(n, -1, dtype=np.int64)
    is_mark = mark >= 0
    if not is_mark.any():
        return tags, []
    steps = sorted(set(mark[is_mark].tolist()))
    host = layer != "device"
    is_wait = host & (cat == "wait")
    # rows inside a wait of their own thread belong to the fetch
    in_wait = np.zeros(n, dtype=bool)
    for p, t in set(zip(pid[is_wait].tolist(), tid[is_wait].tolist())):
        on = np.flatnonzero(host & (pid == p) & (tid == t))
        w = on[is_wait[on]]
        order = np.argsort(start[w], kind="stable")
        ws, we = start[w][order], end[w][order]
        k = np.searchsorted(ws, start[on], side="right") - 1
        ok = k >= 0
        inside = np.zeros(on.size, dtype=bool)
        inside[ok] = start[on][ok] < we[k[ok]]
        in_wait[on[inside]] = True
    for p in set(pid[is_mark].tolist()):
        mine = np.flatnonzero(is_mark & (pid == p))
        mine = mine[np.argsort(start[mine], kind="stable")]
        ms, me, numbers = start[mine], end[mine], mark[mine]
        # each step's last fetch: what runs before it ends is the loop getting its batch (the fetch that found an
        # epoch's data exhausted, the next epoch's iterator starting: the loader's seed, its workers), not the step
        waits = np.flatnonzero(is_wait & (pid == p))
        waits = waits[np.argsort(start[waits], kind="stable")]
        last = np.searchsorted(start[waits], me, side="left") - 1
        has = last >= 0
        has[has] = start[waits[last[has]]] >= ms[has]
        fetched = np.where(has, end[waits[np.maximum(last, 0)]] if waits.size else 0, ms)
        rows = np.flatnonzero(host & (pid == p) & ~is_mark & ~is_wait & ~in_wait)
        k = np.searchsorted(ms, start[rows], side="right") - 1
        ok = k >= 0
        ok[ok] = (start[rows][ok] < me[k[ok]]) & (start[rows][ok] >= fetched[k[ok]])
        tags[rows[ok]] = numbers[k[ok]]
    return tags, steps


def describe(meta: TorchTraceMeta) -> str:
    """One line on a trace's metadata (rank, time base, steps, devices) for logs and tests."""
    steps = f"steps {meta.steps[0]}-{meta.steps[-1]}" if meta.steps else "no profiler steps"
    dev = ", ".join(meta.devices) if meta.devices else "no device timeline"
    return f"rank {meta.rank} ({meta.rank_source}), {meta.time_base}, {steps}, {dev}"


__all__ = ["KIND", "PATTERNS", "TorchTraceMeta", "describe", "iter_trace", "read"]
