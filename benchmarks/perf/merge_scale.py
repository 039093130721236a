"""``trace-merge summary --json`` against ``dftracer_stats`` on generated DFTracer traces; one JSON line per set.

Run: ``python benchmarks/perf/merge_scale.py [--small] [--cache DIR] [--keep]``.

For each trace set (``dftracer_gen_fake_trace``: 8 ranks x 20 epochs x 200 steps, ~0.6 M events, and x 1630
steps, ~5 M events; ``--small`` makes one ~15 k-event set instead) it

1. copies the cached set twice, so that each tool gets a first ("cold") pass over files it has never seen:
   ``dftracer_stats`` builds its ``.dftindex`` (RocksDB) index on that pass, ``trace-merge`` has no index;
2. runs ``trace-merge summary COPY --json`` (the real CLI, a subprocess) and
   ``dftracer_stats -d COPY --report detailed --json`` on the other copy, then ``dftracer_stats`` once more on
   its now-indexed copy (``dftracer_stats_warm_s``, for reference);
3. checks that per event name the count, the sum, min and max of ``dur`` (µs) and the bytes of read/write calls
   agree exactly between the two tools (``stats_equal``; mismatches are listed, and the exit status is 1);
4. prints times (wall seconds), ``ratio`` = trace-merge ÷ dftracer_stats cold, CPU seconds (user + sys) and peak
   RSS of each tool (from ``wait4``, MiB) and the load average: on a shared machine wall times mislead and CPU
   seconds are the fairer comparison.

Targets (issue #3): ``ratio <= 1`` (at least as fast as ``dftracer_stats`` cold) and, for the ~5 M event set,
``trace_merge_s <= 10`` and ``trace_merge_peak_rss_MiB <= 3072``. The page cache is dropped before each cold
pass when that is permitted (root outside a container); ``page_cache_dropped`` says whether it was.

Generated traces are cached under ``--cache`` (default: ``$TMPDIR/dlio-layers-merge-scale``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a script from a checkout

from benchmarks.common.errors import BenchmarkError, cli_main  # noqa: E402
from benchmarks.common.launch import venv_tool  # noqa: E402

TARGET_SECONDS_5M = 10.0
TARGET_RSS_MIB = 3072.0


@dataclass(frozen=True)
class TraceSet:
    """One ``dftracer_gen_fake_trace`` configuration."""

    name: str
    ranks: int
    epochs: int
    steps: int
    hosts: int = 2

    def args(self) -> list[str]:
        return ["-p", str(self.ranks), "-H", str(self.hosts), "-e", str(self.epochs), "-s", str(self.steps)]


SMALL = (TraceSet("15k", ranks=4, epochs=4, steps=50),)
FULL = (TraceSet("0.6M", ranks=8, epochs=20, steps=200), TraceSet("5M", ranks=8, epochs=20, steps=1630))


def tool(name: str) -> str:
    """A console script installed next to this interpreter (the venv), else on PATH."""
    try:
        return venv_tool(name)
    except BenchmarkError as err:
        raise BenchmarkError(f"{err} (pip install 'dlio-layers[posix]')") from None


def generate(ts: TraceSet, cache: Path) -> Path:
    """The cached trace set, generated on first use."""
    out = cache / f"{ts.name}-p{ts.ranks}-e{ts.epochs}-s{ts.steps}"
    done = out / ".complete"
    if not done.exists():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([tool("dftracer_gen_fake_trace"), "-o", str(out), *ts.args()], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done.write_text(json.dumps(asdict(ts)))
    return out


def fresh_copy(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for p in sorted(src.glob("*.pfw*")):
        shutil.copyfile(p, dst / p.name)
    return dst


def timed(cmd: Sequence[str], env: "Mapping[str, str] | None" = None) -> "tuple[float, float, float, str]":
    """Run ``cmd``; (wall s, CPU s (user + sys) of it and its children, peak RSS MiB of its whole process tree,
    stdout).

    The peak is the largest sum of the resident sets of the process and all its descendants, sampled every
    20 ms (``wait4``'s ``ru_maxrss`` would give the largest single process only, and nothing of a pool's
    workers that the process did not wait for itself). Shared pages count once per process: an upper bound.
    """
    import psutil

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=dict(env) if env is not None else None)
        peak = 0
        cpu: dict[int, float] = {}
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            total = 0
            for p in tree:
                try:
                    total += p.memory_info().rss
                    t = p.cpu_times()
                    cpu[p.pid] = t.user + t.system + t.children_user + t.children_system
                except psutil.NoSuchProcess:
                    pass
            peak = max(peak, total)
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise BenchmarkError(f"{cmd[0]} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
        cpu_s = max(sum(cpu.values()), usage.ru_utime + usage.ru_stime - _CHILD_CPU[0])
        _CHILD_CPU[0] = usage.ru_utime + usage.ru_stime
        return wall, cpu_s, peak / 2**20, out.read().decode()


_CHILD_CPU = [0.0]  # CPU seconds of children already counted by earlier calls


# -- the per-name statistics both tools report (also used by tests/test_reader_pfw_stats.py) ----------------


def dftracer_stats_by_name(report: Iterable[Mapping[str, Any]]) -> dict:
    """``dftracer_stats --report detailed --json`` (one entry per file) -> name -> count/sum/min/max/bytes."""
    out: dict[str, dict] = {}
    for per_file in report:
        det = per_file["detailed"]
        for name, d in det["grouped_duration"].items():
            _add(out, name, d["count"], d["sum"], d["min"], d["max"], None)
        for name, d in det.get("grouped_io", {}).items():
            out[name]["bytes"] = (out[name]["bytes"] or 0) + d["size"]["sum"]
    return out


def summary_by_name(summary: Mapping[str, Any]) -> dict:
    """``trace-merge summary --json`` -> name -> count/sum/min/max/bytes (µs), summed over layer/cat groups."""
    out: dict[str, dict] = {}
    for row in summary["event_stats"]:
        _add(out, row["name"], row["count"], row["sum_us"], row["min_us"], row["max_us"], row["bytes"])
    return out


def _add(out: dict, name: str, count: int, total: float, lo: float, hi: float, nbytes: "int | None") -> None:
    acc = out.setdefault(name, {"count": 0, "sum": 0, "min": float("inf"), "max": float("-inf"), "bytes": None})
    acc["count"] += count
    acc["sum"] += total
    acc["min"] = min(acc["min"], lo)
    acc["max"] = max(acc["max"], hi)
    if nbytes is not None:
        acc["bytes"] = (acc["bytes"] or 0) + nbytes


def mismatches(ours: Mapping[str, dict], theirs: Mapping[str, dict]) -> list[str]:
    """Every name whose statistics differ (exact comparison: both tools sum integer µs)."""
    bad = [f"{n}: only in dftracer_stats" for n in sorted(set(theirs) - set(ours))]
    bad += [f"{n}: only in trace-merge" for n in sorted(set(ours) - set(theirs))]
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name], theirs[name]
        for key in ("count", "sum", "min", "max", "bytes"):
            if a[key] != b[key]:
                bad.append(f"{name}: {key} {a[key]} (trace-merge) != {b[key]} (dftracer_stats)")
    return bad


# -- driver ----------------------------------------------------------------------------------------------


def measure(ts: TraceSet, cache: Path, work: Path) -> dict:
    from benchmarks.common.node_cache import drop_all  # one page-cache helper for the benchmarks

    src = generate(ts, cache)
    ours_dir = fresh_copy(src, work / f"{ts.name}-trace-merge")
    theirs_dir = fresh_copy(src, work / f"{ts.name}-dftracer-stats")
    load_before = os.getloadavg()[0]
    dropped = drop_all() is None
    tm_s, tm_cpu, tm_rss, tm_out = timed([sys.executable, "-m", "trace_merge", "summary", str(ours_dir), "--json"])
    drop_all()
    index = theirs_dir / ".dftindex"
    stats_cmd = [tool("dftracer_stats"), "-d", str(theirs_dir), "--index-dir", str(index), "--report", "detailed",
                 "--json", "--log-level", "off"]
    ds_s, ds_cpu, ds_rss, ds_out = timed(stats_cmd)
    indexed = index.is_dir() and any(index.iterdir())
    warm_s, _, _, _ = timed(stats_cmd)
    summary = json.loads(tm_out)
    bad = mismatches(summary_by_name(summary), dftracer_stats_by_name(json.loads(ds_out)))
    result = {
        "set": ts.name,
        "events": summary["events"],
        "files": len(list(src.glob("*.pfw*"))),
        "trace_merge_s": round(tm_s, 3),
        "dftracer_stats_cold_s": round(ds_s, 3),
        "dftracer_stats_warm_s": round(warm_s, 3),
        "ratio": round(tm_s / ds_s, 3),
        "trace_merge_cpu_s": round(tm_cpu, 3),
        "dftracer_stats_cold_cpu_s": round(ds_cpu, 3),
        "trace_merge_peak_rss_MiB": round(tm_rss, 1),
        "dftracer_stats_peak_rss_MiB": round(ds_rss, 1),
        "dftracer_stats_built_index": indexed,
        "stats_equal": not bad,
        "page_cache_dropped": dropped,
        "loadavg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    targets = {"as_fast_as_dftracer_stats_cold": result["ratio"] <= 1.0}
    if summary["events"] >= 4_000_000:
        targets["le_10s"] = tm_s <= TARGET_SECONDS_5M
        targets["le_3GiB"] = tm_rss <= TARGET_RSS_MIB
    result["targets_met"] = targets
    if bad:
        result["mismatches"] = bad[:20]
    return result


def main(argv: "Sequence[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", "--smoke", action="store_true", help="one ~15k-event set (seconds)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "dlio-layers-merge-scale",
                        help="where generated trace sets are kept between runs")
    parser.add_argument("--keep", action="store_true", help="keep the per-run copies (under the cache dir)")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=args.cache))
    ok = True
    try:
        for ts in SMALL if args.small else FULL:
            result = measure(ts, args.cache, work)
            ok = ok and result["stats_equal"]
            print(json.dumps(result), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(cli_main(main))
