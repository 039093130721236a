"""trace_merge.readers.pfw on real DFTracer traces (fake-trace generator and the LD_PRELOAD tracer)
and real TimeLogger files."""
from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trace_merge.errors import TraceInputError
from trace_merge.readers import pfw
from trace_merge.readers.pfw import ParseOptions, tables, text
from trace_merge.schema import FRAME_DTYPES

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    exe = BIN / name
    if not exe.exists():
        found = shutil.which(name)
        if not found:
            pytest.skip(f"{name} not installed (pip install 'dlio-layers[posix]')")
        return found
    return str(exe)


def _events(path: Path) -> list[dict]:
    """Independent reference: every JSON line of a trace, parsed with the json module."""
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    out = []
    for line in text.decode().splitlines():
        line = line.strip().rstrip(",")
        if line and line not in ("[", "]"):
            out.append(json.loads(line, parse_float=Decimal))
    return out


@pytest.fixture(scope="module")
def fake_traces(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fake")
    subprocess.run([_tool("dftracer_gen_fake_trace"), "-o", str(out), "-p", "2", "-H", "1", "-e", "2", "-s", "5"],
                   check=True, capture_output=True)
    return out


_WORKLOAD = r"""
import ctypes, sys
import numpy as np, h5py
from dftracer.python import dftracer, dft_fn
d = sys.argv[1]
log = dftracer.initialize_log(logfile=None, data_dir=None, process_id=-1)
with h5py.File(d + "/a.h5", "w") as f:
    f["x"] = np.arange(50000, dtype="f4")
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fwrite.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
libc.fread.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
fp = libc.fopen((d + "/s.bin").encode(), b"w"); libc.fwrite(b"y" * 4000, 4, 1000, fp); libc.fclose(fp)
for epoch in range(2):
    for step in range(2):
        with dft_fn(cat="dataloader", name="load", epoch=epoch, step=step):
            with h5py.File(d + "/a.h5", "r") as f:
                f["x"][:]
            buf = ctypes.create_string_buffer(8000)
            fp = libc.fopen((d + "/s.bin").encode(), b"r"); libc.fread(buf, 4, 2000, fp); libc.fclose(fp)
log.finalize()
"""


def _preload_run(tmp: Path, **env: str) -> "tuple[Path, int, int]":
    spec = importlib.util.find_spec("dftracer")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("dftracer not installed (pip install 'dlio-layers[posix]')")
    so = Path(list(spec.submodule_search_locations)[0]) / "lib64" / "libdftracer_preload.so"
    if not so.exists():
        pytest.skip(f"{so} missing")
    data, trace = tmp / "data", tmp / "trace"
    data.mkdir()
    trace.mkdir()
    script = tmp / "work.py"
    script.write_text(_WORKLOAD)
    full = dict(os.environ, LD_PRELOAD=str(so), DFTRACER_ENABLE="1", DFTRACER_INIT="PRELOAD",
                DFTRACER_INC_METADATA="1", DFTRACER_LOG_FILE=str(trace / "run"), DFTRACER_DATA_DIR=str(data), **env)
    t0 = time.time_ns()
    subprocess.run([sys.executable, str(script), str(data)], check=True, env=full, capture_output=True, timeout=120)
    return trace, t0, time.time_ns()


@pytest.fixture(scope="module")
def preload(tmp_path_factory) -> "tuple[Path, int, int]":
    return _preload_run(tmp_path_factory.mktemp("preload"))


def _assert_same_frames(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_categorical=False)


# -- DFTracer traces ---------------------------------------------------------------------------------


def test_fake_trace_columns_match_the_json(fake_traces: Path) -> None:
    path = fake_traces / "rank_1.pfw.gz"
    events = _events(path)
    meta = {(e["name"], e["args"]["value"]): e["args"]["name"] for e in events if e.get("ph") == 4}
    complete = [e for e in events if e.get("ph") == 1]
    src = pfw.read(path)
    f = src.frame
    assert src.kind == "dftracer" and src.meta.parser == "scan" and src.warnings == []
    assert dict(f.dtypes.astype(str)) == FRAME_DTYPES
    assert len(f) == len(complete)
    assert Counter(f["name"].astype(str)) == Counter(e["name"] for e in complete)
    # µs -> ns exactly, in file order
    assert f["start_ns"].tolist() == [int(e["ts"]) * 1000 for e in complete]
    assert f["dur_ns"].tolist() == [int(e["dur"]) * 1000 for e in complete]
    # bytes = ret of read-family calls only
    rw = [e for e in complete if e["name"] in pfw.RW_CALLS]
    assert rw, "the generator writes pread/read/fread"
    assert f["bytes"].sum() == sum(e["args"]["ret"] for e in rw)
    assert f.loc[f["name"].isin(["open", "close"]), "bytes"].isna().all()
    # hashes resolved through the FH/HH metadata lines
    files = {e["args"]["fhash"] for e in complete if "fhash" in e["args"]}
    assert set(f["file"].dropna().astype(str)) == {meta[("FH", h)] for h in files}
    assert set(f["host"].astype(str)) == {"node-0"}
    # layers and classes
    posix = f[f["layer"] == "posix"]
    assert len(posix) == sum(e["cat"] == "POSIX" for e in complete) and set(posix["cat"]) == {"io"}
    app = f[f["name"] == "conv3d"]
    assert set(app["layer"]) == {"app"} and set(app["cat"]) == {"other"}
    assert f.loc[f["name"] == "data_loading", "cat"].eq("io").all()
    # rank from the file name, epoch/step from args
    assert set(f["rank"]) == {1} and src.meta.rank == 1 and src.meta.pids == sorted({e["pid"] for e in complete})
    steps = [e["args"].get("step") for e in complete]
    assert f["step"].tolist() == [pd.NA if s is None else s for s in steps]


#: DuckDB however small the body (the reader hands small bodies to pyarrow)
ANY_SIZE = ParseOptions(duckdb_min_bytes=0)


def _read_with(path: Path, duckdb: bool):
    """``path`` read by DuckDB (however small the file) or by pyarrow, the native scanner left out."""
    return pfw.read(path, options=ParseOptions(scanner=False, duckdb=duckdb, duckdb_min_bytes=0))


def _but_parser(meta):
    """``meta`` less which parser read the file."""
    return dataclasses.replace(meta, parser="")


def _same_source(a, b) -> None:
    _assert_same_frames(a.frame, b.frame)
    assert a.warnings == b.warnings
    assert _but_parser(a.meta) == _but_parser(b.meta)


def test_duckdb_and_pyarrow_read_the_same(fake_traces: Path, preload: "tuple[Path, int, int]") -> None:
    """The DuckDB parser is a faster pyarrow: the same frame and metadata from generated and real preload traces."""
    real = [p for p in sorted(preload[0].glob("*.pfw.gz")) if p.stat().st_size]
    for path in [fake_traces / "rank_0.pfw.gz", fake_traces / "rank_1.pfw.gz", *real]:
        duck, arrow = _read_with(path, True), _read_with(path, False)
        assert (duck.meta.parser, arrow.meta.parser) == ("duckdb", "arrow"), path
        _same_source(duck, arrow)


def test_large_bodies_go_to_duckdb_and_small_ones_to_pyarrow(fake_traces: Path, tmp_path: Path) -> None:
    """Without the native scanner (not compiled, or declining)."""
    no_scan = ParseOptions(scanner=False)
    lines = [ln for ln in gzip.decompress((fake_traces / "rank_0.pfw.gz").read_bytes()).split(b"\n")
             if ln.startswith(b"{")]
    copies = pfw.DUCKDB_MIN_BYTES // sum(len(ln) + 1 for ln in lines) + 1
    big = tmp_path / "rank_0.pfw"
    big.write_bytes(b"[\n" + b"\n".join(lines * copies) + b"\n")
    src = pfw.read(big, options=no_scan)
    assert src.meta.parser == "duckdb" and src.warnings == []
    assert len(src.frame) == copies * len(pfw.read(fake_traces / "rank_0.pfw.gz", options=no_scan).frame)
    assert pfw.read(fake_traces / "rank_0.pfw.gz", options=no_scan).meta.parser == "arrow"


@pytest.mark.parametrize("edit", [
    (r'"ts":(\d+)', r'"ts":\1.5'),   # fractional µs: DuckDB would round it, pyarrow keeps it exactly
    (r'"pid":(\d+)', r'"pid":"\1"'),  # a number as a string: DuckDB would cast it silently
    (r'"dur":(\d+)', r'"dur":true'),   # a boolean: DuckDB would read 1
    (r'^\{', r'  {'),                  # an indented line
], ids=["fractional", "string", "boolean", "indented"])
def test_what_duckdb_would_read_differently_goes_to_pyarrow(fake_traces: Path, tmp_path: Path, edit) -> None:
    """DuckDB casts leniently; a body it cannot read exactly is read as before (pyarrow, else the line parser)."""
    import re

    lines = gzip.decompress((fake_traces / "rank_0.pfw.gz").read_bytes()).decode().split("\n")
    k = next(i for i, line in enumerate(lines) if '"ph":1' in line and re.search(edit[0], line))
    lines[k] = re.sub(edit[0], edit[1], lines[k], count=1)
    bad = tmp_path / "rank_0.pfw"
    bad.write_text("\n".join(lines))
    duck, before = _read_with(bad, True), _read_with(bad, False)
    assert duck.meta.parser == before.meta.parser != "duckdb"
    _same_source(duck, before)
    if edit[1].endswith(".5"):
        ts = int(re.search(r'"ts":(\d+)', lines[k]).group(1))
        assert ts * 1000 + 500 in set(duck.frame["start_ns"])
    # the thread's DuckDB connection, kept between bodies, still reads the next one (a refused query left nothing)
    assert _read_with(fake_traces / "rank_0.pfw.gz", True).meta.parser == "duckdb"


def test_each_thread_parses_on_its_own_duckdb_connection(fake_traces: Path) -> None:
    """A connection serves one thread (threads of a Dask worker read files side by side), and is kept for the
    thread's next bodies."""
    from concurrent.futures import ThreadPoolExecutor

    path = fake_traces / "rank_0.pfw.gz"
    duck = ParseOptions(scanner=False, duckdb_min_bytes=0)
    alone = pfw.read(path, options=duck)
    ours = tables._duckdb_local.con
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: (pfw.read(path, options=duck), id(tables._duckdb_local.con)), range(4)))
    for src, _ in both:
        assert src.meta.parser == "duckdb"
        _same_source(src, alone)
    assert ours is tables._duckdb_local.con and id(ours) not in {con for _, con in both}
    assert pfw.read(path, options=duck).meta.parser == "duckdb" and tables._duckdb_local.con is ours


