"""Reader for ``.pfw`` / ``.pfw.gz`` traces: TimeLogger app files and DFTracer traces.

Both use DFTracer's line layout (see ``docs/wire-format.md``): an optional ``[`` line, then one JSON
object per line, optional trailing commas, an optional closing ``]``. ``.pfw.gz`` files are
concatenated gzip members (DFTracer compresses in chunks).

The package, in the order a file goes through it: :mod:`.options` (the parser chain and the limits, one
:class:`ParseOptions` handed down from :func:`read`), :mod:`.text` (gzip members, blocks, where the event lines
are), :mod:`.tables` (the scanner, DuckDB, pyarrow) or :mod:`.lines` (the line parser) into :mod:`.events`
(metadata and columns), :mod:`.validate` (impossible values, corrupt timestamps), :mod:`.semantics` (what
DFTracer's, pydftracer's and DLIO's events mean), :mod:`.frame` (the frame) and :mod:`.meta` (the file's typed
metadata); :mod:`.reader` holds the entry points.

What the reader does with each event
-------------------------------------
* Complete events (``"ph": "X"`` or DFTracer's integer ``1``) become frame rows. ``ts``/``dur`` are
  microseconds (DFTracer's ``CM``/``time_metric`` metadata may say ``NS``) and are converted to int64
  ns exactly (no float round trip; sub-ns digits are truncated).
* Metadata events (``"ph": "M"`` or ``4``) and DFTracer's own bookkeeping events (``cat``
  ``dftracer``: ``start``/``end``) go to :attr:`SourceData.meta` (:class:`TimeLoggerMeta` or
  :class:`DFTracerMeta`). DFTracer's hash tables ``HH`` (host), ``FH`` (file) and ``SH`` (string) resolve
  ``args.hhash``/``args.fhash`` into the ``host`` and ``file`` columns.
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
  else ``-1`` (unknown; the merger maps such files to ranks by pid, see the metadata's ``pids``).
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

Limits keep memory bounded on hostile input (docs/frame.md, "Limits"; :class:`ParseOptions`): an event line
longer than :data:`MAX_LINE_BYTES`, or an event whose name, category or file name is longer than
:data:`MAX_FIELD_CHARS`, is skipped with a ``file:line`` warning; a gzip file whose text would exceed
:data:`MAX_TEXT_RATIO` times its size (and :data:`MIN_TEXT_LIMIT`) is a gzip bomb: a
:class:`~trace_merge.errors.TraceInputError` naming it, raised before that text is held.

Speed
-----
Event lines are parsed by the native scanner (``trace_merge/readers/_pfwscan.c``), else DuckDB's ``from_json``
(C++; one thread per file, files are read side by side), one JSON document per line, into a fixed schema;
integers come out as their JSON text and are cast strictly, so that a value DuckDB would cast leniently
(``1000.5``, ``"12"``, ``true``) sends the body to ``pyarrow.json`` with the same schema (exact decimals), as does
a missing ``duckdb`` or ``TRACE_MERGE_PARSER=pyarrow`` (:data:`PARSER_ENV`). The Python line parser is the
fallback whenever those fail (type conflicts, garbage lines, unusual layouts) and is the only path for TimeLogger
files, which keep their free-form ``args``. All produce the same columns for a file they can read (tested).
:func:`read` releases the GIL for decompression and parsing, so callers can read several files in a thread pool.
Why these engines, and why not DuckDB's own reader of ``.gz`` files: ``docs/partitioned.md``.
"""
from __future__ import annotations

from ...errors import TraceInputError
from .events import INT_ARGS, STR_ARGS
from .meta import DFTracerMeta, PfwMeta, TimeLoggerMeta
from .options import (
    DUCKDB_MIN_BYTES,
    MAX_FIELD_CHARS,
    MAX_LINE_BYTES,
    MAX_TEXT_RATIO,
    MIN_TEXT_LIMIT,
    PARSER_ENV,
    ParseOptions,
)
from .reader import Batch, read, read_batch, read_blocks
from .semantics import AI_CAT_RULES, EPOCH_EVENTS, ITEM_CALLS, PROCESS_CALLS, RW_CALLS, ai_cat
from .tables import event_schema, event_table
from .text import GZIP_RATIO, STREAM_BLOCK_BYTES, arrow_input, body_span
from .validate import OUTLIER_GAP_NS, OUTLIER_MAX_ROWS, OUTLIER_MAX_SHARE

__all__ = [
    "AI_CAT_RULES", "DUCKDB_MIN_BYTES", "EPOCH_EVENTS", "GZIP_RATIO", "INT_ARGS", "ITEM_CALLS", "MAX_FIELD_CHARS",
    "MAX_LINE_BYTES", "MAX_TEXT_RATIO", "MIN_TEXT_LIMIT", "OUTLIER_GAP_NS", "OUTLIER_MAX_ROWS", "OUTLIER_MAX_SHARE",
    "PARSER_ENV", "PROCESS_CALLS", "RW_CALLS", "STREAM_BLOCK_BYTES", "STR_ARGS", "DFTracerMeta", "ParseOptions",
    "PfwMeta", "TimeLoggerMeta", "TraceInputError", "ai_cat", "arrow_input", "body_span", "event_schema",
    "event_table", "Batch", "read", "read_batch", "read_blocks",
]
