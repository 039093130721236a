"""The one way a run becomes a :class:`~trace_merge.merged.Merge`: :func:`open_merge` (``Run.open`` and every command
that reads a run) and :func:`merge_and_store` (``trace-merge merge``).

It decides, once: a trusted stored merge (``merged.parquet`` made from exactly the sources there now) is read whole,
or rank by rank with the summary it kept when it is large; otherwise the sources are merged in memory when they are
small, partition by partition on an engine (:mod:`trace_merge.engines`) when they are large or a scheduler is given.
It owns the engine's lifecycle and the spill directory's (removed when the merge is no longer referenced).

Imports of the data libraries are deferred to the calls: the command line imports this module before it has its
arguments (``tests/test_import_graph.py``).
"""
from __future__ import annotations

import logging
import os
import shutil
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from timelogger.layout import COUNTERS, MERGED, SUMMARY_PARTS
from trace_merge import engines
from trace_merge.errors import TraceInputError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from trace_merge.merged import Merge, MergeInfo
    from trace_merge.schema import Layers

logger = logging.getLogger(__name__)

#: a stored merge of at least this many rows is summarised partition by partition (:func:`open_merge`)
PARTITION_ABOVE_ROWS = 1_000_000


@dataclass(frozen=True)
class MergeOptions:
    """How to open a run.

    scheduler
        A Dask distributed scheduler address (or ``Client``/``LocalCluster``) to run the merge's tasks on.
    workers, memory_bytes
        The local pool's processes and memory budget (:class:`trace_merge.engines.LocalPool`).
    partitioned
        Force (True) or refuse (False) the partitioned path; default: by size, or when ``scheduler`` is given.
    layers
        The layers the partitioned merge summarises (its summary is then at hand).
    keep_rows
        False: a partitioned merge keeps only the summary of ``layers``, not the rows (no partition is written);
        reading rows then raises :class:`~trace_merge.merged.RowsNotKept`. For a summary, nothing else.
    use_stored
        Use a trusted stored merge (False: merge the sources, as ``trace-merge merge`` does).
    all_columns
        A partitioned merge keeps every column (``args`` and ``host`` too: what ``merged.parquet`` stores), and an
        in-memory merge reads its sources one by one (each rank's categories exactly its files', as stored).
    partition_above_bytes, partition_above_rows
        Sources of at least this many bytes are merged partition by partition; a stored merge of at least this many
        rows is summarised partition by partition.
    """

    scheduler: object = None
    workers: Optional[int] = None
    memory_bytes: Optional[int] = None
    partitioned: Optional[bool] = None
    layers: Layers = None
    keep_rows: bool = True
    use_stored: bool = True
    all_columns: bool = False
    partition_above_bytes: Optional[int] = None  # None: partition_above_bytes()
    partition_above_rows: int = PARTITION_ABOVE_ROWS


def open_merge(path: "str | os.PathLike[str]", options: MergeOptions = MergeOptions()) -> "Merge":
    """The run at ``path`` (a run directory, a bare directory of DFTracer ``.pfw[.gz]`` files, or one trace file)
    merged onto one clock; a stored merge that is not to be trusted is merged again from the sources, with a warning
    saying why.

    Raises
    ------
    TraceInputError
        Nothing usable at ``path`` (the message names the file and the cause), or ``path`` is a directory holding
        runs rather than a run (:func:`trace_merge.sources.refuse_runs_below`; runs are never pooled).
    """
    from trace_merge import merge, sources, store

    p = Path(path)
    if not p.exists():
        raise TraceInputError(p, "no such file or directory")
    notes: list[str] = []

    def remerge(why: str, command: str) -> None:  # derived data to make again, never an error
        notes.append(f"{why}; merged again from the sources ({command} stores the new merge)")
        logger.warning("%s", notes[-1])

    info, why, command = store.trusted(p) if options.use_stored and p.is_dir() else (None, None, "")
    if why:
        remerge(why, command)
    if info is not None:
        big = info.partitions is not None and info.rows >= options.partition_above_rows
        if info.partitions is not None and options.partitioned is not False and (
                options.scheduler is not None or options.partitioned or big):
            stored = _open_stored(p, info, options)
            if stored is not None:
                return stored
        try:
            frame, counters, info = store.read_merged(p, info)
        except TraceInputError as exc:
            remerge(str(exc), store.FORCE)
        else:
            logger.info("%s: using %s", p, MERGED)
            whole = merge.Merge(partitions={}, rank_rows={}, counters=counters, info=info,
                                manifest=sources.load_manifest(p)[0], cached=True)
            whole.frame = frame
            return whole
    size = partitioned_input(p, options)
    if size is None:
        res = merge.merge_path(p, batches=not options.all_columns)  # a stored merge keeps its files' categories
        res.frame  # noqa: B018  (loaded now: the rows of a run merged in memory are one frame)
    else:
        res = _merge_partitioned(p, size, options)
    res.info.warnings[:0] = notes
    return res