# -- the native scanner ---------------------------------------------------------------------------------


def test_the_native_scanner_is_built_and_reads_what_duckdb_and_pyarrow_read(
        fake_traces: Path, preload: "tuple[Path, int, int]") -> None:
    """``make env`` compiles the scanner; on generated and real preload traces it gives the other parsers' frames."""
    from trace_merge.readers import _pfwscan  # noqa: F401  (an ImportError here: the install did not compile it)

    real = [p for p in sorted(preload[0].glob("*.pfw.gz")) if p.stat().st_size]
    for path in [fake_traces / "rank_0.pfw.gz", fake_traces / "rank_1.pfw.gz", *real]:
        scanned = pfw.read(path)
        duck = _read_with(path, True)
        assert (scanned.meta.parser, duck.meta.parser) == ("scan", "duckdb"), path
        _same_source(scanned, duck)


def test_newlines_are_counted_as_bytes_count_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner's count of a block's newlines (the reader numbers lines with it) is ``bytes.count``'s, for any
    bytes-like text, and so is numpy's where the scanner is not built."""
    rng = np.random.default_rng(3)
    texts = [b"", b"\n", b"x", b"\n" * 9, b"a\nb\n\nc", bytes(rng.integers(0, 256, 100_000, dtype=np.uint8)),
             (_EVENT + "\n").encode() * 1000]
    for t in texts:
        want = t.count(b"\n")
        assert text._pfwscan.newlines(t) == text.newlines(t) == want
        assert text._pfwscan.newlines(memoryview(t)) == text._pfwscan.newlines(bytearray(t)) == want
    monkeypatch.setattr(text, "_pfwscan", None)  # as where the scanner was not compiled
    assert [text.newlines(t, chunk=7) for t in texts] == [t.count(b"\n") for t in texts]


