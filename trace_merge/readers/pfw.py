"""Reader for ``.pfw`` / ``.pfw.gz`` traces: TimeLogger app files and DFTracer traces.

Both use DFTracer's line layout (see ``docs/wire-format.md``): an optional ``[`` line, then one JSON
object per line, optional trailing commas, an optional closing ``]``. ``.pfw.gz`` files are
concatenated gzip members (DFTracer compresses in chunks).

What the reader does with each event
-------------------------------------
* Complete events (``"ph": "X"`` or DFTracer's integer ``1``) become frame rows. ``ts``/``dur`` are
  microseconds (DFTracer's ``CM``/``time_metric`` metadata may say ``NS``) and are converted to int64
  ns exactly (no float round trip; sub-ns digits are truncated).
* Metadata events (``"ph": "M"`` or ``4``) and DFTracer's own bookkeeping events (``cat``
  ``dftracer``: ``start``/``end``) go to :attr:`SourceData.meta`. DFTracer's hash tables ``HH``
  (host), ``FH`` (file) and ``SH`` (string) resolve ``args.hhash``/``args.fhash`` into the ``host`` and
  ``file`` columns.
* ``layer``: ``app`` for TimeLogger files; for DFTracer, ``posix``/``stdio`` for cat ``POSIX``/
  ``STDIO`` (cat ``io``), ``mpiio``/``hdf5``/``comm`` for MPI-IO, HDF5 and MPI categories, ``app``
  for everything else (Python-level events). Python-level events of pydftracer's AI tracer and of DLIO get their
  ``cat`` from :data:`AI_CAT_RULES` (``dataloader.fetch``/``loop.iter`` -> ``wait``, ``*.compute`` ->
  ``compute``, ...); another DFTracer category that is not one of :data:`~trace_merge.schema.CATS` becomes
  ``other``. The original category is kept in ``args`` as ``cat``.
* ``bytes``: ``args.bytes`` where the source wrote it (TimeLogger), else ``args.ret`` (times
  ``args.size`` for ``fread``/``fwrite``) of read/write-family calls with ``ret >= 0``.
  ``offset``, ``epoch``, ``step``, ``rank`` come from ``args`` where present.
* ``rank``: ``args.rank``, else the TimeLogger header's rank, else ``rank[_-]<r>`` or pydftracer's
  ``trace-<r>-of-<n>`` in the file name,
  else ``-1`` (unknown; the merger maps such files to ranks by pid, see ``meta["pids"]``).
* ``args``: for TimeLogger files, the event's ``args`` minus the keys that became columns; for
  DFTracer files only the original ``cat`` where it was mapped to ``other`` (DFTracer's per-call
  bookkeeping such as ``cmd_hash``, ``level``, ``count``, ``flags`` is not carried, which keeps
  millions of rows cheap).

Bad input
---------
A file that is not gzip although named ``.gz``, corrupt gzip data, or a file with no parseable
event structure raises :class:`~trace_merge.errors.TraceInputError`. A truncated gzip stream keeps
what was complete and adds a warning. A half-written last line is dropped silently (a crashed
writer leaves one); unparseable lines elsewhere are skipped with a warning. A zero-byte file (the
DFTracer preload leaves one when the application initialises DFTracer itself) gives an empty frame
and a warning.

Limits keep memory bounded on hostile input (docs/frame.md, "Limits"): an event line longer than
:data:`MAX_LINE_BYTES`, or an event whose name, category or file name is longer than
:data:`MAX_FIELD_CHARS`, is skipped with a ``file:line`` warning; a gzip file whose text would exceed
:data:`MAX_TEXT_RATIO` times its size (and :data:`MIN_TEXT_LIMIT`) is a gzip bomb: a
:class:`~trace_merge.errors.TraceInputError` naming it, raised before that text is held.

Speed
-----
Event lines are parsed by DuckDB's ``from_json`` (C++; one thread per file, files are read side by side), one
JSON document per line, into a fixed schema; integers come out as their JSON text and are cast strictly, so
that a value DuckDB would cast leniently (``1000.5``, ``"12"``, ``true``) sends the body to ``pyarrow.json``
with the same schema (exact decimals), as does a missing ``duckdb`` or ``TRACE_MERGE_PARSER=pyarrow``. The
Python line parser is the fallback whenever those fail (type conflicts, garbage lines, unusual layouts) and is
the only path for TimeLogger files, which keep their free-form ``args``. All three produce the same columns for
a file they can read (tested). :func:`read` releases the GIL for decompression and parsing, so callers can read
several files in a thread pool. Why DuckDB, and why not its own reader of ``.gz`` files: ``docs/partitioned.md``.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import zlib
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pandas as pd

from ..errors import TraceInputError
from ..formatting import size_text
from ..schema import CATS, DIFFERENT_DAY_NS, MAX_EPOCH_NS, MAX_RANKS, SourceData, checked_int, to_frame

log = logging.getLogger(__name__)

#: Calls whose ``args.ret`` counts transferred bytes (negative: failed, no bytes).
RW_CALLS = frozenset(
    {
        "read", "pread", "pread64", "readv", "preadv", "preadv64", "preadv2", "preadv64v2",
        "write", "pwrite", "pwrite64", "writev", "pwritev", "pwritev64", "pwritev2", "pwritev64v2",
        "fread", "fwrite", "fread_unlocked", "fwrite_unlocked",
    }
)
#: STDIO calls whose ``ret`` counts items of ``args.size`` bytes.
ITEM_CALLS = frozenset({"fread", "fwrite", "fread_unlocked", "fwrite_unlocked"})

#: Calls DFTracer's POSIX preload also traces that do no file-system work: process control (a
#: ``multiprocessing.Pool`` parent polls ``waitpid`` hundreds of times a second). They stay in their layer with
#: cat ``other``, so that the file-system component of the layered breakdown (cat ``io``) is file work only.
PROCESS_CALLS = frozenset({
    "fork", "vfork", "clone", "clone3", "execv", "execve", "execvp", "execvpe", "execl", "execlp", "execle",
    "execveat", "fexecve", "posix_spawn", "posix_spawnp", "wait", "waitpid", "wait3", "wait4", "waitid", "kill",
    "exit", "_exit",
})

#: DFTracer category (lower case) -> layer; anything else is ``app``.
_DFT_LAYERS = {
    "posix": "posix", "stdio": "stdio",
    "mpiio": "mpiio", "mpi-io": "mpiio", "mpi_io": "mpiio",
    "hdf5": "hdf5", "h5": "hdf5",
    "mpi": "comm", "comm": "comm",
}
_IO_LAYERS = frozenset({"posix", "stdio", "mpiio", "hdf5"})
#: Python-level events of other tracers -> frame ``cat``: (source cat in lower case or None for any, regular
#: expression searched in the event name or None for any, frame cat); the first matching rule wins. The table
#: users read is ``docs/frame.md`` ("Categories of other tracers"); keep the two in step.
AI_CAT_RULES: tuple = (
    # pydftracer's AI tracer (dftracer.python.ai): compute[.forward|.backward|.step], data.preprocess,
    # data.item, data.io.*, dataloader.fetch, comm.*, device.transfer, checkpoint.*, pipeline.epoch|train|...
    ("compute", None, "compute"),
    ("data", r"(^|\.)io(\.|$)", "io"),
    ("data", None, "preprocess"),
    ("dataloader", None, "wait"),  # the training loop fetching its batch
    ("checkpoint", None, "checkpoint"),
    ("device", None, "other"),
    ("pipeline", None, "other"),
    # DLIO 2.x (dlio_benchmark): its own categories
    ("ai_framework", r"compute$", "compute"),
    ("ai_framework", r"checkpoint", "checkpoint"),
    ("dlio_benchmark", r"\.iter$", "wait"),  # loop.iter: dft_fn.iter timing the wait for the next batch
    ("data_loader", None, "io"),
    ("reader", r"preprocess", "preprocess"),
    ("reader", None, "io"),
    # any pydftracer iterator wrapper (dft_fn(...).iter): NAME.iter is the wait for the next item
    (None, r"\.iter$", "wait"),
)
_AI_CAT_RULES = tuple((c, None if n is None else re.compile(n), out) for c, n, out in AI_CAT_RULES)
#: Python-level events that span one training epoch: (source cat in lower case, regular expression on the name).
#: The rows of the process inside the k-th such event get epoch k (its own ``epoch`` arg where it has one): DLIO
#: leaves ``epoch`` stale on its compute events and its readers' counters (docs/frame.md).
EPOCH_EVENTS: tuple = (("pipeline", r"(^|\.)epoch$"), ("dlio_benchmark", r"\._train$"))
_EPOCH_EVENTS = tuple((c, re.compile(n)) for c, n in EPOCH_EVENTS)


def ai_cat(src_cat: str, name: str) -> Optional[str]:
    """The frame cat of a Python-level event of another tracer (:data:`AI_CAT_RULES`), None when no rule
    matches (the category's own mapping stands)."""
    low = src_cat.lower()
    for c, pattern, out in _AI_CAT_RULES:
        if (c is None or c == low) and (pattern is None or pattern.search(name)):
            return out
    return None
#: DFTracer's ``time_metric`` -> ns per unit of ``ts``/``dur``.
_TIME_SCALE = {"NS": 1, "US": 1_000, "MS": 1_000_000, "S": 1_000_000_000}
_METADATA_PH = ("M", 4)
_COMPLETE_PH = ("X", 1)
_BOOKKEEPING_CAT = "dftracer"
_INT_ARGS = ("ret", "size", "offset", "epoch", "step", "rank", "bytes")
_STR_ARGS = ("hhash", "fhash", "file", "fname")
#: ``args`` keys that become columns and are not repeated in the ``args`` column.
_COLUMN_ARGS = frozenset({"rank", "epoch", "step", "bytes", "offset", "file", "fname", "hhash", "fhash"})
_MAX_LINE_WARNINGS = 5
_INT64 = (-(2**63), 2**63)
#: rows separated from the bulk of their file by a gap this long, and few, are corrupt timestamps
OUTLIER_GAP_NS = DIFFERENT_DAY_NS
#: a group cut off by such a gap is dropped as outliers when it has at most this share of the file's rows (or
#: :data:`OUTLIER_MAX_ROWS`) and under half the main group; a larger group is reported, not removed
OUTLIER_MAX_SHARE = 0.01
OUTLIER_MAX_ROWS = 3
_ARROW_BLOCK = 1 << 22
#: an event line longer than this is skipped with a warning (DFTracer's and TimeLogger's lines are < 4 KiB)
MAX_LINE_BYTES = 1 << 20
#: an event whose name, cat or file name is longer than this is skipped with a warning (PATH_MAX is 4 KiB)
MAX_FIELD_CHARS = 64 << 10
#: a gzip file may hold at most this many text bytes per compressed byte (trace text compresses 10-20x)...
MAX_TEXT_RATIO = 100
#: ... or this much text, whichever is more
MIN_TEXT_LIMIT = 256 << 20
#: text decompressed per call, so that the limit is checked before the text is held
_INFLATE_CHUNK = 16 << 20


def _text_limit(compressed_bytes: int) -> int:
    return max(MIN_TEXT_LIMIT, MAX_TEXT_RATIO * compressed_bytes)


def _bomb(path: str, compressed_bytes: int) -> TraceInputError:
    return TraceInputError(path, f"decompresses to more than {size_text(_text_limit(compressed_bytes))} "
                                 f"({MAX_TEXT_RATIO}x its {size_text(compressed_bytes)}): not a trace (a gzip "
                                 "bomb?); skipped")


def read(path: "str | os.PathLike[str]", args: bool = True) -> SourceData:
    """Read one TimeLogger or DFTracer ``.pfw``/``.pfw.gz`` file.

    Parameters
    ----------
    path
        The trace file. Gzip is detected by its magic bytes.
    args
        False: the ``args`` column is left empty (missing everywhere), for a caller that does not keep it (a
        summary): building its strings was 3 % of reading a DFTracer trace.

    Returns
    -------
    SourceData
        ``kind`` is ``"timelogger"`` or ``"dftracer"``; ``frame`` holds the complete events in the
        schema of :mod:`trace_merge.schema` (``start_ns``/``end_ns`` absolute epoch ns on this
        source's own clock); ``meta`` holds what alignment needs (``rank``, ``pids``, ``host``,
        and for TimeLogger files ``world_size``, ``clock_offset_ns``, ``anchors``, ``tf_anchors``).

    Raises
    ------
    TraceInputError
        The file cannot be read, is not valid gzip, or holds no JSON event lines.
    """
    path = os.fspath(path)
    warnings: list[str] = []
    raw = _load(path, warnings)
    state = _State(path, args=args)
    cols, parser = _parse_body(raw, state, warnings)
    del raw  # the decompressed text (~10x the file): free it before the frame is built (files read in parallel)
    return _finish(path, state, cols, parser, warnings)


def _parse_body(raw: "bytes | bytearray", state: "_State", warnings: list[str], line_offset: int = 0
                ) -> "tuple[Optional[_Cols], str]":
    """The complete events of ``raw`` (a whole file's text, or a block of whole lines of it) and the parser used;
    ``(None, "none")`` when it holds no events."""
    path = state.path
    span = _body_span(raw)
    if span is None:
        return None, "none"
    start, end, first_lineno, state.truncated_last_line = span
    if start >= end:
        return None, "bracket"
    cols: Optional[_Cols] = None
    parser = "lines"
    if not _looks_timelogger(raw, start):
        cols, engine = _parse_arrow(_arrow_input(raw, start, end), state)
        if cols is not None:
            parser = engine
        else:
            state.reset()
    if cols is not None and _outliers(cols.ts).any():
        cols = None  # rare: parse again line by line, so that the warning can name the lines
        state.reset()
        parser = "lines"
    if cols is None:
        cols = _parse_lines(raw[start:end], first_lineno + line_offset, state, warnings)
        cols = _drop_outliers(cols, path, warnings)
    return cols, parser


def _finish(path: str, state: "_State", cols: "Optional[_Cols]", parser: str, warnings: list[str]) -> SourceData:
    """The :class:`SourceData` of what :func:`_parse_body` found (the bad-input rules of the module docstring)."""
    if cols is None:
        if not any("limit" in w and "event skipped" in w for w in warnings):  # its lines were said too long
            warnings.append(f"{path}: empty file (no events)" if parser == "none"
                            else f"{path}: no events (nothing after the opening bracket)")
        return _result(path, state, _Cols.empty(), "dftracer", warnings, parser="none")
    kind = "timelogger" if state.is_timelogger else "dftracer"
    if cols.n == 0 and not state.saw_any:
        raise TraceInputError(path, "not a .pfw trace: no line is a JSON trace event")
    return _result(path, state, cols, kind, warnings, parser)


#: text per block when a large DFTracer trace is read block by block (:func:`read_blocks`): a worker holds about
#: eight times its block while parsing it; 64 MiB blocks were no faster than 16 MiB and held 2.3x the memory
#: (docs/partitioned.md, "Memory")
STREAM_BLOCK_BYTES = 16 << 20
#: text bytes per gzip byte of a DFTracer trace (measured: 15.7 on dftracer_gen_fake_trace sets), to tell from
#: its size whether a file fits one block
GZIP_RATIO = 16


def read_blocks(path: "str | os.PathLike[str]", block_bytes: int = STREAM_BLOCK_BYTES, args: bool = True
                ) -> Iterator[SourceData]:
    """Read a DFTracer ``.pfw[.gz]`` file in blocks of about ``block_bytes`` of text: memory bounded by the block,
    not the file (a 1,000-node job's traces hold billions of events).

    Yields one :class:`SourceData` per block of whole lines. Hash tables (``HH``/``FH``/``SH``) accumulate over
    the blocks, so a block's ``host``/``file`` are resolved with every record seen so far; one defined only later
    stays a hash, which the merge resolves with the whole run's tables (:func:`trace_merge.partitioned.merge_rank`). The
    last block's ``meta`` holds the file's tables. Corrupt-timestamp outliers are judged per block. A TimeLogger
    file, a file small enough for one block, or damaged gzip data is read whole by :func:`read` (one block), so
    its warnings are exactly :func:`read`'s.
    """
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(2)
    except OSError as err:
        raise TraceInputError(path, f"cannot read: {err.strerror or err}") from None
    gz = head == b"\x1f\x8b"
    if size * (GZIP_RATIO if gz else 1) <= 2 * block_bytes:
        yield read(path, args)  # one block anyway
        return
    found: list[str] = []  # what the decompression finds (a corrupt member, a truncated end), taken as it comes
    blocks = _text_blocks(path, gz, block_bytes, found)
    line_offset, first = next(blocks, (0, b""))
    span = _body_span(first)
    if span is None or _looks_timelogger(first, span[0]):
        yield read(path, args)  # TimeLogger files keep free-form args: the line parser, whole
        return
    known: dict = {"HH": {}, "FH": {}, "SH": {}}
    time_metric = "US"
    block: "bytes | None" = first
    del first  # one block's text alive at a time
    while block is not None:
        warnings = _taken(found)  # those that came with this block's text
        state = _State(path, known, time_metric, args)
        cols, parser = _parse_body(block, state, warnings, line_offset)
        known, time_metric = state.maps, state.time_metric
        # the block's frame is built, and its text and parsed columns let go, before the next block is read
        out = _result(path, state, cols if cols is not None else _Cols.empty(), "dftracer", warnings,
                      parser if cols is not None else "none") if cols is not None or warnings else None
        block = cols = None
        line_offset, block = next(blocks, (0, None))
        if block is None and found:  # the stream's last words (a truncated end) go with its last output
            out = out or _result(path, state, _Cols.empty(), "dftracer", [], "none")
            out.warnings.extend(_taken(found))
        if out is not None:
            yield out
        out = None  # not kept while the next block is parsed


def _newlines(text: bytes, chunk: int = 1 << 22) -> int:
    """``text.count(b"\\n")``: the scanner's one pass of ``memchr`` where it is built (half numpy's time on DFTracer
    lines), else numpy's comparison, 4 MiB at a time (a third of ``bytes.count``'s time)."""
    if _pfwscan is not None:
        return _pfwscan.newlines(text)
    view = np.frombuffer(text, np.uint8)
    return sum(int(np.count_nonzero(view[i:i + chunk] == 10)) for i in range(0, len(view), chunk))


def _taken(found: list) -> list:
    """The items of ``found`` (emptied: the list stays the one its producer appends to)."""
    out = list(found)
    found.clear()
    return out


def _text_blocks(path: str, gz: bool, block_bytes: int, warnings: list[str]) -> Iterator[tuple[int, bytes]]:
    """The file's text in blocks of whole lines of about ``block_bytes``, gzip members decompressed in turn, each
    with the number of lines before it (lines are counted once, here, for the warnings that name one).

    Damage is handled as :func:`_gunzip` does: a corrupt member is left out with a warning and decompression
    resumes at the next member; a truncated stream keeps what was complete, with a warning. Memory stays bounded
    on hostile input: a line longer than a block is dropped as it streams (an empty line keeps the numbering),
    and text beyond :func:`_text_limit` raises (a gzip bomb).
    """
    pending = _Lines()
    member = b"\x1f\x8b\x08"
    size = os.path.getsize(path)
    limit = _text_limit(size)
    produced = 0  # text bytes decompressed so far
    lines = 0  # newlines in the blocks already yielded
    long_line = [0, None]  # (line number, bytes dropped so far) of a line longer than a block, None outside one

    def dropped() -> None:
        warnings.append(f"{path}:{long_line[0]}: a line of {long_line[1]:,} bytes (limit {MAX_LINE_BYTES:,}); "
                        "event skipped")  # as :class:`_LongLines` and the parsers say it
        long_line[1] = None

    def take(text: bytes) -> None:
        nonlocal produced
        produced += len(text)
        if gz and produced > limit:
            raise _bomb(path, size)
        if long_line[1] is not None:  # its text is dropped up to its newline
            nl = text.find(b"\n")
            long_line[1] += len(text) if nl == -1 else nl
            if nl == -1:
                return
            text = text[nl:]
            dropped()
        pending.add(text)

    def whole_lines() -> Iterator[tuple[int, bytes]]:
        nonlocal lines
        while pending.size >= block_bytes:
            block = pending.whole_lines()
            if block is None:  # one line longer than a block: not an event line of any tracer
                long_line[:] = [lines + 1, pending.size]
                pending.clear()
                return
            before, lines = lines, lines + _newlines(block)
            yield before, block

    with open(path, "rb") as fh:
        dec = _gzip_decompressor() if gz else None
        offset = 0  # compressed bytes consumed before ``data``
        resync = False
        inside = False  # a member begun and not ended
        while True:
            data = fh.read(max(1 << 12, min(4 << 20, block_bytes // GZIP_RATIO)))
            if not data:
                break
            if dec is None:
                take(data)
            while dec is not None and data:
                if resync:
                    at = data.find(member)
                    if at == -1:
                        offset += max(0, len(data) - 2)
                        data = data[-2:]  # a magic number may straddle two reads
                        break
                    offset += at
                    data, resync = data[at:], False
                    dec = _gzip_decompressor()
                try:
                    inside = True
                    take(dec.decompress(data, block_bytes))
                except _ZLIB_ERRORS as err:
                    warnings.append(f"{path}: corrupt gzip data near byte {offset} ({err}); that gzip member is "
                                    "left out, reading went on at the next one")
                    pending.drop_part_line()  # a line cut by the damage cannot be trusted
                    resync, data = True, data[1:]
                    offset += 1
                    continue
                if dec.unconsumed_tail:  # a block's worth of text came out: hand it on before inflating more
                    offset += len(data) - len(dec.unconsumed_tail)
                    data = dec.unconsumed_tail
                    yield from whole_lines()
                    continue
                if not dec.eof:
                    offset += len(data)
                    break
                rest = dec.unused_data
                inside = False
                offset += len(data) - len(rest)
                data = rest
                if data and data[:2] != b"\x1f\x8b":
                    if data.strip(b"\0"):
                        raise TraceInputError(path, "corrupt gzip data (garbage after a gzip member)")
                    data = b""
                dec = _gzip_decompressor()
            yield from whole_lines()
        if dec is not None and inside and not resync:
            warnings.append(f"{path}: gzip stream truncated (unexpected end of file); read what was complete")
        if long_line[1] is not None:  # the text ended inside it (a crashed writer's last line)
            dropped()
    if pending.size:
        yield lines, pending.join()


class _Lines:
    """Text as it streams in, held as the pieces that came: a block is joined from them once, so the text of a
    large trace is copied once on its way to the parser (a growing buffer cut into blocks copied it three times)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, text: bytes) -> None:
        if text:
            self.parts.append(text)
            self.size += len(text)

    def clear(self) -> None:
        self.parts, self.size = [], 0

    def join(self) -> bytes:
        out = b"".join(self.parts)
        self.clear()
        return out

    def _split(self) -> "tuple[int, int]":
        """(part, position) of the last newline held; (-1, -1) when none."""
        for i in range(len(self.parts) - 1, -1, -1):
            nl = self.parts[i].rfind(b"\n")
            if nl != -1:
                return i, nl
        return -1, -1

    def whole_lines(self) -> Optional[bytes]:
        """Every whole line held, taken out (the part line after them stays); None when no line is whole."""
        i, nl = self._split()
        if i == -1:
            return None
        last, after = self.parts[i], self.parts[i + 1:]
        out = b"".join([*self.parts[:i], memoryview(last)[: nl + 1]])
        self.clear()
        for part in (last[nl + 1:], *after):
            self.add(part)
        return out

    def drop_part_line(self) -> None:
        """Drop the text after the last newline (all of it when none is held)."""
        i, nl = self._split()
        kept = [*self.parts[:i], self.parts[i][: nl + 1]] if i != -1 else []
        self.clear()
        for part in kept:
            self.add(part)


# ----------------------------------------------------------------------------------------------
# bytes


def _load(path: str, warnings: list[str]) -> "bytes | bytearray":
    """The file's text, decompressed when it is gzip (all members), less its over-long lines (:class:`_LongLines`)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            if head == b"\x1f\x8b":
                return _gunzip(path, head + fh.read(), warnings)
            if path.endswith(".gz") and head:
                raise TraceInputError(path, "not a gzip file (bad magic bytes)")
            out = bytearray(head)
            guard = _LongLines(path, warnings)
            guard.appended(out, 0)
            while chunk := fh.read(_INFLATE_CHUNK):  # in chunks: a line with no end is dropped as it comes
                out += chunk
                guard.appended(out, len(out) - len(chunk))
            guard.end(out)
            return out
    except OSError as err:
        raise TraceInputError(path, f"cannot read: {err.strerror or err}") from None


class _LongLines:
    """Drops every line longer than :data:`MAX_LINE_BYTES` from a text buffer as the text is appended, as soon as
    the line is that long, so that it is never held whole: a crashed writer can leave gigabytes with no newline
    (reading a 2 GB one took 4.6 GiB). The dropped line's newline stays, so the lines after it keep their numbers;
    each drop is a ``"<file>:<line>: a line of N bytes (limit L); event skipped"`` warning, as the parsers give for
    a long line they see whole (one within a chunk of text is left to them)."""

    def __init__(self, path: str, warnings: list[str]) -> None:
        self.path, self.warnings = path, warnings
        self.line_start = 0  # where the unfinished line starts in the buffer
        self.dropped: Optional[int] = None  # bytes of the over-long line dropped so far; None outside one

    def appended(self, buf: bytearray, at: int) -> None:
        """Check ``buf[at:]``, just appended."""
        if self.dropped is not None:
            nl = buf.find(b"\n", at)
            cut = len(buf) if nl == -1 else nl
            self.dropped += cut - at
            del buf[at:cut]
            if nl == -1:
                return
            self._report(buf)
        nl = buf.rfind(b"\n", max(at, self.line_start))
        if nl != -1:
            self.line_start = nl + 1
        if len(buf) - self.line_start > MAX_LINE_BYTES:
            self.dropped = len(buf) - self.line_start
            del buf[self.line_start:]

    def end(self, buf: bytearray) -> None:
        """The text ends (or a damaged gzip member cut it): a line being dropped is reported."""
        if self.dropped is not None:
            self._report(buf)
        self.line_start = len(buf)

    def _report(self, buf: bytearray) -> None:
        lineno = buf.count(b"\n", 0, self.line_start) + 1  # counted only here: long lines are rare
        self.warnings.append(f"{self.path}:{lineno}: a line of {self.dropped:,} bytes (limit {MAX_LINE_BYTES:,}); "
                             "event skipped")
        self.dropped = None


def _gunzip(path: str, raw: bytes, warnings: list[str]) -> bytearray:
    """All gzip members of ``raw``, decompressed. A corrupt member is left out (deflate output past damage cannot
    be trusted) with a warning, and reading resumes at the next member: DFTracer compresses in chunks, so one
    flipped bit costs one chunk, not the file."""
    # one growing buffer: a list of parts joined at the end would hold the text twice
    out = bytearray()
    guard = _LongLines(path, warnings)
    pos = 0
    limit = _text_limit(len(raw))
    produced = 0  # text decompressed, over-long lines included (the bomb limit counts them)
    view = memoryview(raw)
    while pos < len(raw):
        dec = _gzip_decompressor()
        member = len(out)  # where this member's text starts in ``out``
        try:
            data = view[pos:]
            while data and not dec.eof:
                text = dec.decompress(data, _INFLATE_CHUNK)
                produced += len(text)
                if produced > limit:
                    raise _bomb(path, len(raw))
                out += text
                guard.appended(out, len(out) - len(text))
                data = dec.unconsumed_tail
            text = dec.flush()
            out += text
            guard.appended(out, len(out) - len(text))
        except _ZLIB_ERRORS as err:
            del out[member:]  # the damaged member's text
            guard.line_start = min(guard.line_start, len(out))
            guard.end(out)
            nxt = raw.find(b"\x1f\x8b\x08", pos + 1)
            if not out and nxt == -1:
                raise TraceInputError(path, f"corrupt gzip data ({err})") from None
            lost = (nxt if nxt != -1 else len(raw)) - pos
            warnings.append(f"{path}: corrupt gzip data at byte {pos} ({err}); {lost} compressed bytes left out"
                            + (", reading went on at the next gzip member" if nxt != -1 else ""))
            if out and not out.endswith(b"\n"):
                out += b"\n"
                guard.line_start = len(out)
            if nxt == -1:
                break
            pos = nxt
            continue
        if not dec.eof:
            warnings.append(f"{path}: gzip stream truncated (unexpected end of file); read what was complete")
            break
        rest = dec.unused_data
        pos = len(raw) - len(rest)
        if rest and rest[:2] != b"\x1f\x8b":
            if rest.strip(b"\0"):
                raise TraceInputError(path, "corrupt gzip data (garbage after a gzip member)")
            break
    guard.end(out)
    return out


try:  # the native scanner (optional: built where there is a C compiler)
    from . import _pfwscan
except ImportError:
    _pfwscan = None

try:  # ISA-L's inflate: the same gzip, 2.4x faster (measured on DFTracer traces); optional
    from isal import isal_zlib as _inflate

    _ZLIB_ERRORS: tuple = (zlib.error, _inflate.error)
except ImportError:  # pragma: no cover - isal is in the requirements
    _inflate = zlib
    _ZLIB_ERRORS = (zlib.error,)


def _gzip_decompressor():
    """A decompressor of one gzip member (ISA-L when installed, else zlib)."""
    return _inflate.decompressobj(16 + zlib.MAX_WBITS)


_NON_SPACE = re.compile(rb"\S")
_SPACE = b" \t\r\n"


def _body_span(raw: bytes) -> "Optional[tuple[int, int, int, bool]]":
    """Where the event lines are, without copying the (possibly huge) buffer.

    Skips leading white space and the opening ``[``, a closing ``]`` and trailing comma, and a
    half-written last line. Returns ``(start, end, first_lineno, dropped_last_line)`` or ``None``
    when the file holds nothing but white space.
    """
    m = _NON_SPACE.search(raw)
    if m is None:
        return None
    start = m.start()
    if raw[start : start + 1] == b"[":
        m = _NON_SPACE.search(raw, start + 1)
        start = m.start() if m else len(raw)
    first_lineno = 1 + raw.count(b"\n", 0, start)
    end = len(raw)
    while end > start and raw[end - 1] in _SPACE:
        end -= 1
    if end > start and raw[end - 1 : end] == b"]":
        end -= 1
        while end > start and raw[end - 1] in _SPACE:
            end -= 1
    if end > start and raw[end - 1 : end] == b",":
        end -= 1
    dropped = False
    cut = raw.rfind(b"\n", start, end) + 1
    cut = max(cut, start)
    if end > cut:
        try:
            json.loads(raw[cut:end])
        except ValueError:
            log.debug("dropping a half-written last line (%d bytes)", end - cut)
            end, dropped = cut, True
    return start, end, first_lineno, dropped


def _looks_timelogger(raw: "bytes | bytearray", start: int) -> bool:
    """TimeLogger files open with their ``timelogger`` metadata event (docs/wire-format.md)."""
    nl = raw.find(b"\n", start, start + 65536)
    return b'"timelogger"' in raw[start : start + 65536 if nl == -1 else nl]


def _arrow_input(raw: bytes, start: int, end: int) -> "bytes | memoryview":
    """The event lines as pyarrow wants them: one JSON object per line, no trailing commas."""
    nl = raw.find(b"\n", start, end)
    first = raw[start : end if nl == -1 else nl].rstrip()
    if first.endswith(b","):
        return re.sub(rb",[ \t]*(\r?\n)", rb"\1", raw[start:end])
    return memoryview(raw)[start:end]


# ----------------------------------------------------------------------------------------------
# parsed state shared by both parsers


class _State:
    """Metadata collected while parsing one file."""

    def __init__(self, path: str, known: "Optional[dict]" = None, time_metric: str = "US", args: bool = True) -> None:
        self.path = path
        self.args = args  # False: the frame's args column is left empty (:func:`read`)
        self.truncated_last_line = False
        self.started = False
        self._known = known or {"HH": {}, "FH": {}, "SH": {}}
        self._time_metric = time_metric
        self.reset()

    def reset(self) -> None:
        """Forget what a failed parse attempt collected (hash tables of earlier blocks stay)."""
        self.maps: dict[str, dict[str, str]] = {k: dict(v) for k, v in self._known.items()}
        self.time_metric = self._time_metric
        self.header: Optional[dict] = None
        self.clock_sync: list[dict] = []
        self.tf_profile: list[dict] = []
        self.evidence_missing: list[str] = []  # what capture was asked for and did not produce (hooks, profile)
        self.close: Optional[dict] = None
        self.write_failed: Optional[str] = None
        self.dropped = 0  # intervals the TimeLogger writer could not write (timelogger_dropped / close records)
        self.thread_names: dict[int, str] = {}
        self.process_names: dict[int, str] = {}
        self.bookkeeping: list[str] = []
        self.other_meta: Counter = Counter()
        self.meta_pids: set = set()
        self.saw_meta = False
        self.ignored: Counter = Counter()
        self.no_ts = 0

    @property
    def is_timelogger(self) -> bool:
        return self.header is not None

    @property
    def saw_any(self) -> bool:
        return self.saw_meta or bool(self.ignored) or self.no_ts > 0

    @property
    def time_scale(self) -> int:
        return _TIME_SCALE.get(str(self.time_metric).upper(), 1_000)

    def take_special(self, ev: dict) -> bool:
        """Record a metadata or DFTracer bookkeeping event; False if ``ev`` is neither."""
        ph = ev.get("ph")
        if ph in _METADATA_PH and not isinstance(ph, bool):
            self._metadata(ev)
            return True
        if ev.get("cat") == _BOOKKEEPING_CAT and ph in _COMPLETE_PH:
            self.saw_meta = True
            self.bookkeeping.append(str(ev.get("name")))
            return True
        return False

    def _metadata(self, ev: dict) -> None:
        self.saw_meta = True
        name = ev.get("name")
        args = _dict(ev.get("args"))
        pid = _as_int(ev.get("pid"))
        if pid is not None:
            self.meta_pids.add(pid)
        if name in self.maps:
            key, value = args.get("value"), args.get("name")
            if key is not None and value is not None:
                self.maps[name][str(key)] = str(value)
        elif name == "CM":
            if args.get("name") == "time_metric" and args.get("value") is not None:
                self.time_metric = str(args["value"])
        elif name == "timelogger":
            self.header = _plain(args)
        elif name == "clock_sync":
            self.clock_sync.append(_plain(args))
        elif name == "tf_profile":
            self.tf_profile.append(_plain(args))
        elif name == "tf_profile_missed":
            self.evidence_missing.append(f"--tf-profile: nothing profiled: {args.get('reason')}")
        elif name == "timelogger_hooks":
            if not args.get("seen"):
                self.evidence_missing.append("the zero-code hooks saw no framework loop (no tf.data iteration, "
                                             "tf.function call or Keras fit): the program never iterated where they "
                                             "look; time its loop with timelogger.iterate/phase (README)")
        elif name == "timelogger_close":
            self.close = _plain(args)
            self.dropped = max(self.dropped, _as_int(args.get("dropped")) or 0)
        elif name == "timelogger_dropped":  # running total, written as intervals are dropped (survives kill -9)
            self.dropped = max(self.dropped, _as_int(args.get("total")) or 0)
        elif name == "timelogger_lost":  # reserved after the header, rewritten in place when a write failed
            self.dropped = max(self.dropped, _as_int(args.get("lost")) or 0)
            why = str(args.get("why") or "").strip()
            if why:
                self.write_failed = why
        elif name in ("thread_name", "process_name"):
            target = self.thread_names if name == "thread_name" else self.process_names
            ident = _as_int(ev.get("tid" if name == "thread_name" else "pid"))
            if ident is not None and args.get("name") is not None:
                target[ident] = str(args["name"])
        else:
            self.other_meta[str(name)] += 1


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _plain(obj: Any) -> Any:
    """``Decimal`` -> int/float, recursively (metadata is parsed with exact decimals)."""
    if isinstance(obj, Decimal):
        return int(obj) if obj == obj.to_integral_value() else float(obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def _as_int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal):
        try:
            if value == value.to_integral_value():
                return int(value)
        except (InvalidOperation, ValueError):
            return None
    return None


def _as_str(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(_plain(value))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Decimal):
        return _plain(obj)
    raise TypeError(type(obj).__name__)


#: a clock offset between two ranks beyond a day is a corrupt value (a day off is a different run, see align)
_MAX_OFFSET_NS = 24 * 3600 * 10**9


def _value_problem(ts: Any, dur: Any, ts_ns: int, dur_ns: int, pid: Optional[int], tid: Optional[int],
                   ints: dict) -> Optional[str]:
    """Why an event's values cannot be a real event (None when they can): times outside int64 epoch ns or before
    1970, a negative duration or byte count, an integer outside int64."""
    if not 0 <= ts_ns < MAX_EPOCH_NS:
        return f"ts {ts} is not a time"
    if dur_ns < 0:
        return f"negative dur {dur}"
    if ts_ns + dur_ns >= MAX_EPOCH_NS:
        return f"dur {dur} is not a duration"
    for key, value in (("pid", pid), ("tid", tid), *ints.items()):
        if value is not None and not _INT64[0] <= value < _INT64[1]:
            return f"{key} {value} out of range"
    if ints.get("bytes") is not None and ints["bytes"] < 0:
        return f"negative bytes {ints['bytes']}"
    return None


def _time_groups(ts: np.ndarray) -> "tuple[Optional[np.ndarray], np.ndarray]":
    """``(order, bounds)``: ``ts[order[bounds[k]:bounds[k + 1]]]`` is group k of times separated from the next
    by more than :data:`OUTLIER_GAP_NS`. A file spanning less than that (the usual case) is one group, found
    without sorting (``order`` None)."""
    if len(ts) < 2 or int(ts.max()) - int(ts.min()) <= OUTLIER_GAP_NS:
        return None, np.array([0, len(ts)])
    order = np.argsort(ts, kind="stable")
    gaps = np.flatnonzero(np.diff(ts[order]) > OUTLIER_GAP_NS)
    return order, np.concatenate(([0], gaps + 1, [len(ts)]))


def _outliers(ts: np.ndarray) -> np.ndarray:
    """Rows cut off from the bulk of the file by a gap of :data:`OUTLIER_GAP_NS`, when they are few (at most
    :data:`OUTLIER_MAX_ROWS` or :data:`OUTLIER_MAX_SHARE`): a corrupt timestamp, which would otherwise stretch the
    run over years."""
    out = np.zeros(len(ts), dtype=bool)
    order, bounds = _time_groups(ts)
    if order is None or len(bounds) == 2:
        return out
    sizes = np.diff(bounds)
    main = int(np.argmax(sizes))
    few = max(OUTLIER_MAX_ROWS, OUTLIER_MAX_SHARE * len(ts))
    for k, size in enumerate(sizes):
        if k != main and size <= few and 2 * size < sizes[main]:
            out[order[bounds[k]:bounds[k + 1]]] = True
    return out


def _drop_outliers(cols: "_Cols", path: str, warnings: list[str]) -> "_Cols":
    """:func:`_outliers` left out with one warning naming their lines; a file split into large groups far apart
    in time is kept whole and reported."""
    if cols.n < 2:
        return cols
    out = _outliers(cols.ts)
    if out.any():
        lines = cols.lines[out] if cols.lines is not None else np.zeros(0, dtype=np.int64)
        named = ", ".join(map(str, lines[:_MAX_LINE_WARNINGS])) + (" ..." if len(lines) > _MAX_LINE_WARNINGS else "")
        warnings.append(f"{path}: {int(out.sum())} event(s) more than {OUTLIER_GAP_NS // 3_600_000_000_000} h away "
                        f"from all the others in the file (line {named}): corrupt timestamps, skipped")
        cols = cols.take(~out)
    if len(_time_groups(cols.ts)[1]) > 2:
        warnings.append(f"{path}: events fall into groups more than {OUTLIER_GAP_NS // 3_600_000_000_000} h apart; "
                        "kept (check the clock or whether two runs were written to one file)")
    return cols


# ----------------------------------------------------------------------------------------------
# columns of complete events, as both parsers produce them


@dataclass
class _Cols:
    name: pd.Categorical
    cat: pd.Categorical
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray  # int64 ns
    dur: np.ndarray  # int64 ns
    strs: dict  # key in _STR_ARGS -> pd.Categorical
    ints: dict  # key in _INT_ARGS -> (int64 values, bool mask: True = missing)
    extra: Optional[list] = None  # per-row leftover args (TimeLogger), else None
    lines: Optional[np.ndarray] = None  # per-row line number (line parser only)

    @property
    def n(self) -> int:
        return len(self.ts)

    def take(self, keep: np.ndarray) -> "_Cols":
        """The rows where ``keep`` (bool) is True."""
        return _Cols(
            name=self.name[keep], cat=self.cat[keep], pid=self.pid[keep], tid=self.tid[keep], ts=self.ts[keep],
            dur=self.dur[keep], strs={k: v[keep] for k, v in self.strs.items()},
            ints={k: (v[keep], m[keep]) for k, (v, m) in self.ints.items()},
            extra=None if self.extra is None else [e for e, k in zip(self.extra, keep) if k],
            lines=None if self.lines is None else self.lines[keep],
        )

    @classmethod
    def empty(cls) -> "_Cols":
        z = np.zeros(0, dtype=np.int64)
        c = pd.Categorical([])
        return cls(c, c, z, z, z, z, {k: c for k in _STR_ARGS},
                   {k: (z, np.zeros(0, dtype=bool)) for k in _INT_ARGS})


def _parse_lines(body: bytes, first_lineno: int, state: _State, warnings: list[str]) -> _Cols:
    """The robust parser: ``json.loads`` per line, exact decimals, every oddity tolerated."""
    names: list = []
    cats: list = []
    pids: list = []
    tids: list = []
    tss: list = []
    durs: list = []
    strs: dict = {k: [] for k in _STR_ARGS}
    ints: dict = {k: [] for k in _INT_ARGS}
    extras: list = []
    linenos: list = []
    bad: list[int] = []
    bad_values: list[tuple[int, str]] = []
    bad_bytes: list[tuple[int, Any]] = []  # (line, value) of bytes that are present but no byte count
    scale = state.time_scale
    loads = json.loads
    for lineno, line in enumerate(body.split(b"\n"), start=first_lineno):
        if len(line) > MAX_LINE_BYTES:
            bad_values.append((lineno, f"a line of {len(line):,} bytes (limit {MAX_LINE_BYTES:,})"))
            continue
        if not line.strip():
            continue
        try:
            ev = loads(line.rstrip().rstrip(b","), parse_float=Decimal)
        except ValueError:
            bad.append(lineno)
            continue
        if not isinstance(ev, dict):
            bad.append(lineno)
            continue
        if state.take_special(ev):
            continue
        ph = ev.get("ph")
        if ph not in _COMPLETE_PH or isinstance(ph, bool):
            state.ignored[str(ph)] += 1
            continue
        ts = ev.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, Decimal)):
            state.no_ts += 1
            continue
        dur = ev.get("dur")
        if isinstance(dur, bool) or not isinstance(dur, (int, Decimal)):
            dur = 0
        pid, tid = _as_int(ev.get("pid")), _as_int(ev.get("tid"))
        args = _dict(ev.get("args"))
        row_ints = {key: _as_int(args.get(key)) for key in _INT_ARGS}
        if row_ints["bytes"] is None and args.get("bytes") is not None:  # "4096", 4096.7, true, NaN, ...
            bad_bytes.append((lineno, args["bytes"]))
        ts_ns, dur_ns = int(ts * scale), int(dur * scale)
        problem = _value_problem(ts, dur, ts_ns, dur_ns, pid, tid, row_ints)
        if problem is not None:
            bad_values.append((lineno, problem))
            continue
        name = ev.get("name")
        cat = ev.get("cat")
        too_long = _too_long(name, cat, args)
        if too_long:
            bad_values.append((lineno, too_long))
            continue
        names.append("" if name is None else str(name))
        cats.append("" if cat is None else str(cat))
        pids.append(0 if pid is None else pid)
        tids.append(0 if tid is None else tid)
        tss.append(ts_ns)
        durs.append(dur_ns)
        linenos.append(lineno)
        for key in _STR_ARGS:
            strs[key].append(_as_str(args.get(key)))
        for key, value in row_ints.items():
            ints[key].append(value)
        extras.append({k: v for k, v in args.items() if k not in _COLUMN_ARGS} or None)
    if bad:
        for lineno in bad[:_MAX_LINE_WARNINGS]:
            warnings.append(f"{state.path}: line {lineno}: not a JSON object, skipped")
        if len(bad) > _MAX_LINE_WARNINGS:
            warnings.append(f"{state.path}: {len(bad) - _MAX_LINE_WARNINGS} more unparseable lines skipped")
    for lineno, value in bad_bytes[:_MAX_LINE_WARNINGS]:
        shown = json.dumps(value, default=str) if not isinstance(value, Decimal) else str(value)
        warnings.append(f"{state.path}:{lineno}: bytes {shown[:40]} is not a byte count; the event is kept without "
                        "bytes")
    if len(bad_bytes) > _MAX_LINE_WARNINGS:
        warnings.append(f"{state.path}: {len(bad_bytes) - _MAX_LINE_WARNINGS} more events with a bytes value that "
                        "is not a byte count")
    for lineno, problem in bad_values[:_MAX_LINE_WARNINGS]:
        warnings.append(f"{state.path}:{lineno}: {problem}; event skipped")
    if len(bad_values) > _MAX_LINE_WARNINGS:
        warnings.append(f"{state.path}: {len(bad_values) - _MAX_LINE_WARNINGS} more events with bad values skipped")
    n = len(tss)
    ts_ns = np.fromiter(tss, dtype=np.int64, count=n)
    dur_ns = np.fromiter(durs, dtype=np.int64, count=n)
    int_cols = {}
    for key, values in ints.items():
        mask = np.fromiter((v is None for v in values), dtype=bool, count=n)
        vals = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=n)
        int_cols[key] = (vals, mask)
    return _Cols(
        name=pd.Categorical(names),
        cat=pd.Categorical(cats),
        pid=np.asarray(pids, dtype=np.int64),
        tid=np.asarray(tids, dtype=np.int64),
        ts=ts_ns,
        dur=dur_ns,
        strs={k: pd.Categorical(v) for k, v in strs.items()},
        ints=int_cols,
        extra=extras if state.is_timelogger else None,
        lines=np.asarray(linenos, dtype=np.int64),
    )


def _too_long(name: Any, cat: Any, args: dict) -> Optional[str]:
    """Which of an event's names is longer than :data:`MAX_FIELD_CHARS`, as a warning's words (None: none)."""
    for what, value in (("name", name), ("cat", cat), *((k, args.get(k)) for k in _STR_ARGS)):
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            return f"{what} of {len(value):,} characters (limit {MAX_FIELD_CHARS:,})"
    return None


#: Metadata names whose ``args`` the fast parser does not keep (TimeLogger's); seeing one sends
#: the file to the line parser.
_RICH_METADATA = frozenset({"timelogger", "clock_sync", "tf_profile", "timelogger_close", "timelogger_dropped",
                            "timelogger_lost", "tf_profile_missed", "timelogger_hooks"})


def _parse_arrow(body: "bytes | memoryview", state: _State) -> "tuple[Optional[_Cols], str]":
    """The fast parser: DuckDB or ``pyarrow.json`` with a fixed schema, and which one parsed (``duckdb`` or
    ``arrow``). ``None`` when neither can be used.

    Metadata rows come out of the same parse (their ``args.name``/``args.value`` are in the
    schema), so the buffer is scanned once.
    """
    import pyarrow as pa

    if not len(body):
        return _Cols.empty(), "arrow"
    try:
        table, ph_is_str, engine = _event_table(body)
        return _arrow_columns(table, ph_is_str, state), engine
    except (pa.ArrowException, ValueError) as err:  # type conflicts, garbage, >2 GiB string columns...
        log.debug("%s: pyarrow.json cannot read this file (%s); using the line parser", state.path, err)
        return None, "lines"


def _event_schema(ph_is_str: bool, number: "pa.DataType") -> "pa.Schema":
    """The fields the fast parsers read of each event line, ``ts`` and ``dur`` as ``number``."""
    import pyarrow as pa

    args_type = pa.struct(
        [(k, pa.int64()) for k in _INT_ARGS]
        + [(k, pa.string()) for k in _STR_ARGS]
        + [("name", pa.string()), ("value", pa.string())]
    )
    return pa.schema(
        [
            ("name", pa.string()), ("cat", pa.string()), ("ph", pa.string() if ph_is_str else pa.int64()),
            ("pid", pa.int64()), ("tid", pa.int64()),
            ("ts", number), ("dur", number), ("args", args_type),
        ]
    )


def _event_table(body: "bytes | memoryview") -> "tuple[pa.Table, bool, str]":
    """The event lines as a table of the reader's fixed schema, whether ``ph`` is a string, and the engine."""
    import pyarrow as pa
    import pyarrow.json as pj

    head = bytes(body[:65536])
    at = head.find(b'"ph":')
    ph_is_str = at != -1 and head[at + 5 : at + 7].lstrip()[:1] == b'"'

    def parse(number: "pa.DataType") -> "pa.Table":
        return pj.read_json(
            pa.py_buffer(body),
            read_options=pj.ReadOptions(block_size=_ARROW_BLOCK),
            parse_options=pj.ParseOptions(explicit_schema=_event_schema(ph_is_str, number),
                                          unexpected_field_behavior="ignore"),
        )

    # DFTracer writes integer ts/dur: the native scanner reads those in under a third of DuckDB's time, and DuckDB
    # with 23 % less CPU than pyarrow (docs/partitioned.md). What one cannot read exactly goes to the next: pyarrow
    # last, int64 first (~10 % faster than exact decimals, no cast), then decimals for fractional or huge values.
    integers = _event_schema(ph_is_str, pa.int64())
    table = _scanned_table(body, integers)
    if table is not None:
        return table, ph_is_str, "scan"
    table = _duckdb_table(body, integers)
    if table is not None:
        return table, ph_is_str, "duckdb"
    try:
        return parse(pa.int64()), ph_is_str, "arrow"
    except pa.ArrowInvalid:
        return parse(pa.decimal128(38, 9)), ph_is_str, "arrow"


def _arrow_columns(table: "pa.Table", ph_is_str: bool, state: _State) -> Optional[_Cols]:
    """The complete events of a parsed table; ``None`` when the line parser must read them instead (it names
    the lines of absurd names or values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return None
    table = table.combine_chunks()

    def col(tbl: "pa.Table", name: str) -> "pa.Array":
        return tbl.column(name).chunk(0) if tbl.num_rows else pa.array([], tbl.schema.field(name).type)

    ph = col(table, "ph")
    complete_value, meta_value = ("X", "M") if ph_is_str else (1, 4)
    is_meta = pc.fill_null(pc.equal(ph, meta_value), False)
    is_complete = pc.fill_null(pc.equal(ph, complete_value), False)
    is_book = pc.and_(is_complete, pc.fill_null(pc.equal(col(table, "cat"), _BOOKKEEPING_CAT), False))
    special = pc.or_(is_meta, is_book)
    if pc.any(special).as_py():
        for row in table.filter(special).select(["name", "cat", "ph", "pid", "tid", "args"]).to_pylist():
            if row["ph"] == meta_value and row["name"] in _RICH_METADATA:
                return None
            args = {k: row["args"][k] for k in ("name", "value")} if row["args"] else None
            state.take_special(dict(row, args=args))
    events = pc.and_(is_complete, pc.invert(is_book))
    other = pc.invert(pc.or_(events, special))
    if pc.any(other).as_py():
        for item in pc.value_counts(pc.filter(ph, other)).to_pylist():
            state.ignored[str(item["values"])] += item["counts"]
    ts = col(table, "ts")
    if pc.any(pc.and_(events, ts.is_null())).as_py():
        state.no_ts += pc.sum(pc.and_(events, ts.is_null())).as_py()
        events = pc.and_(events, ts.is_valid())
    keep = events.to_numpy(zero_copy_only=False)
    if keep.all():
        keep = slice(None)  # the usual case: no copies
    elif not keep.any():
        return _Cols.empty()

    ts_ns = _to_ns(ts, state.time_scale)
    dur_ns = _to_ns(col(table, "dur"), state.time_scale)
    if ts_ns is None or dur_ns is None:
        return None
    args = col(table, "args")
    fields = dict(zip((f.name for f in args.type), args.flatten()))
    if any(_longer_than(arr, MAX_FIELD_CHARS)
           for arr in (col(table, "name"), col(table, "cat"), *(fields[k] for k in _STR_ARGS))):
        return None  # an absurd name: the line parser skips that event and names its line
    t, d = ts_ns[keep], dur_ns[keep]
    nbytes = pc.fill_null(fields["bytes"], 0).to_numpy(zero_copy_only=False)[keep]
    if len(t) and (t.min() < 0 or t.max() >= MAX_EPOCH_NS or d.min() < 0 or d.max() >= MAX_EPOCH_NS
                   or (t + d).max() >= MAX_EPOCH_NS
                   or (len(nbytes) and nbytes.min() < 0)):
        return None  # bad values: the line parser skips those events and names their lines

    def ints(arr: "pa.Array") -> "tuple[np.ndarray, np.ndarray]":
        values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        return values[keep], arr.is_null().to_numpy(zero_copy_only=False)[keep]

    def categorical(arr: "pa.Array", fill: Optional[str] = None) -> pd.Categorical:
        cat = _categorical(arr, fill)
        return cat if isinstance(keep, slice) else cat[keep]

    return _Cols(
        name=categorical(col(table, "name"), ""),
        cat=categorical(col(table, "cat"), ""),
        pid=ints(col(table, "pid"))[0],
        tid=ints(col(table, "tid"))[0],
        ts=ts_ns[keep],
        dur=dur_ns[keep],
        strs={k: categorical(fields[k]) for k in _STR_ARGS},
        ints={k: ints(fields[k]) for k in _INT_ARGS},
    )


#: the first parser to try: ``scan`` (the native scanner, then DuckDB, then pyarrow), ``duckdb`` or ``pyarrow``,
#: from ``TRACE_MERGE_PARSER`` in the environment (pool workers inherit it; benchmarks/perf/parse_engines.py
#: compares them)
_FIRST_PARSER = os.environ.get("TRACE_MERGE_PARSER", "scan")
#: ``False`` when the scanner was not compiled (no C compiler at install), or another parser is asked for first
USE_SCANNER = _FIRST_PARSER == "scan"
#: ``False`` when ``duckdb`` is not installed, or with ``TRACE_MERGE_PARSER=pyarrow``
USE_DUCKDB = _FIRST_PARSER != "pyarrow"


#: string fields the scanner hands over dictionary-encoded (the reader makes categories of them: encoding while
#: scanning saves Arrow's dictionary_encode, 6 % of a file's read)
_ENCODED = frozenset({"name", "cat"})
_ENCODED_ARGS = frozenset(_STR_ARGS)


def _scanned_table(body: "bytes | memoryview", schema: "pa.Schema") -> "Optional[pa.Table]":
    """The event lines of ``body`` in ``schema``, read by the native scanner (``_pfwscan.c``), or ``None`` where
    it declines: anything it cannot read exactly as DuckDB and pyarrow would (an escaped string, a wanted field of
    another JSON type, a number that is not a plain int64 integer, a line that is not one JSON object...).

    The scanner validates every line as JSON and keeps only the schema's fields, as Arrow buffers wrapped here
    without a copy; the strings of :data:`_ENCODED` and :data:`_ENCODED_ARGS` come dictionary-encoded (their
    decoded table equals DuckDB's).
    """
    global USE_SCANNER
    if not USE_SCANNER:
        return None
    if _pfwscan is None:  # installed without a C compiler
        USE_SCANNER = False
        return None
    import pyarrow as pa

    top = [f for f in schema if f.name != "args"]
    args_type = schema.field("args").type

    def wanted(fields: "list[pa.Field]", encoded: "frozenset[str]") -> "tuple[tuple[bytes, int], ...]":
        return tuple((f.name.encode(), (2 if f.name in encoded else 1) if pa.types.is_string(f.type) else 0)
                     for f in fields)

    scanned = _pfwscan.scan(body, wanted(top, _ENCODED), wanted(list(args_type), _ENCODED_ARGS), MAX_LINE_BYTES)
    if scanned is None:
        return None
    rows, top_columns, args_bitmap, args_nulls, args_columns = scanned

    def array(kind: "pa.DataType", bitmap: bytes, nulls: int, *buffers: bytes) -> "pa.Array":
        validity = pa.py_buffer(bitmap) if nulls else None
        if len(buffers) == 3:  # a dictionary: indices, and its distinct strings' offsets and data
            indices, offsets, data = map(pa.py_buffer, buffers)
            strings = pa.Array.from_buffers(kind, len(offsets) // 4 - 1, [None, offsets, data])
            return pa.DictionaryArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), rows, [validity, indices], null_count=nulls), strings)
        return pa.Array.from_buffers(kind, rows, [validity, *map(pa.py_buffer, buffers)], null_count=nulls)

    columns = {f.name: array(f.type, *c) for f, c in zip(top, top_columns)}
    children = [array(f.type, *c) for f, c in zip(args_type, args_columns)]
    columns["args"] = pa.StructArray.from_buffers(
        pa.struct([(f.name, child.type) for f, child in zip(args_type, children)]), rows,
        [pa.py_buffer(args_bitmap) if args_nulls else None], null_count=args_nulls, children=children)
    return pa.Table.from_arrays([columns[f.name] for f in schema], names=schema.names)


#: bodies smaller than this go to pyarrow: a DuckDB call costs ~12 ms before its first line (a connection, the
#: query), pyarrow is faster below ~4 MB of text (measured), and a small run does not import DuckDB at all
DUCKDB_MIN_BYTES = 8 << 20


def _duckdb_table(body: "bytes | memoryview", schema: "pa.Schema") -> "Optional[pa.Table]":
    """The event lines of ``body`` parsed by DuckDB into ``schema``, or ``None`` when DuckDB cannot read them
    exactly as pyarrow would.

    Each line is one JSON document (DuckDB's own newline-delimited reader lets a broken line take the next one
    with it). DuckDB casts leniently (``1000.5`` to 1000, ``"12"`` to 12), so integers come out as their JSON
    text and Arrow casts that strictly: anything but a plain integer refuses the whole body, which pyarrow then
    reads. A line DuckDB cannot parse, an empty or over-long line or one not starting with ``{`` refuses it too,
    and so does a body of less than :data:`DUCKDB_MIN_BYTES`.
    """
    global USE_DUCKDB
    if not USE_DUCKDB or len(body) < DUCKDB_MIN_BYTES:
        return None
    try:
        import duckdb
    except ImportError:
        USE_DUCKDB = False
        return None
    import pyarrow as pa

    text = np.frombuffer(body, np.uint8)
    ends = np.flatnonzero(text == 10) + 1
    if not len(ends) or ends[-1] != len(text):
        ends = np.append(ends, len(text))
    offsets = np.concatenate(([0], ends)).astype(np.int64, copy=False)
    if np.diff(offsets).max() > MAX_LINE_BYTES or (text[offsets[:-1]] != ord("{")).any():
        return None
    lines = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(body))

    def as_text(kind: "pa.DataType") -> str:
        if pa.types.is_struct(kind):
            return "{" + ",".join(f'"{f.name}":{as_text(f.type)}' for f in kind) + "}"
        return '"VARCHAR"' if pa.types.is_string(kind) else '"JSON"'

    con = _duckdb_connection(duckdb)
    try:
        con.register("lines", pa.table({"line": lines}))
        parsed = con.sql(f"SELECT unnest(from_json(line, '{as_text(pa.struct(list(schema)))}')) FROM lines"
                         ).fetch_arrow_table()
        return parsed.cast(schema)
    except (duckdb.Error, pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError) as err:  # invalid UTF-8
        log.debug("DuckDB cannot read these lines exactly (%s); using pyarrow", err)
        return None
    finally:
        con.unregister("lines")


_duckdb_local = threading.local()


def _duckdb_connection(duckdb: Any) -> Any:
    """This thread's DuckDB connection, opened on its first block. One per thread and process (a connection is not
    shared between threads, nor inherited by a forked worker); kept, because a fresh one per 16 MiB block made a
    2.5 M-event file's read 12 % slower (3.6 s against 4.1 s: its first query in a connection is the slow one). One
    thread: files are parsed side by side (the engine's workers), and two DuckDB threads per file made
    merge_scale.py's 5 M-event summary 10-25 % slower on two cores."""
    con = getattr(_duckdb_local, "con", None)
    if con is None or _duckdb_local.pid != os.getpid():
        con = _duckdb_local.con = duckdb.connect(config={"threads": 1})
        _duckdb_local.pid = os.getpid()
    return con


def _to_ns(arr: "pa.Array", scale: int) -> Optional[np.ndarray]:
    """Parsed ``ts``/``dur`` (int64 or exact decimal, missing = 0) times ``scale`` as int64 ns.

    ``None`` when a value does not fit int64 ns.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_integer(arr.type):
        values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        limit = np.iinfo(np.int64).max // scale
        if len(values) and (values.max() > limit or values.min() < -limit):
            return None
        return values * scale
    digits = {1: 0, 1_000: 3, 1_000_000: 6, 1_000_000_000: 9}[scale]
    return _decimal_to_ns(pc.fill_null(arr, pa.scalar(0, arr.type)), digits)


def _decimal_to_ns(arr: "pa.Array", digits: int) -> Optional[np.ndarray]:
    """Exact decimal -> int64 (value * 10**digits, truncated toward zero), like ``int(d * scale)``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    scaled = pc.cast(arr, pa.decimal128(38, digits), safe=False)
    words = np.frombuffer(scaled.buffers()[1], dtype=np.int64)
    words = words[2 * scaled.offset : 2 * (scaled.offset + len(scaled))].reshape(-1, 2)
    if not np.array_equal(words[:, 1], words[:, 0] >> 63):
        return None  # does not fit int64 ns
    return np.ascontiguousarray(words[:, 0])


def _longer_than(arr: "pa.Array", limit: int) -> bool:
    """Whether a string of ``arr`` has more than ``limit`` characters. Counted only where one has more than
    ``limit`` bytes (a character is one to four): a block's names are otherwise measured from their offsets, not
    decoded (``utf8_length`` of every name was 5 % of a file's read)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary
    if len(arr) == 0:
        return False
    wide = pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32, len(arr) + 1,
                            arr.offset * (8 if wide else 4))
    if int(np.diff(offsets).max()) <= limit:
        return False
    return (pc.max(pc.utf8_length(arr)).as_py() or 0) > limit


def _categorical(arr: "pa.Array", fill: Optional[str] = None) -> pd.Categorical:
    """``arr`` (strings, or the scanner's dictionary of them) as categories in order of first appearance, missing
    values as ``fill`` where given (else missing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(arr.type):
        enc = pc.dictionary_encode(arr if fill is None else pc.fill_null(arr, fill))
        codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        return pd.Categorical.from_codes(codes, categories=pd.Index(enc.dictionary.to_pylist(), dtype=object))
    # already encoded, its strings in order of first appearance: a fill is placed where it first appears (at the
    # first missing value, unless it was seen before), as encoding the filled strings would place it
    categories = arr.dictionary.to_pylist()
    codes = pc.fill_null(arr.indices, -1).to_numpy(zero_copy_only=False).astype(np.int32, copy=True)
    if fill is not None and arr.null_count:
        missing = codes < 0
        first = int(np.argmax(missing))
        seen = int(codes[:first].max()) + 1 if first else 0  # categories first seen before it: 0 .. seen-1
        at = categories.index(fill) if fill in categories else len(categories)
        if at == len(categories):
            categories.append(fill)
        if at >= seen:  # the fill moves to place ``seen``; the categories from there up to it move one along
            remap = np.arange(len(categories), dtype=np.int32)
            remap[seen:at] += 1
            remap[at] = seen
            codes[~missing] = remap[codes[~missing]]
            categories.insert(seen, categories.pop(at))
            at = seen
        codes[missing] = at
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object))


# ----------------------------------------------------------------------------------------------
# frame + meta


def _recode(cat: pd.Categorical, func: Callable[[Any], Any]) -> pd.Categorical:
    """Map every category through ``func`` (None -> missing), merging equal results."""
    mapped = [func(c) for c in cat.categories]
    uniq: dict = {}
    remap = np.full(len(mapped) + 1, -1, dtype=np.int32)
    for i, value in enumerate(mapped):
        if value is not None:
            remap[i] = uniq.setdefault(value, len(uniq))
    codes = remap[np.asarray(cat.codes, dtype=np.int64)]  # code -1 -> remap[-1] == -1
    return pd.Categorical.from_codes(codes, categories=pd.Index(list(uniq), dtype=object))


def _fill(primary: pd.Categorical, fallback: pd.Categorical) -> pd.Categorical:
    """``primary`` where present, else ``fallback``."""
    cats = list(dict.fromkeys(list(primary.categories) + list(fallback.categories)))
    index = {c: i for i, c in enumerate(cats)}
    rp = np.array([index[c] for c in primary.categories] + [-1], dtype=np.int32)
    rf = np.array([index[c] for c in fallback.categories] + [-1], dtype=np.int32)
    pcodes = rp[np.asarray(primary.codes, dtype=np.int64)]
    fcodes = rf[np.asarray(fallback.codes, dtype=np.int64)]
    codes = np.where(pcodes >= 0, pcodes, fcodes)
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


def _strings(cat: pd.Categorical) -> pd.arrays.StringArray:
    """``cat`` as a ``string`` column, taken from its categories (and a missing value last, where code -1 points):
    pandas checks only the categories, where its constructor checks every row (2.75 ms per 145 k rows, against
    0.64; converting an object column took 40 ms per 300 k rows)."""
    values = pd.arrays.StringArray(np.array([*cat.categories, pd.NA], dtype=object))
    return values.take(np.asarray(cat.codes, dtype=np.intp))


def _constant(value: Optional[str], n: int) -> pd.Categorical:
    if value is None:
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int32), categories=pd.Index([], dtype=object))
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int32), categories=pd.Index([value], dtype=object))


