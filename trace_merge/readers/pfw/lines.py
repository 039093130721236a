"""The robust parser: ``json.loads`` per line, exact decimals, every oddity tolerated and the lines it skips named.
The only parser of TimeLogger files (their free-form ``args`` are kept), and the fallback of the table parsers."""
from __future__ import annotations

import json
from decimal import Decimal
from typing import Optional, cast

import numpy as np
import pandas as pd

from .events import COMPLETE_PH, INT_ARGS, STR_ARGS, Cols, Json, State, as_dict, as_int, as_str
from .options import ParseOptions
from .validate import MAX_LINE_WARNINGS, too_long, value_problem

#: ``args`` keys that become columns and are not repeated in the ``args`` column.
_COLUMN_ARGS = frozenset({"rank", "epoch", "step", "bytes", "offset", "file", "fname", "hhash", "fhash"})


def parse_lines(body: "bytes | bytearray", first_lineno: int, state: State, warnings: list[str],
                options: ParseOptions) -> Cols:
    """The complete events of ``body`` (whole event lines, the first numbered ``first_lineno``)."""
    names: list[str] = []
    cats: list[str] = []
    pids: list[int] = []
    tids: list[int] = []
    tss: list[int] = []
    durs: list[int] = []
    strs: dict[str, list[Optional[str]]] = {k: [] for k in STR_ARGS}
    ints: dict[str, list[Optional[int]]] = {k: [] for k in INT_ARGS}
    extras: list[Optional[dict[str, Json]]] = []
    linenos: list[int] = []
    bad: list[int] = []
    bad_values: list[tuple[int, str]] = []
    bad_bytes: list[tuple[int, Json]] = []  # (line, value) of bytes that are present but no byte count
    scale = state.time_scale
    loads = json.loads
    lines = cast("list[bytes]", body.split(b"\n"))  # or of bytearray: the same methods
    for lineno, line in enumerate(lines, start=first_lineno):
        if len(line) > options.max_line_bytes:
            bad_values.append((lineno, f"a line of {len(line):,} bytes (limit {options.max_line_bytes:,})"))
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
        if ph not in COMPLETE_PH or isinstance(ph, bool):
            state.ignored[str(ph)] += 1
            continue
        ts = ev.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, Decimal)):
            state.no_ts += 1
            continue
        dur = ev.get("dur")
        if isinstance(dur, bool) or not isinstance(dur, (int, Decimal)):
            dur = 0
        pid, tid = as_int(ev.get("pid")), as_int(ev.get("tid"))
        args = as_dict(ev.get("args"))
        row_ints = {key: as_int(args.get(key)) for key in INT_ARGS}
        if row_ints["bytes"] is None and args.get("bytes") is not None:  # "4096", 4096.7, true, NaN, ...
            bad_bytes.append((lineno, args["bytes"]))
        ts_ns, dur_ns = int(ts * scale), int(dur * scale)
        problem = value_problem(ts, dur, ts_ns, dur_ns, pid, tid, row_ints)
        if problem is not None:
            bad_values.append((lineno, problem))
            continue
        name = ev.get("name")
        cat = ev.get("cat")
        problem = too_long(name, cat, args, options.max_field_chars)
        if problem:
            bad_values.append((lineno, problem))
            continue
        names.append("" if name is None else str(name))
        cats.append("" if cat is None else str(cat))
        pids.append(0 if pid is None else pid)
        tids.append(0 if tid is None else tid)
        tss.append(ts_ns)
        durs.append(dur_ns)
        linenos.append(lineno)
        for key in STR_ARGS:
            strs[key].append(as_str(args.get(key)))
        for key, value in row_ints.items():
            ints[key].append(value)
        extras.append({k: v for k, v in args.items() if k not in _COLUMN_ARGS} or None)
    _warn(state.path, bad, bad_values, bad_bytes, warnings)
    n = len(tss)
    int_cols = {}
    for key, values in ints.items():
        mask = np.fromiter((v is None for v in values), dtype=bool, count=n)
        vals = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=n)
        int_cols[key] = (vals, mask)
    return Cols(
        name=pd.Categorical(names),
        cat=pd.Categorical(cats),
        pid=np.asarray(pids, dtype=np.int64),
        tid=np.asarray(tids, dtype=np.int64),
        ts=np.fromiter(tss, dtype=np.int64, count=n),
        dur=np.fromiter(durs, dtype=np.int64, count=n),
        strs={k: pd.Categorical(v) for k, v in strs.items()},
        ints=int_cols,
        extra=extras if state.is_timelogger else None,
        lines=np.asarray(linenos, dtype=np.int64),
    )


def _warn(path: str, bad: list[int], bad_values: list[tuple[int, str]], bad_bytes: list[tuple[int, Json]],
          warnings: list[str]) -> None:
    """The warnings of :func:`parse_lines`: the first lines of each kind named, the rest counted."""
    for lineno in bad[:MAX_LINE_WARNINGS]:
        warnings.append(f"{path}: line {lineno}: not a JSON object, skipped")
    if len(bad) > MAX_LINE_WARNINGS:
        warnings.append(f"{path}: {len(bad) - MAX_LINE_WARNINGS} more unparseable lines skipped")
    for lineno, value in bad_bytes[:MAX_LINE_WARNINGS]:
        shown = json.dumps(value, default=str) if not isinstance(value, Decimal) else str(value)
        warnings.append(f"{path}:{lineno}: bytes {shown[:40]} is not a byte count; the event is kept without bytes")
    if len(bad_bytes) > MAX_LINE_WARNINGS:
        warnings.append(f"{path}: {len(bad_bytes) - MAX_LINE_WARNINGS} more events with a bytes value that is not "
                        "a byte count")
    for lineno, problem in bad_values[:MAX_LINE_WARNINGS]:
        warnings.append(f"{path}:{lineno}: {problem}; event skipped")
    if len(bad_values) > MAX_LINE_WARNINGS:
        warnings.append(f"{path}: {len(bad_values) - MAX_LINE_WARNINGS} more events with bad values skipped")
