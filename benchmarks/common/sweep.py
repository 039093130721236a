"""``python -m benchmarks.<name> sweep``: run the (ranks x shuffle) matrix of a benchmark and compare the points.

Each point is a real job, ``mpiexec -n N timelogger run -o SWEEP/n<N>-<shuffle> ... -- python -m
benchmarks.<name> train ...``, merged after it exits (so the POSIX layer is complete). Writes ``comparison.txt``,
``comparison.json`` and ``sweep.png`` (breakdown per point, read bandwidth vs ranks against ideal linear scaling).
The ``ablate`` subcommands run their points (one per ``--mode``) with :func:`run_point` too.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from benchmarks.common.errors import TraceInputError
from benchmarks.common.launch import Layers, run_command, stream
from benchmarks.common.runs import finalize_run, format_breakdown
from benchmarks.common.shuffle import MODES
from trace_merge.formatting import BYTES_IN
from trace_merge.outputs import refuse_existing


@dataclass(frozen=True)
class Point:
    """One job of a sweep: rank count, shuffle mode and ablation mode (:mod:`benchmarks.common.modes`)."""

    ranks: int
    shuffle: str
    mode: str = "full"

    @property
    def name(self) -> str:
        return f"n{self.ranks}-{self.shuffle}" + ("" if self.mode == "full" else f"-{self.mode}")


def layers_for(data: Path, posix: bool, horovod_timeline: bool) -> Layers:
    """Capture layers for one point (DFTracer matches its prefix filter against the path as opened: absolute)."""
    return Layers(posix=posix, posix_filter=str(data.absolute()) if posix else None,
                  horovod_timeline=horovod_timeline)


def run_point(point: Point, data: Path, run_dir: Path, train_args: Sequence[str], layers: Layers,
              dist: str = "auto", benchmark: str = "hepcnn", quiet: bool = False) -> dict[str, Any]:
    """Run one point of ``benchmarks.<benchmark>`` as its own MPI job, streaming the ranks' progress (only into
    ``<run_dir>.log`` when ``quiet``), then merge it; returns the analysis
    (:func:`~benchmarks.common.runs.finalize_run`) and the job's wall time ``job_s``."""
    program = [sys.executable, "-m", f"benchmarks.{benchmark}", "train", "--data", str(data.absolute()),
               "--shuffle", point.shuffle, "--mode", point.mode, "--dist", dist, "--no-merge", *train_args]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"{run_dir.name}.log"
    if quiet:
        with open(os.devnull, "w") as devnull:
            seconds = stream(run_command(point.ranks, run_dir, program, layers), log=log, echo=devnull)
    else:
        print(f"== {point.name}: {' '.join(run_command(point.ranks, run_dir, program, layers))}", flush=True)
        seconds = stream(run_command(point.ranks, run_dir, program, layers), prefix=f"  {point.name} ", log=log)
    parts = finalize_run(run_dir)
    parts["job_s"] = seconds
    return parts


def point_dirs(directory: "str | Path", rows: Sequence[dict[str, Any]]) -> dict[str, Path]:
    """``{point name: run dir}`` for the rows of ``directory/comparison.json``: a sweep keeps each point in
    ``<point name>/`` (``n2-local``), ``make demo`` in ``<shuffle>/`` (``local``, ``global``)."""
    directory = Path(directory)
    found = {}
    for row in rows:
        for name in (row["point"], row["shuffle"]):
            if (directory / name / "merged.parquet").is_file():
                found[row["point"]] = directory / name
                break
    return found


