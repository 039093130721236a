"""The one frame schema (columns and their meaning: ``docs/frame.md``).

Every reader returns rows in this layout; :func:`to_frame` is the only place that
assigns dtypes, so readers build plain column dicts (lists or numpy arrays) and call it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd

#: ``noise``: what ``timelogger run --noise`` generators achieved beside the job (docs/noise.md); no component.
#: ``device``: the accelerator's own timeline (the PyTorch profiler's GPU kernels and copies): the AU where a rank has
#: it (docs/metrics.md), no component of the layered breakdown (it is not the host phase's time)
#: ``cpu``: the CPU time of the rank's threads and its node's cores, sampled by ``timelogger run`` (docs/cpu.md); no
#: component either: a row's duration is CPU time in a sample window, not a phase's time
LAYERS = ("app", "framework", "device", "comm", "posix", "stdio", "mpiio", "hdf5", "noise", "cpu")
#: layers that are measurements beside the job, never part of an analysis of its phases unless named
SIDE_LAYERS = ("noise", "cpu")
CATS = ("io", "preprocess", "compute", "comm", "checkpoint", "wait", "other")


def layer_order(layer: str) -> int:
    """Sort key of a layer: its place in :data:`LAYERS`, unknown layers after them."""
    return LAYERS.index(layer) if layer in LAYERS else len(LAYERS)


#: the layers an analysis is made from: None (``app`` when present, else all), ``"all"``, or layer names
Layers = Optional[Union[str, Sequence[str]]]


def layers_key(layers: Layers) -> Hashable:
    """``layers`` as a dictionary key (a list as a tuple)."""
    return tuple(layers) if isinstance(layers, list) else layers


#: the app phase that is one training step (TimeLogger's Keras callback and the benchmarks use it)
STEP_PHASE = "Training Iteration"
#: layers that trace file-system calls
FS_LAYERS = ("posix", "stdio", "mpiio", "hdf5")

# Bounds past which a value in an input is corrupt, not data (one place for readers, alignment and merge).
#: epoch ns at or beyond this (year 2116) are not times
MAX_EPOCH_NS = 2**62
#: more ranks than any machine runs: a rank or world size beyond it is a corrupt value
MAX_RANKS = 2**24
#: times this far apart (12 h) are not one run's: a different run, a wrong clock or a corrupt timestamp
DIFFERENT_DAY_NS = 12 * 3600 * 10**9

#: column -> dtype; order is the on-disk column order of ``merged.parquet``.
FRAME_DTYPES: dict[str, str] = {
    "layer": "category",
    "cat": "category",
    "name": "category",
    "rank": "int64",
    "pid": "int64",
    "tid": "int64",
    "host": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "dur_ns": "int64",
    "bytes": "Int64",
    "offset": "Int64",
    "file": "category",
    "epoch": "Int64",
    "step": "Int64",
    "args": "string",
}
FRAME_COLUMNS = tuple(FRAME_DTYPES)

COUNTER_DTYPES: dict[str, str] = {
    "layer": "category",
    "rank": "int64",
    "file": "category",
    "counter": "category",
    "value": "float64",
}
COUNTER_COLUMNS = tuple(COUNTER_DTYPES)

# Columns a reader may leave out; they are filled with nulls / defaults.
_DEFAULTS: dict[str, Any] = {
    "pid": 0,
    "tid": 0,
    "host": None,
    "bytes": pd.NA,
    "offset": pd.NA,
    "file": None,
    "epoch": pd.NA,
    "step": pd.NA,
    "args": None,
}


def checked_int(record: Mapping[str, Any], key: str, lo: int, hi: int, where: str, warnings: list[str],
                what: str = "") -> "int | None":
    """``record[key]`` as an int in ``[lo, hi]``; a value that is present but not such an int is warned about
    (``"<where>: <what><key> <value> is not an integer in [lo, hi]; ignored"``) and gives None, as a missing one
    does."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
        return value
    warnings.append(f"{where}: {what}{key} {value!r} is not an integer in [{lo}, {hi}]; ignored")
    return None


def present_codes(codes: np.ndarray, categories: int) -> np.ndarray:
    """The category codes (of ``categories``) that ``codes`` holds, ascending; missing (-1) left out. O(n), no sort."""
    return np.flatnonzero(np.bincount(codes + 1, minlength=categories + 1)[1:])


