"""``python -m benchmarks.climate demo`` (part of ``make demo``): the climate ablation pair on a small dataset.

Generates the demo dataset once (16 files of 16x192x288; re-used on later runs), runs the climate benchmark on 2 ranks
with Horovod, four reader processes per rank and the DFTracer POSIX preload in ``full`` and ``no-io`` modes, merges
each run, and prints the ablation table -- the original study's finding as numbers: the read phase keeps most of its
time without any file access. Writes the HTML report of the ``full`` run. Every invocation writes a fresh
``OUT/<timestamp>/``; ``OUT/latest`` points at the newest.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from benchmarks.climate.data import DEMO_DATA, generate
from benchmarks.climate.sweep import ABLATION_ROWS
from benchmarks.common.ablate import ablation_table, format_ablation
from benchmarks.common.launch import stream, venv_tool
from benchmarks.common.runs import demo_arguments, format_layered, json_ready, link_latest, new_stamp
from benchmarks.common.sweep import Point, layers_for, run_point
from timelogger import layout

MODES = ("full", "no-io")


def main(argv: Sequence[str] | None = None) -> int:
    args, train_args = demo_arguments(argv, "python -m benchmarks.climate demo", __doc__.splitlines()[0],
                                      Path("runs/demo-climate"), "python -m benchmarks.climate ablate --dist mpi ...")
    t0 = time.perf_counter()
    data = args.out / "data"
    print(f"== climate dataset {data}: {DEMO_DATA.files} files of 16x{DEMO_DATA.height}x{DEMO_DATA.width} "
          f"(generated once, then re-used)", flush=True)
    generate(data, DEMO_DATA, force=args.force)
    stamp = new_stamp(args.out)
    layers = layers_for(data, posix=True, horovod_timeline=False)
    results = {}
    for mode in MODES:
        point = Point(args.ranks, "local", mode)
        results[mode] = run_point(point, data, stamp / mode, ["--demo-preset", *train_args], layers,
                                  dist="horovod", benchmark="climate")
    link_latest(args.out, stamp)

    print("\n== where the time went in the full run: each app phase split by what the lower layers of the same rank"
          " did inside it, seconds (fs = file system, by any process of the rank: the reader workers too)")
    print(format_layered(results["full"], title=f"full ({args.ranks} ranks, reader processes)", top=10))
    table = ablation_table(results, ABLATION_ROWS)
    text = format_ablation(table, title="\n== ablation: the read phases with and without file access (s per rank, "
                                        "all epochs; % of the phase above)")
    print(text)
    (stamp / "ablation.txt").write_text(text + "\n")
    (stamp / "ablation.json").write_text(json.dumps(json_ready(table.to_dict()), indent=1) + "\n")
    full, none = table.at["Parallel Read Images", "full"], table.at["Parallel Read Images", "no-io"]
    fs = table.at["  Parallel Read Images: file system", "full"]
    print(f"\nwith no file access the read phase still took {none:.2f} s per rank against {full:.2f} s with it; "
          f"the file system accounted for {fs:.2f} s of the latter ({100 * fs / full:.0f} %)")
    report = stamp / "full" / layout.REPORT
    stream([venv_tool("trace-merge"), "report", str(stamp / "full"), "-o", str(report)], prefix="  ")
    print(f"\nruns:     {stamp / 'full'}  {stamp / 'no-io'}   (latest: {args.out / 'latest'})")
    print(f"wrote     {report}, {stamp / 'ablation.txt'}")
    print(f"climate demo took {time.perf_counter() - t0:.0f} s")
    return 0
