"""Find every source of a run, read it, align it, and store the merged frame.

A run directory (``manifest.json``, ``app/``, ``tf/rank-<r>/``, ``horovod/``, ``posix/``, ``darshan/``;
:mod:`timelogger.layout`, ``docs/frame.md``) or loose inputs: a bare directory of ``.pfw``/``.pfw.gz``/
``.darshan``/``.xplane.pb`` files (searched recursively, e.g. a TF logdir) or a single file. A directory that
is not a run but holds runs below it is refused (:func:`refuse_runs_below`), never pooled into one.

A file that fails to read among others is skipped with a warning ``"<path>: <cause>"``; when nothing
is usable :class:`~trace_merge.errors.TraceInputError` names the path and what was looked for.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
from fnmatch import fnmatchcase
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import pandas as pd

from timelogger import layout
from timelogger.layout import COUNTERS, MANIFEST, MERGE_INFO, MERGE_LOCK, MERGED

from . import __version__
from .align import APP_KINDS, align, meta_value
from .errors import OutputExistsError, TraceInputError
from .identity import Identity, by_name, differences, duplicates, identity_of
from .outputs import atomic_outputs, exclusive
from .readers import detect, rank_from_name, read_any
from .schema import (
    COUNTER_DTYPES,
    FRAME_DTYPES,
    MAX_RANKS,
    SourceData,
    checked_int,
    empty_counters,
)

if TYPE_CHECKING:
    from .partitioned import PartitionedMerge

log = logging.getLogger(__name__)

_LOOKED_FOR = "app/*.pfw[.gz], tf/**/*.xplane.pb, horovod/*.json, posix/*.pfw[.gz], darshan/*.darshan"
_LOOSE_PATTERNS = ("*.pfw", "*.pfw.gz", "*.darshan", "*.xplane.pb", "*.json", "*.json.gz")


@dataclass
class MergeResult:
    """A merged run.

    Attributes
    ----------
    frame
        All interval rows (schema :data:`trace_merge.schema.FRAME_DTYPES`), absolute epoch ns on
        rank 0's clock, epoch/step propagated from the app layer.
    counters
        Counter rows (Darshan), :data:`trace_merge.schema.COUNTER_DTYPES`.
    warnings
        One line each, ``"<path>: <cause>"``: skipped files, missing ranks, dropped sources.
    residual
        Alignment check, see :func:`trace_merge.align.alignment_residual`.
    manifest
        ``manifest.json`` of the run, or None for loose inputs.
    sources
        Paths of the files that made it into the frame.
    clock_offsets_ns
        rank -> the clock offset (ns, that rank's clock minus rank 0's) subtracted from its rows.
    dxt_clock
        Per Darshan log and rank, where its DXT segments were placed (:class:`trace_merge.dxt_clock.DxtClock`
        as a dict: ``source, rank, offset_ns, confidence, basis, matched, segments, uncertainty_ns``).
    inputs
        Identity (:mod:`trace_merge.identity`) of every file found, read or not, and of ``manifest.json``,
        keyed by the name relative to the merged directory; taken before reading, so a file that changes
        during the merge shows as changed afterwards.
    dropped
        app file -> intervals its TimeLogger writer dropped (could not keep up, or a write failed); only files
        that dropped any. Each also has a warning.
    """

    frame: pd.DataFrame
    counters: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    residual: dict[str, Any] = field(default_factory=dict)
    manifest: "dict[str, Any] | None" = None
    sources: list[str] = field(default_factory=list)
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)
    dxt_clock: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, Identity] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def rows_per_layer(self) -> dict[str, int]:
        counts = self.frame["layer"].value_counts()
        return {str(k): int(v) for k, v in counts.items() if v}


def is_run_dir(path: Path) -> bool:
    """A run directory has a manifest or at least one of the per-layer subdirectories."""
    return path.is_dir() and (
        (path / MANIFEST).is_file() or any((path / d).is_dir() for d in layout.LAYER_DIRS)
    )


def runs_below(path: Path) -> list[Path]:
    """The run directories below ``path`` (``path`` itself excluded; a run's own subdirectories are not
    searched), sorted."""
    found = []
    for root, dirs, _ in os.walk(path):
        here = Path(root)
        if here != path and is_run_dir(here):
            found.append(here)
            dirs.clear()
    return sorted(found)


def refuse_runs_below(path: Path) -> None:
    """Refuse a directory that is not a run itself but holds runs below it, before anything is read or written.

    Reading it as loose inputs would pool the runs into one (two rank-0 runs become one rank spanning both
    jobs). Exactly one run below is refused as well: read loosely it would lose its layout (no manifest, no
    rank check) and ``merge`` would write beside it instead of into it, so the user is pointed at the run.

    Raises
    ------
    TraceInputError
        ``"<path>: holds 2 runs (<path>/a, <path>/b); give one of them, or compare them with: trace-merge
        compare <path>/a <path>/b"``, or for one run ``"<path>: holds 1 run (<path>/a); give that run
        directory itself"``.
    """
    if not path.is_dir() or is_run_dir(path):
        return
    runs = runs_below(path)
    names = ", ".join(map(str, runs))
    if len(runs) == 1:
        raise TraceInputError(path, f"holds 1 run ({names}); give that run directory itself")
    if runs:
        raise TraceInputError(path, f"holds {len(runs)} runs ({names}); give one of them, or compare them with: "
                                    f"trace-merge compare {' '.join(shlex.quote(str(r)) for r in runs)}")


def _files(root: Path, patterns: Iterable[str], recursive: bool, warnings: list[str]) -> list[Path]:
    """Files below ``root`` whose name matches one of ``patterns`` (in ``root`` only unless ``recursive``), sorted.

    What would silently drop data is a warning instead: a directory that cannot be listed (its files are
    missing from the merge) and a match that is not a regular file (a directory named ``x.pfw.gz``, a broken
    link). A missing ``root`` is a layer that was not captured and says nothing.
    """
    if not os.path.lexists(root):
        return []
    found: list[Path] = []

    def unlistable(exc: OSError) -> None:
        warnings.append(f"{exc.filename}: cannot list ({exc.strerror or exc}); the traces in it are left out")

    for here, dirs, names in os.walk(root, onerror=unlistable):
        for name in sorted(dirs + names):
            if not any(fnmatchcase(name, pat) for pat in patterns):
                continue
            p = Path(here) / name
            if p.is_file():
                found.append(p)
            elif p.is_dir():
                warnings.append(f"{p}: a directory named like a trace file; skipped")
            else:
                warnings.append(f"{p}: not a regular file (a broken link?); skipped")
        if not recursive:
            break
    return sorted(found)


def launch_records(path: Path) -> "list[dict[str, Any]]":
    """The launcher's per-rank records (``launch/rank-<r>.json``) of a run directory; unreadable ones are skipped
    (the traces do not need them: they only place rows of processes no app file names)."""
    out = []
    for p in sorted((Path(path) / layout.LAUNCH_DIR).glob(layout.LAUNCH_GLOB)) if Path(path).is_dir() else []:
        try:
            record = json.loads(p.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def load_manifest(run_dir: Path) -> "tuple[dict[str, Any] | None, str | None]":
    """``manifest.json`` of a run directory and a warning when it exists but cannot be read.

    The traces do not need the manifest, so a bad one is a warning, not an error.
    """
    p = run_dir / MANIFEST
    if not p.is_file():
        return None, None
    try:
        manifest = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{p}: unreadable manifest, ignored ({exc})"
    if not isinstance(manifest, dict):
        return None, f"{p}: manifest is not a JSON object, ignored"
    return manifest, None


def discover(path: Path) -> "tuple[list[tuple[Path, str]], dict[str, Any] | None]":
    """The trace files of a run directory or loose input, each with its kind (not yet read).

    Returns
    -------
    (files, manifest)
        ``files``: ``(path, kind)`` with app files first (their metadata anchors the others); a file
        whose kind cannot be told is listed with kind ``""`` so the reader's error becomes a warning; a file
        with the same content as an earlier one is left out. ``manifest`` is None for loose inputs and for an
        unreadable ``manifest.json``.
    """
    files, manifest, _, _ = _discover(path)
    return files, manifest


def _root(path: Path) -> Path:
    """The directory source names are relative to (and outputs are written into)."""
    return path if path.is_dir() else path.parent


def source_identity(path: Path) -> dict[str, Identity]:
    """Identity of every file :func:`merge_path` would look at under ``path`` (``manifest.json`` included),
    keyed by name relative to ``path``: what ``merge_info.json`` records as ``inputs``."""
    files, _, _ = _listing(path)
    return _identities([p for p, _ in files], path)[1]


def source_bytes(path: Path) -> int:
    """Bytes on disk of the trace files :func:`discover` finds under ``path`` (0 when it finds none)."""
    try:
        files, _, _ = _listing(path)
    except TraceInputError:
        return 0
    return bytes_on_disk(p for p, _ in files)


def bytes_on_disk(paths: Iterable[Path]) -> int:
    """Σ of the sizes of ``paths`` (a file gone since it was listed counts 0)."""
    total = 0
    for p in paths:
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def _identities(paths: list[Path], path: Path) -> "tuple[dict[Path, Identity], dict[str, Identity]]":
    """Identity of ``paths`` (by path) and of them plus ``manifest.json`` (by name relative to ``path``)."""
    ids = {p: identity_of(p) for p in paths}
    named = dict(ids)
    if path.is_dir() and (path / MANIFEST).is_file():
        named[path / MANIFEST] = identity_of(path / MANIFEST)
    return ids, by_name(named, _root(path))


def _discover(
    path: Path,
) -> "tuple[list[tuple[Path, str]], dict[str, Any] | None, list[str], dict[str, Identity]]":
    """:func:`discover` plus warnings (unreadable manifest, unlistable directories, copies left out) and the
    identity of what was found (:attr:`MergeResult.inputs`).

    The same content under two names (a rank file copied beside itself, a trace set synced twice) would count
    every event twice: the later copy is left out with ``"<copy>: same content as <first>; skipped"``.
    """
    files, manifest, warnings = _listing(path)
    ids, inputs = _identities([p for p, _ in files], path)
    copies = duplicates(ids)
    warnings += [f"{copy}: same content as {first}; skipped" for copy, first in copies.items()]
    return [f for f in files if f[0] not in copies], manifest, warnings, inputs


def _listing(path: Path) -> "tuple[list[tuple[Path, str]], dict[str, Any] | None, list[str]]":
    """The files of :func:`discover` before copies are left out, the manifest, and warnings."""
    if path.is_file():
        return [(path, "")], None, []
    if not path.is_dir():
        raise TraceInputError(path, "no such file or directory")
    warnings: list[str] = []
    if is_run_dir(path):
        manifest, bad_manifest = load_manifest(path)
        if bad_manifest:
            warnings.append(bad_manifest)

        def found(sub: str, patterns: tuple[str, ...], kind: str, recursive: bool = False) -> list[tuple[Path, str]]:
            return [(p, kind) for p in _files(path / sub, patterns, recursive, warnings)]

        files = found(layout.APP_DIR, ("*.pfw", "*.pfw.gz"), "timelogger")
        files += found(layout.TF_DIR, ("*.xplane.pb",), "xplane", recursive=True)
        files += found(layout.HOROVOD_DIR, ("*.json", "*.json.gz"), "horovod")
        files += found(layout.POSIX_DIR, ("*.pfw", "*.pfw.gz"), "")
        files += found(layout.DARSHAN_DIR, ("*.darshan",), "darshan")
        # TimeLogger files whose header says layer "noise" (the reader puts their rows in that layer)
        files += found(layout.NOISE_DIR, ("*.pfw", "*.pfw.gz"), "timelogger")
        return files, manifest, warnings
    refuse_runs_below(path)
    files = []
    for p in _files(path, _LOOSE_PATTERNS, True, warnings):
        if p.name.endswith((".json", ".json.gz")):
            try:
                kind = detect(p)
            except TraceInputError:
                continue  # unrelated JSON beside the traces (configs, summaries)
            files.append((p, kind))
        else:
            files.append((p, ""))
    app = [f for f in files if f[0].name.endswith((".pfw", ".pfw.gz"))]
    rest = [f for f in files if f not in app]
    return app + rest, None, warnings


def _anchors(app: list[SourceData]) -> dict[int, list[dict[str, Any]]]:
    """rank -> ``tf_profile`` metadata dicts of that rank's app files (with the writer's pid)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for src in app:
        rank = meta_value(src.meta, "rank")
        found = meta_value(src.meta, "tf_anchors", "tf_profile", "tf_profiles", default=[])
        if isinstance(found, dict):
            found = [found]
        for anchor in found or []:
            a = dict(anchor)
            a.setdefault("pid", meta_value(src.meta, "pid"))
            out.setdefault(int(rank or 0), []).append(a)
    return out