def _schema(ph_is_str: bool = False):
    import pyarrow as pa

    return pfw.event_schema(ph_is_str, pa.int64())


def _scanned(body: bytes, ph_is_str: bool = False, options: ParseOptions = ANY_SIZE):
    """The scanner's table of ``body``, its dictionary-encoded strings decoded (to compare with DuckDB's)."""
    table = tables.scanned_table(body, _schema(ph_is_str), options)
    return None if table is None else table.cast(_schema(ph_is_str))


def _both_tables(lines: "list[str | bytes]", ph_is_str: bool = False, options: ParseOptions = ANY_SIZE):
    """``lines`` as one body, read by the scanner and by DuckDB into the fast parsers' schema."""
    body = b"\n".join(ln.encode() if isinstance(ln, str) else ln for ln in lines) + b"\n"
    return _scanned(body, ph_is_str, options), tables.duckdb_table(body, _schema(ph_is_str), options)


_EVENT = ('{"id":1,"name":"pread","cat":"POSIX","pid":7,"tid":8,"ts":1700000000000000,"dur":15,"ph":1,'
          '"args":{"hhash":"e6","fhash":"88","ret":4723,"offset":0,"level":2}}')


@pytest.mark.parametrize("line", [
    _EVENT,
    '{"name":"données_é_日本.h5","cat":"POSIX","ph":1,"ts":1,"dur":2,"args":{"fname":"/d/ü/🎉.h5"}}',  # UTF-8
    '{ "name" : "read" ,\t"ts" : 5 , "dur":1 , "ph" : 1 , "args" : { "size" : 3 } }\r',  # whitespace, CRLF
    '{"name":null,"cat":null,"pid":null,"ts":1,"dur":1,"ph":1,"args":{"ret":null,"fhash":null}}',  # nulls
    '{"name":"x","ts":1,"dur":1,"ph":1}',  # no args
    '{"name":"x","ts":1,"dur":1,"ph":1,"args":null}',
    '{}',
    '{"name":"x","ts":-9223372036854775808,"dur":9223372036854775807,"ph":1,"args":{"offset":-0}}',
    '{"name":"x","ts":1,"dur":1,"ph":1,"id":[1,2.5,{"a":[true,false,null]},"q\\"\\u00e9"],'
    '"args":{"cmd":"a\\nb","tags":{"k":[{"x":-0.5}]},"level":1.25,"ok":true,"image_size":1.04858e+06,'
    '"tiny":-2E-07,"big":12345678901234567890123}}',  # unknown values of every kind (DLIO writes sizes as 1e+06)
], ids=["dftracer", "utf8", "whitespace", "nulls", "no-args", "null-args", "empty", "int64-extremes", "unknown"])
def test_the_scanner_reads_these_lines_exactly_as_duckdb(line: str) -> None:
    scanned, duck = _both_tables([_EVENT, line, line])
    assert scanned is not None and duck is not None
    assert scanned.equals(duck), (scanned.to_pylist(), duck.to_pylist())


