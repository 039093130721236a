"""Capture at rates the writer cannot keep up with, and after the disk fills: every interval is on disk or
counted as dropped on disk, with memory bounded — in real child interpreters, killed for real."""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.tools import clean_env, run_py
from tests.helpers.traces import app_files, intervals, meta, read_pfw

FLOOD = Path(__file__).parent / "workloads" / "tl_flood.py"


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_kill9_at_full_speed_loses_nothing_older_than_1s_uncounted(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    proc = subprocess.Popen([sys.executable, str(FLOOD), str(tmp_path / "run"), str(progress), "4"],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (progress.exists() and progress.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert progress.exists(), proc.stderr.read() if proc.poll() is not None else "no progress"
        time.sleep(4.0)
        hwm_kib = _vm_hwm_kib(proc.pid)
        killed_ns = time.time_ns()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    [path] = app_files(tmp_path / "run")
    events = read_pfw(path, allow_partial_last=True)
    on_disk = collections.Counter(e["tid"] for e in intervals(events, "tick"))
    dropped: dict = {}
    for rec in meta(events, "timelogger_dropped"):
        dropped[rec["args"]["tid"]] = max(dropped.get(rec["args"]["tid"], 0), rec["args"]["dropped"])
    # the last progress sample taken more than 1 s before the kill: its counts had ended by then
    samples = [line.split() for line in progress.read_text().splitlines() if line.strip()]
    before = [s for s in samples if int(s[0]) <= killed_ns - 1_000_000_000]
    assert before, "the workload made no progress in its first 3 s"
    needed = {int(t): int(c) for t, c in (x.split(":") for x in before[-1][1:])}
    assert len(needed) == 4 and all(needed.values())
    for tid, n in needed.items():
        assert on_disk[tid] + dropped.get(tid, 0) >= n, (tid, on_disk[tid], dropped.get(tid, 0), n)
    assert sum(on_disk.values()) > 10_000  # the writer wrote while the producers ran, not only a header
    # Bounded memory: the producers make ~1 M intervals/s together (~130 B each buffered); without the bound
    # RSS grew ~190 MB/s. With it, at most ~max_lag (0.75 s) of production plus a chunk is held.
    assert hwm_kib < 400 * 1024, f"peak RSS {hwm_kib} KiB"


def test_short_write_counts_match_the_file(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel cut a write short and then fail it with EFBIG, as a full disk does with
    ENOSPC: events_written must be the whole lines on disk and dropped the rest."""
    script = f"""
import json, resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write() instead of being killed
resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, resource.RLIM_INFINITY))
from timelogger import TimeLogger
from timelogger.writer import CHUNK_EVENTS
tl = TimeLogger({str(tmp_path)!r}, rank=0, world_size=1, flush_interval=3600)
for i in range(3000):
    with tl.phase("Load File", cat="io") as p:
        p.update(bytes=i)
tl.flush()
for i in range(500):
    with tl.phase("after", cat="io"):
        pass
tl.close()
print(json.dumps({{"written": tl.events_written, "dropped": tl.dropped}}))
"""
    out = run_py(script, tmp_path)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    [path] = app_files(tmp_path)
    assert path.stat().st_size == 150_000  # the write really was cut short at the limit
    events = read_pfw(path, allow_partial_last=True)
    whole = len(intervals(events))
    assert 0 < whole < 3000
    assert counts["written"] == whole
    # the 3000 taken before the failure and the 500 timed after it (the logger switched itself off) are all
    # accounted for, and the total lost is on disk, in the record reserved after the header
    assert counts["written"] + counts["dropped"] == 3500
    lost = [e for e in events if e.get("name") == "timelogger_lost"]
    assert len(lost) == 1 and lost[0]["args"]["lost"] == counts["dropped"]
    assert lost[0]["args"]["why"].strip() == "EFBIG"
    assert "writing" in out.stderr and "failed" in out.stderr


def test_reader_reports_dropped_intervals(tmp_path: Path) -> None:
    """What the writer dropped reaches the merge as a warning naming the file and the count."""
    from trace_merge.readers import read_any

    script = f"""
from timelogger import TimeLogger
from timelogger.writer import CHUNK_EVENTS
tl = TimeLogger({str(tmp_path)!r}, rank=0, world_size=1, flush_interval=3600, max_lag=0.0)
for i in range(CHUNK_EVENTS + 100):
    with tl.phase("tick", cat="compute"):
        pass
tl.flush()   # max_lag 0: all are too old; the newest chunk is written anyway, the 100 before it are dropped
with tl.phase("kept", cat="compute"):
    pass
tl.close()
"""
    run_py(script, tmp_path)
    [path] = app_files(tmp_path)
    src = read_any(path)
    assert src.meta.dropped == 100
    assert any(str(path) in w and "100 intervals dropped" in w for w in src.warnings)


def test_dropped_intervals_reach_the_summary(tmp_path: Path, capsys) -> None:
    """The summary says the app layer is incomplete and by how much, merged afresh and from merged.parquet."""
    from trace_merge.cli import main

    script = f"""
from timelogger import TimeLogger
from timelogger.writer import CHUNK_EVENTS
tl = TimeLogger({str(tmp_path)!r}, rank=0, world_size=1, flush_interval=3600, max_lag=0.0)
with tl.phase("outer", cat="other"):
    for i in range(CHUNK_EVENTS + 250):
        with tl.phase("tick", cat="compute"):
            pass
    tl.flush()   # max_lag 0: all are too old; the newest chunk is written anyway, the 250 before it dropped
tl.close()
"""
    run_py(script, tmp_path)
    [path] = app_files(tmp_path)
    for step in ("fresh", "cached"):
        assert main(["summary", str(tmp_path), "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["dropped_app_intervals"] == 250, step
        assert any(str(path) in w and "250 intervals dropped" in w for w in summary["warnings"]), step
        assert main(["summary", str(tmp_path)]) == 0
        text = capsys.readouterr().out
        assert "app layer incomplete: 250 intervals dropped by the TimeLogger writer in 1 file(s)" in text, step
        if step == "fresh":
            assert main(["merge", str(tmp_path)]) == 0
            assert json.loads((tmp_path / "merge_info.json").read_text())["dropped_intervals"] == {str(path): 250}
            capsys.readouterr()


def test_a_starved_writer_drops_nothing(tmp_path: Path) -> None:
    """Intervals older than max_lag in a small backlog mean the writer was starved (a long C++ call holding the GIL,
    seen in a tf.function's first trace), not outrun: they are written, not dropped."""
    from trace_merge.readers import read_any

    script = f"""
import time
from timelogger import TimeLogger
tl = TimeLogger({str(tmp_path)!r}, rank=0, world_size=1, flush_interval=3600, max_lag=0.05)
for i in range(50):
    with tl.phase("tick", cat="compute"):
        pass
time.sleep(0.2)  # the writer did not run for 4 x max_lag
tl.flush()
tl.close()
"""
    run_py(script, tmp_path)
    [path] = app_files(tmp_path)
    src = read_any(path)
    assert src.meta.dropped == 0
    assert (src.frame["name"] == "tick").sum() == 50
