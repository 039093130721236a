"""A merge's result, whichever way it was made: :class:`Merge` holds its rows rank by rank (:class:`Partition`), its
counters, and one :class:`MergeInfo` of what the merge found (the same record ``merge_info.json`` stores), plus the
analysis' summary when the merge ran one.

A partition is a rank's rows in one of four places (:class:`InMemory`, :class:`InGroup`: a span of a frame several
ranks share, :class:`ArrowFile` written by this merge, :class:`RowGroups` of a stored ``merged.parquet``), or
:class:`NotKept` (a merge that kept only its summary); each loads its rows with the schema's dtypes, only the columns
asked for.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Hashable, Iterator, Optional, Protocol, Sequence, TypedDict, Union

import pandas as pd

from trace_merge.align import Residual, time_order
from trace_merge.identity import Identity
from trace_merge.schema import FRAME_COLUMNS, FRAME_DTYPES, concat_frames, empty_frame

if TYPE_CHECKING:  # pragma: no cover - typing only: the merge layer imports no analysis module
    import pyarrow as pa

    from trace_merge.analysis import Summary
    from trace_merge.kernels import JobFacts, RankParts

#: a JSON value as ``merge_info.json`` holds it
JSONValue = Union[str, int, float, bool, None, "list[JSONValue]", "dict[str, JSONValue]"]


class PartitionLayout(TypedDict):
    """One rank's rows in a stored ``merged.parquet``."""

    rank: int
    rows: int
    row_groups: list[int]


@dataclass
class MergeInfo:
    """What a merge found and, once stored, what ``merge_info.json`` records: the one type that a merge fills, that
    :func:`trace_merge.store.write_merged` writes and :meth:`parse` reads back (fields a file lacks, from an older
    version, take their defaults)."""

    sources: list[str] = field(default_factory=list)  # the files that made it into the merge
    inputs: Optional[dict[str, Identity]] = None  # name -> identity of every file found (None: none recorded)
    outputs: Optional[dict[str, Identity]] = None  # merged.parquet / counters.parquet -> identity when written
    warnings: list[str] = field(default_factory=list)  # one line each, "<path>: <cause>"
    residual: Residual = field(default_factory=Residual)  # the alignment check
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)  # rank -> its clock minus rank 0's, subtracted
    dxt_clock: list[dict[str, JSONValue]] = field(default_factory=list)  # per Darshan log and rank: DXT placement
    dropped_intervals: dict[str, int] = field(default_factory=dict)  # app file -> intervals its writer dropped (> 0)
    rows_per_layer: dict[str, int] = field(default_factory=dict)  # layer -> rows, most first
    rows: int = 0
    counter_rows: int = 0
    partitions: Optional[list[PartitionLayout]] = None  # stored: where each rank's rows are in merged.parquet
    trace_merge_version: str = ""

    @classmethod
    def parse(cls, obj: object) -> "MergeInfo":
        """The info of a decoded ``merge_info.json``; ValueError when it is not a JSON object. Values of the wrong
        type are left at their defaults (a hand-edited file is derived data, not an error)."""
        if not isinstance(obj, dict):
            raise ValueError("is not a JSON object")
        info = cls()
        for name, default in asdict(cls()).items():
            value = obj.get(name)
            kind = type(default) if default is not None else (list if name == "partitions" else dict)
            if isinstance(value, kind) and not isinstance(value, bool):
                setattr(info, name, value)
        info.residual = Residual.parse(obj.get("residual"))
        info.dropped_intervals = {str(k): int(v) for k, v in info.dropped_intervals.items()
                                  if isinstance(v, int) and not isinstance(v, bool) and v > 0}
        info.clock_offsets_ns = {int(k): int(v) for k, v in info.clock_offsets_ns.items()
                                 if _integer_text(k) and isinstance(v, int) and not isinstance(v, bool)}
        if info.partitions is not None and not all(
                isinstance(x, dict) and isinstance(x.get("rank"), int) and isinstance(x.get("rows"), int)
                and isinstance(x.get("row_groups"), list) for x in info.partitions):
            info.partitions = None  # a layout that cannot be trusted: the whole frame is read instead
        return info

    def to_json(self) -> str:
        out = asdict(self)
        if self.partitions is None:
            del out["partitions"]
        return json.dumps(out, indent=2, default=str) + "\n"


def _integer_text(key: object) -> bool:
    return isinstance(key, (str, int)) and not isinstance(key, bool) and str(key).lstrip("-").isdigit()


# -- partitions -------------------------------------------------------------------------------------------------


class RowsNotKept(RuntimeError):
    """The rows of a merge that kept only its summary were asked for."""


def require_rows(partitions: "dict[int, Partition]") -> None:
    """RowsNotKept unless every partition kept its rows."""
    if not all(p.kept for p in partitions.values()):
        raise RowsNotKept(NOT_KEPT)


