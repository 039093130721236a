"""Where a run's traces are: run directories and loose inputs, the files of each layer, the manifest, the launcher's
records, the identity of every source, and the facts about sources that a merge needs before it aligns them
(tf_profile anchors, file-name tables, ranks that ended early or are missing).

A run directory (``manifest.json``, ``app/``, ``tf/rank-<r>/``, ``torch/rank-<r>/``, ``horovod/``, ``posix/``,
``darshan/``; :mod:`timelogger.layout`, ``docs/frame.md``) or loose inputs: a bare directory of ``.pfw``/
``.pfw.gz``/``.darshan``/``.xplane.pb``/``.pt.trace.json[.gz]`` files (searched recursively, e.g. a TF logdir) or a
single file. A directory that is not a run but holds runs below it is refused (:func:`refuse_runs_below`), never
pooled into one.
"""
from __future__ import annotations

import json
import os
import shlex
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from timelogger import layout
from timelogger.layout import MANIFEST, link_not_followed
from timelogger.records import LaunchRecord, Manifest

from .errors import TraceInputError
from .identity import Identity, by_name, duplicates, identity_of
from .readers import detect
from .readers.pfw import TimeLoggerMeta
from .schema import MAX_RANKS, SourceData, checked_int

LOOKED_FOR = ("app/*.pfw[.gz], tf/**/*.xplane.pb, torch/**/*.pt.trace.json[.gz], horovod/*.json, posix/*.pfw[.gz], "
              "darshan/*.darshan")
_LOOSE_PATTERNS = ("*.pfw", "*.pfw.gz", "*.darshan", "*.xplane.pb", "*.json", "*.json.gz")
#: the PyTorch profiler's traces in ``torch/rank-<r>/`` (``tensorboard_trace_handler``'s names)
TORCH_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz")


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
    if refused := link_not_followed(root):  # another user's link (posix -> /root/traces) is never read through
        warnings.append(refused)
        return []
    found: list[Path] = []

    def unlistable(exc: OSError) -> None:
        warnings.append(f"{exc.filename}: cannot list ({exc.strerror or exc}); the traces in it are left out")

    for here, dirs, names in os.walk(root, onerror=unlistable):
        for name in sorted(dirs + names):
            if not any(fnmatchcase(name, pat) for pat in patterns):
                continue
            p = Path(here) / name
            if refused := link_not_followed(p):
                warnings.append(refused)
            elif p.is_file():
                found.append(p)
            elif p.is_dir():
                warnings.append(f"{p}: a directory named like a trace file; skipped")
            else:
                warnings.append(f"{p}: not a regular file (a broken link?); skipped")
        if not recursive:
            break
    return sorted(found)


def launch_records(path: Path) -> list[LaunchRecord]:
    """The launcher's per-rank records (``launch/rank-<r>.json``) of a run directory; unreadable ones are skipped
    (the traces do not need them: they only place rows of processes no app file names)."""
    out = []
    for p in sorted((Path(path) / layout.LAUNCH_DIR).glob(layout.LAUNCH_GLOB)) if Path(path).is_dir() else []:
        if link_not_followed(p) or link_not_followed(p.parent):
            continue
        try:
            record = LaunchRecord.from_json(json.loads(p.read_text()))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if record is not None:
            out.append(record)
    return out


def load_manifest(run_dir: Path) -> "tuple[dict[str, Any] | None, str | None]":
    """``manifest.json`` of a run directory (its JSON object, as the report shows it; its fields are read through
    :class:`timelogger.records.Manifest`) and a warning when it exists but cannot be read.

    The traces do not need the manifest, so a bad one is a warning, not an error.
    """
    p = run_dir / MANIFEST
    if refused := link_not_followed(p):
        return None, refused
    if not p.is_file():
        return None, None
    try:
        manifest = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{p}: unreadable manifest, ignored ({exc})"
    if not isinstance(manifest, dict):
        return None, f"{p}: manifest is not a JSON object, ignored"
    return manifest, None


def launched_at(manifest: "Mapping[str, object] | None") -> "int | None":
    """When the run was launched (wall ns): the manifest's ``created_wall_ns``, when it has one."""
    m = Manifest.from_json(manifest)
    return None if m is None else m.created_wall_ns


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
    files, manifest, _, _ = find_sources(path)
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
    if path.is_dir() and (path / MANIFEST).is_file() and not link_not_followed(path / MANIFEST):
        named[path / MANIFEST] = identity_of(path / MANIFEST)
    return ids, by_name(named, _root(path))


