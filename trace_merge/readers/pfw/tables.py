"""The table parsers: the native scanner (``_pfwscan.c``), DuckDB's ``from_json`` and ``pyarrow.json``, each reading
a body of event lines into one fixed schema, and the complete events of that table as :class:`~.events.Cols`.

Each reads a body exactly or declines it (the next one then reads it); what none can read goes to the line parser.
Why this order, and what each declines: docs/partitioned.md, "The parsing engine".
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import pandas as pd

from ...schema import MAX_EPOCH_NS
from .events import BOOKKEEPING_CAT, INT_ARGS, STR_ARGS, Cols, State
from .options import ParseOptions

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

log = logging.getLogger(__name__)

_pfwscan: Optional[ModuleType]
try:  # the native scanner (optional: built where there is a C compiler)
    from .. import _pfwscan
except ImportError:
    _pfwscan = None

_ARROW_BLOCK = 1 << 22
#: Metadata names whose ``args`` the table parsers do not keep (TimeLogger's); seeing one sends the file to the
#: line parser.
_RICH_METADATA = frozenset({"timelogger", "clock_sync", "tf_profile", "timelogger_close", "timelogger_dropped",
                            "timelogger_lost", "tf_profile_missed", "timelogger_hooks"})
#: string fields the scanner hands over dictionary-encoded (the reader makes categories of them: encoding while
#: scanning saves Arrow's dictionary_encode)
_ENCODED = frozenset({"name", "cat"})
_ENCODED_ARGS = frozenset(STR_ARGS)


def parse_table(body: "bytes | memoryview", state: State, options: ParseOptions) -> "tuple[Optional[Cols], str]":
    """The complete events of ``body`` read by the first table parser that can, and which one (``scan``,
    ``duckdb`` or ``arrow``); ``None`` when none can, or when the line parser must (it names the lines of absurd
    names or values).

    Metadata rows come out of the same parse (their ``args.name``/``args.value`` are in the
    schema), so the buffer is scanned once.
    """
    import pyarrow as pa

    if not len(body):
        return Cols.empty(), "arrow"
    try:
        table, ph_is_str, engine = event_table(body, options)
        found = table_columns([table], ph_is_str, [state], options)
        return (found[0] if found is not None else None), engine
    except (pa.ArrowException, ValueError) as err:  # type conflicts, garbage, >2 GiB string columns...
        log.debug("%s: pyarrow.json cannot read this file (%s); using the line parser", state.path, err)
        return None, "lines"


def event_schema(ph_is_str: bool, number: "pa.DataType") -> "pa.Schema":
    """The fields the table parsers read of each event line, ``ts`` and ``dur`` as ``number``."""
    import pyarrow as pa

    args_type = pa.struct(
        [(k, pa.int64()) for k in INT_ARGS]
        + [(k, pa.string()) for k in STR_ARGS]
        + [("name", pa.string()), ("value", pa.string())]
    )
    return pa.schema(
        [
            ("name", pa.string()), ("cat", pa.string()), ("ph", pa.string() if ph_is_str else pa.int64()),
            ("pid", pa.int64()), ("tid", pa.int64()),
            ("ts", number), ("dur", number), ("args", args_type),
        ]
    )


def ph_is_string(body: "bytes | memoryview") -> bool:
    """Whether the lines' ``ph`` is a string (``"X"``) rather than DFTracer's integer, from the first one."""
    head = bytes(body[:65536])
    at = head.find(b'"ph":')
    return at != -1 and head[at + 5 : at + 7].lstrip()[:1] == b'"'


def event_table(body: "bytes | memoryview", options: ParseOptions) -> "tuple[pa.Table, bool, str]":
    """The event lines as a table of the reader's fixed schema, whether ``ph`` is a string, and the engine."""
    import pyarrow as pa
    import pyarrow.json as pj

    ph_is_str = ph_is_string(body)

    def parse(number: "pa.DataType") -> "pa.Table":
        return pj.read_json(
            pa.py_buffer(body),
            read_options=pj.ReadOptions(block_size=_ARROW_BLOCK),
            parse_options=pj.ParseOptions(explicit_schema=event_schema(ph_is_str, number),
                                          unexpected_field_behavior="ignore"),
        )

    # DFTracer writes integer ts/dur: the native scanner reads those fastest, then DuckDB, then pyarrow
    # (docs/partitioned.md). What one cannot read exactly goes to the next: pyarrow last, int64 first (faster than
    # exact decimals, no cast), then decimals for fractional or huge values.
    integers = event_schema(ph_is_str, pa.int64())
    table = scanned_table(body, integers, options)
    if table is not None:
        return table, ph_is_str, "scan"
    table = duckdb_table(body, integers, options)
    if table is not None:
        return table, ph_is_str, "duckdb"
    try:
        return parse(pa.int64()), ph_is_str, "arrow"
    except pa.ArrowInvalid:
        return parse(pa.decimal128(38, 9)), ph_is_str, "arrow"