#: kinds whose reader (:mod:`trace_merge.readers.pfw`) is thread-safe and releases the GIL while it
#: decompresses and parses, so several files are read at once (one gunzips while another parses)
_THREADED_KINDS = ("timelogger", "dftracer")
#: files read at once: one per core (pyarrow parses each with all cores; more files in flight only add
#: memory, each holds its decompressed text), at most 4
_READ_THREADS = max(1, min(4, os.cpu_count() or 1))


def _read_all(
    files: list[tuple[Path, str]], warnings: list[str]
) -> list[SourceData]:
    """Read app files first, then the others with the app files' anchors; failures become warnings.

    Sources and warnings come out in file order however many files are read at once.
    """

    def attempt(p: Path, kind: str, kw: dict[str, Any]) -> "SourceData | str":
        try:
            return read_any(p, kind=kind, **kw)
        except TraceInputError as exc:
            return str(exc)
        except ImportError as exc:
            return f"{p}: {exc}"

    def read_batch(batch: list, pool: ThreadPoolExecutor) -> None:
        """``batch``: (path, kind, kwargs) or a warning string, in order; sources/warnings in that order."""
        pending = [pool.submit(attempt, *job) if not isinstance(job, str) and job[1] in _THREADED_KINDS
                   else job for job in batch]
        for item in pending:
            if isinstance(item, str):
                out = item
            elif isinstance(item, tuple):  # a reader not known to be thread-safe: here, in order
                out = attempt(*item)
            else:
                out = item.result()
            if isinstance(out, str):
                warnings.append(out)
            else:
                sources.append(out)

    sources: list[SourceData] = []
    first: list = []
    later: list[tuple[Path, str]] = []
    for p, kind in files:
        try:
            kind = kind or detect(p)
        except TraceInputError as exc:
            first.append(str(exc))
            continue
        if kind not in APP_KINDS:
            later.append((p, kind))
        else:
            first.append((p, kind, {}))
    with ThreadPoolExecutor(max_workers=_READ_THREADS, thread_name_prefix="trace-read") as pool:
        read_batch(first, pool)
        anchors = _anchors(sources)
        all_anchors = [a for lst in anchors.values() for a in lst]
        second = []
        for p, kind in later:
            kw: dict[str, Any] = {}
            if kind == "xplane":
                rank = rank_from_name(str(p))
                kw = {"rank": rank, "anchors": anchors.get(rank, []) if rank is not None else all_anchors}
            second.append((p, kind, kw))
        read_batch(second, pool)
    for src in sources:
        warnings.extend(src.warnings)
    return sources


