"""How many intervals per second the TimeLogger writer keeps up with, and what happens beyond that.

Run: ``python benchmarks/perf/writer_rate.py [--smoke]``. Prints one JSON line.

Producers (1 or 4 threads) log empty phases at a fixed aggregate rate for ``seconds`` each; the rate doubles
until the writer drops intervals (it drops what it cannot write within ``max_lag``, counting them). Reported per
thread count: the highest rate with nothing dropped (``sustained_events_per_s_<n>_threads``), and with the
producers unthrottled (as fast as Python runs them) the rate produced, the rate written and the dropped
fraction, and the peak RSS growth — which stays bounded because the writer drops instead of buffering.
Throttled producers sleep between bursts, as a training loop does between steps; unthrottled ones hold the
GIL that the writer thread needs, which is the worst case. ``accelerated``: whether the C accelerator
(``timelogger._capture``) recorded and wrote; ``TIMELOGGER_PURE_PYTHON=1`` measures the pure Python path.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

from timelogger import TimeLogger, writer


@dataclass(frozen=True)
class Config:
    seconds: float = 3.0
    start_rate: int = 25_000
    max_rate: int = 3_200_000
    threads: tuple = (1, 4)

    @classmethod
    def smoke(cls) -> "Config":
        return cls(seconds=1.0, start_rate=50_000, max_rate=400_000)


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _run(n_threads: int, rate: Optional[int], seconds: float) -> Dict[str, Any]:
    """Log for ``seconds`` at ``rate`` intervals/s in total (None: unthrottled); returns counts after close."""
    with tempfile.TemporaryDirectory(prefix="tl-rate-") as tmp:
        tl = TimeLogger(tmp, rank=0, world_size=1)
        stop = time.perf_counter() + seconds
        made = [0] * n_threads
        per_thread = None if rate is None else rate / n_threads

        def produce(i: int) -> None:
            phase = tl.phase
            t0 = time.perf_counter()
            n = 0
            while True:
                now = time.perf_counter()
                if now >= stop:
                    break
                if per_thread is not None:
                    due = int((now - t0) * per_thread)
                    if n >= due:
                        time.sleep(0.0005)
                        continue
                    burst = due - n
                else:
                    burst = 1000
                for _ in range(burst):
                    with phase("tick", cat="compute"):
                        pass
                n += burst
            made[i] = n

        rss0 = _rss_kib()
        threads = [threading.Thread(target=produce, args=(i,)) for i in range(n_threads)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        dropped_while_running = tl.dropped
        tl.close()
        return {"made": sum(made), "elapsed_s": elapsed, "written": tl.events_written, "dropped": tl.dropped,
                "dropped_while_running": dropped_while_running, "rss_growth_kib": _rss_kib() - rss0}


def measure(cfg: Config) -> Dict[str, Any]:
    out: Dict[str, Any] = {"config": asdict(cfg), "python": sys.version.split()[0], "cpus": os.cpu_count(),
                           "accelerated": writer.ACCEL is not None, "load_avg_1min_before": os.getloadavg()[0]}
    for n in cfg.threads:
        sustained, first_dropping = 0, None
        rate = cfg.start_rate
        while rate <= cfg.max_rate:
            res = _run(n, rate, cfg.seconds)
            achieved = res["made"] / res["elapsed_s"]
            if res["dropped"]:
                first_dropping = rate
                break
            if achieved < 0.9 * rate:  # the producers themselves cannot go faster, and nothing was dropped
                sustained = int(achieved)
                break
            sustained = int(achieved)
            rate *= 2
        out[f"sustained_events_per_s_{n}_threads"] = sustained
        out[f"first_dropping_rate_events_per_s_{n}_threads"] = first_dropping
        full = _run(n, None, cfg.seconds)
        out[f"unthrottled_made_events_per_s_{n}_threads"] = int(full["made"] / full["elapsed_s"])
        out[f"unthrottled_written_events_per_s_{n}_threads"] = int(
            (full["made"] - full["dropped_while_running"]) / full["elapsed_s"])
        out[f"unthrottled_dropped_fraction_{n}_threads"] = round(full["dropped"] / max(1, full["made"]), 3)
        out[f"unthrottled_peak_rss_growth_MiB_{n}_threads"] = round(full["rss_growth_kib"] / 1024, 1)
    out["load_avg_1min_after"] = os.getloadavg()[0]
    return out


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small preset (seconds)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(Config.smoke() if args.smoke else Config())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
