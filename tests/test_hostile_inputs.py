"""Hostile inputs keep memory bounded and are named: one long file name among many distinct ones, an absurd name
or line, a gzip bomb (docs/frame.md, "Limits"); an interval that ends after close() is not reported as lost.

Each case adds to a real TimeLogger + DFTracer run (``run_copy``) a DFTracer trace of the same process."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pandas as pd
import pytest

from timelogger import TimeLogger
from trace_merge.cli import main
from trace_merge.readers import pfw
from trace_merge.schema import as_text

#: runs ``trace-merge ARGS`` and prints its peak RSS (MiB) last on stdout
PEAK_RSS = ("import resource, sys\nfrom trace_merge.cli import main\nrc = main(sys.argv[1:])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10)\nsys.exit(rc)\n")


def posix_event(run: Path) -> dict:
    """The first POSIX event of the run's DFTracer trace: its pid and tid place added events on the run's rank."""
    (trace,) = (run / "posix").glob("*.pfw.gz")
    with gzip.open(trace, "rt") as fh:
        return next(json.loads(line) for line in fh if '"cat":"POSIX"' in line)


def add_reads(run: Path, names: list[str], name: str = "extra.pfw") -> Path:
    """A DFTracer trace beside the run's, one ``read`` of 4096 bytes per name, 3 µs apart, one line each."""
    first = posix_event(run)
    lines = [json.dumps({"id": 10**6 + i, "name": "read", "cat": "POSIX", "pid": first["pid"], "tid": first["tid"],
                         "ts": first["ts"] + 3 * i, "dur": 2, "ph": 1,
                         "args": {"fname": f, "ret": 4096, "offset": 0}}, separators=(",", ":"))
             for i, f in enumerate(names)]
    out = run / "posix" / name
    out.write_text("\n".join(lines) + "\n")
    return out


def peak_rss_mib(*args: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().rsplit("\n", 1)[-1]), proc.stderr