def resolve_shared_names(sources: list[SourceData]) -> None:
    """Resolve file hashes a DFTracer trace uses but another trace of the run defines.

    DFTracer writes a name's ``FH`` (hash -> path) record once per process tree: a forked child (a
    ``multiprocessing.Pool`` reader, ``trace-<id>-fork.pfw.gz``) inherits its parent's table and writes only the
    hashes, so its reads would carry no file name. The reader resolves each file's own table; this takes the
    union of the run's tables for what is left.
    """
    names: dict[str, str] = {}
    for src in sources:
        if src.kind == "dftracer":
            names.update(src.meta.get("files") or {})
    for src in sources:
        if src.kind == "dftracer":
            src.frame = resolve_names(src.frame, names)


def resolve_names(frame: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """``frame`` with the DFTracer file hashes in ``file`` that ``names`` (hash -> path) knows replaced."""
    if not len(frame) or not names:
        return frame
    col = frame["file"]
    if not any(c in names for c in col.cat.categories):
        return frame
    frame = frame.copy(deep=False)
    frame["file"] = col.astype(object).map(lambda v: names.get(v, v)).astype("category")
    return frame


def ended_early(app: list[SourceData]) -> list[str]:
    """One warning per rank process whose TimeLogger file says it ended early (an uncaught exception, SIGINT, a
    signal, no close record). Worker processes of a rank (their parent wrote an app file of that rank too) are
    left out: a reader pool's workers are stopped by signals as a matter of course."""
    pids = {(meta_value(s.meta, "rank"), meta_value(s.meta, "host"), meta_value(s.meta, "pid")) for s in app}
    out = []
    for s in app:
        why = meta_value(s.meta, "ended_early")
        rank, host = meta_value(s.meta, "rank"), meta_value(s.meta, "host")
        if not why or (rank, host, meta_value(s.meta, "ppid")) in pids:
            continue
        out.append(f"rank {rank} {why} (pid {meta_value(s.meta, 'pid')} on {host}, {s.path}); the app layer "
                   "is incomplete")
    return sorted(out)


def _missing_ranks(path: Path, manifest: "dict[str, Any] | None", app: list[SourceData]) -> list[str]:
    """Warnings about the world size (a bad value in the manifest) and the ranks it names that have no app file.

    Work and output are bounded by the ranks present, not by the world size a file claims: missing ranks are
    the gaps between present ranks and the tail up to the world size, given as ranges.
    """
    warnings: list[str] = []
    world = checked_int(manifest or {}, "world_size", 1, MAX_RANKS, str(path / MANIFEST), warnings)
    for src in app:  # the reader checked app headers' values
        world = world or meta_value(src.meta, "world_size")
    if not world:
        return warnings
    present = sorted({r for s in app if isinstance(r := meta_value(s.meta, "rank"), int)})
    gaps: list[tuple[int, int]] = []  # [first, last] of each run of missing ranks
    expected = 0
    for r in present + [world]:
        if r > expected:
            gaps.append((expected, min(r, world) - 1))
        expected = max(expected, r + 1)
        if expected >= world:
            break
    if not gaps:
        return warnings
    n_missing = sum(b - a + 1 for a, b in gaps)
    names = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps)
    note = "; their layers are unaligned"
    if n_missing > 2 * len(present) + 16:
        note += f" ({n_missing} missing, only {len(present)} present: is world_size right?)"
    warnings.append(f"{path}: no app (TimeLogger) files for rank(s) {names} of world_size {world}" + note)
    return warnings