def parse_list(text: str, kind: type) -> list:
    try:
        return [kind(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None


def comparison_rows(points: Sequence[Point], results: Sequence[dict]) -> list[dict[str, Any]]:
    """One row per point: throughput, read bytes/time/bandwidth and whole-job breakdown shares."""
    rows = []
    for point, parts in zip(points, results):
        s = parts["summary"]
        rows.append({"point": point.name, "ranks": point.ranks, "shuffle": point.shuffle, "mode": point.mode,
                     "throughput_samples_per_s": s.get("throughput_samples_per_s"),
                     "steady_throughput_samples_per_s": s.get("steady_throughput_samples_per_s"),
                     "read_bytes": s.get("read_bytes"), "read_time_s": s.get("read_time_s"),
                     "read_bandwidth_bytes_per_s": s.get("read_bandwidth_bytes_per_s"),
                     "read_layer": s.get("read_layer"), "exposed_io_pct": s.get("exposed_io_pct"),
                     "epoch0_read_bw_MB_per_s": s.get("epoch0_read_bw_MB_per_s"),
                     "later_read_bw_MB_per_s": s.get("later_read_bw_MB_per_s"),
                     "study_read_pct": (s.get("study_view_pct") or {}).get("read"),
                     "node_cache": (s.get("node_cache") or {}).get("mode"),
                     # under --node-cache emulate: the bytes of the files first read after an eviction (storage)
                     "storage_read_bytes": sum((s.get("node_cache") or {}).get("evicted_bytes_per_epoch") or [])
                     if (s.get("node_cache") or {}).get("mode") == "emulate" else None,
                     **{f"{k}_pct": v for k, v in (s.get("breakdown_pct") or {}).items()},
                     "final_accuracy": s.get("final_accuracy"), "job_s": parts.get("job_s")})
    return rows


def format_comparison(rows: Sequence[dict[str, Any]]) -> str:
    width = max([12, *(len(r["point"]) for r in rows)])
    head = (f"{'point':<{width}} {'samples/s':>9} {'steady':>9} {'read MB':>9} {'read s':>8} {'read MB/s':>10} "
            f"{'io %':>6} {'wait %':>6} {'comp %':>6} {'comm %':>6} {'exposed %':>9} {'ep0 MB/s':>9} "
            f"{'later MB/s':>10} {'study read %':>12} {'storage MB':>11}")
    lines = [head]
    for r in rows:
        def num(key: str, fmt: str, scale: float = 1.0, r: dict[str, Any] = r) -> str:
            v = r.get(key)
            return format(v / scale, fmt) if v is not None else "-"
        lines.append(f"{r['point']:<{width}} {num('throughput_samples_per_s', '9.1f')} "
                     f"{num('steady_throughput_samples_per_s', '9.1f')} {num('read_bytes', '9.2f', BYTES_IN['MB'])} "
                     f"{num('read_time_s', '8.4f')} {num('read_bandwidth_bytes_per_s', '10.1f', BYTES_IN['MB'])} "
                     f"{num('io_pct', '6.2f')} {num('wait_pct', '6.2f')} {num('compute_pct', '6.2f')} "
                     f"{num('comm_pct', '6.2f')} {num('exposed_io_pct', '9.2f')} "
                     f"{num('epoch0_read_bw_MB_per_s', '9.1f')} {num('later_read_bw_MB_per_s', '10.1f')} "
                     f"{num('study_read_pct', '12.2f')} {num('storage_read_bytes', '11.2f', BYTES_IN['MB'])}")
    return "\n".join(lines)


def add_job_flags(p: argparse.ArgumentParser, out_help: str) -> None:
    """``--data``, ``--out`` and ``--ranks N`` (default 2): what ``ablate`` and ``noise`` start their jobs with."""
    p.add_argument("--data", required=True, type=Path, help="dataset directory (see `generate`)")
    p.add_argument("--out", required=True, type=Path, help=out_help)
    p.add_argument("--ranks", type=int, default=2)


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, type=Path, help="dataset directory (see `generate`)")
    p.add_argument("--ranks", type=lambda t: parse_list(t, int), default=[1, 2], help="e.g. 1,2")
    p.add_argument("--shuffle", type=lambda t: parse_list(t, str), default=list(MODES), help="local,global")
    p.add_argument("--out", required=True, type=Path, help="sweep directory (one run directory per point)")
    p.add_argument("--no-posix", action="store_true", help="without the DFTracer POSIX layer")
    p.add_argument("--horovod-timeline", action="store_true")
    p.add_argument("--dist", default="auto")
    p.add_argument("--force", action="store_true", help="replace an existing sweep directory's points")
    p.add_argument("--debug", action="store_true")


def run_points(points: Sequence[Point], data: Path, out: Path, train_args: Sequence[str], layers: Layers,
               dist: str, benchmark: str, force: bool) -> list[dict[str, Any]]:
    """Run ``points`` one after the other into ``out/<point name>`` (refused if there unless ``force``)."""
    refuse_existing(*(out / point.name for point in points), force=force)
    results = []
    for point in points:
        if force:
            _clear(out / point.name)
        results.append(run_point(point, data, out / point.name, train_args, layers, dist, benchmark))
        print(format_breakdown(results[-1], title=f"{point.name}: breakdown, % of wall time"), flush=True)
    return results


def sweep_main(argv: Sequence[str] | None, benchmark: str, check: Callable[[Path, int], Any],
               beside: "Callable[[Sequence[dict]], str] | None" = None) -> int:
    """``python -m benchmarks.<benchmark> sweep``; ``check(data, ranks)`` validates the dataset first;
    ``beside(rows)``, when given, makes a text table printed last and written to ``study.txt``."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{benchmark} sweep",
                                description="Run ranks x shuffle points and compare them; other flags go to "
                                            "`train` (e.g. --smoke, --epochs 3, --mode io-only).")
    setup_parser(p)
    args, train_args = p.parse_known_args(argv)
    for mode in args.shuffle:
        if mode not in MODES:
            raise TraceInputError("--shuffle", f"unknown mode {mode!r}; expected {','.join(MODES)}")
    check(args.data, max(args.ranks))
    points = [Point(n, mode) for n in args.ranks for mode in args.shuffle]
    layers = layers_for(args.data, not args.no_posix, args.horovod_timeline)
    results = run_points(points, args.data, args.out, train_args, layers, args.dist, benchmark, args.force)
    rows = comparison_rows(points, results)
    text = format_comparison(rows)
    (args.out / "comparison.txt").write_text(text + "\n")
    (args.out / "comparison.json").write_text(json.dumps(rows, indent=1) + "\n")
    from benchmarks.common.plots import sweep_figure

    fig = sweep_figure(rows, {pt.name: parts["analysis"].breakdown for pt, parts in zip(points, results)})
    fig.savefig(args.out / "sweep.png", dpi=110)
    print(text)
    print(f"wrote {args.out / 'comparison.txt'}, {args.out / 'comparison.json'}, {args.out / 'sweep.png'}")
    if beside is not None:
        extra = beside(rows)
        (args.out / "study.txt").write_text(extra + "\n")
        print(extra)
    return 0


def _clear(run_dir: Path) -> None:
    """Remove a previous point's run directory (only with --force)."""
    import shutil

    if run_dir.exists():
        shutil.rmtree(run_dir)
