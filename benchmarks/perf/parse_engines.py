"""Which engine should parse DFTracer traces? The candidates measured on the same files, in fresh processes.

Run: ``python benchmarks/perf/parse_engines.py DIR [--files N] [--repeats R]`` (``DIR``: a directory of ``.pfw.gz``
traces, e.g. a set of ``benchmarks/perf/merge_scale.py``'s cache). One JSON line per engine, then one summary line.

Every engine parses the columns the reader needs (``name``, ``cat``, ``ph``, ``pid``, ``tid``, ``ts``, ``dur`` and
the ``args`` fields of :data:`trace_merge.readers.pfw.INT_ARGS` / ``STR_ARGS``) of the first ``N`` files, one file
after another, into Arrow columns in memory, with every core it wants:

- ``pyarrow``: gunzip (zlib) then ``pyarrow.json.read_json`` with the reader's explicit schema; what
  :mod:`trace_merge.readers.pfw` does on each block, without building the frame;
- ``duckdb .gz``: ``read_json`` of the ``.gz`` files themselves (its own gunzip), the same columns,
  ``fetch_arrow_table``: what a reader that hands the files to DuckDB would do;
- ``duckdb lines``: gunzip and the reader's body span in Python (as ``pyarrow``), then what the reader did before
  the native scanner: each line a JSON document for DuckDB's ``from_json``, integers as their JSON text cast
  strictly by Arrow, without building the frame;
- ``scan lines``: the same bodies read by what the reader does now (:func:`trace_merge.readers.pfw.event_table`):
  the native scanner (``trace_merge/readers/_pfwscan.c``), straight into Arrow buffers;
- ``reader``: the whole of :func:`trace_merge.readers.pfw.read` (parse, event and metadata handling, frame);
  ``reader, duckdb`` and ``reader, pyarrow`` the same with the parser before the scanner first and the one before
  DuckDB (:class:`~trace_merge.readers.pfw.ParseOptions`, as ``TRACE_MERGE_PARSER=duckdb`` and ``=pyarrow`` set);
- ``duckdb per-name``: issue 20's reference, ``merge_scale.py``'s DuckDB query (count, sum, min and max of ``dur``
  per ``name``: two columns only).

``--hazards`` shows instead why reading the ``.gz`` with DuckDB is not a drop-in replacement (see the docs).

Each is run ``R`` times, interleaved, in a fresh interpreter (page cache warm: this is parsing, not the disk); the
script prints the median wall seconds, CPU seconds (user + sys of the child) and peak RSS, and the events each
engine saw (they must agree). The choice it informs is written up in ``docs/partitioned.md`` ("The parsing
engine").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a script from a checkout

from benchmarks.common.errors import BenchmarkError, cli_main  # noqa: E402
from benchmarks.perf.merge_scale import DUCKDB_QUERY  # noqa: E402

#: the start of the programs that parse the reader's text: ``bodies()`` gunzips each file of argv[1:] (all its
#: gzip members) and yields its event lines as the reader hands them to its parser (no "[" line, no trailing "]"
#: or commas)
_BODIES = """
import sys, zlib
from trace_merge.readers.pfw import arrow_input, body_span


def bodies():
    for path in sys.argv[1:]:
        out, rest = [], open(path, "rb").read()
        while rest:
            d = zlib.decompressobj(wbits=31)
            out.append(d.decompress(rest))
            rest = d.unused_data
        raw = b"".join(out)
        start, end, _, _ = body_span(raw)
        yield arrow_input(raw, start, end)
"""


def _lines_program(parser: str) -> str:
    """The reader's bodies parsed by its ``event_table`` with ``parser`` (``scan`` or ``duckdb``) first."""
    return _BODIES + f"""
import pyarrow.compute as pc
from trace_merge.readers import pfw
# DuckDB however small the files (the reader hands small bodies to pyarrow)
options = pfw.ParseOptions(scanner={parser == "scan"}, duckdb_min_bytes=0)
n = 0
for body in bodies():
    table, _, engine = pfw.event_table(body, options)
    assert engine == {parser!r}, engine
    n += pc.sum(pc.equal(table.column("ph"), 1)).as_py() or 0
print(n)
"""


