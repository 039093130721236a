"""The pieces of a merge (:mod:`trace_merge.partitioned`): a source's rows of one rank (:class:`Piece`), spilled to
a file of their own (:func:`write_piece`, :func:`read_piece`) or kept in memory, whole or as a span of a frame that
several pieces share (small sources read in a batch: :func:`trace_merge.partitioned.ingest_batch`)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.errors import TraceInputError
from trace_merge.schema import FRAME_DTYPES
from trace_merge.sources import resolve_names

#: a spilled piece's file: this magic, the length of a JSON header (8 bytes, little-endian), the header (the rows, and
#: per column its kind, dtype, categories and where its buffers are, or its one value), then each column's buffers as
#: they are in memory. Faster to write and to read than Arrow IPC through pandas (docs/measurements.md#partitioned):
#: every piece of a summary is written once and read once, column by column. A piece lives only while its merge runs,
#: in the merge's own spill directory; nothing else reads it.
_PIECE_MAGIC = b"TMPIECE1"
_PIECE_ALIGN = 64


def write_piece(frame: pd.DataFrame, path: Path) -> None:
    """Spill ``frame`` (schema columns) to ``path`` (written beside it and renamed: never half a piece there)."""
    import pyarrow as pa

    columns: dict = {}
    buffers: list = []
    at = 0

    def place(data: Any) -> list:
        nonlocal at
        view = _bytes_of(np.ascontiguousarray(data)) if isinstance(data, np.ndarray) else data
        buffers.append((at, view))
        where = [at, len(view)]
        at += -(-len(view) // _PIECE_ALIGN) * _PIECE_ALIGN
        return where

    for name in frame.columns:
        column = frame[name]
        values = column.array
        if isinstance(values, pd.Categorical) and all(isinstance(c, str) for c in values.categories):
            columns[name] = {"kind": "category", "dtype": values.codes.dtype.str, "data": place(values.codes),
                             "categories": values.categories.tolist()}
        elif isinstance(values, pd.arrays.IntegerArray):
            columns[name] = {"kind": "masked", "dtype": values._data.dtype.str, "data": place(values._data),
                             "mask": place(values._mask)}
        elif isinstance(column.dtype, np.dtype) and column.dtype.kind in "iufb":
            data = column.to_numpy()
            if data.dtype.kind in "iu" and len(data) and (data == data[0]).all():
                # one value (a piece's rank, often its pid): no bytes to write and read
                columns[name] = {"kind": "constant", "dtype": data.dtype.str, "value": int(data[0])}
            else:
                columns[name] = {"kind": "array", "dtype": data.dtype.str, "data": place(data)}
        else:  # strings (args), anything else: one column of Arrow IPC
            sink = pa.BufferOutputStream()
            table = pa.table({name: pa.array(values, from_pandas=True)})
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            columns[name] = {"kind": "arrow", "data": place(memoryview(sink.getvalue()))}
    header = json.dumps({"rows": len(frame), "columns": columns}).encode()
    start = -(-(len(_PIECE_MAGIC) + 8 + len(header)) // _PIECE_ALIGN) * _PIECE_ALIGN
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(_PIECE_MAGIC + len(header).to_bytes(8, "little") + header)
        for offset, view in buffers:
            fh.seek(start + offset)
            fh.write(view)
        fh.truncate(start + at)
    os.replace(tmp, path)


def _piece_header(fh: Any, path: str) -> "tuple[dict, int]":
    """A piece file's header and where its buffers start."""
    head = fh.read(len(_PIECE_MAGIC) + 8)
    if head[:len(_PIECE_MAGIC)] != _PIECE_MAGIC:
        raise TraceInputError(path, "not a spilled piece of this merge (changed while the merge ran?)")
    size = int.from_bytes(head[len(_PIECE_MAGIC):], "little")
    try:
        header = json.loads(fh.read(size))
    except ValueError:  # cut short or overwritten (UnicodeDecodeError is one too)
        raise TraceInputError(path, "a spilled piece's header is damaged (changed while the merge ran?)") from None
    return header, -(-(len(_PIECE_MAGIC) + 8 + size) // _PIECE_ALIGN) * _PIECE_ALIGN


def _bytes_of(array: np.ndarray) -> memoryview:
    """A contiguous array's bytes, without a copy (numpy arrays are buffers; its stubs for 1.x do not say so)."""
    return memoryview(array).cast("B")  # type: ignore[arg-type]


def _read_into(fh: Any, start: int, where: list, dtype: "str | np.dtype | type", rows: int) -> np.ndarray:
    out = np.empty(rows, dtype=dtype)
    fh.seek(start + where[0])
    if fh.readinto(_bytes_of(out)) != where[1]:
        raise TraceInputError(fh.name, "a spilled piece cut short (changed while the merge ran?)")
    return out


def _piece_column(fh: Any, header: dict, start: int, name: str) -> pd.Series:
    """One column of an open piece file, with the schema's dtype."""
    spec, rows = header["columns"][name], header["rows"]
    kind = spec["kind"]
    if kind == "category":
        codes = _read_into(fh, start, spec["data"], spec["dtype"], rows)
        values: Any = pd.Categorical.from_codes(codes, pd.Index(spec["categories"], dtype=object), validate=False)
    elif kind == "masked":
        values = pd.arrays.IntegerArray(_read_into(fh, start, spec["data"], spec["dtype"], rows),
                                        _read_into(fh, start, spec["mask"], "|b1", rows))
    elif kind == "array":
        values = _read_into(fh, start, spec["data"], spec["dtype"], rows)
    elif kind == "constant":
        values = np.full(rows, spec["value"], dtype=spec["dtype"])
    else:
        import pyarrow as pa

        raw = _read_into(fh, start, spec["data"], np.uint8, spec["data"][1])
        values = pa.ipc.open_stream(pa.py_buffer(raw)).read_all().column(0).to_pandas()
    col = pd.Series(values, name=name, copy=False)
    dtype = FRAME_DTYPES.get(name)
    return col if dtype is None or str(col.dtype) == dtype else col.astype(dtype)


def read_piece(path: str, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """A spilled piece (``columns``: only those it has), each column with the schema's dtype."""
    with open(path, "rb") as fh:
        header, start = _piece_header(fh, path)
        names = [c for c in (header["columns"] if columns is None else columns) if c in header["columns"]]
        return pd.DataFrame({c: _piece_column(fh, header, start, c) for c in names}, columns=names, copy=False)


def read_piece_column(path: str, name: str) -> pd.Series:
    with open(path, "rb") as fh:
        header, start = _piece_header(fh, path)
        return _piece_column(fh, header, start, name)


@dataclass
class Piece:
    """Rows of one rank from one source: spilled to ``path``, or kept in memory (``frame``, the inline engine)."""

    path: Optional[str]
    source: str
    kind: str
    rank: int
    rows: int
    residual_flags: dict  # :func:`trace_merge.align.residual_flags` of the rows
    frame: Optional[pd.DataFrame] = None
    #: in memory only: the rows are ``frame``'s from ``span[0]`` to ``span[1]``, a frame that other pieces share (a
    #: batch of small sources read together, :func:`~trace_merge.partitioned.ingest_batch`); adjacent spans go on
    #: together (:func:`joined`)
    span: Optional[tuple[int, int]] = None

    def load(self) -> pd.DataFrame:
        if self.span is not None:
            return self.shared_frame().iloc[self.span[0]:self.span[1]]
        return self.frame if self.path is None else read_piece(self.path)

    def shared_frame(self) -> pd.DataFrame:
        assert self.frame is not None, "a span's frame is kept until the piece is discarded"
        return self.frame

    def resolved(self, names: dict) -> pd.DataFrame:
        """The piece's rows, DFTracer file hashes resolved by ``names`` (hash -> path)."""
        return resolve_names(self.load(), names) if self.kind == "dftracer" else self.load()

    def column(self, names: dict, name: str) -> pd.Series:
        """One column of :meth:`resolved` (read from the piece's file alone)."""
        col = (read_piece_column(self.path, name) if self.path is not None else self.load()[name]
               if self.span is None else self.shared_frame()[name].iloc[self.span[0]:self.span[1]])
        return resolve_names(col.to_frame(), names)[name] if name == "file" and self.kind == "dftracer" else col

    def store(self, frame: pd.DataFrame) -> None:
        """Replace the piece's rows."""
        self.span = None
        if self.path is None:
            self.frame = frame
        else:
            write_piece(frame, Path(self.path))

    def discard(self) -> None:
        self.frame = None
        if self.path is not None:
            Path(self.path).unlink(missing_ok=True)


def joined(pieces: "Sequence[Piece]") -> "list[Piece]":
    """``pieces`` with each run of adjacent spans of one shared frame as one piece (a batch's ranks merged together
    take its frame whole, not cut rank by rank and put together again)."""
    out: list[Piece] = []
    for p in pieces:
        last = out[-1] if out else None
        if (p.span is not None and last is not None and last.span is not None and last.frame is p.frame
                and last.span[1] == p.span[0] and last.kind == p.kind):
            out[-1] = replace(last, rows=last.rows + p.rows, span=(last.span[0], p.span[1]))
        else:
            out.append(p)
    return out