def test_the_scanner_reads_string_ph_and_a_last_line_without_newline() -> None:
    line = _EVENT.replace('"ph":1', '"ph":"X"')
    for body in [(line + "\n" + line).encode(), (line + "\n").encode()]:
        scanned, duck = _scanned(body, True), tables.duckdb_table(body, _schema(True), ANY_SIZE)
        assert scanned is not None and scanned.equals(duck)


def test_the_scanner_reads_lines_whose_keys_move_as_duckdb() -> None:
    """The scanner takes a member whose `"key":` bytes are the last line's at that position as that key without
    reading it again: lines whose keys move, change, grow, shrink or get spaces give DuckDB's table all the same,
    and a key twice on a line is still declined when both come that way."""
    app = ('{"id":1,"name":"step","cat":"APP","pid":7,"tid":8,"ts":10,"dur":5,"ph":1,'
           '"args":{"hhash":"e6","level":1,"epoch":0,"step":3}}')
    lines = [_EVENT, app, _EVENT, app,
             '{"name":"read","id":2,"tid":9,"pid":7,"ph":1,"dur":4,"ts":20,"args":{"level":2,"offset":8,"hhash":"e6"}}',
             '{"id":3,"name" :"read","cat":"POSIX","pid":7,"tid":8,"ts":30,"dur":1,"ph":1,"args":{"size":3}}',
             '{"id":4,"nam":"x","cat":"POSIX","pid":7,"tid":8,"ts":31,"dur":1,"ph":1,"args":null}',
             '{"id":5,"names":"x","cat":"POSIX","pid":7,"tid":8,"tsx":1,"ts":32,"dur":1,"ph":1}',
             '{"args":{"fhash":"88"},"id":6,"name":"open","cat":"POSIX","pid":7,"ts":33,"dur":1,"ph":1}',
             '{"id":7,"name":"open","args":{"ret":1},"cat":"POSIX","pid":7,"tid":8,"ts":34,"dur":1,"ph":1}',
             '{"id":"8","name":"y","cat":"POSIX","pid":7,"tid":8,"ts":35,"dur":1,"ph":1,"args":{"hhash":"e6"}}']
    scanned, duck = _both_tables(lines)
    assert scanned is not None and duck is not None
    assert scanned.equals(duck), (scanned.to_pylist(), duck.to_pylist())
    # positions 0 and 1 both hold "name" (from two lines): a third line's "name" twice comes that way, and declines
    twice = ['{"a":1,"name":"x","ts":1,"dur":1,"ph":1}', '{"name":"x"}', '{"name":"x","name":"y","ts":1}']
    assert _both_tables(twice[:2])[0] is not None and _both_tables(twice)[0] is None


@pytest.mark.parametrize("edit", [
    ('"name":"pread"', '"name":"pre\\"ad"'),         # an escape in a wanted string: the next parser decodes it
    ('"name":"pread"', '"name":7'),                    # a wanted string of another type: DuckDB makes it "7"
    ('"pid":7', '"pid":"7"'), ('"pid":7', '"pid":7.0'), ('"pid":7', '"pid":true'), ('"pid":7', '"pid":7e0'),
    ('"pid":7', '"pid":9223372036854775808'),          # beyond int64
    ('"pid":7', '"pid":-9223372036854775809'), ('"pid":7', '"pid":18446744073709551616'),  # (2^64 wraps to 0)
    ('"pid":7', '"pid":07'),                           # not JSON
    ('"tid":8', '"tid":8,"pid":9'),                    # a wanted key twice
    ('"level":2', '"level":2},"args":{"ret":1'),       # "args" twice
    ('"args":{', '"x":{"args":1},"args":{'),           # (an "args" inside an unknown value is not it: read)
    ('"level":2', '"level":"\\ud800"'),              # a lone surrogate, even where unread
    ('"level":2', '"level":1e999'),                    # where a double may overflow, even where unread
    ('"level":2', '"level":' + "9" * 201 + 'e1'),
    ('"level":2', '"level":' + "[" * 70 + "]" * 70),  # too deep
    ('"level":2', '"level":"a\tb"'),                  # a control character in a string
    ('"level":2}}', '"level":2}} x'),                  # after the object
    ('"level":2}}', '"level":2}'),                     # cut short
    ('"args":{', '"args":['),
    ('{"id"', ' {"id"'),                               # indented
], ids=["escaped", "number-as-name", "string-int", "float", "bool", "exponent", "too-big", "below-int64", "2^64",
        "leading-zero",
        "duplicate", "duplicate-args", "nested-args", "surrogate", "unread-1e999", "unread-long-1e1", "deep", "control",
        "trailing", "truncated", "args-array", "indented"])
