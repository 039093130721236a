"""A merge stored in its run directory: ``merged.parquet``, ``counters.parquet`` and ``merge_info.json``, written all
or none under the run's lock, and read back with the schema's dtypes."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import pandas as pd

from timelogger.layout import COUNTERS, MERGE_INFO, MERGE_LOCK, MERGED, link_not_followed

from . import __version__
from .errors import OutputExistsError, TraceInputError
from .identity import by_name, differences, identity_of
from .merged import ArrowFile, Merge, MergeInfo, Partition, PartitionLayout, RowGroups, file_batches
from .outputs import atomic_outputs, exclusive
from .schema import COUNTER_DTYPES, FRAME_DTYPES, empty_frame
from .sources import source_identity

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

log = logging.getLogger(__name__)


def _read_info(path: Path) -> MergeInfo:
    """``merge_info.json`` at ``path``; ValueError saying what is wrong with it."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot be read ({exc})") from None
    return MergeInfo.parse(obj)


def _to_parquet(df: pd.DataFrame, path: Path) -> None:
    """Write ``df`` so that every dtype comes back from ``pd.read_parquet``.

    An all-null category column becomes ``dictionary<null>`` in Arrow, which reads back as ``object``;
    such columns are stored as ``dictionary<string>`` instead.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    for i, fld in enumerate(table.schema):
        if pa.types.is_dictionary(fld.type) and pa.types.is_null(fld.type.value_type):
            table = table.set_column(i, fld.name, table.column(i).cast(pa.dictionary(pa.int32(), pa.string())))
    pq.write_table(table, path)


def output_paths(run_dir: Path) -> list[Path]:
    """The outputs of a merge, in the order they are renamed into place (``merge_info.json`` last)."""
    return [run_dir / MERGED, run_dir / COUNTERS, run_dir / MERGE_INFO]


def lock(run_dir: "str | os.PathLike[str]"):
    """Context manager: hold the run's merge lock (:func:`trace_merge.outputs.exclusive`) for the block.

    Take it before looking at the outputs, so that of two merges of one run started together the second is
    refused (:class:`~trace_merge.errors.OutputBusyError`) instead of both writing. Re-entrant.
    """
    return exclusive(Path(run_dir) / MERGE_LOCK, "a merge of this run")


def stored_outputs(run_dir: Path) -> "tuple[MergeInfo | None, str | None]":
    """Whether ``run_dir`` holds a complete set of merge outputs.

    Returns
    -------
    (info, why)
        ``(merge_info, None)`` for a complete set; ``(None, None)`` when none of the outputs exists;
        ``(None, why)`` for a set that cannot be trusted: an output missing, ``merge_info.json`` unreadable or
        not a JSON object, or parquet files that are not the ones ``merge_info.json`` was written with (a
        merge killed between its renames, a file replaced by hand). A set from a version that recorded no
        output identity counts as complete; its sources are checked by the caller.
    """
    paths = output_paths(run_dir)
    for p in paths:  # another user's link at an output's name: not read through (merged again instead)
        if refused := link_not_followed(p):
            return None, refused
    missing = [p.name for p in paths if not p.exists()]
    if len(missing) == len(paths):
        return None, None
    if missing:
        return None, f"incomplete merge outputs ({', '.join(missing)} missing: an interrupted merge)"
    try:
        info = _read_info(paths[2])
    except ValueError as exc:
        return None, f"{MERGE_INFO} {exc}"
    if info.outputs is None:
        return info, None
    current = by_name({p: identity_of(p) for p in paths[:2]}, run_dir)
    changed = differences(info.outputs, current)
    if changed:
        return None, (f"merge outputs do not belong together ({'; '.join(changed)} since {MERGE_INFO} was "
                      "written: an interrupted merge or a replaced file)")
    return info, None


#: the command that replaces a stored merge that is complete but not to be used
FORCE = "trace-merge merge --force"


def trusted(run_dir: Path) -> "tuple[MergeInfo | None, str | None, str]":
    """The stored merge of ``run_dir`` when it can be used, decided once: one read of ``merge_info.json``, one
    identity pass over the sources.

    Returns ``(info, None, _)`` for a trusted merge: a complete output set (:func:`stored_outputs`) whose recorded
    ``inputs`` are the sources found now (none added, removed or changed; modification times do not count:
    ``cp -p`` keeps an old one on a new file). ``(None, None, _)`` when there is none; ``(None, why, command)``
    for one not to use, with the command that replaces it.
    """
    info, why = stored_outputs(run_dir)
    if why:  # an incomplete set is no output: merge replaces it without --force
        return None, f"{run_dir}: {why}", "trace-merge merge"
    if info is None:
        return None, None, ""
    if info.inputs is None:
        return None, f"{run_dir / MERGE_INFO}: no source identity recorded (made by an older trace-merge)", FORCE
    changed = differences(info.inputs, source_identity(run_dir))
    if changed:
        return None, f"{run_dir / MERGED}: out of date, sources changed since it was made ({'; '.join(changed)})", FORCE
    return info, None, ""


def refuse_stored(run_dir: Path, force: bool = False) -> None:
    """Refuse a complete set of outputs in ``run_dir`` unless ``force``; an incomplete one is no output (a warning).

    Raises
    ------
    OutputExistsError
        A complete set (:func:`stored_outputs`) exists and ``force`` is False.
    """
    if force:
        return
    info, why = stored_outputs(run_dir)
    if why:
        log.warning("%s: %s; written anew", run_dir, why)
    elif info is not None:
        raise OutputExistsError(run_dir / MERGED)


def write_merged(res: Merge, run_dir: "str | os.PathLike[str]", force: bool = False) -> dict[str, Path]:
    """Write ``merged.parquet``, ``counters.parquet`` and ``merge_info.json`` into ``run_dir``: all or none.

    Under the run's :func:`lock`, all three are written to temporary names and only then renamed into place,
    ``merge_info.json`` last; it records the identity of the two parquet files beside it
    (:func:`stored_outputs` tells a mixed set) and of the sources (``inputs``, see :mod:`trace_merge.run`).
    Category, nullable-integer and string dtypes survive the round trip (:func:`read_merged`). A partitioned merge
    (:class:`trace_merge.merged.Merge`) is written rank by rank, each rank in row groups of its own,
    listed in ``merge_info.json`` as ``partitions``.

    Raises
    ------
    OutputExistsError
        A complete set of outputs exists and ``force`` is False (nothing is written then). An incomplete set
        (a merge killed or out of disk space) is replaced with a warning.
    OutputBusyError
        Another process is merging this run.
    OutputWriteError
        An output could not be written (disk full); no new output is left in place.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    targets = output_paths(run_dir)
    with lock(run_dir):
        refuse_stored(run_dir, force)
        with atomic_outputs(targets, force=True) as (merged_tmp, counters_tmp, info_tmp):
            partitions = None
            if res.in_memory:  # every row in time order
                _to_parquet(res.frame, merged_tmp)
            else:  # rank by rank, one in memory at a time
                partitions = write_parquet(res, merged_tmp)
            _to_parquet(res.counters, counters_tmp)
            info = replace(res.info, outputs={MERGED: identity_of(merged_tmp), COUNTERS: identity_of(counters_tmp)},
                           partitions=partitions,  # rank -> row groups: a re-summary reads rank by rank
                           trace_merge_version=__version__)
            info_tmp.write_text(info.to_json())
    return dict(zip(("merged", "counters", "info"), targets))


