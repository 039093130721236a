"""Source identity: which files a merge was made from, told by content rather than by modification time.

A file's identity is its size and a *fingerprint*: BLAKE2b over the size, the first and the last 64 KiB. The
fingerprint costs two short reads whatever the file's size, so it is taken of every source of a run each time a
stored ``merged.parquet`` is considered (:mod:`trace_merge.run`), and of every discovered file to find the same
content under two names (:func:`duplicates`). Times are not part of it: ``cp -p`` and ``rsync -a`` keep an old
modification time on a new file, and a plain ``cp -r`` of a run gives new times to unchanged files.

Limit: a change that keeps the size and touches neither the first nor the last 64 KiB of a file larger than
128 KiB is not seen (``trace-merge merge --force`` merges again regardless). Trace files are appended to, never
rewritten in the middle, so a change of theirs moves the size or the tail.
"""
from __future__ import annotations

import filecmp
import hashlib
import os
from pathlib import Path
from typing import Mapping, Optional, TypedDict

#: bytes hashed at each end of a file
EDGE_BYTES = 64 * 1024


class Identity(TypedDict):
    """One file's identity as ``merge_info.json`` stores it."""

    #: bytes; -1 when the file could not be read
    size: int
    #: :func:`fingerprint` digest (hex); None when the file could not be read
    fingerprint: Optional[str]


def fingerprint(path: "str | os.PathLike[str]") -> tuple[int, str]:
    """Size and cheap content hash of ``path``.

    Returns
    -------
    (size, digest)
        ``size`` in bytes; ``digest`` hex BLAKE2b (16 bytes) of the size, the first and the last
        :data:`EDGE_BYTES` bytes (the whole file when it is at most twice that).

    Raises
    ------
    OSError
        ``path`` cannot be opened or read.
    """
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        h.update(size.to_bytes(8, "little"))
        h.update(fh.read(EDGE_BYTES))
        if size > EDGE_BYTES:
            fh.seek(max(EDGE_BYTES, size - EDGE_BYTES))
            h.update(fh.read(EDGE_BYTES))
    return size, h.hexdigest()


def identity_of(path: Path) -> Identity:
    """``{"size", "fingerprint"}`` of ``path`` (:func:`fingerprint`); size -1 and fingerprint None when it cannot
    be read (its reader reports why), which differs from any readable state."""
    try:
        size, digest = fingerprint(path)
    except OSError:
        return {"size": -1, "fingerprint": None}
    return {"size": size, "fingerprint": digest}


def by_name(identities: Mapping[Path, Identity], root: Path) -> dict[str, Identity]:
    """``identities`` keyed by each path relative to ``root`` (``/``-separated), as stored in ``merge_info.json``.

    Names are relative so that a run directory copied or moved elsewhere keeps its stored merge.
    """
    out: dict[str, Identity] = {}
    for p, ident in identities.items():
        try:
            name = p.relative_to(root).as_posix()
        except ValueError:
            name = str(p)
        out[name] = ident
    return out


def differences(recorded: Mapping[str, Identity], current: Mapping[str, Identity], limit: int = 5) -> list[str]:
    """What changed between two :func:`by_name` results, as short phrases (``"app/x.pfw added"``).

    At most ``limit`` phrases per kind of change, then ``"and N more"``.
    """
    def listed(names: list[str], what: str) -> list[str]:
        shown = [f"{n} {what}" for n in names[:limit]]
        if len(names) > limit:
            shown.append(f"{len(names) - limit} more {what}")
        return shown

    added = sorted(set(current) - set(recorded))
    removed = sorted(set(recorded) - set(current))
    changed = sorted(n for n in set(current) & set(recorded) if _as_identity(recorded[n]) != current[n])
    return listed(added, "added") + listed(removed, "removed") + listed(changed, "changed")


def _as_identity(value: object) -> Optional[Identity]:
    """A recorded identity as :func:`identity_of` makes it, or None when the record is not one (hand-edited)."""
    if isinstance(value, dict) and set(value) == {"size", "fingerprint"}:
        return {"size": value["size"], "fingerprint": value["fingerprint"]}
    return None


def duplicates(identities: Mapping[Path, Identity]) -> dict[Path, Path]:
    """Files whose content is the same as an earlier file's: ``{later: first}``.

    ``identities`` in the order the files are read (the first of a group is kept). Candidates share size and
    fingerprint; a full byte comparison confirms them, so two files that differ only in the middle are not
    taken for copies. Empty and unreadable files are never duplicates: each gets a warning of its own kind.
    """
    groups: dict[tuple[int, str], list[Path]] = {}
    out: dict[Path, Path] = {}
    for path, ident in identities.items():
        if not ident["fingerprint"] or ident["size"] <= 0:
            continue
        firsts = groups.setdefault((ident["size"], ident["fingerprint"]), [])
        for first in firsts:
            try:
                same = filecmp.cmp(first, path, shallow=False)
            except OSError:
                same = False
            if same:
                out[path] = first
                break
        else:
            firsts.append(path)
    return out