def test_the_scanner_declines_what_it_cannot_read_exactly(edit) -> None:
    """Declined, the body goes to DuckDB, pyarrow or the line parser as before: what the scanner does read is equal
    to DuckDB's table."""
    assert edit[0] in _EVENT
    line = _EVENT.replace(edit[0], edit[1], 1)
    scanned, duck = _both_tables([_EVENT, line])
    if edit[1].startswith('"x":{"args"'):
        assert scanned is not None and scanned.equals(duck)
    else:
        assert scanned is None


def test_the_scanners_categories_are_in_the_order_arrow_encoding_gives() -> None:
    """The scanner hands names over encoded, in order of first appearance: the reader's categories, missing values
    filled or not, are the same as from Arrow's encoding of the plain strings (a fill first seen at the first
    missing value, or earlier, or never before)."""
    import pyarrow as pa

    cases = [["b", None, "a", "b", "", None, "c"], ["", "b", None, "a"], ["b", "a", None, "", "a"], [None, "x"],
             ["x", "y"], [None, None], ["a", "b", "c", None, "c"]]
    for values in cases:
        plain = pa.array(values, pa.string())
        encoded = plain.dictionary_encode()
        for fill in (None, ""):
            want, got = tables._categorical(plain, fill), tables._categorical(encoded, fill)
            assert list(got.categories) == list(want.categories), (values, fill)
            assert got.codes.tolist() == want.codes.tolist(), (values, fill)


def test_invalid_utf8_and_long_lines_are_declined(fake_traces: Path, tmp_path: Path) -> None:
    for bad in [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80"]:
        line = _EVENT.encode().replace(b'"hhash":"e6"', b'"hhash":"e' + bad + b'"')
        assert _both_tables([_EVENT, line])[0] is None, bad
    for limit, declined in ((len(_EVENT), True), (len(_EVENT) + 1, False)):
        options = ParseOptions(duckdb_min_bytes=0, max_line_bytes=limit)
        assert (_both_tables([_EVENT], options=options)[0] is None) == declined, limit
    # and DuckDB, next, declines it too (it raised UnicodeDecodeError out of the reader)
    text = gzip.decompress((fake_traces / "rank_0.pfw.gz").read_bytes())
    k = text.index(b'"hhash":"') + 9
    (tmp_path / "rank_0.pfw").write_bytes(text[:k] + b"\xff" + text[k:])
    assert pfw.read(tmp_path / "rank_0.pfw").meta.parser not in ("scan", "duckdb")
    assert _read_with(tmp_path / "rank_0.pfw", True).meta.parser != "duckdb"


def test_what_the_scanner_reads_of_damaged_lines_duckdb_reads_the_same(fake_traces: Path) -> None:
    """Bytes changed, dropped and repeated at random in real DFTracer lines: where the scanner gives a table,
    DuckDB gives the same one; and it never fails otherwise than by declining."""
    import random

    lines = [ln for ln in gzip.decompress((fake_traces / "rank_0.pfw.gz").read_bytes()).split(b"\n")
             if ln.startswith(b"{")][:400]
    rng = random.Random(20)
    read = 0
    for _ in range(300):
        chunk = rng.sample(lines, 12)
        k = rng.randrange(len(chunk))
        b = bytearray(chunk[k])
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(b))
            what = rng.random()
            if what < 0.4:
                b[i] = rng.choice(b'{}[]",:0123456789-.eE \\tnul\x00\xc3\xa9x')
            elif what < 0.7:
                del b[i]
            else:
                b[i:i] = b[i:i + rng.randint(1, 8)]
        chunk[k] = bytes(b).replace(b"\n", b" ")
        scanned, duck = _both_tables(chunk)
        if scanned is not None:
            read += 1
            assert duck is not None and scanned.equals(duck), chunk[k]
    assert 20 < read < 280  # both kinds of outcome were tried


