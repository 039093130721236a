"""The frame of what the parsers found: columns in the schema of :mod:`trace_merge.schema`, built on category codes
(no string per row), with the file's metadata (:mod:`.meta`)."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np
import pandas as pd

from ...schema import MAX_RANKS, SIDE_LAYERS, SourceData, checked_int, to_frame
from .events import Cols, State, as_str, json_default
from .meta import PfwMeta, file_meta
from .semantics import ITEM_CALLS, PROCESS_CALLS, RW_CALLS, ai_cats, classify, epoch_windows, name_mask


def _recode(cat: pd.Categorical, func: Callable[[str], Optional[str]]) -> pd.Categorical:
    """Map every category through ``func`` (None -> missing), merging equal results."""
    mapped = [func(c) for c in cat.categories]
    uniq: dict[str, int] = {}
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
    pandas then checks only the categories, where its constructor checks every row."""
    values = pd.arrays.StringArray(np.array([*cat.categories, pd.NA], dtype=object))
    return values.take(np.asarray(cat.codes, dtype=np.intp))


def _constant(value: Optional[str], n: int) -> pd.Categorical:
    if value is None:
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int32), categories=pd.Index([], dtype=object))
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int32), categories=pd.Index([value], dtype=object))


def _masked(values: np.ndarray, mask: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.ascontiguousarray(values, dtype=np.int64), np.ascontiguousarray(mask, dtype=bool))


def _args_column(cols: Cols, state: State, timelogger: bool,
                 classes: "list[tuple[str, str, Optional[str]]]") -> "pd.arrays.StringArray | list[Optional[str]]":
    """The ``args`` column: TimeLogger's leftover args (and a mapped category's original) as JSON text; for
    DFTracer only the original ``cat`` where it was mapped (:func:`~.semantics.classify`); empty without args."""
    n = cols.n
    if not state.args:
        return _strings(_constant(None, n))
    if cols.extra is not None:
        keep_cats = np.array([k for _, _, k in classes] + [None], dtype=object)[np.asarray(cols.cat.codes, np.int64)]
        out: list[Optional[str]] = []
        for extra, orig in zip(cols.extra, keep_cats):
            if orig is not None:
                extra = dict(extra or {}, cat=orig)
            out.append(json.dumps(extra, default=json_default) if extra else None)
        return out
    texts = {k: json.dumps({"cat": k}) for _, _, k in classes if k is not None}

    def text(c: str) -> Optional[str]:
        keep = classify(str(c), timelogger)[2]
        return None if keep is None else texts.get(keep)

    return _strings(_recode(cols.cat, text))


@dataclass
class FileRows:
    """One file's share of a frame built from several files' events (:func:`batch_frame`): its rows are the next
    ``rows`` of the columns."""

    path: str
    state: State
    warnings: list[str]
    rows: int


def source_data(path: str, state: State, cols: Cols, kind: str, warnings: list[str], parser: str) -> SourceData:
    """The :class:`SourceData` of one file (or block): its frame and metadata."""
    frame, (meta,) = _frame([FileRows(path, state, warnings, cols.n)], cols, kind, parser)
    return SourceData(path=path, kind=kind, frame=frame, meta=meta, warnings=warnings)


def batch_frame(files: "list[FileRows]", cols: Cols, parser: str) -> "Optional[tuple[pd.DataFrame, list[PfwMeta]]]":
    """One frame of several DFTracer files' events (``cols``: theirs, file after file) and each file's metadata,
    as :func:`source_data` of each would give them; ``None`` when their hash tables disagree on a hash (each is then
    read alone)."""
    for table in ("HH", "FH"):
        united: dict[str, str] = {}
        for f in files:
            for key, value in f.state.maps[table].items():
                if united.setdefault(key, value) != value:
                    return None
    return _frame(files, cols, "dftracer", parser)


def _per_row(files: "list[FileRows]", values: "list[Optional[str]]") -> pd.Categorical:
    """A categorical column holding each file's value on its rows (None: missing)."""
    categories = list(dict.fromkeys(v for v in values if v is not None))
    codes = np.array([categories.index(v) if v is not None else -1 for v in values], dtype=np.int32)
    return pd.Categorical.from_codes(np.repeat(codes, [f.rows for f in files]),
                                     categories=pd.Index(categories, dtype=object))


