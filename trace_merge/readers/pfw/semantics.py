"""What DFTracer's, pydftracer's and DLIO's events mean in the frame: the layer and ``cat`` of a source category,
the calls whose ``ret`` counts bytes, the categories of other tracers' Python-level events (:data:`AI_CAT_RULES`,
the table users read is ``docs/frame.md``), and the epochs of the rows inside an epoch event."""
from __future__ import annotations

import re
from typing import Callable, Optional, TypeVar

import numpy as np
import pandas as pd

from ...schema import CATS
from .events import Cols

#: Calls whose ``args.ret`` counts transferred bytes (negative: failed, no bytes).
RW_CALLS = frozenset(
    {
        "read", "pread", "pread64", "readv", "preadv", "preadv64", "preadv2", "preadv64v2",
        "write", "pwrite", "pwrite64", "writev", "pwritev", "pwritev64", "pwritev2", "pwritev64v2",
        "fread", "fwrite", "fread_unlocked", "fwrite_unlocked",
    }
)
#: STDIO calls whose ``ret`` counts items of ``args.size`` bytes.
ITEM_CALLS = frozenset({"fread", "fwrite", "fread_unlocked", "fwrite_unlocked"})

#: Calls DFTracer's POSIX preload also traces that do no file-system work: process control (a
#: ``multiprocessing.Pool`` parent polls ``waitpid`` hundreds of times a second). They stay in their layer with
#: cat ``other``, so that the file-system component of the layered breakdown (cat ``io``) is file work only.
PROCESS_CALLS = frozenset({
    "fork", "vfork", "clone", "clone3", "execv", "execve", "execvp", "execvpe", "execl", "execlp", "execle",
    "execveat", "fexecve", "posix_spawn", "posix_spawnp", "wait", "waitpid", "wait3", "wait4", "waitid", "kill",
    "exit", "_exit",
})

#: DFTracer category (lower case) -> layer; anything else is ``app``.
_DFT_LAYERS = {
    "posix": "posix", "stdio": "stdio",
    "mpiio": "mpiio", "mpi-io": "mpiio", "mpi_io": "mpiio",
    "hdf5": "hdf5", "h5": "hdf5",
    "mpi": "comm", "comm": "comm",
}
_IO_LAYERS = frozenset({"posix", "stdio", "mpiio", "hdf5"})
#: Python-level events of other tracers -> frame ``cat``: (source cat in lower case or None for any, regular
#: expression searched in the event name or None for any, frame cat); the first matching rule wins. The table
#: users read is ``docs/frame.md`` ("Categories of other tracers"); keep the two in step.
AI_CAT_RULES: tuple[tuple[Optional[str], Optional[str], str], ...] = (
    # pydftracer's AI tracer (dftracer.python.ai): compute[.forward|.backward|.step], data.preprocess,
    # data.item, data.io.*, dataloader.fetch, comm.*, device.transfer, checkpoint.*, pipeline.epoch|train|...
    ("compute", None, "compute"),
    ("data", r"(^|\.)io(\.|$)", "io"),
    ("data", None, "preprocess"),
    ("dataloader", None, "wait"),  # the training loop fetching its batch
    ("checkpoint", None, "checkpoint"),
    ("device", None, "other"),
    ("pipeline", None, "other"),
    # DLIO 2.x (dlio_benchmark): its own categories
    ("ai_framework", r"compute$", "compute"),
    ("ai_framework", r"checkpoint", "checkpoint"),
    ("dlio_benchmark", r"\.iter$", "wait"),  # loop.iter: dft_fn.iter timing the wait for the next batch
    ("data_loader", None, "io"),
    ("reader", r"preprocess", "preprocess"),
    ("reader", None, "io"),
    # any pydftracer iterator wrapper (dft_fn(...).iter): NAME.iter is the wait for the next item
    (None, r"\.iter$", "wait"),
)
_AI_CAT_RULES = tuple((c, None if n is None else re.compile(n), out) for c, n, out in AI_CAT_RULES)
#: Python-level events that span one training epoch: (source cat in lower case, regular expression on the name).
#: The rows of the process inside the k-th such event get epoch k (its own ``epoch`` arg where it has one): DLIO
#: leaves ``epoch`` stale on its compute events and its readers' counters (docs/frame.md).
EPOCH_EVENTS: tuple[tuple[str, str], ...] = (("pipeline", r"(^|\.)epoch$"), ("dlio_benchmark", r"\._train$"))
_EPOCH_EVENTS = tuple((c, re.compile(n)) for c, n in EPOCH_EVENTS)
_T = TypeVar("_T")


def ai_cat(src_cat: str, name: str) -> Optional[str]:
    """The frame cat of a Python-level event of another tracer (:data:`AI_CAT_RULES`), None when no rule
    matches (the category's own mapping stands)."""
    low = src_cat.lower()
    for c, pattern, out in _AI_CAT_RULES:
        if (c is None or c == low) and (pattern is None or pattern.search(name)):
            return out
    return None