def test_one_long_name_among_many_costs_its_length_once(run_copy, tmp_path):
    n = 60_000
    names = [f"/data/sample-{i:06d}.h5" for i in range(n)]
    short = tmp_path / "short"
    shutil.copytree(run_copy, short)
    add_reads(short, names)
    names[n // 2] = "/data/" + "x" * 4000  # one long path: on main before the fix, 60k x 4000 x 4 B = +0.96 GB
    add_reads(run_copy, names)
    base, _ = peak_rss_mib("summary", str(short))
    peak, err = peak_rss_mib("summary", str(run_copy))
    assert peak < base + 150, (base, peak)
    assert "limit" not in err  # a 4,000-character path is a legitimate name


def test_as_text_never_widens_to_the_longest_category():
    values = pd.Series(pd.Categorical([f"f{i}" for i in range(1000)] + ["y" * 100_000, None]))
    out = as_text(values)
    assert out.dtype == object and out.iloc[0] == "f0" and out.iloc[1000] == "y" * 100_000 and pd.isna(out.iloc[-1])
    assert list(as_text(pd.Series(pd.Categorical([3, 1, 3])))) == ["3", "1", "3"]


def test_an_absurd_line_and_an_absurd_name_are_skipped_with_their_lines(run_copy, capsys):
    names = [f"/data/s{i}.h5" for i in range(100)]
    names[10] = "/data/" + "z" * 2_000_000  # a line of 2 MB: beyond MAX_LINE_BYTES
    names[20] = "/data/" + "w" * 100_000  # a 100k-character name on a short line: beyond MAX_FIELD_CHARS
    extra = add_reads(run_copy, names)
    assert main(["summary", "--json", str(run_copy)]) == 0
    out, err = capsys.readouterr()
    assert f"{extra}:11: a line of 2,000," in err and "(limit 1,048,576); event skipped" in err
    assert f"{extra}:21: fname of 100,006 characters (limit 65,536); event skipped" in err
    frame = pd.read_parquet(run_copy / "merged.parquet") if (run_copy / "merged.parquet").exists() else None
    if frame is not None:
        assert not frame["file"].dropna().astype(object).map(len).gt(65_536).any()


def test_an_absurd_name_sends_the_fast_parser_to_the_line_parser(tmp_path):
    """pyarrow.json reads a 100k-character name happily; the reader still skips that event and names its line."""
    lines = [json.dumps({"name": "read", "cat": "POSIX", "pid": 1, "tid": 1, "ts": 1_700_000_000_000_000 + i,
                         "dur": 1, "ph": 1, "args": {"fname": "q" * (100_000 if i == 3 else 8), "ret": 1}})
             for i in range(10)]
    path = tmp_path / "t.pfw"
    path.write_text("\n".join(lines) + "\n")
    src = pfw.read(path)
    assert len(src.frame) == 9
    assert src.warnings == [f"{path}:4: fname of 100,000 characters (limit 65,536); event skipped"]


def bomb(path: Path, text_mib: int) -> Path:
    """A gzip file of ``text_mib`` MiB of zeros (no newline), made of 1 MiB members: ~1 KiB each."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = c.compress(b"\0" * (1 << 20)) + c.flush()
    path.write_bytes(member * text_mib)
    return path


def test_a_gzip_bomb_is_skipped_naming_its_file_before_its_text_is_held(run_copy, capsys):
    """3,000 MiB of text in 3 MB: the limit is 100x 3 MB = 300 MB, reached in well under a second."""
    b = bomb(run_copy / "posix" / "trace-bomb-preload.pfw.gz", 3000)
    assert main(["summary", str(run_copy)]) == 0
    out, err = capsys.readouterr()
    assert f"{b}: decompresses to more than 315 MB (100x its 3.15 MB): not a trace (a gzip bomb?); " \
           "skipped" in err
    assert "posix" in out.split("verdict:", 1)[0]  # the run's own trace is still merged (its first lines)


def test_a_gzip_bomb_read_block_by_block_stops_at_the_limit(tmp_path):
    small = pfw.ParseOptions(min_text_limit=8 << 20)
    b = bomb(tmp_path / "b.pfw.gz", 64)
    with pytest.raises(pfw.TraceInputError, match="decompresses to more than 8.39 MB"):
        list(pfw.read_blocks(b, block_bytes=1 << 20, options=small))
    with pytest.raises(pfw.TraceInputError, match="decompresses to more than 8.39 MB"):
        pfw.read(b, options=small)


def test_a_line_longer_than_a_block_is_dropped_as_it_streams(tmp_path):
    """Blocks stay bounded: the over-long line is dropped while it streams, the lines around it are read and keep
    their numbers."""
    ev = {"name": "read", "cat": "POSIX", "pid": 1, "tid": 1, "dur": 1, "ph": 1, "args": {"ret": 1}}
    lines = [json.dumps(dict(ev, ts=1_700_000_000_000_000 + i)) for i in range(200)]
    lines[100] = '{"name":"' + "n" * (3 << 20) + '"}'
    path = tmp_path / "long.pfw"  # plain text: over two blocks, so it streams
    path.write_text("\n".join(lines) + "\n")
    blocks = list(pfw.read_blocks(path, block_bytes=1 << 20))
    assert sum(len(b.frame) for b in blocks) == 199
    warnings = [w for b in blocks for w in b.warnings]
    assert warnings == [f"{path}:101: a line of {len(lines[100]):,} bytes (limit 1,048,576); event skipped"]


#: reads the .pfw files given, whole and block by block, and prints the peak RSS above its own before (MiB) last
READ_PEAK = ("import resource, sys\nimport pandas, pyarrow.json\nfrom trace_merge.readers import pfw\n"
             "def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10\n"
             "base = rss()\nfor p in sys.argv[1:]:\n"
             "    for src in [pfw.read(p), *pfw.read_blocks(p)]:\n        print(len(src.frame), src.warnings)\n"
             "print(rss() - base)\n")


def test_a_line_with_no_end_is_dropped_as_it_streams_in_bounded_memory(tmp_path):
    """What a crash can leave: a few events, then hundreds of MB with no newline. Every read path holds the line
    limit and a chunk, not the line (before: 576 MiB above the reader's own for 256 MB plain, 600 for 200 MB of
    gzip text; 3 GiB for 2 GB)."""
    ev = {"name": "read", "cat": "POSIX", "pid": 1, "tid": 1, "dur": 1, "ph": 1, "args": {"ret": 1}}
    head = "[\n" + "".join(json.dumps(dict(ev, ts=1_700_000_000_000_000 + i)) + "\n" for i in range(3))
    plain = tmp_path / "crashed.pfw"
    with open(plain, "wb") as fh:
        fh.write(head.encode())
        fh.truncate(256 << 20)  # sparse: NUL bytes with no newline
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = member.compress(b"x" * (1 << 20)) + member.flush()
    gz = tmp_path / "crashed.pfw.gz"
    gz.write_bytes(gzip.compress(head.encode()) + member * 200)  # 200 MiB of text under the gzip-bomb limit
    proc = subprocess.run([sys.executable, "-c", READ_PEAK, str(plain), str(gz)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    *reads, peak = proc.stdout.strip().split("\n")
    long_line = [f"3 ['{plain}:5: a line of {(256 << 20) - len(head):,} bytes (limit 1,048,576); event skipped']"] * 2
    long_line += [f"3 ['{gz}:5: a line of {200 << 20:,} bytes (limit 1,048,576); event skipped']"] * 2
    assert reads == long_line
    assert int(peak) < (pfw.MAX_LINE_BYTES >> 20) + 64, peak


def test_intervals_after_close_are_not_counted_as_dropped(tmp_path):
    """Another thread still logging while SIGTERM closes the logger: what ends after close() is outside the session;
    the close record must not call it lost (main before the fix: dropped = 2000)."""
    tl = TimeLogger(tmp_path)
    with tl.phase("before"):
        pass
    tl.close()
    for _ in range(2000):
        with tl.phase("late"):
            pass
    assert tl.dropped == 0


def test_sigterm_with_a_second_thread_logging_reports_nothing_dropped(tmp_path, tool_env):
    script = tmp_path / "s.py"
    script.write_text(
        "import os, signal, sys, threading, time\n"
        "from timelogger import TimeLogger\n"
        "tl = TimeLogger(sys.argv[1])\n"
        "def spin():\n"
        "    while True:\n"
        "        with tl.phase('bg', cat='compute'):\n"
        "            time.sleep(0.0001)\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "time.sleep(0.5)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(5)\n")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True,
                          env=tool_env, timeout=60)
    assert proc.returncode == -15
    (path,) = (tmp_path / "out").rglob("*.pfw")
    close = [json.loads(line) for line in path.read_text().splitlines() if '"timelogger_close"' in line]
    assert close and close[0]["args"]["dropped"] == 0 and close[0]["args"]["exit"]["signal"] == "SIGTERM"


def test_out_of_memory_is_one_line_naming_the_run(run_copy, capsys, monkeypatch):
    import trace_merge.cli as cli

    def exhausted(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(cli, "_open_run", exhausted)
    assert main(["summary", str(run_copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"trace-merge: error: {run_copy}: out of memory")


def test_control_characters_from_a_trace_are_escaped_in_terminal_output(tmp_path, capsys):
    """A phase name, a file name and a warning that carry terminal escape sequences (retitle, clear, a C1 CSI) are
    printed as visible ``\\xNN`` escapes by ``summary`` and ``findings``: a trace cannot drive the user's terminal."""
    hostile = "Load \x1b]0;pwned\x07File\x1b[2J\x9b31m"
    tl = TimeLogger(tmp_path / "run", rank=0, world_size=1)
    for i in range(3):
        tl.set_step(i)
        with tl.phase("Training Iteration", cat="compute"):
            with tl.phase(hostile, cat="io") as p:
                p.update(bytes=10, file=f"/data/\x1b[31mred-{i}.h5")
    tl.close()
    for cmd in ("summary", "findings"):
        assert main([cmd, str(tmp_path / "run")]) == 0
        out = capsys.readouterr()
        text = out.out + out.err
        assert not any(c in text for c in ("\x1b", "\x07", "\x9b")), repr(text[:500])
    assert main(["summary", str(tmp_path / "run")]) == 0
    assert "Load \\x1b]0;pwned\\x07File\\x1b[2J\\x9b31m" in capsys.readouterr().out


def _dftracer_rank(path: Path, rank: int, base_us: int) -> None:
    lines = [json.dumps({"id": i, "name": "read", "cat": "POSIX", "pid": 100 + rank, "tid": 100 + rank,
                         "ts": base_us + 1000 * i, "dur": 10, "ph": "X",
                         "args": {"fname": "/data/f", "ret": 4096, "offset": 0}}) for i in range(5)]
    path.write_text("[\n" + "\n".join(lines) + "\n")


def test_dftracer_ranks_whose_clocks_are_a_day_apart_are_named(tmp_path, capsys):
    """A rank whose clock reads 1970 beside ranks in 2026 (no app layer to judge them by): a warning names it and
    its date; with two ranks, which one is wrong cannot be told, so both are named."""
    now_us = 1_795_000_000_000_000
    _dftracer_rank(tmp_path / "trace-0-of-3.pfw", 0, now_us)
    _dftracer_rank(tmp_path / "trace-1-of-3.pfw", 1, 5_000_000)
    _dftracer_rank(tmp_path / "trace-2-of-3.pfw", 2, now_us + 2_000_000)
    assert main(["summary", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "trace-1-of-3.pfw: its timestamps are" in err and "1970-01-01" in err
    assert "trace-0-of-3.pfw" not in err and "trace-2-of-3.pfw" not in err
    (tmp_path / "trace-2-of-3.pfw").unlink()
    assert main(["summary", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "clocks lie more than a day apart" in err and "trace-0-of-3.pfw (2026-" in err and "(1970-01-01)" in err