#: the child programs: argv[1:] are the files; each prints the number of events (complete events) it parsed
PROGRAMS = {
    "pyarrow": _BODIES + """
import pyarrow as pa, pyarrow.json as pj, pyarrow.compute as pc
from trace_merge.readers.pfw import event_schema
schema = event_schema(False, pa.int64())
n = 0
for body in bodies():
    table = pj.read_json(pa.py_buffer(body), read_options=pj.ReadOptions(block_size=16 << 20),
                         parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    n += pc.sum(pc.equal(table.column("ph"), 1)).as_py() or 0
print(n)
""",
    "duckdb .gz": """
import sys
import duckdb
import pyarrow.compute as pc
from trace_merge.readers.pfw import INT_ARGS, STR_ARGS
fields = ", ".join([f'"{k}" BIGINT' for k in INT_ARGS] + [f'"{k}" VARCHAR' for k in STR_ARGS]
                   + ['"name" VARCHAR', '"value" VARCHAR'])
columns = {"name": "VARCHAR", "cat": "VARCHAR", "ph": "BIGINT", "pid": "BIGINT", "tid": "BIGINT",
           "ts": "BIGINT", "dur": "BIGINT", "args": f"STRUCT({fields})"}
con = duckdb.connect()
n = 0
for path in sys.argv[1:]:
    table = con.execute("select * from read_json(?, format='newline_delimited', ignore_errors=true, columns=?)",
                        [path, columns]).fetch_arrow_table()
    n += pc.sum(pc.equal(table.column("ph"), 1)).as_py() or 0
print(n)
""",
    "duckdb lines": _lines_program("duckdb"),
    "scan lines": _lines_program("scan"),
    "reader": """
import sys
from trace_merge.readers import pfw
print(sum(len(pfw.read(p).frame) for p in sys.argv[1:]))
""",
    "reader, duckdb": """
import sys
from trace_merge.readers import pfw
options = pfw.ParseOptions(scanner=False)
print(sum(len(pfw.read(p, options=options).frame) for p in sys.argv[1:]))
""",
    "reader, pyarrow": """
import sys
from trace_merge.readers import pfw
options = pfw.ParseOptions(scanner=False, duckdb=False)
print(sum(len(pfw.read(p, options=options).frame) for p in sys.argv[1:]))
""",
    "duckdb per-name": DUCKDB_QUERY,
}


def run_once(program: str, files: list) -> dict:
    """One fresh interpreter running ``program`` on ``files``: wall and CPU seconds and peak RSS of that process
    (``wait4``), and its output."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", program, *map(str, files)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    stdout, stderr = child.stdout.read(), child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise BenchmarkError(f"engine failed: {stderr.strip().splitlines()[-1] if stderr else child.returncode}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_MiB": usage.ru_maxrss / 1024,
            "events": _events(stdout)}


def _events(stdout: str) -> int:
    """The events a program saw: its last line, a count, or the reference query's per-name JSON (their counts)."""
    last = stdout.strip().splitlines()[-1]
    return int(last) if last.lstrip("-").isdigit() else sum(v["count"] for v in json.loads(last).values())


#: small DFTracer-like files on which DuckDB's ``read_json`` of the ``.gz`` (newline-delimited, ``ignore_errors``, so
#: that a bad line does not fail the whole file) and the reader disagree: name -> text
HAZARDS = {
    "opening [ line": '[\n{"name":"HH","ph":4,"args":{"hhash":"h1","name":"node-0","value":"h1"}}\n'
                      '{"name":"read","cat":"POSIX","pid":1,"tid":1,"ts":1000,"dur":2,"ph":1}\n',
    "fractional ts": '{"name":"read","cat":"POSIX","pid":1,"tid":1,"ts":1000.5,"dur":2,"ph":1}\n',
    "a garbage line": '{"name":"read","cat":"POSIX","pid":1,"tid":1,"ts":1000,"dur":2,"ph":1}\n{"name":"read","ts":\n'
                      '{"name":"read","cat":"POSIX","pid":1,"tid":1,"ts":1001,"dur":2,"ph":1}\n',
}