def read_merged(run_dir: "str | os.PathLike[str]", info: Optional[MergeInfo] = None
                ) -> "tuple[pd.DataFrame, pd.DataFrame, MergeInfo]":
    """Load what :func:`write_merged` stored: ``(frame, counters, merge_info)`` with schema dtypes (``info``: the
    merge info already read, not read again).

    Raises
    ------
    TraceInputError
        A file cannot be read, its columns are not the schema's (another version's merge), or
        ``merge_info.json`` is not a JSON object.
    """
    run_dir = Path(run_dir)
    tables = []
    for name, dtypes in ((MERGED, FRAME_DTYPES), (COUNTERS, COUNTER_DTYPES)):
        try:
            df = pd.read_parquet(run_dir / name, engine="pyarrow")
        except (OSError, ValueError) as exc:
            raise TraceInputError(run_dir / name, f"cannot be read ({exc})") from None
        lacking = [c for c in dtypes if c not in df.columns]
        extra = [str(c) for c in df.columns if c not in dtypes]
        if lacking or extra:
            raise TraceInputError(run_dir / name, f"columns are not the schema's (missing: {', '.join(lacking) or '-'}"
                                                  f"; unexpected: {', '.join(extra) or '-'})")
        try:
            tables.append(df[list(dtypes)].astype(dtypes))
        except (TypeError, ValueError) as exc:
            raise TraceInputError(run_dir / name, f"column types are not the frame schema's ({exc})") from None
    if info is None:
        try:
            info = _read_info(run_dir / MERGE_INFO)
        except ValueError as exc:
            raise TraceInputError(run_dir / MERGE_INFO, str(exc)) from None
    return tables[0], tables[1], info


