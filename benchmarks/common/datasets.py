"""What the synthetic-data generators share: the ``generator.json`` spec, re-use or refusal of an output directory,
and atomic file writes.

A generator writes its spec (a frozen dataclass with ``as_dict()``) to ``generator.json`` after its last data file.
A later run with the same spec finds it there and leaves the directory as it is; a directory holding data files of
any other (or no) spec is an :class:`OutputExistsError` unless ``force``, and then only the data files (and the
old spec) are removed. Every file is written as ``<name>.part`` and renamed into place, so an interrupted run
never leaves a half-written file under a data file's name.
"""
from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from benchmarks.common.errors import OutputExistsError, TraceInputError

log = logging.getLogger(__name__)

SPEC_FILE = "generator.json"

S = TypeVar("S")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield ``<path>.part`` to write to; renamed to ``path`` when the block ends without an error, else removed."""
    tmp = path.with_name(path.name + ".part")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_spec(out: Path, spec_type: type[S]) -> S | None:
    """The spec (of ``spec_type``) a generator wrote in ``out``, None if there is none.

    Raises
    ------
    TraceInputError
        ``generator.json`` exists but is not a spec of ``spec_type``.
    """
    path = Path(out) / SPEC_FILE
    if not path.is_file():
        return None
    try:
        return spec_type(**json.loads(path.read_text()))
    except (ValueError, TypeError) as err:
        raise TraceInputError(path, f"unreadable generator spec ({err})") from None


def write_spec(out: Path, spec: Any) -> None:
    """Write ``spec.as_dict()`` to ``out/generator.json`` (atomically: the last step of a complete dataset)."""
    with atomic_path(Path(out) / SPEC_FILE) as tmp:
        tmp.write_text(json.dumps(spec.as_dict(), indent=1) + "\n")


def prepare_output(out: Path, spec: Any, pattern: str, expected: Iterable[str], force: bool = False) -> bool:
    """Decide what to do with the output directory ``out`` before generating ``spec`` into it.

    Parameters
    ----------
    pattern
        glob of the generator's data files (``hep_*.h5``); other files in ``out`` are neither counted nor removed.
    expected
        the file names a complete dataset of ``spec`` has.

    Returns
    -------
    bool
        True when ``out`` already holds this spec's complete dataset (re-use it, write nothing); False when ``out``
        is ready (created, emptied of old data files and of the old spec) for generating.

    Raises
    ------
    TraceInputError
        ``out`` exists and is not a directory.
    OutputExistsError
        ``out`` holds data files of another (or no) spec, and not ``force``.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TraceInputError(out, "exists and is not a directory")
    existing = sorted(out.glob(pattern)) if out.is_dir() else []
    if existing and not force:
        if read_spec(out, type(spec)) == spec and all((out / name).is_file() for name in expected):
            log.info("%s: dataset already there, re-using it", out)
            return True
        raise OutputExistsError(out)
    out.mkdir(parents=True, exist_ok=True)
    # The old spec goes first: a run interrupted from here on must not leave it describing the new files.
    (out / SPEC_FILE).unlink(missing_ok=True)
    for path in existing:
        path.unlink()
    return False


# ---------------------------------------------------------------------------------------------------- checking


def data_directory(data_dir: "str | os.PathLike[str]") -> Path:
    """``data_dir`` as an absolute path (file names in every layer -- the app's, DFTracer's prefix filter,
    Darshan's -- must match); :class:`TraceInputError` when it is not a directory."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise TraceInputError(data_dir, "no such data directory")
    return data_dir.absolute()


def need_one_per_rank(data_dir: Path, count: int, ranks: int, noun: str = "files") -> None:
    """:class:`TraceInputError` when ``count`` files cannot give each of ``ranks`` ranks one."""
    if count < ranks:
        raise TraceInputError(data_dir, f"{count} {noun} for {ranks} ranks; need at least one per rank")


def open_hdf5(path: Path) -> Any:
    """``h5py.File(path, "r")``; :class:`TraceInputError` naming the file when HDF5 cannot open it."""
    import h5py

    try:
        return h5py.File(path, "r")
    except OSError as err:
        cause = str(err).split("(")[0].strip() or type(err).__name__
        raise TraceInputError(path, f"not a readable HDF5 file (truncated or corrupt?): {cause}") from None


def contiguous_extent(path: Path, dset: Any, label: str) -> tuple[int, int]:
    """``(offset, bytes)`` of a contiguous, uncompressed dataset (what a plain read or a byte count needs)."""
    offset = dset.id.get_offset()
    if offset is None or dset.chunks is not None or dset.compression is not None:
        raise TraceInputError(path, f"'{label}' is not contiguous and uncompressed")
    return int(offset), int(dset.id.get_storage_size())


def check_not_truncated(path: Path, ends: Iterable[tuple[int, str]]) -> None:
    """:class:`TraceInputError` when a dataset (``(end byte, label)``) ends past the end of the file."""
    size = path.stat().st_size
    end, label = max(ends)
    if end > size:
        raise TraceInputError(path, f"truncated: '{label}' ends at byte {end}, file has {size}")