def merge_path(path: "str | os.PathLike[str]") -> MergeResult:
    """Read, align and merge every trace under ``path``.

    Parameters
    ----------
    path
        A run directory, a directory of loose trace files (recursively), or one trace file.

    Returns
    -------
    MergeResult

    Raises
    ------
    TraceInputError
        Nothing usable was found (the message lists what was looked for, and why files failed).
    """
    path = Path(path)
    files, manifest, warnings, inputs = _discover(path)
    if not files:
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise TraceInputError(path, f"no trace files found (looked for {_LOOKED_FOR}){why}")
    sources = _read_all(files, warnings)
    resolve_shared_names(sources)
    usable = [s for s in sources if len(s.frame) or len(s.counters)]
    if not usable:
        why = "; ".join(warnings) if warnings else "all empty"
        raise TraceInputError(path, f"no usable trace data ({why})")
    app = [s for s in sources if s.kind in APP_KINDS]
    warnings.extend(ended_early(app))
    if is_run_dir(path):
        warnings.extend(_missing_ranks(path, manifest, app))
    launch = (manifest or {}).get("created_wall_ns")
    aligned = align(sources, launch_ns=launch if isinstance(launch, int) and not isinstance(launch, bool) else None,
                    launched=launch_records(path))
    warnings.extend(aligned.warnings)
    counters = [s.counters for s in sources if len(s.counters) and s.path not in aligned.dropped]
    counters_df = pd.concat(counters, ignore_index=True) if counters else empty_counters()
    counters_df = counters_df.astype(COUNTER_DTYPES)
    for w in warnings:
        log.warning("%s", w)
    return MergeResult(
        frame=aligned.frame,
        counters=counters_df,
        warnings=warnings,
        residual=aligned.residual,
        manifest=manifest,
        sources=[s.path for s in sources if s.path not in aligned.dropped],
        clock_offsets_ns=aligned.offsets,
        dxt_clock=[c.as_dict() for c in aligned.dxt_clock],
        inputs=inputs,
        dropped={s.path: int(meta_value(s.meta, "dropped")) for s in app
                 if meta_value(s.meta, "dropped") and s.path not in aligned.dropped},
    )


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


