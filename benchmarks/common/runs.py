"""Finishing a run directory: merge every layer, add the I/O metrics to ``summary.json``, format tables.

The metric definitions are trace_merge's (``trace_merge.analysis``); this module only picks the numbers a
benchmark summary reports and lays tables out for a terminal.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Sequence

from trace_merge.formatting import BYTES_IN, size_text

log = logging.getLogger(__name__)
SUMMARY = "summary.json"
#: breakdown columns shown in the terminal, in this order
SHOWN = ("io", "wait", "compute", "comm", "checkpoint", "preprocess", "other", "outside_epochs")


def finalize_run(run_dir: "str | Path") -> dict[str, Any]:
    """Merge ``run_dir`` (replacing an earlier ``merged.parquet``, which is derived data) and update its summary.

    Adds to ``summary.json`` (created if missing): ``read_bytes``, ``read_time_s`` (the slowest rank's union of
    read time), ``read_bandwidth_bytes_per_s`` (Σ bytes ÷ that time), ``read_layer`` (the lowest layer that
    measured the bytes), ``read_bw_over_wall_bytes_per_s``, ``breakdown_pct`` (whole-job shares),
    ``exposed_io_pct``, ``input_bound`` verdict with ``input_wait_pct`` and its ``input_basis``, ``layered_s``
    (seconds per app phase and lower-layer component), ``epoch_read`` (the job's read bytes, slowest union read
    time and aggregate bandwidth per epoch), ``epoch0_read_bw_MB_per_s`` and ``later_read_bw_MB_per_s``,
    ``study_view_pct`` (the original study's Read / Load / Training / Checkpoint / other shares, mean over ranks;
    None without its phases), ``merge_warnings``.

    Returns
    -------
    dict
        ``analysis`` (trace_merge's :class:`~trace_merge.analysis.Summary`), ``summary`` (what was written to
        ``summary.json``) and ``run`` (the :class:`~trace_merge.run.Run`).
    """
    from trace_merge.merge import merge_path, write_merged
    from trace_merge.run import Run

    run_dir = Path(run_dir)
    write_merged(merge_path(run_dir), run_dir, force=True)
    run = Run.open(run_dir)
    analysis = run.analyse()
    metrics, totals, bw = analysis.metrics.as_dict(), analysis.bandwidth_totals, analysis.bandwidth
    summary_path = run_dir / SUMMARY
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    read_time = totals.get("slowest_read_time_s")
    summary.update({
        "read_bytes": int(totals.get("read_bytes") or 0),
        "read_time_s": read_time,
        "read_bandwidth_bytes_per_s": (totals["read_bytes"] / read_time) if read_time else None,
        "read_bw_over_wall_bytes_per_s": _mb_to_bytes(totals.get("bw_over_job_wall_MB_per_s")),
        "read_layer": ",".join(sorted(set(str(x) for x in bw["layer"]))) if len(bw) else None,
        "breakdown_pct": {c: metrics.get(f"{c}_pct") for c in SHOWN},
        "exposed_io_pct": metrics.get("exposed_io_pct"),
        "input_bound": metrics.get("verdict"),
        "input_wait_pct": metrics.get("input_pct"),
        "input_basis": metrics.get("verdict_basis"),
        "layered_s": _layered_totals(analysis.layered),
        "epoch_read": [{"epoch": int(row.epoch), "read_bytes": int(row.read_bytes),
                        "slowest_read_time_s": float(row.slowest_read_time_s),
                        "aggregate_bw_MB_per_s": float(row.aggregate_bw_MB_per_s)}
                       for row in analysis.epoch_bandwidth_totals.itertuples()],
        "epoch0_read_bw_MB_per_s": metrics.get("epoch0_read_bw_MB_per_s"),
        "later_read_bw_MB_per_s": metrics.get("later_read_bw_MB_per_s"),
        "study_view_pct": {c: float(analysis.study_view[f"{c}_pct"].mean())
                           for c in ("read", "load", "training", "checkpoint", "other")}
        if len(analysis.study_view) else None,
        "merge_warnings": list(run.warnings),
    })
    summary_path.write_text(json.dumps(json_ready(summary), indent=1) + "\n")
    return {"analysis": analysis, "summary": summary, "run": run}


def _layered_totals(layered: Any) -> dict[str, dict[str, float]]:
    """Seconds per app phase and component of the layered breakdown, summed over ranks and epochs."""
    from trace_merge.analysis import COMPONENTS

    if not len(layered):
        return {}
    sums = layered.groupby("phase", sort=True)[["time_s", *(f"{c}_s" for c in COMPONENTS)]].sum()
    return {str(k): {c: float(v) for c, v in row.items()} for k, row in sums.iterrows()}


def _mb_to_bytes(value: float | None) -> float | None:
    return None if value is None else value * 1e6


def json_ready(obj: Any) -> Any:
    """``obj`` with numpy scalars as Python numbers and non-finite floats as None (valid JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalars
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def format_breakdown(parts: dict[str, Any], title: str = "") -> str:
    """The per-rank x epoch breakdown (exclusive % of wall time) as a text table; ``all`` = whole run."""
    bd = parts["analysis"].breakdown
    cols = [c for c in SHOWN if f"{c}_pct" in bd.columns]
    head = f"{'rank':>4} {'epoch':>5} {'wall s':>7} " + " ".join(f"{c[:7] + ' %':>9}" for c in cols)
    lines = [title, head] if title else [head]
    for _, row in bd.iterrows():
        epoch = "all" if row["epoch"] is None or _isna(row["epoch"]) else str(int(row["epoch"]))
        cells = " ".join(f"{row[f'{c}_pct']:9.2f}" for c in cols)
        lines.append(f"{int(row['rank']):>4} {epoch:>5} {row['wall_s']:7.2f} {cells}")
    return "\n".join(lines)


def format_layered(parts: dict[str, Any], title: str = "", top: int = 8) -> str:
    """The layered breakdown: the longest app phases (summed over epochs) per rank, split by lower layer (s)."""
    from trace_merge.analysis import COMPONENTS

    lay = parts["analysis"].layered
    lines = [title] if title else []
    short = {"fs": "fs", "comm": "comm", "input_wait": "in-wait", "compute": "compute", "python": "python",
             "not_observed": "unseen"}
    lines.append(f"{'rank':>4} {'phase':<22} {'time s':>7} " + " ".join(f"{short[c]:>8}" for c in COMPONENTS))
    if not len(lay):
        return "\n".join(lines + ["  (no app phases)"])
    sums = lay.groupby(["rank", "phase"], sort=True)[["time_s", *(f"{c}_s" for c in COMPONENTS)]].sum()
    for rank, block in sums.groupby(level=0):
        for (_, phase), row in block.sort_values("time_s", ascending=False).head(top).iterrows():
            cells = " ".join(f"{row[f'{c}_s']:8.3f}" for c in COMPONENTS)
            lines.append(f"{int(rank):>4} {str(phase)[:22]:<22} {row['time_s']:7.3f} {cells}")
    return "\n".join(lines)


def format_layers(parts: dict[str, Any], title: str = "") -> str:
    """Every captured layer per rank: events and busy time (union) as % of the job's wall time."""
    from trace_merge.analysis import layer_activity_df

    act = layer_activity_df(parts["run"].frame)
    lines = [title] if title else []
    lines.append(f"{'layer':>9} {'rank':>4} {'events':>7} {'busy s':>8} {'busy %':>7}")
    for _, row in act.iterrows():
        lines.append(f"{row['layer']:>9} {int(row['rank']):>4} {int(row['events']):>7} {row['busy_s']:8.3f} "
                     f"{row['busy_pct']:7.2f}")
    return "\n".join(lines)


def format_bandwidth(parts: dict[str, Any], title: str = "") -> str:
    """Read bytes, union read time and bandwidth per rank, and the job aggregate."""
    bw = parts["analysis"].bandwidth
    lines = [title] if title else []
    mb = BYTES_IN["MB"]  # decimal, as the MB/s beside it (trace_merge.formatting)
    lines.append(f"{'rank':>4} {'layer':>7} {'reads':>6} {'MB':>8} {'read s':>8} {'MB/s':>9}")
    for _, row in bw.iterrows():
        lines.append(f"{int(row['rank']):>4} {str(row['layer']):>7} {int(row['reads']):>6} "
                     f"{row['read_bytes'] / mb:8.2f} {row['read_time_s']:8.4f} {row['read_bw_MB_per_s']:9.1f}")
    s = parts.get("summary", {})
    if s.get("read_bandwidth_bytes_per_s"):
        lines.append(f"aggregate: {size_text(s['read_bytes'])} in {s['read_time_s']:.4f} s (slowest rank) = "
                     f"{s['read_bandwidth_bytes_per_s'] / mb:.1f} MB/s")
    return "\n".join(lines)


def _isna(value: Any) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def side_by_side(blocks: Sequence[str], gap: int = 4) -> str:
    """Text blocks next to each other, top-aligned."""
    split = [b.splitlines() for b in blocks]
    widths = [max((len(x) for x in lines), default=0) for lines in split]
    height = max((len(lines) for lines in split), default=0)
    out = []
    for i in range(height):
        cells = [(lines[i] if i < len(lines) else "").ljust(w) for lines, w in zip(split, widths)]
        out.append((" " * gap).join(cells).rstrip())
    return "\n".join(out)


def new_stamp(out: Path) -> Path:
    """``out/<YYYYmmdd-HHMMSS>``, never one that exists (two demos in one second get ``-1``)."""
    import time

    stamp = out / time.strftime("%Y%m%d-%H%M%S")
    while stamp.exists():
        stamp = stamp.with_name(stamp.name + "-1")
    return stamp


def link_latest(out: Path, stamp: Path) -> None:
    """Point ``out/latest`` at ``stamp`` (atomically; a real directory named ``latest`` is left alone)."""
    import os

    link = out / "latest"
    if link.is_symlink() or not link.exists():
        tmp = out / ".latest.tmp"
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(stamp.name)
        os.replace(tmp, link)


def demo_arguments(argv: "Sequence[str] | None", prog: str, description: str, default_out: Path,
                   instead: str) -> "tuple[Any, list[str]]":
    """A demo's command line (``--out --ranks --force --debug``; other flags go to ``train``), refused early when
    Horovod, which the demos run on, is not importable (``instead``: the command to run without it)."""
    import argparse
    import importlib.util

    from benchmarks.common.errors import BenchmarkError

    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--out", type=Path, default=default_out,
                   help="demo directory (data/ and one <timestamp>/ per invocation)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--force", action="store_true", help="regenerate OUT/data if it holds a different dataset")
    p.add_argument("--debug", action="store_true")
    args, train_args = p.parse_known_args(argv)
    if importlib.util.find_spec("horovod") is None:
        raise BenchmarkError("the demo runs on Horovod, which is not importable here; build the environment with "
                             f"`make env` (or run `{instead}`)")
    return args, train_args