def hazards(work: Path) -> list:
    """What DuckDB reading the ``.gz`` itself and the reader make of each of :data:`HAZARDS` (and of a gzip file
    cut short): events, their ``ts`` (µs), metadata records and warnings."""
    import gzip

    import duckdb

    from trace_merge.readers import pfw

    cases = dict(HAZARDS)
    whole = gzip.compress(("".join(f'{{"name":"read","cat":"POSIX","pid":1,"tid":1,"ts":{1000 + i},"dur":2,"ph":1}}\n'
                                   for i in range(2000))).encode())
    out = []
    for name, text in [*cases.items(), ("gzip cut short", None)]:
        path = work / f"{name.replace(' ', '-')}.pfw.gz"
        path.write_bytes(gzip.compress(text.encode()) if text is not None else whole[: len(whole) // 2])
        rows = duckdb.connect().execute(
            "select name, ph, ts from read_json(?, format='newline_delimited', ignore_errors=true, "
            "columns={name: 'VARCHAR', ph: 'BIGINT', ts: 'BIGINT'})", [str(path)]).fetchall()
        ours = pfw.read(path)
        out.append({"case": name,
                    "duckdb": {"events": sum(1 for r in rows if r[1] == 1),
                               "metadata": sum(1 for r in rows if r[1] == 4),
                               "ts_us": [r[2] for r in rows if r[1] == 1][:3],
                               "null_rows": sum(r[0] is None for r in rows)},
                    "reader": {"events": len(ours.frame),
                               "metadata": len(ours.meta.hosts) if isinstance(ours.meta, pfw.DFTracerMeta) else 0,
                               "ts_us": [t / 1e3 for t in ours.frame["start_ns"].head(3)],
                               "warnings": [w.split(": ", 1)[-1][:90] for w in ours.warnings]}})
    return out


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--files", type=int, default=2, help="files of DIR to parse (default 2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hazards", action="store_true", help="instead: what DuckDB reading the .gz and the reader make "
                    "of an opening '[' line, a fractional ts, a garbage line and a truncated gzip file (DIR: where "
                    "to write those small files)")
    args = ap.parse_args(argv)
    if args.hazards:
        args.dir.mkdir(parents=True, exist_ok=True)
        for row in hazards(args.dir):
            print(json.dumps(row))
        return 0
    files = sorted(args.dir.glob("*.pfw.gz"))[: args.files]
    if not files:
        raise BenchmarkError(f"{args.dir}: no .pfw.gz files")
    if args.files < 1 or args.repeats < 1:
        raise BenchmarkError("--files and --repeats must be at least 1")
    results: dict = {name: [] for name in PROGRAMS}
    for _ in range(args.repeats):  # interleaved: a noisy moment hits every engine alike
        for name, program in PROGRAMS.items():
            results[name].append(run_once(program, files))
    summary = {}
    for name, runs in results.items():
        row = {"engine": name, "files": len(files),
               "MB_compressed": round(sum(f.stat().st_size for f in files) / 1e6, 1),
               **{k: round(statistics.median(r[k] for r in runs), 3) for k in ("wall_s", "cpu_s", "peak_rss_MiB")},
               "events": sorted({r["events"] for r in runs})}
        print(json.dumps(row))
        summary[name] = row
    base = summary["pyarrow"]["wall_s"]
    print(json.dumps({"vs_pyarrow_wall": {n: round(r["wall_s"] / base, 2) for n, r in summary.items()},
                      "load": os.getloadavg()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(cli_main(main))
