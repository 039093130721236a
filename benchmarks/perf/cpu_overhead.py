"""Does the cpu layer change the step time? The HEP-CNN demo's training job with and without the CPU sampler.

Run: ``python benchmarks/perf/cpu_overhead.py [--data runs/demo/data] [--pairs 4] [--ranks 2]`` (``make demo`` makes
the data). Each pair runs the demo's global-shuffle job (``mpiexec -n RANKS timelogger run --posix --tf-profile ...
-- python -m benchmarks.hepcnn train --demo-preset ...``, the layers the demo switches on) once with the cpu layer
(the default) and once with ``--no-cpu``, in alternating order, cold-started as whole processes. Printed, one JSON
line: per variant the workload's own steady-state throughput (samples/s, its ``summary.json``) and the job's wall
time, their medians, the median of the pairs' ratios (with / without), and the load average. Target (issue 49): no
measurable change in step time, i.e. a ratio within the pairs' spread of 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def one(run_dir: Path, data: Path, ranks: int, cpu: bool) -> tuple[float, float]:
    """(steady samples/s, wall s) of one job."""
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks), str(BIN / "timelogger"), "run", "-o", str(run_dir), "--posix",
           "--posix-filter", str(data), "--tf-profile=2:6", "--horovod-timeline", *([] if cpu else ["--no-cpu"]),
           "--", sys.executable, "-m", "benchmarks.hepcnn", "train", "--data", str(data), "--shuffle", "global",
           "--dist", "horovod", "--no-merge", "--demo-preset"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "TF_CPP_MIN_LOG_LEVEL": "2"}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"cpu_overhead: the job failed ({p.returncode}): {p.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return float(summary["steady_throughput_samples_per_s"]), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO / "runs" / "demo" / "data")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=2)
    a = ap.parse_args()
    if not a.data.is_dir():
        raise SystemExit(f"cpu_overhead: {a.data}: no data (run `make demo` first, or give --data)")
    got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            for cpu in ((True, False) if i % 2 == 0 else (False, True)):
                run_dir = Path(tmp) / f"{i}-{'cpu' if cpu else 'nocpu'}"
                got[cpu].append(one(run_dir, a.data.resolve(), a.ranks, cpu))
                shutil.rmtree(run_dir)
    ratios = [w[0] / wo[0] for w, wo in zip(got[True], got[False])]
    out = {"pairs": a.pairs, "ranks": a.ranks,
           "with_cpu_samples_per_s": [round(x[0], 1) for x in got[True]],
           "without_cpu_samples_per_s": [round(x[0], 1) for x in got[False]],
           "with_cpu_wall_s_median": round(statistics.median(x[1] for x in got[True]), 2),
           "without_cpu_wall_s_median": round(statistics.median(x[1] for x in got[False]), 2),
           "throughput_ratio_median": round(statistics.median(ratios), 4),
           "throughput_ratio_range": [round(min(ratios), 4), round(max(ratios), 4)],
           "load_1min": round(os.getloadavg()[0], 2)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
