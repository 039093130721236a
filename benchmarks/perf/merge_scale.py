"""``trace-merge summary --json`` against ``dftracer_stats`` on generated DFTracer traces; one JSON line per set.

Run: ``python benchmarks/perf/merge_scale.py [--small | --sets 0.6M,5M,20M,50M | --shapes]
[--scheduler ADDRESS|local] [--cache DIR] [--keep] [--runs N]``.

Trace sets (``dftracer_gen_fake_trace``, 8 ranks x 20 epochs, 2 hosts): ``0.6M`` (200 steps), ``5M`` (1630),
``20M`` (6520), ``50M`` (16300); ``--small`` is one ~15 k-event set. The trace shapes (issue 50, :data:`SHAPES`:
one table, name -> ranks, hosts, epochs, steps), about 5 M events each but one: ``7ranks`` (a rank count no
multiple of the cores), ``4hosts`` (fewer ranks over more hosts, more epochs), ``200epochs``, ``1000ranks`` (1,000
small ranks, 760 k events) and ``1rank`` (one huge rank); ``--shapes`` runs them and the 5M set cold (use ``--runs
3``) and ends with a line of each one's ratio. For each set it

1. copies the cached set twice, so that each tool gets a first ("cold") pass over files it has never seen, their
   pages evicted from the page cache before it (``posix_fadvise(DONTNEED)``; the tools themselves stay cached, as
   on a machine that has run them before): ``dftracer_stats`` builds its ``.dftindex`` (RocksDB) index on that
   pass, ``trace-merge`` has none;
2. runs ``trace-merge summary COPY --json`` (the real CLI: at this size the partitioned merge on the local pool)
   and ``dftracer_stats -d COPY --report detailed --json`` on the other copy, interleaved;
3. re-summary: ``trace-merge merge COPY`` stores the merge (``merged.parquet``, one row group run per rank, and the
   summary's per-rank tables, ``summary_parts.zip``), then ``trace-merge summary COPY --json`` again (the reduction
   of those tables), against ``dftracer_stats`` once more on its now-indexed copy; the merge is to us what the
   index is to ``dftracer_stats`` (``--cold-only`` skips this step);
4. the reference issue 20 names: DuckDB (``read_json`` of ``name`` and ``dur``, GROUP BY name: per-name count, sum,
   min, max) on a third cold copy, when ``duckdb`` is installed (``make bench`` installs it);
5. with ``--scheduler``, ``trace-merge summary --scheduler ADDRESS`` on a fresh copy (``local``: a Dask
   ``LocalCluster`` of 2 single-thread workers started here for that run only), whose summary must equal the local
   engine's;
6. checks that per event name the count, the sum, min and max of ``dur`` (µs) and the bytes of read/write calls
   agree exactly between the two tools (``stats_equal``; mismatches are listed, and the exit status is 1);
7. prints wall seconds, CPU seconds (user + sys, workers included) and the peak memory of each tool's whole
   process tree (PSS: shared pages split between the processes that share them; and the RSS sum, an upper bound),
   ``ratio`` = trace-merge ÷ dftracer_stats, and the load average. The cold runs (trace-merge, ``dftracer_stats``,
   DuckDB) are made ``--runs N`` times each (default 1), interleaved, cold each time: the wall times are those of
   the runs alone (their median; ``ratio`` is the median of the runs' ratios, ``ratio_range`` their least and
   greatest), the CPU time and peaks those of one more run, sampled (reading /proc every 50 ms slows the sampled
   tool: 15 % for trace-merge at 20 M events, 7 % for ``dftracer_stats``; its wall time is printed too,
   ``*_sampled_s``).

Targets (issue 20): cold ``ratio <= 0.5`` (trace-merge at most half of ``dftracer_stats``' wall time) and
``duckdb_ratio <= 2`` (within 2x of the DuckDB per-name query) at 5 M and 20 M events; peak memory (PSS of the
process tree) <= 1 GiB at 20 M and 50 M events; re-summary ``resummary_ratio <= 0.5`` against the indexed
``dftracer_stats``.

Generated traces are cached under ``--cache`` (default: ``$TMPDIR/dlio-layers-merge-scale``).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a script from a checkout

from benchmarks.common.errors import BenchmarkError, cli_main  # noqa: E402
from benchmarks.common.launch import venv_tool  # noqa: E402


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
#: the trace shapes (issue 50), each about the 5M set's size but one: a summary's speed must not hang on the shape
SHAPES = (TraceSet("7ranks", ranks=7, epochs=20, steps=1860),  # a rank count no multiple of the cores
          TraceSet("4hosts", ranks=4, hosts=4, epochs=40, steps=1630),  # fewer ranks over more hosts, more epochs
          TraceSet("200epochs", ranks=8, epochs=200, steps=163),  # many epochs
          TraceSet("1000ranks", ranks=1000, hosts=10, epochs=2, steps=20),  # a 1,000-node job's many small ranks
          TraceSet("1rank", ranks=1, hosts=1, epochs=20, steps=13000))  # one huge rank
SETS = {ts.name: ts for ts in (TraceSet("0.6M", ranks=8, epochs=20, steps=200),
                              TraceSet("5M", ranks=8, epochs=20, steps=1630),
                              TraceSet("20M", ranks=8, epochs=20, steps=6520),
                              TraceSet("50M", ranks=8, epochs=20, steps=16300), *SHAPES)}
DEFAULT_SETS = "0.6M,5M,20M"
#: ``--shapes``: the project's own shape (the 5M set) and the others
SHAPE_SETS = ",".join(["5M", *(ts.name for ts in SHAPES)])
#: peak memory targets (MiB) by set
MEMORY_TARGET_MIB = {"20M": 1024.0, "50M": 1024.0}
#: trace-merge's wall time at most this share of dftracer_stats' (cold, and re-summary against the indexed one) ...
STATS_RATIO_TARGET = 0.5
#: ... and at most this many times DuckDB's per-name query
DUCKDB_RATIO_TARGET = 2.0
#: the DuckDB reference: per-name statistics of every trace file of a directory (or of the files given), as JSON on
#: stdout
DUCKDB_QUERY = """
import glob, json, os, sys
import duckdb
files = sorted(glob.glob(sys.argv[1] + "/*.pfw*")) if os.path.isdir(sys.argv[1]) else sys.argv[1:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")  # past ~2 s it would print on stdout
rows = con.execute(
    "select name, count(*), sum(dur), min(dur), max(dur) from read_json(?, format='newline_delimited', "
    "ignore_errors=true, columns={name: 'VARCHAR', dur: 'BIGINT'}) where dur is not null group by name",
    [files]).fetchall()
print(json.dumps({n: {"count": c, "sum": s, "min": lo, "max": hi} for n, c, s, lo, hi in rows}))
"""


def tool(name: str) -> str:
    """A console script installed next to this interpreter (the venv), else on PATH."""
    try:
        return venv_tool(name)
    except BenchmarkError as err:
        raise BenchmarkError(f"{err} (pip install 'dlio-layers[posix]')") from None


def generate(ts: TraceSet, cache: Path) -> Path:
    """The cached trace set, generated on first use."""
    hosts = f"-H{ts.hosts}" if ts.hosts != TraceSet.hosts else ""  # (the 2-host sets' names as they were)
    out = cache / f"{ts.name}-p{ts.ranks}{hosts}-e{ts.epochs}-s{ts.steps}"
    done = out / ".complete"
    if not done.exists():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([tool("dftracer_gen_fake_trace"), "-o", str(out), *ts.args()], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done.write_text(json.dumps(asdict(ts)))
    return out


def fresh_copy(src: Path, dst: Path) -> Path:
    """A copy of the set's traces, written through to the disk: pages still dirty are not evicted (``evict``), and
    their writeback would run during the first cold runs (the first of five rounds at 5 M events took 1.2-1.4x the
    time of the others, for every tool)."""
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for p in sorted(src.glob("*.pfw*")):
        shutil.copyfile(p, dst / p.name)
        fd = os.open(dst / p.name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return dst


@dataclass
class Timed:
    """One process tree's run: wall and CPU seconds, peak memory of the whole tree, stdout."""

    wall_s: float
    cpu_s: float
    peak_pss_mib: float  # largest sum of the tree's proportional set sizes (shared pages split between sharers)
    peak_rss_mib: float  # largest sum of the tree's resident sets (shared pages counted in every process)
    stdout: str
    sampled_wall_s: float = 0.0  # :func:`measured`: the wall time of the run whose memory was sampled
    walls: list[float] = field(default_factory=list)  # :func:`measured`: the runs alone's (``wall_s``: median)


def measured(tools: "Mapping[str, tuple[Sequence[str], Callable[[], None]]]", runs: int = 1) -> "dict[str, Timed]":
    """Each tool's ``(cmd, prepare)``: the commands run alone ``runs`` times, interleaved (A B C A B C ...: a drift
    of the machine's speed reaches every tool alike), ``prepare()`` (a cold page cache, no index) before each run,
    for their wall times (in ``Timed.walls``; ``wall_s`` is their median); then once more each, sampled, for CPU
    time and peaks. Reading /proc every 50 ms is work on the same two cores and holds the sampled processes' memory
    maps: it took 15 % of ``trace-merge summary``'s wall time at 20 M events (22.1-22.3 s against 18.9-19.6) and 7 %
    of ``dftracer_stats``' (37.4-38.2 s against 35.1-35.8). (The CPU time needs the samples: the pool's workers are
    the fork server's children, whose ``rusage`` never reaches this process.)"""
    walls: dict = {name: [] for name in tools}
    for _ in range(runs):
        for name, (cmd, prepare) in tools.items():
            prepare()
            walls[name].append(timed(cmd, sample=False).wall_s)
    out = {}
    for name, (cmd, prepare) in tools.items():
        prepare()
        sampled = timed(cmd)
        out[name] = replace(sampled, wall_s=statistics.median(walls[name]), sampled_wall_s=sampled.wall_s,
                            walls=walls[name])
    return out


def paired_ratio(a: Timed, b: Timed) -> "tuple[float, float, float]":
    """The median, least and greatest of ``a``'s wall time over ``b``'s, run by run (the runs of one round side by
    side, as :func:`measured` interleaves them)."""
    ratios = [x / y for x, y in zip(a.walls, b.walls)]
    return statistics.median(ratios), min(ratios), max(ratios)


def timed(cmd: Sequence[str], env: "Mapping[str, str] | None" = None, sample: bool = True) -> Timed:
    """Run ``cmd`` and measure it, its pool workers included.

    Memory is sampled every 50 ms over the process and all its descendants: ``wait4``'s ``ru_maxrss`` gives the
    largest single process only, and nothing of workers the process did not wait for itself. PSS is the fair
    sum (a library mapped by five processes counts once in all); the RSS sum is an upper bound. Without
    ``sample``, only the wall time is right: the CPU time is the waited-for children's ``rusage``, and the peaks 0.
    """
    import psutil

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=dict(env) if env is not None else None)
        peak_pss = peak_rss = 0
        cpu: dict[int, float] = {}
        root = psutil.Process(proc.pid)
        if not sample:
            proc.wait()
        while proc.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            pss = rss = 0
            for p in tree:
                kib = _rollup(p.pid)
                if kib is None:
                    continue
                pss, rss = pss + kib[0] * 1024, rss + kib[1] * 1024
                try:
                    t = p.cpu_times()
                    cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
            time.sleep(SAMPLE_S)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise BenchmarkError(f"{cmd[0]} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
        waited = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return Timed(wall, max(sum(cpu.values()), waited), peak_pss / 2**20, peak_rss / 2**20, out.read().decode())


#: seconds between memory samples (reading /proc costs ~1 ms per process; sampling faster would load the machine)
SAMPLE_S = 0.05


def _rollup(pid: int) -> "tuple[int, int] | None":
    """(PSS, RSS) in KiB of a process from ``/proc/<pid>/smaps_rollup``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = dict(line.split(b":", 1) for line in text.splitlines()[1:] if b":" in line)
    try:
        return int(fields[b"Pss"].split()[0]), int(fields[b"Rss"].split()[0])
    except (KeyError, ValueError, IndexError):
        return None


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


def measure(ts: TraceSet, cache: Path, work: Path, scheduler: "str | None" = None, cold_only: bool = False,
            runs: int = 1) -> dict:
    from benchmarks.common.node_cache import evict  # one page-cache helper for the benchmarks

    def cold(d: Path) -> None:
        evict(str(p) for p in d.glob("*.pfw*"))

    src = generate(ts, cache)
    ours_dir = fresh_copy(src, work / f"{ts.name}-trace-merge")
    theirs_dir = fresh_copy(src, work / f"{ts.name}-dftracer-stats")
    load_before = os.getloadavg()[0]
    summary_cmd = [sys.executable, "-m", "trace_merge", "summary", str(ours_dir), "--json"]
    index = theirs_dir / ".dftindex"
    stats_cmd = [tool("dftracer_stats"), "-d", str(theirs_dir), "--index-dir", str(index), "--report", "detailed",
                 "--json", "--log-level", "off"]

    def no_index() -> None:  # each cold run builds its index
        shutil.rmtree(index, ignore_errors=True)
        cold(theirs_dir)

    tools: dict = {"ours": (summary_cmd, lambda: cold(ours_dir)), "theirs": (stats_cmd, no_index)}
    duck_dir = None
    if importlib.util.find_spec("duckdb") is not None:
        duck_dir = fresh_copy(src, work / f"{ts.name}-duckdb")
        tools["duck"] = ([sys.executable, "-c", DUCKDB_QUERY, str(duck_dir)], lambda: cold(duck_dir))
    timings = measured(tools, runs)
    ours, theirs, duck = timings["ours"], timings["theirs"], timings.get("duck")
    if duck_dir is not None:
        shutil.rmtree(duck_dir, ignore_errors=True)
    indexed = index.is_dir() and any(index.iterdir())
    ratio, ratio_lo, ratio_hi = paired_ratio(ours, theirs)
    summary = json.loads(ours.stdout)
    bad = mismatches(summary_by_name(summary), dftracer_stats_by_name(json.loads(theirs.stdout)))
    if cold_only:
        merged = again = warm = None
    else:
        merged = timed([sys.executable, "-m", "trace_merge", "merge", str(ours_dir)])
        again = timed(summary_cmd)
        warm = timed(stats_cmd)
        bad += [f"re-summary: {m}" for m in mismatches(summary_by_name(json.loads(again.stdout)),
                                                        summary_by_name(summary))]
    result = {
        "set": ts.name,
        "events": summary["events"],
        "files": len(list(src.glob("*.pfw*"))),
        "trace_merge_s": round(ours.wall_s, 3),
        "dftracer_stats_cold_s": round(theirs.wall_s, 3),
        "runs": runs,
        "timing": "wall: median of the runs alone, interleaved; ratios: median of the runs' (range: least, greatest);"
                  " CPU and peaks of one more run, sampled (its wall: *_sampled_s)",
        "trace_merge_sampled_s": round(ours.sampled_wall_s, 3),
        "dftracer_stats_cold_sampled_s": round(theirs.sampled_wall_s, 3),
        "ratio": round(ratio, 3),
        "ratio_range": [round(ratio_lo, 3), round(ratio_hi, 3)],
        "trace_merge_walls_s": [round(w, 3) for w in ours.walls],
        "dftracer_stats_cold_walls_s": [round(w, 3) for w in theirs.walls],
        "trace_merge_cpu_s": round(ours.cpu_s, 3),
        "dftracer_stats_cold_cpu_s": round(theirs.cpu_s, 3),
        "trace_merge_peak_pss_MiB": round(ours.peak_pss_mib, 1),
        "trace_merge_peak_rss_sum_MiB": round(ours.peak_rss_mib, 1),
        "dftracer_stats_peak_pss_MiB": round(theirs.peak_pss_mib, 1),
        "dftracer_stats_peak_rss_sum_MiB": round(theirs.peak_rss_mib, 1),
        "dftracer_stats_built_index": indexed,
        "stats_equal": not bad,
        "traces_evicted_before_cold_runs": True,
        "loadavg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    if duck is not None:
        per_name = json.loads(duck.stdout)
        duck_ratio, duck_lo, duck_hi = paired_ratio(ours, duck)
        result.update({"duckdb_s": round(duck.wall_s, 3), "duckdb_sampled_s": round(duck.sampled_wall_s, 3),
                       "duckdb_cpu_s": round(duck.cpu_s, 3),
                       "duckdb_peak_pss_MiB": round(duck.peak_pss_mib, 1),
                       "duckdb_events": sum(v["count"] for v in per_name.values()),
                       "duckdb_walls_s": [round(w, 3) for w in duck.walls],
                       "duckdb_ratio": round(duck_ratio, 3),
                       "duckdb_ratio_range": [round(duck_lo, 3), round(duck_hi, 3)]})
    else:
        result["duckdb_s"] = "not measured: duckdb is not installed (make bench installs it)"
    if merged is not None and again is not None and warm is not None:
        result.update({"merge_s": round(merged.wall_s, 3), "merge_peak_pss_MiB": round(merged.peak_pss_mib, 1),
                       "resummary_s": round(again.wall_s, 3), "dftracer_stats_indexed_s": round(warm.wall_s, 3),
                       "resummary_ratio": round(again.wall_s / warm.wall_s, 3),
                       "resummary_peak_pss_MiB": round(again.peak_pss_mib, 1)})
    if scheduler:
        dask_dir = fresh_copy(src, work / f"{ts.name}-dask")
        cold(dask_dir)
        cluster = None
        if scheduler == "local":
            from distributed import LocalCluster

            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        try:
            on_dask = timed([sys.executable, "-m", "trace_merge", "summary", str(dask_dir), "--json", "--scheduler",
                             cluster.scheduler_address if cluster else scheduler])
        finally:
            if cluster is not None:
                cluster.close()
        same = _comparable(json.loads(on_dask.stdout)) == _comparable(summary)
        result.update({"dask_s": round(on_dask.wall_s, 3), "dask_driver_peak_pss_MiB": round(on_dask.peak_pss_mib, 1),
                       "dask_summary_equal": same})
        if not same:
            bad.append("the Dask engine's summary differs from the local engine's")
        shutil.rmtree(dask_dir, ignore_errors=True)
    targets = {f"cold_le_{STATS_RATIO_TARGET:g}x_dftracer_stats": result["ratio"] <= STATS_RATIO_TARGET}
    if duck is not None:
        targets[f"cold_le_{DUCKDB_RATIO_TARGET:g}x_duckdb"] = result["duckdb_ratio"] <= DUCKDB_RATIO_TARGET
    if not cold_only:
        targets[f"resummary_le_{STATS_RATIO_TARGET:g}x_indexed_dftracer_stats"] = \
            result["resummary_ratio"] <= STATS_RATIO_TARGET
    if ts.name in MEMORY_TARGET_MIB:
        targets[f"peak_le_{MEMORY_TARGET_MIB[ts.name]:.0f}MiB"] = ours.peak_pss_mib <= MEMORY_TARGET_MIB[ts.name]
    result["targets_met"] = targets
    result["stats_equal"] = not bad
    if bad:
        result["mismatches"] = bad[:20]
    for d in (ours_dir, theirs_dir):
        shutil.rmtree(d, ignore_errors=True)
    return result


def _comparable(summary: dict) -> dict:
    """A summary without what names the copy it was made from."""
    return {k: v for k, v in summary.items() if k not in ("path", "warnings")}


def main(argv: "Sequence[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", "--smoke", action="store_true", help="one ~15k-event set (seconds)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "dlio-layers-merge-scale",
                        help="where generated trace sets are kept between runs")
    parser.add_argument("--keep", action="store_true", help="keep the per-run copies (under the cache dir)")
    parser.add_argument("--sets", default=DEFAULT_SETS,
                        help=f"comma-separated sets of {', '.join(SETS)} (default: {DEFAULT_SETS})")
    parser.add_argument("--shapes", action="store_true",
                        help=f"the trace shapes ({SHAPE_SETS}), cold only, then a line of each one's ratio")
    parser.add_argument("--cold-only", action="store_true",
                        help="only the cold summaries (no merge, re-summary or indexed dftracer_stats): the 50M set")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="also summarise on this Dask scheduler; 'local' starts a LocalCluster of 2 workers")
    parser.add_argument("--runs", type=int, default=1, metavar="N",
                        help="cold runs of each tool, interleaved; times and ratios are their medians (default: 1)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        raise BenchmarkError(f"--runs: {args.runs}: at least 1")
    if args.shapes:
        args.sets, args.cold_only = SHAPE_SETS, True
    unknown = [x for x in args.sets.split(",") if x not in SETS]
    if unknown:
        raise BenchmarkError(f"--sets: unknown set(s) {', '.join(unknown)} (known: {', '.join(SETS)})")
    args.cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=args.cache))
    ok = True
    results = []
    try:
        for ts in SMALL if args.small else [SETS[x] for x in args.sets.split(",")]:
            result = measure(ts, args.cache, work, args.scheduler, args.cold_only, args.runs)
            ok = ok and result["stats_equal"]
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.shapes:
        print(json.dumps(shape_ratios(results)), flush=True)
    return 0 if ok else 1


def shape_ratios(results: Sequence[dict]) -> dict:
    """``--shapes``' last line: per set, the cold ratio to ``dftracer_stats`` (median and range of the runs) and
    whether it meets the target, and whether every set does."""
    per = {r["set"]: {"ratio": r["ratio"], "ratio_range": r["ratio_range"], "trace_merge_s": r["trace_merge_s"],
                      "dftracer_stats_s": r["dftracer_stats_cold_s"], "stats_equal": r["stats_equal"],
                      f"le_{STATS_RATIO_TARGET:g}x": r["ratio"] <= STATS_RATIO_TARGET} for r in results}
    return {"shapes": per, "all_le_target": all(v[f"le_{STATS_RATIO_TARGET:g}x"] for v in per.values()),
            "runs": results[0]["runs"] if results else 0}


if __name__ == "__main__":
    sys.exit(cli_main(main))