def merge_and_store(run_dir: Path, options: MergeOptions = MergeOptions(), force: bool = False
                    ) -> "tuple[Merge, dict[str, Path]]":
    """``trace-merge merge``: the sources merged (every column) and stored in ``run_dir`` under the run's lock, with
    the summary's parts of a partitioned merge beside it (:mod:`trace_merge.stored_summary`). Returns the merge
    (its spill directory removed) and the paths written.

    Raises
    ------
    OutputExistsError
        A complete set of outputs exists and ``force`` is False; checked before the (slow) merge.
    """
    from trace_merge import store, stored_summary
    from trace_merge.identity import identity_of

    # the lock before the existence check: of two merges started together the second is refused here
    with store.lock(run_dir):
        store.refuse_stored(run_dir, force=force)
        (run_dir / SUMMARY_PARTS).unlink(missing_ok=True)  # an earlier merge's: it would not match the new one
        res = open_merge(run_dir, replace(options, use_stored=False, all_columns=True))
        try:
            # checked above under the same lock, so nothing can have appeared since
            written = store.write_merged(res, run_dir, force=True)
            if res.parts is not None and res.job is not None:
                parts = stored_summary.write(run_dir, identity_of(run_dir / MERGED), res.job, res.parts)
                if parts is not None:
                    written["summary_parts"] = parts
        finally:
            res.cleanup()
    return res, written


def partitioned_input(p: Path, options: MergeOptions = MergeOptions()) -> Optional[int]:
    """The bytes of ``p``'s sources when they are to be merged partition by partition, else None: forced by
    ``options.partitioned``, or a scheduler given, or at least ``options.partition_above_bytes``."""
    from trace_merge import sources

    if options.partitioned is False:
        return None
    size = sources.source_bytes(p)
    above = partition_above_bytes() if options.partition_above_bytes is None else options.partition_above_bytes
    if options.scheduler is not None or options.partitioned or size >= above:
        return size
    return None


#: the environment variable that sets the size from which sources are merged partition by partition (bytes)
PARTITION_ABOVE_ENV = "TRACE_MERGE_PARTITION_ABOVE_BYTES"


def partition_above_bytes() -> int:
    """Sources of at least this many bytes are merged partition by partition: ``$TRACE_MERGE_PARTITION_ABOVE_BYTES``
    when it is a whole number (0: always; a large value: never unless forced), else
    :data:`~trace_merge.engines.PARTITION_ABOVE_BYTES`."""
    text = os.environ.get(PARTITION_ABOVE_ENV, "").strip()
    return int(text) if text.isdigit() else engines.PARTITION_ABOVE_BYTES


def _merge_partitioned(p: Path, size: int, options: MergeOptions) -> "Merge":
    from trace_merge import kernels, partitioned
    from trace_merge.schema import layers_key

    engine = engines.engine_for(options.scheduler, size, options.workers, options.memory_bytes)
    try:
        res = partitioned.merge_partitioned(p, engine=engine, analysis=kernels.SummaryHook(options.layers),
                                            summary_only=not options.all_columns, keep_rows=options.keep_rows)
    finally:
        engine.close()
    if res.summary is not None:
        res.summaries[layers_key(options.layers)] = res.summary
    _remove_spill_with(res)
    return res


def _open_stored(p: Path, info: "MergeInfo", options: MergeOptions) -> "Optional[Merge]":
    """A trusted stored merge with a partition layout, summarised rank by rank (its frame loaded on demand) from
    the parts it kept when they belong to it; None when its counters cannot be read (the whole-frame path then
    says why)."""
    import pandas as pd

    from trace_merge import analysis, sources, store, stored_summary
    from trace_merge.schema import COUNTER_DTYPES, layers_key

    try:
        counters = pd.read_parquet(p / COUNTERS).astype(COUNTER_DTYPES)
    except (OSError, ValueError):
        return None
    pm = store.stored_partitions(p, info, counters)
    kept = stored_summary.read(p, (info.outputs or {}).get(MERGED))
    if kept is not None:
        pm.job, summary = analysis.summarise_stored(pm, stored=kept)
    else:
        engine = engines.engine_for(options.scheduler, sum(pm.rank_rows.values()) * 100, options.workers,
                                    options.memory_bytes)
        try:
            pm.job, summary = analysis.summarise_stored(pm, engine)
        finally:
            engine.close()
    pm.summary = pm.summaries[layers_key(None)] = summary
    pm.manifest = sources.load_manifest(p)[0]
    return pm


def _remove_spill_with(res: "Merge") -> None:
    """The merge's spill directory goes when the merge does (a finalizer that holds no reference to it)."""
    if res.spill is not None:
        weakref.finalize(res, shutil.rmtree, str(res.spill), True)


def start_pool_early(path: "str | os.PathLike[str] | None", scheduler: object, workers: Optional[int]) -> None:
    """A command that merges given inputs large enough for the local pool starts the pool's fork server before it
    imports the analysis: the server imports the same modules meanwhile, on the other core, and the first wave
    finds it ready. The walk that decides it counts every file's bytes, stopping at the threshold; a stored merge is
    summarised from its parts."""
    if path is None or scheduler is not None or workers == 1:
        return
    if (Path(path) / MERGED).exists() or not engines.holds_at_least(path, partition_above_bytes()):
        return
    engines.start_fork_server()


#: the data libraries loaded with one BLAS thread (:func:`trace_merge.engines.one_blas_thread`)
one_blas_thread = engines.one_blas_thread