NOT_KEPT = ("this merge kept only its summary, not its rows (opened with keep_rows=False); open the run again to read "
            "them")


class Partition(Protocol):
    """One rank's rows, wherever they are."""

    @property
    def kept(self) -> bool:
        """False: the merge summarised the rows and let them go."""

    @property
    def in_memory(self) -> bool:
        """The rows are held in this process."""

    def load(self, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        """The rows (only ``columns`` when given) with the schema's dtypes."""


@dataclass(frozen=True, eq=False)
class InMemory:
    """Rows held in memory (the in-process engine's merge)."""

    frame: pd.DataFrame
    kept: bool = True
    in_memory: bool = True

    def load(self, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        return self.frame if columns is None else self.frame[[c for c in columns if c in self.frame.columns]]


@dataclass(frozen=True, eq=False)
class InGroup:
    """A rank's rows held in memory as the span ``span`` of a frame that several ranks merged together share
    (:func:`trace_merge.partitioned.merge_ranks`): cut out, with the rank's own categories (``categories``: column ->
    categories, its pieces' united), only when loaded alone."""

    frame: pd.DataFrame
    span: tuple[int, int]
    categories: "dict[str, pd.Index]"
    kept: bool = True
    in_memory: bool = True

    def load(self, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        rows = self.frame.iloc[self.span[0]:self.span[1]]
        own = self.categories
        return pd.DataFrame({c: rows[c].cat.set_categories(own[c]).array if c in own else rows[c].array
                             for c in rows.columns if columns is None or c in columns}, copy=False)


def _whole_groups(parts: "list[Partition]") -> "list[Partition | pd.DataFrame]":
    """``parts`` (a rank each, in rank order) with each run of :class:`InGroup` spans that covers its frame
    from end to end replaced by that frame: the ranks' rows in the same order, and, with their categories united,
    the same categories (a group's frame has the union of its ranks')."""
    out: list = []
    at = 0
    while at < len(parts):
        p = parts[at]
        if isinstance(p, InGroup) and p.span[0] == 0:
            reach, end = p.span[1], at + 1
            while end < len(parts):
                q = parts[end]
                if not (isinstance(q, InGroup) and q.frame is p.frame and q.span[0] == reach):
                    break
                reach, end = q.span[1], end + 1
            if reach == len(p.frame):
                out.append(p.frame)
                at = end
                continue
        out.append(p)
        at += 1
    return out


@dataclass(frozen=True)
class ArrowFile:
    """An Arrow IPC file this merge wrote (its spill directory)."""

    path: str
    kept: bool = True
    in_memory: bool = False

    def load(self, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        return read_arrow(self.path, columns)


@dataclass(frozen=True)
class RowGroups:
    """Row groups of a stored ``merged.parquet``."""

    path: str
    groups: tuple[int, ...]
    kept: bool = True
    in_memory: bool = False

    def load(self, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(self.path).read_row_groups(list(self.groups), columns=list(columns) if columns else None)
        return schema_dtypes(table)


@dataclass(frozen=True)
class NotKept:
    """Rows summarised and let go (``keep_rows=False``)."""

    kept: bool = False
    in_memory: bool = False

    def load(self, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        raise RowsNotKept(NOT_KEPT)


def schema_dtypes(table: "pa.Table") -> pd.DataFrame:
    """A table read back from Arrow or Parquet as a frame with the schema's dtypes, converting only the columns
    whose dtype differs (``astype`` of an empty mapping copies the whole frame). The frame's arrays are its own and
    writable (``to_pandas`` copies them out of the file's memory map)."""
    frame = table.to_pandas()
    wrong = {c: FRAME_DTYPES[c] for c in frame.columns if str(frame[c].dtype) != FRAME_DTYPES[c]}
    return frame.astype(wrong) if wrong else frame


def read_arrow(path: "str | os.PathLike[str]", columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """A spilled piece or a rank partition as a frame with the schema's dtypes (``columns``: only those)."""
    import pyarrow as pa

    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    return schema_dtypes(table)


def file_batches(path: "str | os.PathLike[str]") -> "Iterator[pa.RecordBatch]":
    """The record batches of an Arrow IPC file one at a time, read, not mapped: the pages of a mapped file stay in
    the process while it is mapped (a whole partition by the end of a sweep over it)."""
    import pyarrow as pa

    with pa.OSFile(str(path), "rb") as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


# -- the result -------------------------------------------------------------------------------------------------


@dataclass
class Merge:
    """A merged run, whichever way it was made (:func:`trace_merge.partitioned.merge_partitioned`,
    :func:`~trace_merge.partitioned.merge_in_memory`, a stored merge): its rows per rank (:attr:`partitions`, loaded
    by :meth:`load` or all at once as :attr:`frame`), its counters, what the merge found (:attr:`info`) and, when the
    merge ran the analysis hook, the summary of its rows (:attr:`summary`, :attr:`job`, :attr:`parts`)."""

    partitions: dict[int, Partition]
    rank_rows: dict[int, int]  # rank -> rows
    counters: pd.DataFrame
    info: MergeInfo
    manifest: Optional[dict[str, JSONValue]] = None  # the run directory's manifest.json
    spill: Optional[Path] = None  # the spill directory this merge owns (None: in memory, or a stored merge's rows)
    job: "Optional[JobFacts]" = None  # the analysis hook's job facts (None without one)
    summary: "Optional[Summary]" = None  # the analysis hook's reduction (None without one)
    parts: "Optional[list[RankParts]]" = None  # the analysis' tables of each rank, in rank order
    dxt_segments: Optional[int] = None  # Darshan DXT segments among the rows (None: not counted, a stored merge)
    cached: bool = False  # made from a fresh stored merge (merged.parquet), not from the sources
    #: summaries of other layers than the merge's, by :func:`trace_merge.schema.layers_key`
    summaries: "dict[Hashable, Summary]" = field(default_factory=dict)

    # what the merge found, by the names merge_info.json gives it
    @property
    def warnings(self) -> list[str]:
        return self.info.warnings

    @property
    def residual(self) -> Residual:
        return self.info.residual

    @property
    def sources(self) -> list[str]:
        return self.info.sources

    @property
    def clock_offsets_ns(self) -> dict[int, int]:
        return self.info.clock_offsets_ns

    @property
    def dxt_clock(self) -> list[dict[str, JSONValue]]:
        return self.info.dxt_clock

    @property
    def dropped_intervals(self) -> dict[str, int]:
        return self.info.dropped_intervals

    @property
    def rows_kept(self) -> bool:
        """False when the merge summarised the rows and let them go (``keep_rows=False``)."""
        return all(p.kept for p in self.partitions.values())

    @property
    def in_memory(self) -> bool:
        """Every partition is rows in memory (the in-process engine's merge, or a stored frame read whole)."""
        return all(p.in_memory for p in self.partitions.values())

    @property
    def rows_apart(self) -> bool:
        """The rows are in the partitions, not loaded as :attr:`frame`."""
        return "frame" not in self.__dict__

    @functools.cached_property
    def frame(self) -> pd.DataFrame:
        """Every row (schema :data:`trace_merge.schema.FRAME_DTYPES`), absolute epoch ns on rank 0's clock, epoch and
        step propagated, in time order; loaded on first use."""
        require_rows(self.partitions)
        return self._load_partitions()

    def load(self, columns: Optional[Sequence[str]] = None, ranks: Optional[Sequence[int]] = None) -> pd.DataFrame:
        """The merged rows (only ``columns`` / ``ranks`` when given): from :attr:`frame` when it is loaded, else
        read from the partitions now.

        Raises
        ------
        RowsNotKept
            The merge kept no rows (``keep_rows=False``).
        """
        if self.rows_apart:
            require_rows(self.partitions)
            return self._load_partitions(columns, ranks)
        frame = self.frame
        if ranks is not None:
            frame = frame[frame["rank"].isin(list(ranks)).to_numpy()]
        return frame if columns is None else frame[list(columns)]

    def rank_frames(self, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
        """The rows (``columns``) a rank at a time while they are apart, else the frame's (a large run's rows are
        never all in memory)."""
        if not self.rows_apart:
            yield self.frame[list(columns)]
            return
        for rank in sorted(self.partitions):
            yield self._load_partitions(columns, ranks=[rank])

    def _load_partitions(self, columns: Optional[Sequence[str]] = None, ranks: Optional[Sequence[int]] = None
                         ) -> pd.DataFrame:
        use = [r for r in sorted(self.partitions) if ranks is None or r in set(ranks)]
        if columns is not None:
            frames = [self.partitions[r].load(columns) for r in use]
            return pd.concat(frames, ignore_index=True) if frames else empty_frame()[list(columns)]
        frames = [p if isinstance(p, pd.DataFrame) else p.load()
                  for p in _whole_groups([self.partitions[r] for r in use])]
        if not frames:
            return empty_frame()
        frame = time_order(concat_frames(frames))
        for c in FRAME_COLUMNS:  # a summary's partitions leave out args and host
            if c not in frame.columns:
                frame[c] = pd.Series([None] * len(frame), dtype=FRAME_DTYPES[c])
        return frame[list(FRAME_COLUMNS)]

    def rows_per_layer(self) -> dict[str, int]:
        """Rows per layer, most first: of :attr:`frame` when it is loaded, else the merge's counts."""
        if not self.rows_apart:
            counts = self.frame["layer"].value_counts()
            return {str(k): int(v) for k, v in counts.items() if v}
        return dict(sorted(self.info.rows_per_layer.items(), key=lambda kv: -kv[1]))

    def cleanup(self) -> None:
        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)