def test_preload_trace_posix_stdio_and_python_events(preload: "tuple[Path, int, int]") -> None:
    trace, t0, t1 = preload
    files = sorted(trace.glob("*.pfw.gz"))
    app_file = next(p for p in files if p.stat().st_size > 0)
    src = pfw.read(app_file)
    f = src.frame
    events = [e for e in _events(app_file) if e.get("ph") == 1 and e.get("cat") != "dftracer"]
    assert len(f) == len(events) and src.meta.parser == "scan"
    assert f["start_ns"].between(t0, t1).all()
    # POSIX reads/writes of the HDF5 file (pread64 or pread, depending on the HDF5 build): bytes = ret
    rw = [e for e in events if e["cat"] == "POSIX" and e["name"] in pfw.RW_CALLS]
    posix_rw = f[(f["layer"] == "posix") & f["name"].isin(list(pfw.RW_CALLS))]
    assert rw and posix_rw["bytes"].sum() == sum(e["args"]["ret"] for e in rw) and posix_rw["bytes"].notna().all()
    assert f.loc[f["layer"] == "posix", "cat"].eq("io").all()
    # STDIO: fread returns items, bytes = items * size
    fr = f[f["name"] == "fread"]
    assert set(fr["layer"]) == {"stdio"} and set(fr["cat"]) == {"io"}
    assert fr["bytes"].tolist() == [4000] * 4  # 1000 items of 4 bytes (the file is 4000 bytes)
    assert f.loc[f["name"] == "fwrite", "bytes"].tolist() == [4000]
    assert set(fr["file"].astype(str)) == {str(trace.parent / "data" / "s.bin")}
    # the Python-level region: layer app; pydftracer's "dataloader" category is the loop fetching its batch (wait,
    # docs/frame.md's table), the original category kept in args
    load = f[f["name"] == "load"]
    assert len(load) == 4 and set(load["layer"]) == {"app"} and set(load["cat"]) == {"wait"}
    assert set(load["args"]) == {json.dumps({"cat": "dataloader"})}
    assert load["epoch"].tolist() == [0, 0, 1, 1] and load["step"].tolist() == [0, 1, 0, 1]
    # DFTracer's own start/end go to meta, not to the frame
    assert "dftracer" not in set(f["cat"].astype(str)) and src.meta.dftracer_events == ["start", "end"]
    assert src.meta.host == set(f["host"].astype(str)).pop() and src.meta.rank is None
    assert set(f["rank"]) == {-1}


def test_preload_ns_metric_uncompressed(tmp_path: Path) -> None:
    trace, t0, t1 = _preload_run(tmp_path, DFTRACER_TRACE_COMPRESSION="0", DFTRACER_TIME_METRIC="NS")
    (path,) = [p for p in trace.glob("*.pfw") if p.stat().st_size]
    src = pfw.read(path)
    assert src.meta.time_metric == "NS"
    assert len(src.frame) and src.frame["start_ns"].between(t0, t1).all()
    events = [e for e in _events(path) if e.get("ph") == 1 and e.get("cat") != "dftracer"]
    assert src.frame["dur_ns"].tolist() == [int(e["dur"]) for e in events]


def _with_garbage_line(clean: Path, garbage: bytes, out: Path) -> int:
    """Copy a trace with one bad line inserted in the middle; returns that line's number."""
    lines = gzip.decompress(clean.read_bytes()).split(b"\n")
    mid = len(lines) // 2
    out.write_bytes(b"\n".join(lines[:mid] + [garbage] + lines[mid:]))
    return mid + 1


@pytest.mark.parametrize("garbage", [b'{"name": "read", "cat": "POSIX", garbage', b"\x00\x00\x00"])
@pytest.mark.parametrize("trace", ["fake", "preload"])
def test_garbage_line_falls_back_to_the_line_parser_with_the_same_frame(
    request: pytest.FixtureRequest, trace: str, garbage: bytes, tmp_path: Path
) -> None:
    if trace == "fake":
        clean = request.getfixturevalue("fake_traces") / "rank_0.pfw.gz"
    else:
        folder = request.getfixturevalue("preload")[0]
        clean = next(p for p in sorted(folder.glob("*.pfw.gz")) if p.stat().st_size)
    bad = tmp_path / clean.name.replace(".gz", "")
    lineno = _with_garbage_line(clean, garbage, bad)
    fast, slow = pfw.read(clean), pfw.read(bad)
    assert fast.meta.parser == "scan" and slow.meta.parser == "lines"
    assert slow.warnings == [f"{bad}: line {lineno}: not a JSON object, skipped"]
    _assert_same_frames(fast.frame, slow.frame)
    assert _but_parser(fast.meta) == _but_parser(slow.meta)


