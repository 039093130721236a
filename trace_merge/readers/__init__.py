"""One reader per source; :func:`detect` tells which one a file needs, :func:`read_any` calls it.

Kinds: ``timelogger`` and ``dftracer`` (both ``.pfw``/``.pfw.gz``, read by :mod:`.pfw`; told apart by
the ``timelogger`` metadata event TimeLogger writes first), ``xplane`` (:mod:`.xplane`), ``torch`` (the PyTorch
profiler's Chrome trace, :mod:`.torch_trace`), ``horovod`` (:mod:`.horovod`), ``darshan`` (:mod:`.darshan`).
"""
from __future__ import annotations

import importlib
import os
import re
import zlib
from pathlib import Path
from typing import Any

from ..errors import TraceInputError
from ..schema import SourceData

KINDS = ("timelogger", "dftracer", "xplane", "torch", "horovod", "darshan")
#: kind -> reader module (inside this package)
_MODULES = {
    "timelogger": "pfw",
    "dftracer": "pfw",
    "xplane": "xplane",
    "torch": "torch_trace",
    "horovod": "horovod",
    "darshan": "darshan",
}
#: keyword arguments each reader accepts beyond ``path``
_KWARGS = {"xplane": ("anchors", "rank"), "torch": ("rank",), "horovod": ("rank",)}
_PEEK_BYTES = 8192
#: ``rank-3``/``rank_3``/``rank3``, and pydftracer's (DLIO's) ``trace-3-of-8``
_RANK_IN_NAME = re.compile(r"(?<![a-z])rank[-_]?(\d+)|(?<![a-z0-9])trace-(\d+)-of-\d+", re.I)
_HOROVOD_HINTS = (b"start_time_since_epoch_in_micros", b"NEGOTIATE_", b"MPI_ALLREDUCE", b"ALLREDUCE")
#: the PyTorch profiler's file names (``tensorboard_trace_handler``) and the fields its trace starts with
TORCH_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
_TORCH_HINTS = (b'"baseTimeNanoseconds"', b'"distributedInfo"')


def _peek(path: Path) -> bytes:
    """The first bytes of the (decompressed) file. Damage further on is the reader's to report, so the gzip
    stream is not checked to its end here (gzip.open would verify the CRC of a small file as a whole)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(1 << 16)
    except OSError as exc:
        raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if path.name.endswith(".gz") or raw[:2] == b"\x1f\x8b":
        dec, out = zlib.decompressobj(16 + zlib.MAX_WBITS), b""
        try:  # small pieces, so that what came out before damage is kept
            for at in range(0, len(raw), 1024):
                out += dec.decompress(raw[at:at + 1024], _PEEK_BYTES - len(out))
                if len(out) >= _PEEK_BYTES or dec.eof:
                    break
        except zlib.error as exc:
            if not out:
                raise TraceInputError(path, f"corrupt gzip data at its start ({exc})") from None
        return out
    return raw[:_PEEK_BYTES]


def rank_from_name(path: "str | os.PathLike[str]") -> "int | None":
    """``rank-3``/``rank_3``/``rank3`` or ``trace-3-of-8`` (pydftracer, DLIO) in the file's name or its
    directories (the last one wins)."""
    found = _RANK_IN_NAME.findall(str(path))
    return int(next(x for x in found[-1] if x)) if found else None


def detect(path: "str | os.PathLike[str]") -> str:
    """Which reader a file needs, from its name and (for ``.pfw``/``.json``) its first bytes.

    Returns
    -------
    str
        One of :data:`KINDS`.

    Raises
    ------
    TraceInputError
        Missing file, directory, or a file no reader recognises.
    """
    path = Path(path)
    if not path.exists():
        raise TraceInputError(path, "no such file")
    if path.is_dir():
        raise TraceInputError(path, "is a directory, not a trace file")
    name = path.name
    if name.endswith(".xplane.pb"):
        return "xplane"
    if name.endswith(".darshan"):
        return "darshan"
    if name.endswith((".pfw", ".pfw.gz")):
        head = _peek(path)
        # TimeLogger's first event after "[" is its `timelogger` metadata (docs/wire-format.md).
        first = head.lstrip(b"[ \r\n").split(b"\n", 1)[0]
        return "timelogger" if b'"timelogger"' in first else "dftracer"
    if name.endswith(TORCH_SUFFIXES):
        return "torch"
    if name.endswith((".json", ".json.gz")):
        head = _peek(path)
        # a PyTorch trace's top-level fields come before its events; a Horovod timeline is an array of events
        if head.lstrip()[:1] == b"{" and (any(h in head for h in _TORCH_HINTS) or
                                         (b'"schemaVersion"' in head and b'"traceEvents"' in head)):
            return "torch"
        if any(h in head for h in _HOROVOD_HINTS):
            return "horovod"
        raise TraceInputError(path, "JSON file that is neither a Horovod timeline nor a PyTorch profiler trace")
    raise TraceInputError(
        path, "unrecognised trace file (expected .pfw[.gz], .xplane.pb, .darshan, a PyTorch profiler trace "
              ".pt.trace.json[.gz] or a Horovod timeline .json)"
    )


def reader_for(kind: str) -> Any:
    """The reader module for ``kind`` (imported lazily: readers pull optional dependencies)."""
    if kind not in _MODULES:
        raise ValueError(f"unknown trace kind {kind!r}; expected one of {KINDS}")
    return importlib.import_module(f"{__name__}.{_MODULES[kind]}")


def read_any(path: "str | os.PathLike[str]", kind: "str | None" = None, **kw: Any) -> SourceData:
    """Read any supported trace file.

    Parameters
    ----------
    path
        The file.
    kind
        Skip detection and use this reader.
    **kw
        Passed on to readers that take them: ``anchors``/``rank`` (xplane), ``rank`` (torch, horovod);
        ignored for the others.
    """
    kind = kind or detect(path)
    accepted = {k: v for k, v in kw.items() if k in _KWARGS.get(kind, ()) and v is not None}
    return reader_for(kind).read(path, **accepted)