def table_columns(tables: "Sequence[pa.Table]", ph_is_str: bool, states: "Sequence[State]", options: ParseOptions,
                  sizes: "Optional[Sequence[int]]" = None) -> "Optional[tuple[Cols, list[int]]]":
    """The complete events of parsed tables of one or more files (``states``: each file's; ``sizes``: each file's
    rows of the tables, one after the other, by default a table each) as one :class:`Cols`, file after file, and how
    many events each file gave; ``None`` when the line parser must read them instead (it names the lines of absurd
    names or values), or, for several files, when their time units differ (each is then read alone)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sizes = [t.num_rows for t in tables] if sizes is None else sizes
    table = (tables[0] if len(tables) == 1 else pa.concat_tables(tables)).combine_chunks()  # dictionaries united
    if table.num_rows == 0:
        return None
    owner = np.repeat(np.arange(len(states)), sizes) if len(states) > 1 else np.zeros(table.num_rows, np.intp)

    def col(tbl: "pa.Table", name: str) -> "pa.Array":
        return tbl.column(name).chunk(0) if tbl.num_rows else pa.array([], tbl.schema.field(name).type)

    def rows_of(mask: "pa.Array") -> np.ndarray:
        return np.flatnonzero(mask.to_numpy(zero_copy_only=False))

    ph = col(table, "ph")
    complete_value, meta_value = ("X", "M") if ph_is_str else (1, 4)
    is_meta = pc.fill_null(pc.equal(ph, meta_value), False)
    is_complete = pc.fill_null(pc.equal(ph, complete_value), False)
    is_book = pc.and_(is_complete, pc.fill_null(pc.equal(col(table, "cat"), BOOKKEEPING_CAT), False))
    special = pc.or_(is_meta, is_book)
    if pc.any(special).as_py():
        taken = table.filter(special).select(["name", "cat", "ph", "pid", "tid", "args"]).to_pylist()
        for at, row in zip(rows_of(special), taken):
            if row["ph"] == meta_value and row["name"] in _RICH_METADATA:
                return None
            args = {k: row["args"][k] for k in ("name", "value")} if row["args"] else None
            states[owner[at]].take_special(dict(row, args=args))
    events = pc.and_(is_complete, pc.invert(is_book))
    other = pc.invert(pc.or_(events, special))
    if pc.any(other).as_py():  # counted per value, each file's in the order its values first appear
        found = pc.dictionary_encode(pc.filter(ph, other), null_encoding="encode")
        values, codes = found.dictionary.to_pylist(), found.indices.to_numpy(zero_copy_only=False)
        owners = owner[rows_of(other)]
        for o in np.unique(owners):
            mine = codes[owners == o]
            seen, first = np.unique(mine, return_index=True)
            counts = np.bincount(mine, minlength=len(values))
            for code in seen[np.argsort(first)]:
                states[o].ignored[str(values[code])] += int(counts[code])
    ts = col(table, "ts")
    if pc.any(pc.and_(events, ts.is_null())).as_py():
        no_ts = np.bincount(owner[rows_of(pc.and_(events, ts.is_null()))], minlength=len(states))
        for state, count in zip(states, no_ts):
            state.no_ts += int(count)
        events = pc.and_(events, ts.is_valid())
    keep = events.to_numpy(zero_copy_only=False)
    kept = np.bincount(owner[keep], minlength=len(states)).tolist()
    if keep.all():
        keep = slice(None)  # the usual case: no copies
    elif not keep.any():
        return Cols.empty(), kept
    scales = {state.time_scale for state in states}
    if len(scales) > 1:
        return None

    scale = scales.pop()
    ts_ns = _to_ns(ts, scale)
    dur_ns = _to_ns(col(table, "dur"), scale)
    if ts_ns is None or dur_ns is None:
        return None
    args = col(table, "args")
    fields = dict(zip((f.name for f in args.type), args.flatten()))
    if any(_longer_than(arr, options.max_field_chars)
           for arr in (col(table, "name"), col(table, "cat"), *(fields[k] for k in STR_ARGS))):
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

    return Cols(
        name=categorical(col(table, "name"), ""),
        cat=categorical(col(table, "cat"), ""),
        pid=ints(col(table, "pid"))[0],
        tid=ints(col(table, "tid"))[0],
        ts=ts_ns[keep],
        dur=dur_ns[keep],
        strs={k: categorical(fields[k]) for k in STR_ARGS},
        ints={k: ints(fields[k]) for k in INT_ARGS},
    ), kept


def scanned_table(body: "bytes | memoryview", schema: "pa.Schema", options: ParseOptions) -> "Optional[pa.Table]":
    """The event lines of ``body`` in ``schema``, read by the native scanner (``_pfwscan.c``), or ``None`` where
    it declines: anything it cannot read exactly as DuckDB and pyarrow would (an escaped string, a wanted field of
    another JSON type, a number that is not a plain int64 integer, a line that is not one JSON object...), and
    where :attr:`ParseOptions.scanner` is off or the scanner was not compiled (no C compiler at install).

    The scanner validates every line as JSON and keeps only the schema's fields, as Arrow buffers wrapped here
    without a copy; the strings of :data:`_ENCODED` and :data:`_ENCODED_ARGS` come dictionary-encoded (their
    decoded table equals DuckDB's).
    """
    if not options.scanner or _pfwscan is None:
        return None
    import pyarrow as pa

    top = [f for f in schema if f.name != "args"]
    args_type = schema.field("args").type

    def wanted(fields: "list[pa.Field]", encoded: "frozenset[str]") -> "tuple[tuple[bytes, int], ...]":
        return tuple((f.name.encode(), (2 if f.name in encoded else 1) if pa.types.is_string(f.type) else 0)
                     for f in fields)

    scanned = _pfwscan.scan(body, wanted(top, _ENCODED), wanted(list(args_type), _ENCODED_ARGS),
                            options.max_line_bytes)
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


@functools.lru_cache(maxsize=None)
def _duckdb() -> Optional[ModuleType]:
    """The ``duckdb`` module, None where it is not installed (looked for once)."""
    try:
        import duckdb
    except ImportError:
        return None
    return duckdb


def duckdb_table(body: "bytes | memoryview", schema: "pa.Schema", options: ParseOptions) -> "Optional[pa.Table]":
    """The event lines of ``body`` parsed by DuckDB into ``schema``, or ``None`` when DuckDB cannot read them
    exactly as pyarrow would.

    Each line is one JSON document (DuckDB's own newline-delimited reader lets a broken line take the next one
    with it). DuckDB casts leniently (``1000.5`` to 1000, ``"12"`` to 12), so integers come out as their JSON
    text and Arrow casts that strictly: anything but a plain integer refuses the whole body, which pyarrow then
    reads. A line DuckDB cannot parse, an empty or over-long line or one not starting with ``{`` refuses it too,
    and so does a body of less than :attr:`ParseOptions.duckdb_min_bytes`, or :attr:`ParseOptions.duckdb` off, or
    no ``duckdb`` installed.
    """
    if not options.duckdb or len(body) < options.duckdb_min_bytes:
        return None
    found = _duckdb()
    if found is None:
        return None
    import pyarrow as pa

    text = np.frombuffer(body, np.uint8)
    ends = np.flatnonzero(text == 10) + 1
    if not len(ends) or ends[-1] != len(text):
        ends = np.append(ends, len(text))
    offsets = np.concatenate(([0], ends)).astype(np.int64, copy=False)
    if np.diff(offsets).max() > options.max_line_bytes or (text[offsets[:-1]] != ord("{")).any():
        return None
    lines = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(body))

    def as_text(kind: "pa.DataType") -> str:
        if pa.types.is_struct(kind):
            return "{" + ",".join(f'"{f.name}":{as_text(f.type)}' for f in kind) + "}"
        return '"VARCHAR"' if pa.types.is_string(kind) else '"JSON"'

    con = _duckdb_connection(found)
    try:
        con.register("lines", pa.table({"line": lines}))
        parsed = con.sql(f"SELECT unnest(from_json(line, '{as_text(pa.struct(list(schema)))}')) FROM lines"
                         ).fetch_arrow_table()
        return parsed.cast(schema)
    except (found.Error, pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError) as err:  # invalid UTF-8
        log.debug("DuckDB cannot read these lines exactly (%s); using pyarrow", err)
        return None
    finally:
        con.unregister("lines")


_duckdb_local = threading.local()


def _duckdb_connection(module: ModuleType) -> "duckdb.DuckDBPyConnection":
    """This thread's DuckDB connection, opened on its first block. One per thread and process (a connection is not
    shared between threads, nor inherited by a forked worker); kept, because a fresh one per block made a file's
    read slower (its first query in a connection is the slow one). One thread: files are parsed side by side (the
    engine's workers), and two DuckDB threads per file made a merge slower (docs/partitioned.md)."""
    con = getattr(_duckdb_local, "con", None)
    if con is None or _duckdb_local.pid != os.getpid():
        con = _duckdb_local.con = module.connect(config={"threads": 1})
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
    decoded (``utf8_length`` of every name was a noticeable share of a file's read)."""
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