def test_commas_and_closing_bracket(fake_traces: Path, tmp_path: Path) -> None:
    clean = fake_traces / "rank_1.pfw.gz"
    lines = [ln for ln in gzip.decompress(clean.read_bytes()).split(b"\n") if ln.strip()]
    assert lines[0] == b"[" and lines[-1] == b"]"
    chrome = tmp_path / "rank_1.pfw"
    chrome.write_bytes(b"[\n" + b",\n".join(lines[1:-1]) + b"\n]\n")
    a, b = pfw.read(clean), pfw.read(chrome)
    assert b.meta.parser == "scan" and b.warnings == []
    _assert_same_frames(a.frame, b.frame)


def test_half_written_last_line_is_dropped_silently(fake_traces: Path, tmp_path: Path) -> None:
    text = gzip.decompress((fake_traces / "rank_0.pfw.gz").read_bytes())
    body = text[: text.rindex(b"]")].rstrip()  # a live DFTracer file has no closing bracket yet
    cut = tmp_path / "rank_0.pfw"
    cut.write_bytes(body[:-40])
    full, part = pfw.read(fake_traces / "rank_0.pfw.gz"), pfw.read(cut)
    assert part.warnings == [] and part.meta.truncated_last_line is True
    assert len(part.frame) == len(full.frame) - 1
    _assert_same_frames(full.frame.iloc[:-1], part.frame)


def test_truncated_gzip_keeps_the_complete_part(fake_traces: Path, tmp_path: Path) -> None:
    raw = (fake_traces / "rank_0.pfw.gz").read_bytes()
    cut = tmp_path / "rank_0.pfw.gz"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    src = pfw.read(cut)
    assert src.warnings == [f"{cut}: gzip stream truncated (unexpected end of file); read what was complete"]
    full = pfw.read(fake_traces / "rank_0.pfw.gz").frame
    assert 0 < len(src.frame) < len(full)
    _assert_same_frames(full.iloc[: len(src.frame)], src.frame)


def test_bad_gzip(fake_traces: Path, tmp_path: Path) -> None:
    not_gz = tmp_path / "a.pfw.gz"
    not_gz.write_bytes(gzip.decompress((fake_traces / "rank_0.pfw.gz").read_bytes()))
    with pytest.raises(TraceInputError, match=r"a\.pfw\.gz: not a gzip file"):
        pfw.read(not_gz)
    raw = bytearray((fake_traces / "rank_0.pfw.gz").read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)
    corrupt = tmp_path / "b.pfw.gz"
    corrupt.write_bytes(bytes(raw))
    with pytest.raises(TraceInputError, match=r"b\.pfw\.gz: corrupt gzip data"):
        pfw.read(corrupt)


def test_empty_file_from_the_preload(preload: "tuple[Path, int, int]") -> None:
    # The preload leaves an empty file when the application initialises DFTracer itself.
    trace, _, _ = preload
    empty = [p for p in trace.glob("*.pfw.gz") if p.stat().st_size == 0]
    assert empty, "the real preload writes an empty -preload.pfw.gz here"
    src = pfw.read(empty[0])
    assert len(src.frame) == 0 and src.warnings == [f"{empty[0]}: empty file (no events)"]


def test_opening_bracket_only(tmp_path: Path) -> None:
    p = tmp_path / "started.pfw"
    p.write_bytes(b"[\n")
    src = pfw.read(p)
    assert len(src.frame) == 0 and src.warnings == [f"{p}: no events (nothing after the opening bracket)"]


def test_not_a_trace(tmp_path: Path) -> None:
    p = tmp_path / "notes.pfw"
    p.write_text("this is\nnot a trace\n")
    with pytest.raises(TraceInputError, match=r"notes\.pfw: not a \.pfw trace"):
        pfw.read(p)
    with pytest.raises(TraceInputError, match=r"missing\.pfw: cannot read"):
        pfw.read(tmp_path / "missing.pfw")


# -- TimeLogger files --------------------------------------------------------------------------------


def test_timelogger_file(tmp_path: Path) -> None:
    from timelogger import TimeLogger

    tl = TimeLogger(tmp_path, rank=1, world_size=2)
    tl.set_epoch(0)
    for step in range(3):
        tl.set_step(step)
        with tl.phase("Load File", cat="io") as p:
            p.update(bytes=100 * step, file="/data/a.h5", samples=5)
        with tl.phase("Training Iteration", cat="compute"):
            pass
    tl.close()
    (path,) = (tmp_path / "app").glob("rank-1-pid-*.pfw")
    src = pfw.read(path)
    f = src.frame
    events = [e for e in _events(path) if e["ph"] == "X"]
    assert src.kind == "timelogger" and src.warnings == []
    assert f["start_ns"].tolist() == [int(e["ts"] * 1000) for e in events]  # exact ns, no float round trip
    assert f["dur_ns"].tolist() == [int(e["dur"] * 1000) for e in events]
    assert set(f["layer"]) == {"app"} and f["cat"].astype(str).tolist() == [e["cat"] for e in events]
    load = f[f["name"] == "Load File"]
    assert load["bytes"].tolist() == [0, 100, 200] and set(load["file"]) == {"/data/a.h5"}
    assert set(load["args"]) == {'{"samples": 5}'} and f.loc[f["name"] != "Load File", "args"].isna().all()
    assert f["step"].tolist() == [0, 0, 1, 1, 2, 2] and set(f["rank"]) == {1}
    m = src.meta
    assert isinstance(m, pfw.TimeLoggerMeta)
    assert (m.rank, m.world_size, m.pid) == (1, 2, os.getpid())
    assert m.host == m.header["hostname"] == set(f["host"]).pop()
    assert len(m.anchors) == 2 and all({"wall_ns", "perf_ns"} <= set(a) for a in m.anchors)
    assert m.clock_offset_ns is None and m.tf_anchors == []


