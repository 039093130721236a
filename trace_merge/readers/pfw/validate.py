"""Which events cannot be real: values outside int64 epoch ns, absurd names, and timestamps cut off from the rest of
their file (corrupt ones that would stretch the run over years)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...schema import DIFFERENT_DAY_NS, MAX_EPOCH_NS
from .events import STR_ARGS, Cols, Json

#: at most this many lines are named one by one in a warning of one kind
MAX_LINE_WARNINGS = 5
_INT64 = (-(2**63), 2**63)
#: rows separated from the bulk of their file by a gap this long, and few, are corrupt timestamps
OUTLIER_GAP_NS = DIFFERENT_DAY_NS
#: a group cut off by such a gap is dropped as outliers when it has at most this share of the file's rows (or
#: :data:`OUTLIER_MAX_ROWS`) and under half the main group; a larger group is reported, not removed
OUTLIER_MAX_SHARE = 0.01
OUTLIER_MAX_ROWS = 3


def value_problem(ts: Json, dur: Json, ts_ns: int, dur_ns: int, pid: Optional[int], tid: Optional[int],
                  ints: dict[str, Optional[int]]) -> Optional[str]:
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
    nbytes = ints.get("bytes")
    if nbytes is not None and nbytes < 0:
        return f"negative bytes {nbytes}"
    return None


def too_long(name: Json, cat: Json, args: dict[str, Json], limit: int) -> Optional[str]:
    """Which of an event's names is longer than ``limit`` characters, as a warning's words (None: none)."""
    for what, value in (("name", name), ("cat", cat), *((k, args.get(k)) for k in STR_ARGS)):
        if isinstance(value, str) and len(value) > limit:
            return f"{what} of {len(value):,} characters (limit {limit:,})"
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


def outliers(ts: np.ndarray) -> np.ndarray:
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


def drop_outliers(cols: Cols, path: str, warnings: list[str]) -> Cols:
    """:func:`outliers` left out with one warning naming their lines; a file split into large groups far apart
    in time is kept whole and reported."""
    if cols.n < 2:
        return cols
    out = outliers(cols.ts)
    if out.any():
        lines = cols.lines[out] if cols.lines is not None else np.zeros(0, dtype=np.int64)
        named = ", ".join(map(str, lines[:MAX_LINE_WARNINGS])) + (" ..." if len(lines) > MAX_LINE_WARNINGS else "")
        warnings.append(f"{path}: {int(out.sum())} event(s) more than {OUTLIER_GAP_NS // 3_600_000_000_000} h away "
                        f"from all the others in the file (line {named}): corrupt timestamps, skipped")
        cols = cols.take(~out)
    if len(_time_groups(cols.ts)[1]) > 2:
        warnings.append(f"{path}: events fall into groups more than {OUTLIER_GAP_NS // 3_600_000_000_000} h apart; "
                        "kept (check the clock or whether two runs were written to one file)")
    return cols
