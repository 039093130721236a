"""Does the cpu layer change the step time? The HEP-CNN demo's training job with and without the CPU sampler.

Run: ``python benchmarks/perf/cpu_overhead.py [--data runs/demo/data] [--pairs 4] [--ranks 2]`` (``make demo`` makes
the data). Each pair runs the demo's global-shuffle job (``mpiexec -n RANKS timelogger run --posix --tf-profile ...
-- python -m benchmarks.hepcnn train --demo-preset ...``, the layers the demo switches on) once with the cpu layer
(the default) and once with ``--no-cpu``, in alternating order, cold-started as whole processes. Printed, one JSON
line: per variant the workload's own steady-state throughput (samples/s, its ``summary.json``) and the job's wall
time, their medians, the median of the pairs' ratios (with / without), and the load average. Target (issue 49): no
measurable change in step time, i.e. a ratio within the pairs' spread of 1.

``--toggle SECONDS`` measures inside one job instead, which takes away the run-to-run spread (the 2-rank job's
throughput alone ranges over ±20 % between runs, set by where TensorFlow's threads land): the job runs with the cpu
layer, and every SECONDS its samplers are stopped (SIGSTOP) or let run (SIGCONT), from a random first state. Each
``Training Iteration`` that starts and ends inside one state is counted for it (the first epoch, TensorFlow's
warm-up, is left out); printed per job and pooled: the median step time with the samplers running ÷ stopped.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from trace_merge.cpu_use import sampler_records  # noqa: E402

BIN = Path(sys.executable).parent


#: ``--cpu-period`` of the jobs with the cpu layer (None: the launcher's default)
PERIOD: list[str] = []


def job_command(run_dir: Path, data: Path, ranks: int, cpu: bool, epochs: int = 0) -> list[str]:
    return [str(BIN / "mpiexec"), "-n", str(ranks), str(BIN / "timelogger"), "run", "-o", str(run_dir), "--posix",
           "--posix-filter", str(data), "--tf-profile=2:6", "--horovod-timeline", *(PERIOD if cpu else ["--no-cpu"]),
           "--", sys.executable, "-m", "benchmarks.hepcnn", "train", "--data", str(data), "--shuffle", "global",
           "--dist", "horovod", "--no-merge", "--demo-preset",
            *(["--epochs", str(epochs)] if epochs else [])]


ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "TF_CPP_MIN_LOG_LEVEL": "2"}


def one(run_dir: Path, data: Path, ranks: int, cpu: bool) -> tuple[float, float]:
    """(steady samples/s, wall s) of one job."""
    cmd = job_command(run_dir, data, ranks, cpu)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"cpu_overhead: the job failed ({p.returncode}): {p.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return float(summary["steady_throughput_samples_per_s"]), wall


def samplers_of(run_dir: Path) -> list[int]:
    """The pids of the cpu samplers writing into ``run_dir``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"timelogger.cpu" in argv and str(run_dir).encode() in argv:
            found.append(int(proc.name))
    return found


def steps_of(run_dir: Path) -> list[tuple[float, float]]:
    """(start, end) in wall seconds of every ``Training Iteration`` after the first epoch, all ranks."""
    out = []
    for f in sorted((run_dir / "app").glob("rank-*.pfw")):
        for line in f.read_text().splitlines():
            if '"Training Iteration"' not in line:
                continue
            ev = json.loads(line.rstrip(","))
            if ev["args"].get("epoch", 0) >= 1:
                out.append((ev["ts"] / 1e6, (ev["ts"] + ev["dur"]) / 1e6))
    return out


def toggled(run_dir: Path, data: Path, ranks: int, every: float, epochs: int) -> dict:
    """One job with the cpu layer whose samplers are stopped and let run in turn every ``every`` s."""
    p = subprocess.Popen(job_command(run_dir, data, ranks, True, epochs), cwd=REPO, env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    while p.poll() is None and len(pids) < ranks:
        time.sleep(0.05)
        pids = samplers_of(run_dir)
    running = random.random() < 0.5
    spans: list[tuple[float, float, bool]] = []  # (from, to, samplers running) in wall seconds
    while p.poll() is None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT if running else signal.SIGSTOP)
            except ProcessLookupError:
                pass
        since = time.time()
        try:
            p.wait(timeout=every)
        except subprocess.TimeoutExpired:
            pass
        spans.append((since, time.time(), running))
        running = not running
    for pid in pids:  # let them close their files
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    if p.returncode != 0:
        raise SystemExit(f"cpu_overhead: the job failed ({p.returncode}): {p.stderr.read()[-2000:]}")
    got: dict[bool, list[float]] = {True: [], False: []}
    for t0, t1 in steps_of(run_dir):
        for a, b, state in spans:
            if a <= t0 and t1 <= b:
                got[state].append(t1 - t0)
    # the samplers sampled through the job (not ended by the first stop): their close records count the samples
    closes = [r["close"] or {} for r in sampler_records(run_dir).values()]
    on, off = statistics.median(got[True]), statistics.median(got[False])
    return {"samplers": len(pids), "samples": [c.get("samples") for c in closes],
            "stopped_by": sorted({c.get("exit", {}).get("stopped_by", "no close record") for c in closes}),
            "running_s": round(sum(b - a for a, b, state in spans if state), 1),
            "steps_running": len(got[True]), "steps_stopped": len(got[False]),
            "step_ms_running": round(on * 1e3, 3), "step_ms_stopped": round(off * 1e3, 3), "ratio": round(on / off, 4),
            "mean_ratio": round(statistics.mean(got[True]) / statistics.mean(got[False]), 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO / "runs" / "demo" / "data")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--toggle", type=float, default=0.0, metavar="SECONDS",
                    help="measure inside each job: stop and resume its samplers every SECONDS")
    ap.add_argument("--epochs", type=int, default=24, help="epochs of each --toggle job")
    ap.add_argument("--cpu-period", type=float, default=None, help="the samplers' period (default: the launcher's)")
    a = ap.parse_args()
    if a.cpu_period is not None:
        PERIOD[:] = ["--cpu-period", repr(a.cpu_period)]
    if not a.data.is_dir():
        raise SystemExit(f"cpu_overhead: {a.data}: no data (run `make demo` first, or give --data)")
    if a.toggle:
        jobs = []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.pairs):
                jobs.append(toggled(Path(tmp) / f"job-{i}", a.data.resolve(), a.ranks, a.toggle, a.epochs))
                print(json.dumps(jobs[-1]), flush=True)
        ratios = [j["ratio"] for j in jobs]
        print(json.dumps({"jobs": len(jobs), "toggle_s": a.toggle, "ratio_median": statistics.median(ratios),
                          "ratio_range": [min(ratios), max(ratios)], "load_1min": round(os.getloadavg()[0], 2)}))
        return 0
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