def classify(src_cat: str, timelogger: bool) -> "tuple[str, str, Optional[str]]":
    """(layer, cat, original cat to keep in ``args`` or None) for a source category."""
    low = src_cat.lower()
    if timelogger:
        layer = "app"
        cat = src_cat if src_cat in CATS else (low if low in CATS else "other")
    else:
        layer = _DFT_LAYERS.get(low, "app")
        cat = "io" if layer in _IO_LAYERS else ("comm" if layer == "comm" else (low if low in CATS else "other"))
    keep = None if low in (cat, layer) else src_cat
    return layer, cat, keep


def name_mask(cols: Cols, names: "frozenset[str]") -> np.ndarray:
    """Rows whose name is one of ``names``, from the categories, not per row."""
    hit = np.array([c in names for c in cols.name.categories] + [False], dtype=bool)
    return hit[np.asarray(cols.name.codes, dtype=np.int64)]


def _pair_mask(cols: Cols, rows: np.ndarray, test: Callable[[str, str], _T]) -> "tuple[np.ndarray, list[_T]]":
    """``test(src cat, name)`` for the rows ``rows`` (bool mask), evaluated once per distinct pair: (the index of
    each such row's pair, the results per pair). Hash-based on the category codes: no sort, no strings per row."""
    n_names = len(cols.name.categories) + 1
    cat_codes = np.asarray(cols.cat.codes, dtype=np.int64)[rows]
    name_codes = np.asarray(cols.name.codes, dtype=np.int64)[rows]
    inverse, pairs = pd.factorize((cat_codes + 1) * n_names + (name_codes + 1))
    results: list[_T] = []
    for code in np.asarray(pairs, dtype=np.int64):
        c, m = int(code // n_names) - 1, int(code % n_names) - 1
        results.append(test(str(cols.cat.categories[c]) if c >= 0 else "", str(cols.name.categories[m]) if m >= 0
                            else ""))
    return inverse, results


def _cat_rows(cols: Cols, wanted: "set[str]") -> np.ndarray:
    """Rows whose source category (lower case) is one of ``wanted``, from the categories, not per row."""
    hit = np.array([str(c).lower() in wanted for c in cols.cat.categories] + [False], dtype=bool)
    return hit[np.asarray(cols.cat.codes, dtype=np.int64)]


def epoch_windows(cols: Cols, epoch: "tuple[np.ndarray, np.ndarray]") -> "tuple[np.ndarray, np.ndarray]":
    """``(values, missing)`` of the epoch column with :data:`EPOCH_EVENTS` applied per process."""
    candidates = _cat_rows(cols, {ec for ec, _ in _EPOCH_EVENTS}) if cols.n else np.zeros(0, dtype=bool)
    if not candidates.any():  # a POSIX-only trace: nothing to look at row by row
        return epoch
    which, hits = _pair_mask(cols, candidates, lambda c, name: any(
        c.lower() == ec and p.search(name) for ec, p in _EPOCH_EVENTS))
    is_epoch = np.zeros(cols.n, dtype=bool)
    is_epoch[np.flatnonzero(candidates)] = np.asarray(hits, dtype=bool)[which]
    if not is_epoch.any():
        return epoch
    values, missing = epoch[0].copy(), epoch[1].copy()
    pid, start = np.asarray(cols.pid), np.asarray(cols.ts)
    end = start + np.asarray(cols.dur)
    by_pid = np.argsort(pid, kind="stable")  # each process's rows together: its epochs look at its rows only
    sorted_pid = pid[by_pid]
    for p in np.unique(pid[is_epoch]):
        mine = by_pid[np.searchsorted(sorted_pid, p, "left"):np.searchsorted(sorted_pid, p, "right")]
        ev = mine[is_epoch[mine]]
        ev = ev[np.argsort(start[ev], kind="stable")]
        for k, i in enumerate(ev):
            number = int(epoch[0][i]) if not epoch[1][i] else k  # its own epoch arg where it has one
            inside = mine[(start[mine] >= start[i]) & (start[mine] <= end[i])]
            values[inside], missing[inside] = number, False
    return values, missing


def ai_cats(cols: Cols, layer: pd.Categorical, cat: pd.Categorical) -> pd.Categorical:
    """``cat`` with :func:`ai_cat` applied to the app-layer rows of a DFTracer trace, per distinct (cat, name), on
    the codes (no string per row)."""
    app = np.asarray(layer == "app")
    if not app.any():
        return cat
    inverse, mapped = _pair_mask(cols, app, ai_cat)
    if not any(mapped):
        return cat
    categories = list(cat.categories) + sorted({v for v in mapped if v} - set(cat.categories))
    code_of = {c: i for i, c in enumerate(categories)}
    pair_code = np.array([code_of[v] if v else -2 for v in mapped], dtype=np.int64)[inverse]  # -2: no rule
    codes = np.asarray(cat.codes, dtype=np.int64).copy()
    idx = np.flatnonzero(app)
    hit = pair_code >= 0
    codes[idx[hit]] = pair_code[hit]
    return pd.Categorical.from_codes(codes, categories=categories)
