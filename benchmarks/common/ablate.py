"""``python -m benchmarks.<name> ablate``: the ablation modes of one benchmark as real jobs, side by side.

Each mode (:mod:`benchmarks.common.modes`) runs as its own MPI job with the POSIX layer on, is merged, and the
table puts, per mode, the read phases' time next to what the file system did inside them (the layered breakdown,
``docs/metrics.md``), training and input wait. The original study's finding reads off it: with ``no-io`` the
read phase keeps most of its time while the file system's share drops to zero, so most of what its timer called
"read" was Python, IPC and normalisation.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from benchmarks.common.errors import TraceInputError
from benchmarks.common.modes import RUN_MODES
from benchmarks.common.runs import json_ready
from benchmarks.common.shuffle import MODES
from benchmarks.common.sweep import Point, add_job_flags, layers_for, parse_list, run_points


@dataclass(frozen=True)
class PhaseRow:
    """One app phase in the table; ``split`` adds its file-system time and the rest below it."""

    phase: str
    split: bool = False
    note: str = ""


EPOCH_WALL = "epoch wall time"


def ablation_table(results: Mapping[str, Mapping[str, Any]], rows: Sequence[PhaseRow]) -> pd.DataFrame:
    """Seconds per rank (mean over ranks) summed over the epochs, one column per mode.

    ``results`` maps a mode to :func:`~benchmarks.common.runs.finalize_run`'s result. Rows: the epochs' wall time,
    then each :class:`PhaseRow`'s time (the layered breakdown's ``time_s``: the union of its intervals' self time --
    without the phases nested in it -- over every process and thread of the rank, where parallel readers overlap)
    and, for split rows,
    ``  file system`` (``fs_s``) and ``  outside the file system`` (the rest: Python, IPC, decoding,
    normalisation). A phase a mode does not have is NaN.
    """
    table: dict[str, dict[str, float]] = {}
    for mode, parts in results.items():
        analysis = parts["analysis"]
        col: dict[str, float] = {}
        bd = analysis.breakdown
        epochs = bd[bd["epoch"].notna()] if len(bd) else bd
        col[EPOCH_WALL] = float(epochs.groupby("rank")["wall_s"].sum().mean()) if len(epochs) else np.nan
        lay = analysis.layered
        lay = lay[lay["epoch"].notna()] if len(lay) else lay
        ranks = lay["rank"].nunique() if len(lay) else 0
        for row in rows:
            part = lay[lay["phase"] == row.phase] if len(lay) else lay
            label = row.phase + (f" ({row.note})" if row.note else "")
            if not len(part):
                col[label] = np.nan
                if row.split:
                    col[f"  {row.phase}: file system"] = col[f"  {row.phase}: outside the file system"] = np.nan
                continue
            time_s = float(part["time_s"].sum()) / ranks
            col[label] = time_s
            if row.split:
                fs = float(part["fs_s"].sum()) / ranks
                col[f"  {row.phase}: file system"] = fs
                col[f"  {row.phase}: outside the file system"] = time_s - fs
        table[mode] = col
    return pd.DataFrame(table)


def ablation_of_runs(run_dirs: Mapping[str, "str | Path"], rows: Sequence[PhaseRow]) -> pd.DataFrame:
    """:func:`ablation_table` of merged run directories, ``{mode: run_dir}`` (e.g. an ``ablate`` output's)."""
    from trace_merge.run import Run

    return ablation_table({mode: {"analysis": Run.open(d).analyse()} for mode, d in run_dirs.items()}, rows)


def find_modes(directory: "str | Path") -> dict[str, Path]:
    """``{mode: run_dir}`` of the run directories in ``directory`` whose ``summary.json`` names a mode, in
    :data:`RUN_MODES` order (what ``ablate`` and the climate demo write)."""
    found = {}
    for sub in sorted(Path(directory).iterdir()):
        summary = sub / "summary.json"
        if not summary.is_file():
            continue
        try:
            mode = json.loads(summary.read_text()).get("mode")
        except (OSError, ValueError, AttributeError) as err:
            raise TraceInputError(summary, f"unreadable run summary ({err})") from None
        if mode in RUN_MODES:
            found[mode] = sub
    return {m: found[m] for m in RUN_MODES if m in found}


def format_ablation(table: pd.DataFrame, title: str = "") -> str:
    """The table as text: seconds, and each split row's share of its phase in %."""
    width = max([28, *(len(str(i)) for i in table.index)])
    lines = [title] if title else []
    lines.append(f"{'s per rank, all epochs':<{width}} " + " ".join(f"{c:>14}" for c in table.columns))
    for label, row in table.iterrows():
        cells = []
        for mode, value in row.items():
            if pd.isna(value):
                cells.append(f"{'-':>14}")
                continue
            cell = f"{value:.3f}"
            if str(label).startswith("  "):
                parent = table.at[_parent(table.index, label), mode]
                if parent and not pd.isna(parent):
                    cell += f" ({100 * value / parent:3.0f}%)"
            cells.append(f"{cell:>14}")
        lines.append(f"{str(label):<{width}} " + " ".join(cells))
    return "\n".join(lines)


def _parent(index: pd.Index, label: str) -> str:
    """The phase row a split row belongs to (the nearest row above it that is not indented)."""
    labels = list(index)
    for above in reversed(labels[:labels.index(label)]):
        if not str(above).startswith("  "):
            return above
    return label


def ablate_main(argv: Sequence[str] | None, benchmark: str, check: Callable[[Path, int], Any],
                rows: Sequence[PhaseRow]) -> int:
    """``python -m benchmarks.<benchmark> ablate``; ``check(data, ranks)`` validates the dataset first."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{benchmark} ablate",
                                description="Run the ablation modes as real jobs and put them side by side; other "
                                            "flags go to `train` (e.g. --smoke, --epochs 3).")
    add_job_flags(p, "directory for one run directory per mode")
    p.add_argument("--shuffle", choices=MODES, default="local")
    p.add_argument("--modes", type=lambda t: parse_list(t, str), default=list(RUN_MODES),
                   help=f"comma-separated, of {','.join(RUN_MODES)}")
    p.add_argument("--no-posix", action="store_true", help="without the DFTracer POSIX layer (no file-system split)")
    p.add_argument("--dist", default="auto")
    p.add_argument("--force", action="store_true", help="replace the modes' run directories")
    p.add_argument("--debug", action="store_true")
    args, train_args = p.parse_known_args(argv)
    for mode in args.modes:
        if mode not in RUN_MODES:
            raise TraceInputError("--modes", f"unknown mode {mode!r}; expected {','.join(RUN_MODES)}")
    if args.ranks < 1:
        raise TraceInputError("--ranks", f"need at least 1 rank, got {args.ranks}")
    check(args.data, args.ranks)
    points = [Point(args.ranks, args.shuffle, mode) for mode in args.modes]
    layers = layers_for(args.data, not args.no_posix, False)
    results = run_points(points, args.data, args.out, train_args, layers, args.dist, benchmark, args.force)
    table = ablation_table({pt.mode: parts for pt, parts in zip(points, results)}, rows)
    text = format_ablation(table, title=f"== {benchmark} ablation: {args.ranks} rank(s), {args.shuffle} shuffle")
    print(text)
    (args.out / "ablation.txt").write_text(text + "\n")
    (args.out / "ablation.json").write_text(json.dumps(json_ready(table.to_dict()), indent=1) + "\n")
    print(f"wrote {args.out / 'ablation.txt'}, {args.out / 'ablation.json'}")
    return 0
