"""The reader's entry points: :func:`read` (a whole file) and :func:`read_blocks` (a large DFTracer trace block by
block), and the parser chain each body of event lines goes through."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, TypeVar

import pandas as pd

from ...errors import TraceInputError
from ...schema import SourceData, empty_counters
from ...threads import ahead
from .events import HASH_TABLES, Cols, State
from .frame import FileRows, batch_frame, source_data
from .lines import parse_lines
from .options import ParseOptions
from .tables import event_schema, parse_table, ph_is_string, scanned_table, table_columns
from .text import GZIP_RATIO, STREAM_BLOCK_BYTES, arrow_input, body_span, load, looks_timelogger, newlines, text_blocks
from .validate import drop_outliers, outliers

if TYPE_CHECKING:
    import pyarrow as pa

_T = TypeVar("_T")


def read(path: "str | os.PathLike[str]", args: bool = True, options: Optional[ParseOptions] = None) -> SourceData:
    """Read one TimeLogger or DFTracer ``.pfw``/``.pfw.gz`` file.

    Parameters
    ----------
    path
        The trace file. Gzip is detected by its magic bytes.
    args
        False: the ``args`` column is left empty (missing everywhere), for a caller that does not keep it (a
        summary): building its strings is a noticeable share of reading a DFTracer trace.
    options
        The parser chain and limits; by default :meth:`ParseOptions.from_env`.

    Returns
    -------
    SourceData
        ``kind`` is ``"timelogger"`` or ``"dftracer"``; ``frame`` holds the complete events in the
        schema of :mod:`trace_merge.schema` (``start_ns``/``end_ns`` absolute epoch ns on this
        source's own clock); ``meta`` is a :class:`~.meta.TimeLoggerMeta` or :class:`~.meta.DFTracerMeta`
        (``rank``, ``pids``, ``host``, and for TimeLogger files ``world_size``, ``clock_offset_ns``, ``anchors``,
        ``tf_anchors``: what alignment needs).

    Raises
    ------
    TraceInputError
        The file cannot be read, is not valid gzip, or holds no JSON event lines.
    """
    path = os.fspath(path)
    options = options if options is not None else ParseOptions.from_env()
    warnings: list[str] = []
    raw = load(path, warnings, options)
    state = State(path, args=args)
    cols, parser = _parse_body(raw, state, warnings, options)
    del raw  # the decompressed text (several times the file): freed before the frame is built (files read in parallel)
    return _finish(path, state, cols, parser, warnings)


def _parse_body(raw: "bytes | bytearray", state: State, warnings: list[str], options: ParseOptions,
                line_offset: int = 0) -> "tuple[Optional[Cols], str]":
    """The complete events of ``raw`` (a whole file's text, or a block of whole lines of it) and the parser used;
    ``(None, "none")`` when it holds no events."""
    path = state.path
    span = body_span(raw)
    if span is None:
        return None, "none"
    start, end, first_lineno, state.truncated_last_line = span
    if start >= end:
        return None, "bracket"
    cols: Optional[Cols] = None
    parser = "lines"
    if not looks_timelogger(raw, start):
        cols, engine = parse_table(arrow_input(raw, start, end), state, options)
        if cols is not None:
            parser = engine
        else:
            state.reset()
    if cols is not None and outliers(cols.ts).any():
        cols = None  # rare: parse again line by line, so that the warning can name the lines
        state.reset()
        parser = "lines"
    if cols is None:
        cols = parse_lines(raw[start:end], first_lineno + line_offset, state, warnings, options)
        cols = drop_outliers(cols, path, warnings)
    return cols, parser


def _finish(path: str, state: State, cols: Optional[Cols], parser: str, warnings: list[str]) -> SourceData:
    """The :class:`SourceData` of what :func:`_parse_body` found (the bad-input rules of the package docstring)."""
    if cols is None:
        if not any("limit" in w and "event skipped" in w for w in warnings):  # its lines were said too long
            warnings.append(f"{path}: empty file (no events)" if parser == "none"
                            else f"{path}: no events (nothing after the opening bracket)")
        return source_data(path, state, Cols.empty(), "dftracer", warnings, parser="none")
    kind = "timelogger" if state.is_timelogger else "dftracer"
    if cols.n == 0 and not state.saw_any:
        raise TraceInputError(path, "not a .pfw trace: no line is a JSON trace event")
    return source_data(path, state, cols, kind, warnings, parser)


@dataclass
class Batch:
    """Small DFTracer files read together (:func:`read_batch`): one frame of their rows, file after file."""

    frame: pd.DataFrame
    files: list[SourceData]  # each file's metadata and warnings, its frame left empty
    rows: list[int]  # each file's rows in :attr:`frame`, in the order of :attr:`files`


def read_batch(paths: Sequence[str], args: bool = True, options: Optional[ParseOptions] = None
               ) -> "tuple[Optional[Batch], list[str]]":
    """Read small DFTracer files together: each one's text is parsed by the table parsers on its own, then their
    tables become one frame in one pass (a 1,000-rank job's small files each paid the frame's fixed costs).

    Returns the batch of the files read so (``None``: none) and the paths left to :func:`read`, one at a time:
    those with anything for a warning (a damaged or truncated file, a long line), those the table parsers decline,
    TimeLogger files, and every file of a batch whose hash tables disagree or whose timestamps need a look line by
    line. The batch's rows and metadata are those :func:`read` gives each file.
    """
    options = options if options is not None else ParseOptions.from_env()
    alone: list[str] = []
    bodies: list[tuple[str, "bytes | memoryview"]] = []
    ph_is_str = False
    for path in paths:
        warnings: list[str] = []
        try:
            raw = load(path, warnings, options)
        except TraceInputError:
            alone.append(path)  # read alone, its error said there
            continue
        span = body_span(raw)
        if warnings or span is None or span[0] >= span[1] or span[3] or looks_timelogger(raw, span[0]):
            alone.append(path)
            continue
        body = arrow_input(raw, span[0], span[1])
        if bodies and ph_is_string(body) != ph_is_str:  # the batch's lines are read with the first file's ``ph``
            alone.append(path)
            continue
        ph_is_str = ph_is_str if bodies else ph_is_string(body)
        bodies.append((path, body))
    # one scan of their lines together (a file's lines are its rows: one per line); where it declines, each
    # file's own, to find the ones it declines
    joined = _scan(b"\n".join(b for _, b in bodies), ph_is_str, options) if len(bodies) > 1 else None
    if joined is not None:
        tables, sizes = [joined], [newlines(b) + 1 for _, b in bodies]  # no newline after a body's last line
    else:
        scanned = [(path, _scan(b, ph_is_str, options)) for path, b in bodies]
        alone += [path for path, t in scanned if t is None]
        bodies = [(path, b) for (path, b), (_, t) in zip(bodies, scanned) if t is not None]
        tables = [t for _, t in scanned if t is not None]
        sizes = [t.num_rows for t in tables]
    if not bodies:
        return None, alone
    states = [State(path, args=args) for path, _ in bodies]
    found = table_columns(tables, ph_is_str, states, options, sizes)
    built = None
    if found is not None:
        cols, rows = found
        bounds = [0, *itertools.accumulate(rows)]
        if not any(outliers(cols.ts[lo:hi]).any() for lo, hi in zip(bounds[:-1], bounds[1:])):
            alone += [path for (path, _), n in zip(bodies, rows) if not n]  # what read says of a file of none
            files = [FileRows(path, state, [], n) for (path, _), state, n in zip(bodies, states, rows) if n]
            built = batch_frame(files, cols, "scan") if files else None
    if built is None:
        return None, alone + [path for path, _ in bodies if path not in alone]
    frame, metas = built
    none, no_counters = frame.iloc[:0], empty_counters()  # shared: each file's rows are in the batch's frame
    return Batch(frame, [SourceData(f.path, "dftracer", none, no_counters, meta=m, warnings=f.warnings)
                         for f, m in zip(files, metas)], [f.rows for f in files]), alone


def _scan(body: "bytes | memoryview", ph_is_str: bool, options: ParseOptions) -> "Optional[pa.Table]":
    """The event lines read by the native scanner (``None`` where it declines)."""
    import pyarrow as pa

    return scanned_table(body, event_schema(ph_is_str, pa.int64()), options)


def read_blocks(path: "str | os.PathLike[str]", block_bytes: int = STREAM_BLOCK_BYTES, args: bool = True,
                options: Optional[ParseOptions] = None) -> Iterator[SourceData]:
    """Read a DFTracer ``.pfw[.gz]`` file in blocks of about ``block_bytes`` of text: memory bounded by the block,
    not the file (a 1,000-node job's traces hold billions of events).

    Yields one :class:`SourceData` per block of whole lines. Hash tables (``HH``/``FH``/``SH``) accumulate over
    the blocks, so a block's ``host``/``file`` are resolved with every record seen so far; one defined only later
    stays a hash, which the merge resolves with the whole run's tables (:func:`trace_merge.partitioned.merge_rank`).
    The last block's ``meta`` holds the file's tables. Corrupt-timestamp outliers are judged per block. A
    TimeLogger file, a file small enough for one block, or damaged gzip data is read whole by :func:`read` (one
    block), so its warnings are exactly :func:`read`'s.
    """
    path = os.fspath(path)
    options = options if options is not None else ParseOptions.from_env()
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(2)
    except OSError as err:
        raise TraceInputError(path, f"cannot read: {err.strerror or err}") from None
    gz = head == b"\x1f\x8b"
    if size * (GZIP_RATIO if gz else 1) <= 2 * block_bytes:
        yield read(path, args, options)  # one block anyway
        return
    found: list[str] = []  # what the decompression finds (a corrupt member, a truncated end), taken as it comes
    # the next block's text is decompressed while this one is parsed (where a second thread may run: ahead), each
    # with the warnings that came with it
    blocks = ahead((at, text, _taken(found)) for at, text in text_blocks(path, gz, block_bytes, found, options))
    line_offset, first, said = next(blocks, (0, b"", []))
    span = body_span(first)
    if span is None or looks_timelogger(first, span[0]):
        blocks.close()  # no block read ahead beside the whole file's
        yield read(path, args, options)  # TimeLogger files keep free-form args: the line parser, whole
        return
    known: dict[str, dict[str, str]] = {k: {} for k in HASH_TABLES}
    time_metric = "US"
    block: Optional[bytes] = first
    del first  # one block's text held here (and the next one's, read ahead)
    while block is not None:
        warnings = said
        state = State(path, known, time_metric, args)
        cols, parser = _parse_body(block, state, warnings, options, line_offset)
        known, time_metric = state.maps, state.time_metric
        # the block's frame is built, and its text and parsed columns let go, before the next block is read
        out = source_data(path, state, cols if cols is not None else Cols.empty(), "dftracer", warnings,
                          parser if cols is not None else "none") if cols is not None or warnings else None
        block = cols = None
        line_offset, block, said = next(blocks, (0, None, []))
        if block is None and found:  # the stream's last words (a truncated end) go with its last output
            out = out or source_data(path, state, Cols.empty(), "dftracer", [], "none")
            out.warnings.extend(_taken(found))
        if out is not None:
            yield out
        out = None  # not kept while the next block is parsed


def _taken(found: list[_T]) -> list[_T]:
    """The items of ``found`` (emptied: the list stays the one its producer appends to)."""
    out = list(found)
    found.clear()
    return out
