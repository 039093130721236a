"""``trace-merge summary`` on runs with many distinct io phase names and files; one JSON line per run.

Run: ``python benchmarks/perf/many_names.py [--names 1000,30000,100000] [--events 100000] [--files M] [--no-posix]
[--runs N] [--cache DIR] [--text]``.

Each run is made by the real tools: ``timelogger run --posix`` around a loop of ``--events`` io phases (``Load
<i mod N>``, cat ``io``, ``bytes`` and ``file`` = one of ``M`` files, ``M`` = N unless ``--files``) in 100 steps of
``Training Iteration``; one phase in :data:`POSIX_EVERY` reads its file for real, so the POSIX layer (DFTracer's
preload) holds calls on up to ``M`` distinct files too. Runs are cached under ``--cache`` (default
``$TMPDIR/dlio-layers-many-names``).

For each N it times, interleaved ``--runs`` times (median wall seconds), whole processes:

- ``trace-merge summary RUN --json`` of this checkout (``--text``: the text summary too);
- ``dftracer_stats -d DIR --report detailed --json`` on the same traces (the app file gzipped beside the POSIX
  trace, as DFTracer would write it; its ``.dftindex`` removed before each run, so it builds it as on a first pass);
- DuckDB's per-name GROUP BY (``merge_scale.DUCKDB_QUERY``) on those files, when ``duckdb`` is installed;

and prints them with ``ratio`` = trace-merge ÷ ``dftracer_stats``, ``duckdb_ratio`` = trace-merge ÷ DuckDB,
``vs_first`` = trace-merge's time ÷ its time at the first N (the same event count: the cost of the names alone),
and the load average. The page cache is warm for every tool (the files are a few MB).
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a script from a checkout

from benchmarks.common.errors import BenchmarkError, cli_main  # noqa: E402
from benchmarks.perf.merge_scale import DUCKDB_QUERY, measured, tool  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
#: one io phase in this many reads its file (open, read, close under the POSIX preload)
POSIX_EVERY = 10
STEPS = 100
#: the instrumented loop: argv = events, names, files, data dir, posix_every
LOOP = textwrap.dedent("""
    import os, sys, time
    from timelogger import default_logger
    tl = default_logger()
    events, names, nfiles, every = (int(a) for a in sys.argv[1:4] + sys.argv[5:6])
    data = sys.argv[4]
    paths = [os.path.join(data, f"f{j}.bin") for j in range(nfiles)]
    per = events // 100
    i = 0
    for step in range(100):
        tl.set_step(step)
        with tl.phase("Training Iteration", cat="compute"):
            for _ in range(per):
                path = paths[i % nfiles]
                with tl.phase(f"Load {i % names}", cat="io") as p:
                    n = 0
                    if i % every == 0:
                        with open(path, "rb") as fh:
                            n = len(fh.read())
                    p.update(bytes=n, file=path)
                i += 1
                if i % 2000 == 0:
                    time.sleep(0.005)  # below the writer's sustained rate: no interval dropped
    tl.close()
""")


def make_run(cache: Path, events: int, names: int, files: int, posix: bool) -> Path:
    """The cached run directory (``RUN/run``) and its DFTracer-layout copy (``RUN/dft``), made on first use."""
    root = cache / f"e{events}-n{names}-f{files}{'-posix' if posix else ''}"
    if (root / ".complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    data = root / "data"
    data.mkdir(parents=True)
    for j in range(files):
        (data / f"f{j}.bin").write_bytes(b"x" * 4096)
    script = root / "loop.py"
    script.write_text(LOOP)
    cmd = [tool("timelogger"), "run", "-o", str(root / "run")]
    if posix:
        cmd += ["--posix", "--posix-filter", str(data)]
    cmd += ["--", sys.executable, str(script), str(events), str(names), str(files), str(data), str(POSIX_EVERY)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=root, timeout=600,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))
    dft = root / "dft"
    dft.mkdir()
    for p in (root / "run" / "app").glob("*.pfw"):
        with open(p, "rb") as src, gzip.open(dft / (p.name + ".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    for p in (root / "run" / "posix").glob("*.pfw*"):
        shutil.copyfile(p, dft / p.name)
    (root / ".complete").write_text("")
    return root


def summary_cmd(run: Path, text: bool) -> list[str]:
    # -P: a checkout in the working directory must not shadow this one
    return [sys.executable, "-P", "-m", "trace_merge", "summary", str(run), *([] if text else ["--json"])]


def bench(root: Path, runs: int, text: bool) -> dict:
    run, dft = root / "run", root / "dft"

    def no_index() -> None:
        shutil.rmtree(dft / ".dftindex", ignore_errors=True)

    tools = {"trace_merge": (summary_cmd(run, False), lambda: None)}
    if text:
        tools["trace_merge_text"] = (summary_cmd(run, True), lambda: None)
    tools["dftracer_stats"] = ([tool("dftracer_stats"), "-d", str(dft), "--report", "detailed", "--json"], no_index)
    if importlib.util.find_spec("duckdb") is not None:
        tools["duckdb"] = ([sys.executable, "-c", DUCKDB_QUERY, str(dft)], lambda: None)
    os.environ["PYTHONPATH"] = str(REPO)
    timed = measured(tools, runs=runs)
    summary = json.loads(timed["trace_merge"].stdout)
    out = {"events": summary.get("events"), "dropped_app_intervals": summary.get("dropped_app_intervals", 0)}
    for name, t in timed.items():
        out[f"{name}_s"] = round(t.wall_s, 3)
        out[f"{name}_peak_pss_mib"] = round(t.peak_pss_mib, 1)
    tm = out["trace_merge_s"]
    out["ratio"] = round(tm / out["dftracer_stats_s"], 3)
    if "duckdb_s" in out:
        out["duckdb_ratio"] = round(tm / out["duckdb_s"], 3)
    return out


def main(argv: "Sequence[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--names", default="1000,30000,100000", help="distinct io phase names, comma-separated")
    ap.add_argument("--events", type=int, default=100_000, help="io phases per run (a multiple of 100)")
    ap.add_argument("--files", type=int, default=None, help="distinct files (default: as many as names)")
    ap.add_argument("--no-posix", action="store_true", help="the app layer only")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--text", action="store_true", help="time the text summary too")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "dlio-layers-many-names")
    args = ap.parse_args(argv)
    if args.events % STEPS:
        raise BenchmarkError(f"--events must be a multiple of {STEPS}")
    first = None
    for n in (int(x) for x in args.names.split(",")):
        root = make_run(args.cache, args.events, n, args.files or n, not args.no_posix)
        row = {"names": n, "files": args.files or n, **bench(root, args.runs, args.text)}
        first = first or row["trace_merge_s"]
        row["vs_first"] = round(row["trace_merge_s"] / first, 2)
        row["loadavg"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main(main))