def test_timelogger_clock_sync_offset(tmp_path: Path) -> None:
    mpi = pytest.importorskip("mpi4py.MPI")  # a singleton MPI world: sync_clocks writes real clock_sync events
    from timelogger import TimeLogger

    tl = TimeLogger(tmp_path, rank=0, world_size=1)
    tl.sync_clocks(mpi.COMM_SELF)
    tl.sync_clocks(mpi.COMM_SELF)
    with tl.phase("x"):
        pass
    tl.close()
    (path,) = (tmp_path / "app").glob("*.pfw")
    syncs = [e for e in _events(path) if e["name"] == "clock_sync"]
    src = pfw.read(path)
    assert len(syncs) == 2 and src.meta.clock_offset_ns == int(syncs[-1]["args"]["clock_offset_ns"])
    assert src.meta.clock_sync["method"] == syncs[-1]["args"]["method"]


def test_many_gzip_members(tmp_path: Path) -> None:
    # DFTracer compresses in chunks (one gzip member per checkpoint): every member is read.
    out = tmp_path / "chunked"
    # ~5 MB of text: the generator starts a new member every ~4 MB
    subprocess.run([_tool("dftracer_gen_fake_trace"), "-o", str(out), "-p", "1", "-H", "1", "-e", "2", "-s", "600"],
                   check=True, capture_output=True)
    path = out / "rank_0.pfw.gz"
    raw, members = path.read_bytes(), 0
    while raw:
        dec = zlib.decompressobj(31)
        dec.decompress(raw)
        raw, members = dec.unused_data, members + 1
    assert members > 1
    one = tmp_path / "rank_0.pfw.gz"
    one.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())))
    a, b = pfw.read(path), pfw.read(one)
    assert len(a.frame) == sum(e.get("ph") == 1 for e in _events(path))
    _assert_same_frames(a.frame, b.frame)


def test_the_scanner_reads_every_integer_and_string_length_as_duckdb() -> None:
    """The scanner reads integers and plain strings a word (8 bytes) at a time: every length from 0 to 19 digits
    and 0 to 40 characters, and a special byte (a quote, a backslash, a control character, UTF-8) at every position
    of a word, read exactly as DuckDB reads them, or declined where DuckDB would read them otherwise."""
    lines = []
    for n in range(1, 20):
        digits = "1987654321012345678"[:n]
        lines += [f'{{"name":"n{n}","ts":{digits},"dur":-{digits},"ph":1,"pid":{"1" + "0" * (n - 1)},"tid":{n}}}',
                  f'{{"name":"z{n}","ts":0,"dur":{digits},"ph":1,"args":{{"offset":{digits},"size":-0}}}}']
    for n in range(41):
        text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"[:n]
        lines.append(f'{{"name":"{text}","cat":"{text[::-1]}","ts":{n},"dur":1,"ph":1,"args":{{"fname":"{text}"}}}}')
        lines.append(f'{{"name":"é{text}€","ts":{n},"dur":1,"ph":1,"args":{{"fname":"/d/{text}🎉"}}}}')
    scanned, duck = _both_tables(lines)
    assert scanned is not None and scanned.equals(duck), (scanned.to_pylist()[:3], duck.to_pylist()[:3])
    for at in range(9):  # a byte that ends the plain run, at each position of a word
        for special in ('\\"', "\\\\", "\\u00e9", "\t", "\x7f"):
            name = "abcdefgh"[:at] + special + "ijklmnop"
            line = f'{{"name":"{name}","ts":1,"dur":1,"ph":1}}'
            scanned, duck = _both_tables([lines[0], line])
            if special == "\x7f":  # DEL is a plain character in JSON
                assert scanned is not None and scanned.equals(duck)
            else:  # an escape or a raw control character: declined
                assert scanned is None, (at, special)
    for number in ("01", "0.5", "12345678.5", "1234567890123456.5", "12e3", "1234567890123456E1", "-",
                   "1234567890123456789012"):
        line = f'{{"name":"x","ts":{number},"dur":1,"ph":1}}'
        assert _both_tables([lines[0], line])[0] is None, number
