"""What the CPU sampler (``timelogger run``'s cpu layer, docs/cpu.md) costs: its own CPU as a share of one core.

Run: ``python benchmarks/perf/cpu_sampler.py [--threads 8,64,256] [--workers 4] [--seconds 10] [--period 0.1]``.

For each thread count, a target process starts that many threads (all but two waiting, two busy) and ``--workers``
child processes (busy), as a training rank with a framework's thread pools and loader workers would; the sampler
(``python -m timelogger.cpu``, the launcher's command) follows it for ``--seconds`` at ``--period``, and is then
stopped as the launcher's program end stops it. One JSON line per count: the sampler's CPU seconds and share of one
core from its close record, and as ``/proc`` measured it from outside (utime + stime of the sampler process), the
samples it took and the rows it wrote. Target (issue 49): <= 1 % of one core at the default period.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a script from a checkout

TARGET = """
import multiprocessing as mp, sys, threading, time
def spin():
    while True:
        pass
if __name__ == "__main__":
    stop = threading.Event()
    for i in range(int(sys.argv[1])):
        threading.Thread(target=spin if i < 2 else stop.wait, daemon=True).start()
    for _ in range(int(sys.argv[2])):
        mp.get_context("fork").Process(target=spin, daemon=True).start()
    print("ready", flush=True)
    time.sleep(3600)
"""


def _ticks(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def measure(threads: int, workers: int, seconds: float, period: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        target = subprocess.Popen([sys.executable, "-c", TARGET, str(threads), str(workers)], stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        try:
            assert target.stdout is not None and target.stdout.readline().strip() == "ready"
            sampler = subprocess.Popen([sys.executable, "-m", "timelogger.cpu", "--program", str(target.pid),
                                        "--run-dir", tmp, "--period", repr(period), "--parent", str(os.getpid())],
                                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
            time.sleep(1.0)  # its start (the interpreter) is not the sampling
            outside0, t0 = _ticks(sampler.pid), time.perf_counter()
            time.sleep(seconds)
            outside = _ticks(sampler.pid) - outside0
            wall = time.perf_counter() - t0
            sampler.send_signal(signal.SIGTERM)
            sampler.wait(10)
        finally:
            os.killpg(target.pid, signal.SIGKILL)
            target.wait()
        (path,) = Path(tmp, "cpu").glob("rank-*.pfw")
        lines = path.read_text().splitlines()
        close = json.loads(lines[-1])["args"]
    return {"threads": threads, "workers": workers, "period_s": period, "seconds": round(wall, 2),
            "samples": close["samples"], "rows": close["events"],
            "sampler_cpu_s_sampling": round(outside, 3), "share_of_core_sampling": round(outside / wall, 5),
            "sampler_share_of_core_close_record": close["sampler_share_of_core"],
            "load_1min": round(os.getloadavg()[0], 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="8,64,256")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--period", type=float, default=0.1)
    a = p.parse_args()
    for n in (int(x) for x in a.threads.split(",")):
        print(json.dumps(measure(n, a.workers, a.seconds, a.period)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