def _classify(src_cat: str, timelogger: bool) -> "tuple[str, str, Optional[str]]":
    """(layer, cat, original cat to keep in ``args`` or None) for a source category."""
    low = src_cat.lower()
    if timelogger:
        layer = "app"
        cat = src_cat if src_cat in CATS else (low if low in CATS else "other")
    else:
        layer = _DFT_LAYERS.get(low, "app")
        cat = "io" if layer in _IO_LAYERS else ("comm" if layer == "comm" else (low if low in CATS else "other"))
    keep = None if low in (cat, layer) else src_cat
    return layer, cat, keep


def _pair_mask(cols: "_Cols", rows: np.ndarray, test: Callable[[str, str], Any]) -> "tuple[np.ndarray, list]":
    """``test(src cat, name)`` for the rows ``rows`` (bool mask), evaluated once per distinct pair: (the index of
    each such row's pair, the results per pair). Hash-based on the category codes: no sort, no strings per row."""
    n_names = len(cols.name.categories) + 1
    cat_codes = np.asarray(cols.cat.codes, dtype=np.int64)[rows]
    name_codes = np.asarray(cols.name.codes, dtype=np.int64)[rows]
    inverse, pairs = pd.factorize((cat_codes + 1) * n_names + (name_codes + 1))
    results = []
    for code in np.asarray(pairs, dtype=np.int64):
        c, m = int(code // n_names) - 1, int(code % n_names) - 1
        results.append(test(str(cols.cat.categories[c]) if c >= 0 else "", str(cols.name.categories[m]) if m >= 0
                            else ""))
    return inverse, results


def _cat_rows(cols: "_Cols", wanted: "set[str]") -> np.ndarray:
    """Rows whose source category (lower case) is one of ``wanted``, from the categories, not per row."""
    hit = np.array([str(c).lower() in wanted for c in cols.cat.categories] + [False], dtype=bool)
    return hit[np.asarray(cols.cat.codes, dtype=np.int64)]


def _epoch_windows(cols: "_Cols", epoch: "tuple[np.ndarray, np.ndarray]") -> "tuple[np.ndarray, np.ndarray]":
    """``(values, missing)`` of the epoch column with :data:`EPOCH_EVENTS` applied per process."""
    candidates = _cat_rows(cols, {ec for ec, _ in _EPOCH_EVENTS}) if cols.n else np.zeros(0, dtype=bool)
    if not candidates.any():  # a POSIX-only trace: nothing to look at row by row
        return epoch
    which, hits = _pair_mask(cols, candidates, lambda c, name: any(
        c.lower() == ec and p.search(name) for ec, p in _EPOCH_EVENTS))
    is_epoch = np.zeros(cols.n, dtype=bool)
    is_epoch[np.flatnonzero(candidates)] = np.asarray(hits, dtype=bool)[which]
    if not is_epoch.any():
        return epoch
    values, missing = epoch[0].copy(), epoch[1].copy()
    pid, start = np.asarray(cols.pid), np.asarray(cols.ts)
    end = start + np.asarray(cols.dur)
    for p in np.unique(pid[is_epoch]):
        ev = np.flatnonzero(is_epoch & (pid == p))
        ev = ev[np.argsort(start[ev], kind="stable")]
        mine = pid == p
        for k, i in enumerate(ev):
            number = int(epoch[0][i]) if not epoch[1][i] else k  # its own epoch arg where it has one
            inside = mine & (start >= start[i]) & (start <= end[i])
            values[inside], missing[inside] = number, False
    return values, missing


def _ai_cats(cols: "_Cols", layer: pd.Categorical, cat: pd.Categorical) -> pd.Categorical:
    """``cat`` with :func:`ai_cat` applied to the app-layer rows of a DFTracer trace, per distinct (cat, name), on
    the codes (no string per row)."""
    app = np.asarray(layer == "app")
    if not app.any():
        return cat
    inverse, mapped = _pair_mask(cols, app, ai_cat)
    if not any(mapped):
        return cat
    categories = list(cat.categories) + sorted({v for v in mapped if v} - set(cat.categories))
    code_of = {c: i for i, c in enumerate(categories)}
    pair_code = np.array([code_of[v] if v else -2 for v in mapped], dtype=np.int64)[inverse]  # -2: no rule
    codes = np.asarray(cat.codes, dtype=np.int64).copy()
    idx = np.flatnonzero(app)
    hit = pair_code >= 0
    codes[idx[hit]] = pair_code[hit]
    return pd.Categorical.from_codes(codes, categories=categories)


def _ended_early(close: Optional[dict]) -> Optional[str]:
    """Why a TimeLogger file's process ended early, from its close record (None: it closed normally)."""
    if close is None:
        return "ended early: no close record (killed, crashed, or still running)"
    exit_ = close.get("exit") if isinstance(close.get("exit"), dict) else {}
    if exit_.get("reason") == "exception":
        return (f"ended early: uncaught {exit_.get('type')}"
                + (" (SIGINT)" if exit_.get("type") == "KeyboardInterrupt" else ""))
    if exit_.get("reason") == "signal":
        return f"ended early: stopped by {exit_.get('signal')}"
    return None


def _masked(values: np.ndarray, mask: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.ascontiguousarray(values, dtype=np.int64), np.ascontiguousarray(mask, dtype=bool))


def _result(path: str, state: _State, cols: _Cols, kind: str, warnings: list[str], parser: str) -> SourceData:
    n = cols.n
    timelogger = kind == "timelogger"
    header = state.header or {}

    # rows of DFTracer's own bookkeeping never reach here (both parsers route them to meta)
    classes = [_classify(str(c), timelogger) for c in cols.cat.categories]
    layer = _recode(cols.cat, lambda c: _classify(str(c), timelogger)[0])
    if timelogger and header.get("layer") == "noise":  # a `timelogger run --noise` generator (docs/noise.md)
        layer = _constant("noise", n)
    cat = _recode(cols.cat, lambda c: _classify(str(c), timelogger)[1])

    # rank
    default_rank = checked_int(header, "rank", 0, MAX_RANKS - 1, path, warnings) if timelogger else None
    if default_rank is None:
        from . import rank_from_name  # the one file-name rank rule, shared with the other readers

        default_rank = rank_from_name(path)
    rvals, rmask = cols.ints["rank"]
    rank = np.where(rmask, -1 if default_rank is None else default_rank, rvals).astype(np.int64)

    # host
    if timelogger:
        host = _constant(_as_str(header.get("hostname")), n)
    else:
        hosts = state.maps["HH"]
        host = _recode(cols.strs["hhash"], lambda h: hosts.get(h, h))
        if len(set(hosts.values())) == 1:
            host = _fill(host, _constant(next(iter(hosts.values())), n))

    # file
    files = state.maps["FH"]
    file_ = _fill(_recode(cols.strs["fhash"], lambda h: files.get(h, h)), _fill(cols.strs["file"], cols.strs["fname"]))

    # bytes: explicit args.bytes, else ret of read/write calls
    bvals, bmask = cols.ints["bytes"]
    ret, ret_missing = cols.ints["ret"]
    size, size_missing = cols.ints["size"]
    name_codes = np.asarray(cols.name.codes, dtype=np.int64)
    is_rw = np.array([c in RW_CALLS for c in cols.name.categories] + [False], dtype=bool)[name_codes]
    is_item = np.array([c in ITEM_CALLS for c in cols.name.categories] + [False], dtype=bool)[name_codes]
    from_ret = is_rw & ~ret_missing & (ret >= 0)
    ret_bytes = np.where(is_item & ~size_missing, ret * size, ret)
    byte_vals = np.where(bmask, ret_bytes, bvals)
    byte_mask = bmask & ~from_ret

    # args
    if not state.args:
        args_col = _strings(_constant(None, n))
    elif cols.extra is not None:
        keep_cats = np.array([k for _, _, k in classes] + [None], dtype=object)[np.asarray(cols.cat.codes, dtype=np.int64)] if n else []
        args_col = []
        for extra, orig in zip(cols.extra, keep_cats):
            if orig is not None:
                extra = dict(extra or {}, cat=orig)
            args_col.append(json.dumps(extra, default=_json_default) if extra else None)
    else:
        texts = {k: json.dumps({"cat": k}) for _, _, k in classes if k is not None}
        args_col = _strings(_recode(cols.cat, lambda c: texts.get(_classify(str(c), timelogger)[2])))

    if not timelogger and n:
        process = np.array([c in PROCESS_CALLS for c in cols.name.categories] + [False],
                           dtype=bool)[np.asarray(cols.name.codes, dtype=np.int64)]
        if process.any():
            cat = cat.add_categories(["other"]) if "other" not in cat.categories else cat.copy()
            cat[process] = "other"
        cat = _ai_cats(cols, layer, cat)
    frame = to_frame(
        {
            "layer": layer,
            "cat": cat,
            "name": cols.name,
            "rank": rank,
            "pid": cols.pid,
            "tid": cols.tid,
            "host": host,
            "start_ns": cols.ts,
            "dur_ns": cols.dur,
            "bytes": _masked(byte_vals, byte_mask),
            "offset": _masked(*cols.ints["offset"]),
            "file": file_,
            "epoch": _masked(*(cols.ints["epoch"] if timelogger else _epoch_windows(cols, cols.ints["epoch"]))),
            "step": _masked(*cols.ints["step"]),
            "args": args_col if n else None,
        },
        owned=True,  # every column built here for this frame
    )
    frame_pids = pd.unique(cols.pid).tolist() if n else []  # hashed, not sorted: sorted below
    pids = sorted(set(int(p) for p in frame_pids) | state.meta_pids)
    meta: dict = {
        "kind": kind,
        "parser": parser,
        "events": n,
        "pids": pids,
        "pid": pids[0] if len(pids) == 1 else None,
        "rank": default_rank,
        "truncated_last_line": state.truncated_last_line,
    }
    if state.ignored:
        meta["ignored_events"] = dict(state.ignored)
    if state.no_ts:
        meta["events_without_ts"] = state.no_ts
        warnings.append(f"{path}: {state.no_ts} complete events without a numeric ts skipped")
    if state.thread_names:
        meta["thread_names"] = state.thread_names
    if timelogger:
        anchors = [a for a in (header.get("anchor"), (state.close or {}).get("anchor")) if a]
        meta.update(
            {
                "world_size": checked_int(header, "world_size", 1, MAX_RANKS, path, warnings),
                "hostname": header.get("hostname"),
                "host": header.get("hostname"),
                "pid": _as_int(header.get("pid")) if header.get("pid") is not None else meta["pid"],
                "ppid": header.get("ppid"),
                "versions": header.get("versions"),
                "argv": header.get("argv"),
                "header": header,
                "anchors": anchors,
                "clock_sync": state.clock_sync[-1] if state.clock_sync else None,
                "clock_offset_ns": checked_int(state.clock_sync[-1], "clock_offset_ns", -_MAX_OFFSET_NS,
                                               _MAX_OFFSET_NS, path, warnings, "clock_sync ") if state.clock_sync else None,
                "tf_anchors": state.tf_profile,
                "close": state.close,
                "dropped": state.dropped,
                "ended_early": _ended_early(state.close),
            }
        )
        if state.write_failed:
            meta["ended_early"] = (f"lost intervals: its writes failed ({state.write_failed}: disk full or a "
                                   f"file-size limit?), {state.dropped:,} intervals never reached the file")
        warnings += [f"{path}: {x}" for x in state.evidence_missing]
        if state.dropped:
            warnings.append(f"{path}: {state.dropped} intervals dropped by the writer (it could not keep up, or a "
                            "write failed); the app layer is incomplete")
    else:
        hosts = sorted(set(state.maps["HH"].values()))
        meta.update(
            {
                "host": hosts[0] if len(hosts) == 1 else None,
                "hosts": hosts,
                "time_metric": state.time_metric,
                "files": dict(state.maps["FH"]),
                "strings": dict(state.maps["SH"]),
                "dftracer_events": list(state.bookkeeping),
            }
        )
    if state.process_names:
        meta["process_names"] = state.process_names
    if state.other_meta:
        meta["other_metadata"] = dict(state.other_meta)
    return SourceData(path=path, kind=kind, frame=frame, meta=meta, warnings=warnings)