def stored_partitions(run_dir: Path, info: MergeInfo, counters: pd.DataFrame) -> Merge:
    """A trusted stored merge with a partition layout (:func:`trusted`) as a :class:`Merge` whose partitions are
    ``merged.parquet``'s row groups (no summary yet: :func:`trace_merge.analysis.summarise_stored` computes it
    partition by partition)."""
    layout = info.partitions or []
    where: dict[int, Partition] = {p["rank"]: RowGroups(str(run_dir / MERGED), tuple(int(g) for g in p["row_groups"]))
                                   for p in layout}
    rows = {p["rank"]: p["rows"] for p in layout}
    return Merge(partitions=where, rank_rows=rows, counters=counters, info=info, cached=True)

# -- merged.parquet of a partitioned merge: one row group run per rank ---------------------------------------------


def parquet_schema():
    """The Arrow schema of ``merged.parquet``: the frame schema's, categories as ``dictionary<string>`` (an all-null
    category column of one rank would otherwise be ``dictionary<null>`` and not fit the others' row groups)."""
    import pyarrow as pa

    schema = pa.Schema.from_pandas(empty_frame(), preserve_index=False)
    for i, fld in enumerate(schema):
        if pa.types.is_dictionary(fld.type):
            schema = schema.set(i, fld.with_type(pa.dictionary(pa.int32(), pa.string())))
    return schema


#: rows of a row group of ``merged.parquet``: Arrow's Parquet writer holds the group it writes, so smaller groups hold
#: less, down to where they write slower and make the file larger (docs/measurements.md#store)
ROW_GROUP_ROWS = 1 << 19


def write_parquet(pm: Merge, path: Path, row_group_rows: int = ROW_GROUP_ROWS) -> list[PartitionLayout]:
    """Write the partitions into one ``merged.parquet``, rank after rank, each rank's rows in row groups of its own,
    a row group in memory at a time (:func:`_partition_tables`). Returns ``[{rank, rows, row_groups}]`` for
    ``merge_info.json``."""
    import pyarrow.parquet as pq

    schema = parquet_schema()
    layout: list[PartitionLayout] = []
    group = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        for rank in sorted(pm.partitions):
            rows, first = 0, group
            for table in _partition_tables(pm, rank, schema, row_group_rows):
                writer.write_table(table, row_group_size=row_group_rows)
                rows += table.num_rows
                group += max(1, -(-table.num_rows // row_group_rows))
            layout.append({"rank": int(rank), "rows": rows, "row_groups": list(range(first, group))})
    return layout


def _partition_tables(pm: Merge, rank: int, schema: "pa.Schema", rows: int) -> "Iterator[pa.Table]":
    """One rank's partition as Arrow tables of ``schema``, ``rows`` rows each (the last one fewer). A partition file
    of this merge is read as it is, batch by batch (only the category codes are widened), not through pandas and
    back (faster); and read, not mapped: the mapped pages of a whole partition stayed in the process
    (docs/measurements.md#store). Rows kept in memory are converted through pandas."""
    import pyarrow as pa

    def conformed(table: "pa.Table") -> "pa.Table":  # the schema's columns: a partition may hold a subset
        return pa.Table.from_arrays([table.column(f.name).cast(f.type) if f.name in table.column_names
                                     else pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)

    where = pm.partitions[rank]
    if not isinstance(where, ArrowFile):
        yield pa.Table.from_pandas(pm.load(ranks=[rank]), schema=schema, preserve_index=False)
        return
    pending, held, given = [], 0, False
    for batch in file_batches(where.path):
        pending.append(batch)
        held += batch.num_rows
        while held >= rows:
            table = pa.Table.from_batches(pending)
            yield conformed(table.slice(0, rows))
            pending, held, given = table.slice(rows).to_batches(), held - rows, True
    if held:
        yield conformed(pa.Table.from_batches(pending))
    elif not given:  # an empty partition: one empty row group, as for every rank
        yield schema.empty_table()