def stored_outputs(run_dir: Path) -> "tuple[dict[str, Any] | None, str | None]":
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
    missing = [p.name for p in paths if not p.exists()]
    if len(missing) == len(paths):
        return None, None
    if missing:
        return None, f"incomplete merge outputs ({', '.join(missing)} missing: an interrupted merge)"
    try:
        info = json.loads(paths[2].read_text())
    except (OSError, ValueError) as exc:
        return None, f"{MERGE_INFO} cannot be read ({exc})"
    if not isinstance(info, dict):
        return None, f"{MERGE_INFO} is not a JSON object"
    recorded = info.get("outputs")
    if recorded is None:
        return info, None
    current = by_name({p: identity_of(p) for p in paths[:2]}, run_dir)
    changed = differences(recorded if isinstance(recorded, dict) else {}, current)
    if changed:
        return None, (f"merge outputs do not belong together ({'; '.join(changed)} since {MERGE_INFO} was "
                      "written: an interrupted merge or a replaced file)")
    return info, None


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


def write_merged(res: "MergeResult | PartitionedMerge", run_dir: "str | os.PathLike[str]", force: bool = False) -> dict[str, Path]:
    """Write ``merged.parquet``, ``counters.parquet`` and ``merge_info.json`` into ``run_dir``: all or none.

    Under the run's :func:`lock`, all three are written to temporary names and only then renamed into place,
    ``merge_info.json`` last; it records the identity of the two parquet files beside it
    (:func:`stored_outputs` tells a mixed set) and of the sources (``inputs``, see :mod:`trace_merge.run`).
    Category, nullable-integer and string dtypes survive the round trip (:func:`read_merged`). A partitioned merge
    (:class:`trace_merge.partitioned.PartitionedMerge`) is written rank by rank, each rank in row groups of its own,
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
            if isinstance(res, MergeResult):
                _to_parquet(res.frame, merged_tmp)
            else:  # a partitioned merge: rank by rank, one in memory at a time
                from trace_merge.partitioned import write_parquet

                partitions = write_parquet(res, merged_tmp)
            _to_parquet(res.counters, counters_tmp)
            info = {
                "trace_merge_version": __version__,
                "sources": res.sources,
                "inputs": res.inputs,
                "outputs": {MERGED: identity_of(merged_tmp), COUNTERS: identity_of(counters_tmp)},
                "warnings": res.warnings,
                "residual": res.residual,
                "clock_offsets_ns": {str(r): int(o) for r, o in res.clock_offsets_ns.items()},
                "dxt_clock": res.dxt_clock,
                "dropped_intervals": res.dropped,
                "rows_per_layer": res.rows_per_layer(),
                "rows": int(len(res.frame)) if partitions is None else int(sum(res.rows.values())),
                "counter_rows": int(len(res.counters)),
            }
            if partitions is not None:
                info["partitions"] = partitions  # rank -> row groups: a re-summary reads rank by rank
            info_tmp.write_text(json.dumps(info, indent=2, default=str) + "\n")
    return dict(zip(("merged", "counters", "info"), targets))


def read_merged(run_dir: "str | os.PathLike[str]") -> "tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]":
    """Load what :func:`write_merged` stored: ``(frame, counters, merge_info)`` with schema dtypes.

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
    try:
        info = json.loads((run_dir / MERGE_INFO).read_text())
    except (OSError, ValueError) as exc:
        raise TraceInputError(run_dir / MERGE_INFO, f"cannot be read ({exc})") from None
    if not isinstance(info, dict):
        raise TraceInputError(run_dir / MERGE_INFO, "is not a JSON object")
    return tables[0], tables[1], info
