"""The frame and metadata of what the parsers found: columns in the schema of :mod:`trace_merge.schema`, built on
category codes (no string per row), and what alignment needs to know of the file."""
from __future__ import annotations

import json
from typing import Callable, Optional

import numpy as np
import pandas as pd

from ...schema import MAX_RANKS, SourceData, checked_int, to_frame
from .events import Cols, Json, State, as_int, as_str, json_default
from .semantics import ITEM_CALLS, PROCESS_CALLS, RW_CALLS, ai_cats, classify, epoch_windows, name_mask

#: a clock offset between two ranks beyond a day is a corrupt value (a day off is a different run, see align)
_MAX_OFFSET_NS = 24 * 3600 * 10**9


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


def source_data(path: str, state: State, cols: Cols, kind: str, warnings: list[str], parser: str) -> SourceData:
    """The :class:`SourceData` of one file (or block): its frame and metadata."""
    n = cols.n
    timelogger = kind == "timelogger"
    header = state.header or {}

    # rows of DFTracer's own bookkeeping never reach here (both parsers route them to meta)
    classes = [classify(str(c), timelogger) for c in cols.cat.categories]
    layer = _recode(cols.cat, lambda c: classify(str(c), timelogger)[0])
    if timelogger and header.get("layer") == "noise":  # a `timelogger run --noise` generator (docs/noise.md)
        layer = _constant("noise", n)
    cat = _recode(cols.cat, lambda c: classify(str(c), timelogger)[1])

    # rank
    default_rank = checked_int(header, "rank", 0, MAX_RANKS - 1, path, warnings) if timelogger else None
    if default_rank is None:
        from .. import rank_from_name  # the one file-name rank rule, shared with the other readers

        default_rank = rank_from_name(path)
    rvals, rmask = cols.ints["rank"]
    rank = np.where(rmask, -1 if default_rank is None else default_rank, rvals).astype(np.int64)

    # host
    if timelogger:
        host = _constant(as_str(header.get("hostname")), n)
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
            "epoch": _masked(*(cols.ints["epoch"] if timelogger else epoch_windows(cols, cols.ints["epoch"]))),
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
                "pid": as_int(header.get("pid")) if header.get("pid") is not None else meta["pid"],
                "ppid": header.get("ppid"),
                "versions": header.get("versions"),
                "argv": header.get("argv"),
                "header": header,
                "anchors": anchors,
                "clock_sync": state.clock_sync[-1] if state.clock_sync else None,
                "clock_offset_ns": checked_int(state.clock_sync[-1], "clock_offset_ns", -_MAX_OFFSET_NS,
                                               _MAX_OFFSET_NS, path, warnings, "clock_sync ")
                if state.clock_sync else None,
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
        host_names = sorted(set(state.maps["HH"].values()))
        meta.update(
            {
                "host": host_names[0] if len(host_names) == 1 else None,
                "hosts": host_names,
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