def _frame(files: "list[FileRows]", cols: Cols, kind: str, parser: str) -> "tuple[pd.DataFrame, list[PfwMeta]]":
    """The frame of ``cols``, the events of ``files`` one after the other (several only of DFTracer traces), and
    each file's metadata."""
    n = cols.n
    timelogger = kind == "timelogger"
    assert len(files) == 1 or not timelogger, "TimeLogger files are read one at a time"
    state = files[0].state
    header = state.header or {}
    sizes = [f.rows for f in files]

    # rows of DFTracer's own bookkeeping never reach here (both parsers route them to meta)
    classes = [classify(str(c), timelogger) for c in cols.cat.categories]
    layer = _recode(cols.cat, lambda c: classify(str(c), timelogger)[0])
    if timelogger and header.get("layer") in SIDE_LAYERS:  # `timelogger run`'s noise generators and CPU sampler
        layer = _constant(str(header["layer"]), n)
    cat = _recode(cols.cat, lambda c: classify(str(c), timelogger)[1])

    # rank
    if timelogger:
        default_ranks = [checked_int(header, "rank", 0, MAX_RANKS - 1, files[0].path, files[0].warnings)]
    else:
        default_ranks = [None]
    if default_ranks[0] is None:
        from .. import rank_from_name  # the one file-name rank rule, shared with the other readers

        default_ranks = [rank_from_name(f.path) for f in files]
    rvals, rmask = cols.ints["rank"]
    defaults = np.array([-1 if r is None else r for r in default_ranks], dtype=np.int64)
    rank = np.where(rmask, defaults[0] if len(files) == 1 else np.repeat(defaults, sizes), rvals).astype(np.int64)

    # host
    if timelogger:
        host = _constant(as_str(header.get("hostname")), n)
    else:
        hosts = {k: v for f in files for k, v in f.state.maps["HH"].items()}
        host = _recode(cols.strs["hhash"], lambda h: hosts.get(h, h))
        only = [next(iter(set(m.values()))) if len(set(m.values())) == 1 else None
                for m in (f.state.maps["HH"] for f in files)]  # a file of one host: its rows' host where missing
        if any(v is not None for v in only):
            host = _fill(host, _constant(only[0], n) if len(files) == 1 else _per_row(files, only))

    # file
    names = {k: v for f in files for k, v in f.state.maps["FH"].items()}
    file_ = _fill(_recode(cols.strs["fhash"], lambda h: names.get(h, h)), _fill(cols.strs["file"], cols.strs["fname"]))

    # bytes: explicit args.bytes, else ret of read/write calls
    bvals, bmask = cols.ints["bytes"]
    ret, ret_missing = cols.ints["ret"]
    size, size_missing = cols.ints["size"]
    is_rw, is_item = name_mask(cols, RW_CALLS), name_mask(cols, ITEM_CALLS)
    from_ret = is_rw & ~ret_missing & (ret >= 0)
    ret_bytes = np.where(is_item & ~size_missing, ret * size, ret)
    byte_vals = np.where(bmask, ret_bytes, bvals)
    byte_mask = bmask & ~from_ret

    args_col = _args_column(cols, state, timelogger, classes)

    if not timelogger and n:
        process = name_mask(cols, PROCESS_CALLS)
        if process.any():
            cat = cat.add_categories(["other"]) if "other" not in cat.categories else cat.copy()
            cat[process] = "other"
        cat = ai_cats(cols, layer, cat)
    if timelogger:
        epoch = cols.ints["epoch"]
    else:  # epochs are windows per process: a process of each file (pids of two hosts may be equal)
        keyed = cols if len(files) == 1 else replace(
            cols, pid=(np.repeat(np.arange(len(files), dtype=np.int64), sizes) << 32) | (cols.pid & 0xFFFFFFFF))
        epoch = epoch_windows(keyed, cols.ints["epoch"])
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
            "epoch": _masked(*epoch),
            "step": _masked(*cols.ints["step"]),
            "args": args_col if n else None,
        },
        owned=True,  # every column built here for this frame
    )
    bounds = np.cumsum([0, *sizes])
    metas = [file_meta(f.path, f.state, cols.pid[lo:hi], kind, parser, r, f.warnings)
             for f, r, lo, hi in zip(files, default_ranks, bounds[:-1], bounds[1:])]
    return frame, metas
