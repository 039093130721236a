"""What a stored merge keeps of its summary: the job's facts and every rank's summary parts
(``summary_parts.zip`` beside ``merged.parquet``), so that summarising a stored merge again is a reduction of small
tables instead of a pass over every row.

``trace-merge merge`` of a large run computes them while each rank is in memory (the merge's analysis hook,
:class:`trace_merge.kernels.SummaryHook`) and writes them after the merge's outputs, under the run's lock. They are
used only when they belong to the ``merged.parquet`` beside them (its identity, recorded in both files) and were
made by the same analysis code (a hash of this package's sources: any change to a kernel makes them stale), and only
for the default layers (``--layers`` summarises the partitions again). Anything else -- a missing, stale,
truncated or hand-edited file -- is not an error: the summary is computed from the partitions, as without it.

The file is a zip of Arrow IPC tables (one per rank and table of :class:`~trace_merge.kernels.RankParts`) and one
JSON member: no pickle, so a run directory from elsewhere cannot run code when it is opened.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import zipfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from timelogger.layout import MERGED, SUMMARY_PARTS, link_not_followed
from trace_merge import kernels
from trace_merge.errors import OutputWriteError
from trace_merge.identity import Identity
from trace_merge.outputs import atomic_output

log = logging.getLogger(__name__)

_JSON = "parts.json"
_NONE = np.zeros(0, np.int64)
_TABLES = tuple(f.name for f in dataclasses.fields(kernels.RankParts) if f.type in ("pd.DataFrame", pd.DataFrame))


@functools.lru_cache(maxsize=1)
def code_key() -> str:
    """A hash of this package's Python sources: stored parts are used only by the code that made them."""
    package = Path(__file__).resolve().parent
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def write(run_dir: Path, merged: Identity, job: kernels.JobFacts, parts: Sequence[kernels.RankParts]) -> Optional[Path]:
    """Write ``summary_parts.zip`` for the ``merged.parquet`` of identity ``merged`` (a temporary name renamed into
    place). Returns its path, or None when the parts cannot be stored (logged; the summary is then computed from
    the partitions each time)."""
    import pyarrow as pa

    target = run_dir / SUMMARY_PARTS
    try:  # a temporary created exclusively (never a planted link's target), renamed over the old file
        with atomic_output(target, force=True) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
            for i, part in enumerate(parts):
                for name in _TABLES:
                    zf.writestr(f"{i}/{name}.arrow", kernels.ipc_bytes(getattr(part, name)))
            collectives = sorted(job.collectives.items())
            zf.writestr("collectives.arrow", kernels.ipc_bytes(pa.table({
                "rank": np.concatenate([np.full(len(s), r, np.int64) for r, (s, _) in collectives] + [_NONE]),
                "start": np.concatenate([s for _, (s, _) in collectives] + [_NONE]),
                "end": np.concatenate([e for _, (_, e) in collectives] + [_NONE])})))
            zf.writestr(_JSON, json.dumps({
                "merged": merged, "code": code_key(),
                "job": {"ranks": job.ranks, "present": job.present,
                        "timed": {str(r): sorted(v) for r, v in job.timed.items()},
                        "app_files": sorted(job.app_files), "rows_per_layer": job.rows_per_layer,
                        "events": job.events},
                "ranks": [{"data_files": sorted(p.data_files), "span": list(p.span) if p.span else None}
                          for p in parts]}))
        return target
    except (OSError, OutputWriteError, ValueError, TypeError, pa.ArrowException) as exc:
        log.warning("%s: the summary's parts were not stored (%s); a summary reads the partitions instead", target, exc)
        return None


def read(run_dir: Path, merged: Optional[Identity]) -> "Optional[tuple[kernels.JobFacts, list[kernels.RankParts]]]":
    """The stored job facts and rank parts when they belong to the ``merged.parquet`` of identity ``merged`` and
    to this code; None otherwise (why at debug level)."""
    import pyarrow as pa

    path = run_dir / SUMMARY_PARTS
    if merged is None or not path.is_file() or link_not_followed(path):
        return None
    try:
        with zipfile.ZipFile(path) as zf:
            head = json.loads(zf.read(_JSON))
            if head.get("merged") != merged or head.get("code") != code_key():
                log.debug("%s: made for another %s or by other code; not used", path, MERGED)
                return None

            def table(name: str) -> pd.DataFrame:
                return kernels.ipc_frame(zf.read(name))

            j = head["job"]
            coll = table("collectives.arrow")
            collectives = {int(r): (g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64))
                           for r, g in coll.groupby("rank", sort=True)}
            job = kernels.JobFacts(ranks=[int(r) for r in j["ranks"]], present=list(j["present"]),
                                   timed={int(r): set(v) for r, v in j["timed"].items()},
                                   app_files=frozenset(j["app_files"]), collectives=collectives,
                                   rows_per_layer={str(k): int(v) for k, v in j["rows_per_layer"].items()},
                                   events=int(j["events"]))
            parts = [kernels.RankParts(**{name: table(f"{i}/{name}.arrow") for name in _TABLES},
                                       data_files=frozenset(r["data_files"]),
                                       span=tuple(r["span"]) if r["span"] else None)
                     for i, r in enumerate(head["ranks"])]
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, pa.ArrowException) as exc:
        log.debug("%s: cannot be used (%s)", path, exc)
        return None
    return job, parts