def category_mask(series: pd.Series, predicate) -> np.ndarray:
    """Evaluate ``predicate(str) -> bool`` once per category instead of once per row (null: False): per category
    present where there are many categories for the rows, else per category (where they are few, finding which are
    present costs more than it saves: docs/measurements.md#schema)."""
    codes = series.cat.codes.to_numpy()
    cats = series.cat.categories
    hit = np.zeros(len(cats) + 1, dtype=bool)  # the last entry: null (code -1)
    todo = present_codes(codes, len(cats)) if len(cats) * 64 > len(codes) else np.arange(len(cats))
    # the categories as one array taken at once: an Index looked up per code costs a pandas call each
    hit[todo] = [bool(predicate(str(c))) for c in cats.to_numpy()[todo]]
    return hit[codes]


def as_text(series: pd.Series) -> pd.Series:
    """``series`` as Python ``str`` objects (null stays null). Never ``astype(str)`` on a categorical: pandas
    first makes a fixed-width numpy array of its categories, categories x the longest one (one long path among many
    distinct file names makes that gigabytes: docs/measurements.md#schema)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = series.cat.categories
        if cats.dtype != object or not all(isinstance(c, str) for c in cats):
            series = series.cat.rename_categories([str(c) for c in cats])
        return series.astype(object)
    return series.map(lambda v: v if isinstance(v, str) or v is None or v is pd.NA or v != v else str(v))


def to_frame(columns: Mapping[str, Any], owned: bool = False) -> pd.DataFrame:
    """Build a frame in the canonical schema.

    Parameters
    ----------
    columns
        Column name -> list/array. Required: ``layer, cat, name, rank, start_ns`` and
        either ``end_ns`` or ``dur_ns`` (both int64 epoch/duration nanoseconds).
        Missing optional columns are filled with nulls.
    owned
        The caller hands its arrays over (a reader's fresh columns): one already of its column's type, in writable
        memory, becomes the column as it is instead of a copy (a DFTracer block's frame: a fifth of its reader's
        frame-building time).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`FRAME_COLUMNS` with :data:`FRAME_DTYPES`.
    """
    cols = dict(columns)
    n = len(cols["start_ns"]) if "start_ns" in cols else 0
    start = np.asarray(cols.get("start_ns", []), dtype=np.int64)
    if "end_ns" in cols:
        end = np.asarray(cols["end_ns"], dtype=np.int64)
        dur = end - start
    else:
        dur = np.asarray(cols.get("dur_ns", np.zeros(n)), dtype=np.int64)
        end = start + dur
    cols["start_ns"], cols["end_ns"], cols["dur_ns"] = start, end, dur
    data = {}
    for name, dtype in FRAME_DTYPES.items():
        value = cols.get(name)
        if value is None:
            value = [_DEFAULTS.get(name)] * n
        elif np.isscalar(value) or isinstance(value, str):
            value = [value] * n
        elif owned and _own_typed(value, dtype):
            data[name] = value if isinstance(value, pd.api.extensions.ExtensionArray) else \
                pd.arrays.NumpyExtensionArray(value)
            continue
        data[name] = pd.Series(value).astype(dtype).array
    # copy=False: the arrays are already owned (astype copied them); consolidating them into 2-D blocks would
    # copy every int column again for nothing (docs/measurements.md#schema).
    return pd.DataFrame(data, columns=list(FRAME_COLUMNS), copy=False)


def _own_typed(value: Any, dtype: str) -> bool:
    """Whether ``value`` is an array of ``dtype`` whose memory can be written (not a view of Arrow's buffers)."""
    if isinstance(value, np.ndarray):
        return str(value.dtype) == dtype and value.ndim == 1 and value.flags.writeable
    if isinstance(value, pd.arrays.IntegerArray):
        return str(value.dtype) == dtype and value._data.flags.writeable and value._mask.flags.writeable
    return isinstance(value, (pd.Categorical, pd.arrays.StringArray)) and str(value.dtype) == dtype


def empty_frame() -> pd.DataFrame:
    """A zero-row frame with the canonical columns and dtypes."""
    return to_frame({"layer": [], "cat": [], "name": [], "rank": [], "start_ns": [], "end_ns": []})


def to_counters(columns: Mapping[str, Any]) -> pd.DataFrame:
    """Build a ``counters`` table (``layer, rank, file, counter, value``)."""
    n = len(columns["counter"])
    data = {}
    for name, dtype in COUNTER_DTYPES.items():
        value = columns.get(name)
        if value is None:
            value = [None] * n
        elif np.isscalar(value) or isinstance(value, str):
            value = [value] * n
        data[name] = pd.Series(value).astype(dtype).array
    return pd.DataFrame(data, columns=list(COUNTER_COLUMNS))


def empty_counters() -> pd.DataFrame:
    """A zero-row ``counters`` table (a copy of one built once: every block of a trace has one, and building each was
    a share of reading the file: docs/measurements.md#schema)."""
    return _empty_counters_built().copy()


@functools.lru_cache(maxsize=1)
def _empty_counters_built() -> pd.DataFrame:
    return to_counters({"layer": [], "rank": [], "file": [], "counter": [], "value": []})


def only_columns(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """A new frame of ``frame``'s ``columns``, in that order, sharing their arrays (a selection copies every row; a
    column assigned to the new frame later leaves ``frame`` as it was). Once ``frame`` is let go, the columns left
    out are freed."""
    return pd.DataFrame({c: frame[c] for c in columns}, copy=False)


def concat_column(parts: "list[pd.Series]", name: str) -> Any:
    """One schema column of several frames as one array (categories united, in order of first appearance)."""
    from pandas.api.types import union_categoricals

    if FRAME_DTYPES.get(name) == "category":
        return union_categoricals([p.array for p in parts], ignore_order=True)
    return pd.concat(parts, ignore_index=True).array if len(parts) > 1 else parts[0].reset_index(drop=True).array


def concat_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate schema frames keeping category dtypes (union of categories)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty_frame()
    from trace_merge.threads import thread_map

    def column(name: str) -> Any:
        return concat_column([f[name] for f in frames], name)

    # the schema's columns the frames have (a partition may hold a subset)
    columns = [c for c in FRAME_COLUMNS if c in frames[0].columns]
    if len(frames) == 1:
        return frames[0][columns].reset_index(drop=True)
    # columns in parallel: the copies (and the page faults of millions of fresh rows) run without the GIL
    out = dict(zip(columns, thread_map(column, columns, rows=sum(len(f) for f in frames))))
    return pd.DataFrame(out, columns=columns, copy=False)  # no block consolidation copy


@dataclass
class SourceMeta:
    """What a reader says of its file beyond its rows. Each reader returns its own subclass, defined beside it
    (:class:`~trace_merge.readers.pfw.TimeLoggerMeta`, ``DFTracerMeta``, ``XPlaneMeta``, ``HorovodMeta``,
    ``DarshanMeta``); this base is the metadata of a source built without a reader."""


@dataclass
class SourceData:
    """What one reader returns for one input file.

    Attributes
    ----------
    frame
        Interval rows in the schema. ``start_ns``/``end_ns`` are absolute epoch ns
        in the *source's own* clock (before per-rank offsets are applied by
        :mod:`trace_merge.align`).
    counters
        Non-interval counters (Darshan), or an empty counters table.
    meta
        The reader's metadata of the file (a :class:`SourceMeta` subclass per reader), e.g. for a TimeLogger
        file its ``rank``, ``world_size``, ``host``, ``clock_offset_ns`` (this rank's clock minus rank 0's),
        ``tf_anchors``.
    warnings
        One-line, user-facing warnings (``"<path>: <cause>"``) for skipped parts.
    """

    path: str
    kind: str
    frame: pd.DataFrame
    counters: pd.DataFrame = field(default_factory=empty_counters)
    meta: SourceMeta = field(default_factory=SourceMeta)
    warnings: list[str] = field(default_factory=list)


#: small ranks are merged (:func:`trace_merge.partitioned.merge_ranks`, in memory) and summarised
#: (:func:`trace_merge.analysis.summarise`) in groups of about this many rows: a thousand ranks of a few hundred rows
#: each paid a task's and the kernels' fixed costs a thousand times (docs/measurements.md, "Trace shapes")
RANK_GROUP_ROWS = 1 << 16


def by_rank(frame: pd.DataFrame) -> "list[tuple[int, pd.DataFrame]]":
    """A frame's rows per rank (ascending), each in the frame's order."""
    return [(ranks[0], rows) for ranks, rows in rank_groups(frame, 0)]


def rank_groups(frame: pd.DataFrame, rows: int) -> "list[tuple[list[int], pd.DataFrame]]":
    """A frame's rows in groups of consecutive whole ranks (ascending), a group closed once it holds ``rows`` rows
    (0: a rank each); in a group, its ranks one after another, each rank's rows in the frame's order."""
    if not len(frame):
        return []
    ranks = frame["rank"].to_numpy()
    uniq = np.sort(pd.unique(ranks))  # hashed: a piece's few ranks, not a sort of its rows
    if len(uniq) == 1:
        return [([int(uniq[0])], frame)]
    out: list = []
    members: list = []
    at: list = []
    held = 0
    for r, idx in pd.Series(np.arange(len(frame))).groupby(ranks, sort=True).indices.items():
        members.append(int(r))
        at.append(idx)
        held += len(idx)
        if held >= rows:
            out.append((members, frame.take(at[0] if len(at) == 1 else np.concatenate(at))))
            members, at, held = [], [], 0
    if members:
        out.append((members, frame.take(at[0] if len(at) == 1 else np.concatenate(at))))
    return out
