"""``python -m benchmarks.hepcnn demo`` (``make demo``): the whole toolkit on a small generated dataset.

Generates the demo dataset once (deterministic; re-used on later runs), runs HEP-CNN on 2 ranks with Horovod for
local and global shuffle with every local layer on (TimeLogger, a TF profiler window, the Horovod timeline, the
DFTracer POSIX preload) and the node-local cache emulation (``--node-cache emulate``: a file is cold the first time
a rank reads it, as on a cluster), merges each run, prints the two breakdowns side by side with the read bandwidths
(per epoch too) and the original study's view, and writes the HTML report and a Perfetto trace of each run.
Every invocation writes a fresh ``OUT/<timestamp>/``; ``OUT/latest`` points at the newest.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from benchmarks.common.launch import stream, venv_tool
from benchmarks.common.runs import (
    demo_arguments,
    format_bandwidth,
    format_breakdown,
    format_layered,
    format_layers,
    link_latest,
    new_stamp,
    side_by_side,
)
from benchmarks.common.sweep import Point, comparison_rows, format_comparison, layers_for, run_point
from benchmarks.hepcnn.config import DEMO_DATA
from benchmarks.hepcnn.data import generate
from timelogger import layout
from trace_merge.analysis import verdict_text
from trace_merge.findings import findings, next_step


def main(argv: Sequence[str] | None = None) -> int:
    args, train_args = demo_arguments(argv, "python -m benchmarks.hepcnn demo", __doc__.splitlines()[0],
                                      Path("runs/demo"), "python -m benchmarks.hepcnn sweep --dist mpi ...")
    t0 = time.perf_counter()
    out = args.out
    data = out / "data"
    print(f"== dataset {data}: {DEMO_DATA.files} train files x {DEMO_DATA.samples_per_file} samples of "
          f"3x{DEMO_DATA.image_size}x{DEMO_DATA.image_size} (generated once, then re-used)", flush=True)
    generate(data, DEMO_DATA, force=args.force)
    stamp = new_stamp(out)
    layers = layers_for(data, posix=True, horovod_timeline=True)
    points = [Point(args.ranks, mode) for mode in ("local", "global")]
    results = {}
    for point in points:
        results[point] = run_point(point, data, stamp / point.shuffle,
                                   ["--demo-preset", "--node-cache", "emulate", *train_args], layers,
                                   dist="horovod")
    link_latest(out, stamp)

    print("\n== where the time went, layer by layer: each app phase (summed over epochs) split by what the lower"
          " layers of the same rank did inside it, seconds (fs = file system, comm = Horovod, in-wait = tf.data"
          " input wait, compute = framework compute, python = seen by no lower layer inside the TF profile window,"
          " unseen = outside it: not observed); docs/metrics.md")
    for pt in points:
        print(format_layered(results[pt], title=f"{pt.shuffle} shuffle ({pt.ranks} ranks)"))
        v = results[pt]["analysis"].verdict
        print(f"verdict: {verdict_text(v)}")
        for line in v.notes + results[pt]["analysis"].explanations:
            print(f"  - {line}")
        found = findings(results[pt]["analysis"])
        print(f"next step: {next_step(found)}")
        print("".join(f"  finding {i}: {f.text()}\n" for i, f in enumerate(found[:3], 1)), end="")
    print("\n== drill-down, app layer alone: exclusive share of each rank's epoch wall time (%)")
    print(side_by_side([format_breakdown(results[pt], title=f"{pt.shuffle} shuffle ({pt.ranks} ranks)")
                        for pt in points]))
    print("\n== every layer on one clock: busy time (union of its intervals) as % of the job's wall time; layers"
          " overlap (comm = Horovod's background thread, framework = the TF profile window, posix = DFTracer)")
    print(side_by_side([format_layers(results[pt], title=f"{pt.shuffle} shuffle") for pt in points]))
    print("\n== read bandwidth (bytes from the lowest layer that measured them; time = union of read intervals)")
    print(side_by_side([format_bandwidth(results[pt], title=f"{pt.shuffle} shuffle") for pt in points]))
    print("\n== read bandwidth per epoch (Σ bytes ÷ slowest rank's read time; epoch 0 reads every file from storage"
          " under the node-cache emulation) and the original study's view (% of Train Loop, per rank)")
    print(side_by_side([f"{pt.shuffle} shuffle\n" + results[pt]["analysis"].epoch_bandwidth_totals.to_string(
        index=False, float_format=lambda v: f"{v:.4g}") for pt in points]))
    study_cols = ["rank", "read_pct", "load_pct", "training_pct", "checkpoint_pct", "other_pct"]
    print(side_by_side([f"{pt.shuffle} shuffle\n" + results[pt]["analysis"].study_view[study_cols].to_string(
        index=False, float_format=lambda v: f"{v:.2f}") for pt in points]))
    rows = comparison_rows(points, [results[pt] for pt in points])
    print("\n== comparison")
    print(format_comparison(rows))
    (stamp / "comparison.txt").write_text(format_comparison(rows) + "\n")
    (stamp / "comparison.json").write_text(json.dumps(rows, indent=1) + "\n")

    print("\n== report and trace", flush=True)
    written = []
    for pt in points:
        run_dir = stamp / pt.shuffle
        report, trace = run_dir / layout.REPORT, run_dir / "trace.perfetto.json.gz"
        stream([venv_tool("trace-merge"), "report", str(run_dir), "-o", str(report)], prefix="  ")
        stream([venv_tool("trace-merge"), "export", str(run_dir), "--perfetto", str(trace)], prefix="  ")
        written += [report, trace]
    for pt in points:
        warnings = results[pt]["summary"].get("merge_warnings") or []
        for w in warnings:
            print(f"warning ({pt.shuffle}): {w}")
    print(f"\nruns:     {stamp / 'local'}  {stamp / 'global'}   (latest: {out / 'latest'})")
    for path in written:
        print(f"wrote     {path}")
    print("open the .html in a browser; load the .json.gz at https://ui.perfetto.dev")
    print(f"demo took {time.perf_counter() - t0:.0f} s")
    return 0