def find_sources(
    path: Path,
) -> "tuple[list[tuple[Path, str]], dict[str, Any] | None, list[str], dict[str, Identity]]":
    """:func:`discover` plus warnings (unreadable manifest, unlistable directories, copies left out) and the
    identity of what was found (:attr:`trace_merge.merged.MergeInfo.inputs`).

    The same content under two names (a rank file copied beside itself, a trace set synced twice) would count
    every event twice: the later copy is left out with ``"<copy>: same content as <first>; skipped"``.

    Zero-byte ``.pfw``/``.pfw.gz`` files (DFTracer's preload leaves one per process that traced nothing, thousands
    in a large job) are left out with one warning for all of them, ``"<dir>: N empty trace files skipped (first:
    <file>)"``: read one by one, each cost an empty frame and a warning line of its own (docs/measurements.md#sources).
    They stay in the identity, so one that gains content later is seen as changed.
    """
    files, manifest, warnings = _listing(path)
    ids, inputs = _identities([p for p, _ in files], path)
    copies = duplicates(ids)
    warnings += [f"{copy}: same content as {first}; skipped" for copy, first in copies.items()]
    empty = [p for p, _ in files if ids[p]["size"] == 0 and p.name.endswith((".pfw", ".pfw.gz"))]
    if len(empty) == 1:
        warnings.append(f"{empty[0]}: empty file (no events); skipped")
    elif empty:
        warnings.append(f"{_root(path)}: {len(empty)} empty trace files skipped (first: {empty[0]})")
    left_out = set(copies).union(empty)
    return [f for f in files if f[0] not in left_out], manifest, warnings, inputs


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
        files += found(layout.TORCH_DIR, TORCH_PATTERNS, "torch", recursive=True)
        files += found(layout.HOROVOD_DIR, ("*.json", "*.json.gz"), "horovod")
        files += found(layout.POSIX_DIR, ("*.pfw", "*.pfw.gz"), "")
        files += found(layout.DARSHAN_DIR, ("*.darshan",), "darshan")
        # TimeLogger files whose header says layer "noise" (the reader puts their rows in that layer)
        files += found(layout.NOISE_DIR, ("*.pfw", "*.pfw.gz"), "timelogger")
        files += found(layout.CPU_DIR, ("*.pfw", "*.pfw.gz"), "timelogger")  # the same: header layer "cpu"
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
    # a stable sort, not a membership test per file in the list of app files (quadratic: docs/measurements.md#sources)
    files.sort(key=lambda f: not f[0].name.endswith((".pfw", ".pfw.gz")))
    return files, None, warnings


def anchors_by_rank(app: list[SourceData]) -> dict[int, list[dict[str, Any]]]:
    """rank -> ``tf_profile`` metadata dicts of that rank's app files (with the writer's pid)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for m in _app_metas(app):
        for anchor in m.tf_anchors:
            a = dict(anchor)
            a.setdefault("pid", m.pid)
            out.setdefault(m.rank or 0, []).append(a)
    return out


def _app_metas(app: list[SourceData]) -> list[TimeLoggerMeta]:
    """The metadata of the rank processes' TimeLogger files among ``app`` (not the launcher's sidecars')."""
    return [s.meta for s in app if isinstance(s.meta, TimeLoggerMeta) and not s.meta.side_layer]


def resolve_names(frame: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """``frame`` with the DFTracer file hashes in ``file`` that ``names`` (hash -> path) knows replaced."""
    if not len(frame) or not names:
        return frame
    col = frame["file"]
    if not any(c in names for c in col.cat.categories):
        return frame
    # categories, not rows: each category's name, then one code per row (two hashes may name one file)
    codes, uniques = pd.factorize(pd.Index([names.get(c, c) for c in col.cat.categories], dtype=object))
    was = col.cat.codes.to_numpy()
    frame = frame.copy(deep=False)
    frame["file"] = pd.Categorical.from_codes(np.where(was >= 0, codes[np.maximum(was, 0)], -1),
                                              categories=pd.Index(uniques, dtype=object))
    return frame


def ended_early(app: list[SourceData]) -> list[str]:
    """One warning per rank process whose TimeLogger file says it ended early (an uncaught exception, SIGINT, a
    signal, no close record). Worker processes of a rank (their parent wrote an app file of that rank too) are
    left out: a reader pool's workers are stopped by signals as a matter of course."""
    pids = {(m.rank, m.host, m.pid) for m in _app_metas(app)}
    out = []
    for s in app:
        m = s.meta
        if (not isinstance(m, TimeLoggerMeta) or m.side_layer or not m.ended_early
                or (m.rank, m.host, m.ppid) in pids):
            continue
        out.append(f"rank {m.rank} {m.ended_early} (pid {m.pid} on {m.host}, {s.path}); the app layer is incomplete")
    return sorted(out)


def missing_ranks(path: Path, manifest: "Mapping[str, object] | None", app: list[SourceData]) -> list[str]:
    """Warnings about the world size (a bad value in the manifest) and the ranks it names that have no app file.

    Work and output are bounded by the ranks present, not by the world size a file claims: missing ranks are
    the gaps between present ranks and the tail up to the world size, given as ranges.
    """
    warnings: list[str] = []
    m = Manifest.from_json(manifest)
    # a value of the wrong type is named in the warning as it is in the file
    given = {} if m is None else {"world_size": m.rejected.get("world_size", m.world_size)}
    world = checked_int(given, "world_size", 1, MAX_RANKS, str(path / MANIFEST), warnings)
    for meta in _app_metas(app):  # the reader checked app headers' values
        world = world or meta.world_size
    if not world:
        return warnings
    present = sorted({m.rank for m in _app_metas(app) if m.rank is not None})
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
