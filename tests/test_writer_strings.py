"""Capture survives any string and any float: a lone surrogate (``os.fsdecode`` of a non-UTF-8 file name) and
NaN/Infinity never raise into the application, never lose intervals, and never make the file unreadable."""
from __future__ import annotations

import json
import os

from timelogger import TimeLogger
from trace_merge.run import Run

BAD_NAME = os.fsdecode(b"sample-\xff\xfe.h5")  # 'sample-\udcff\udcfe.h5'


def _strict(line: str) -> dict:
    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")
    return json.loads(line, parse_constant=refuse)


def test_lone_surrogates_and_non_finite_numbers_are_written_and_read_back(tmp_path):
    tl = TimeLogger(tmp_path / "run", rank=0, world_size=1)
    tl.write_metadata("dataset", {"first_file": BAD_NAME})
    n = 2 * 4096 + 10  # more than one writer chunk
    for i in range(n):
        with tl.phase("Load " + BAD_NAME, cat="io") as p:
            p.update(file=BAD_NAME, bytes=float("nan") if i % 2 else 4096, ratio=float("inf"))
    tl.set_step(3)
    with tl.phase("Train Step", cat="compute") as p:
        p.update(loss=float("-inf"), note=BAD_NAME)
    tl.close()  # used to raise UnicodeEncodeError here and lose every buffered interval
    assert tl.dropped == 0 and tl.events_written == n + 1
    (app,) = (tmp_path / "run" / "app").glob("*.pfw")
    text = app.read_text(encoding="utf-8")  # valid UTF-8 throughout
    assert "NaN" not in text and "Infinity" not in text
    events = [_strict(line.rstrip(",\n")) for line in text.splitlines() if line.startswith("{")]
    loads = [e for e in events if e.get("ph") == "X" and e["name"].startswith("Load ")]
    assert len(loads) == n and all(e["name"] == "Load " + BAD_NAME and e["args"]["file"] == BAD_NAME for e in loads)
    assert all(e["args"]["ratio"] is None for e in loads)
    frame = Run.open(tmp_path / "run").frame
    load_rows = frame[frame["name"] == "Load " + BAD_NAME]
    assert len(load_rows) == n and set(load_rows["file"].astype(str)) == {BAD_NAME}
    assert int(load_rows["bytes"].notna().sum()) == n // 2 + n % 2  # NaN bytes are no bytes, 4096 are


FILL = """
import resource, signal, sys, time
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
from timelogger import TimeLogger
tl = TimeLogger(sys.argv[1], rank=0, world_size=1)
n = 0
for step in range(40):
    tl.set_step(step)
    for i in range(1000):
        with tl.phase("Training Iteration" if i == 0 else "tick", cat="compute"):
            n += 1
    tl.flush()
tl.close()
print(n, tl.events_written, tl.dropped)
"""


def test_a_file_size_limit_loses_no_interval_uncounted(tmp_path, capsys):
    """``ulimit -f`` (EFBIG; a full disk's ENOSPC takes the same path): what did not reach the file is counted in
    the record reserved after the header, so on disk + dropped = every interval, and the summary says so first."""
    import subprocess
    import sys

    from tests.helpers.tools import REPO, clean_env
    from trace_merge.cli import main as trace_merge

    run = tmp_path / "run"
    p = subprocess.run([sys.executable, "-c", FILL, str(run)], env=clean_env(PYTHONPATH=str(REPO)),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    total, written, dropped = map(int, p.stdout.split())
    assert dropped > 0 and written + dropped == total
    frame = Run.open(run).frame
    assert len(frame) == written  # every interval on disk is read, none invented
    assert trace_merge(["summary", str(run)]) == 0
    head = capsys.readouterr().out.splitlines()[:4]
    assert any(line.startswith("rank 0 lost intervals: its writes failed (EFBIG") and f"{dropped:,} intervals"
               in line for line in head), head
    assert any(line.startswith(f"app layer incomplete: {dropped:,} intervals dropped") for line in head), head


def test_every_bytes_value_that_is_no_byte_count_gets_a_file_line_warning(tmp_path):
    """"4096", 4096.7, true, NaN, Infinity, a list: the event stays, without bytes, and its line is named (negative
    and out-of-range values already skip the event with a warning)."""
    from trace_merge.readers import pfw

    bad = ['"4096"', "4096.7", "true", "NaN", "Infinity", "[1]"]
    lines = ["[", '{"name":"timelogger","ph":"M","ts":1,"pid":1,"tid":1,"args":{"rank":0,"world_size":1,'
                  '"pid":1,"anchor":{"wall_ns":1700000000000000000,"perf_ns":0}}}']
    for i, value in enumerate(["4096", *bad]):
        lines.append('{"name":"Load File","cat":"io","ph":"X","ts":%d.0,"dur":5.0,"pid":1,"tid":1,'
                     '"args":{"bytes":%s}}' % (1_700_000_000_000_000 + 10 * i, value))
    path = tmp_path / "rank-0-pid-1.pfw"
    path.write_text("\n".join(lines) + "\n")
    src = pfw.read(path)
    assert len(src.frame) == 1 + len(bad) and src.frame["bytes"].notna().sum() == 1
    flagged = [w for w in src.warnings if w.startswith(f"{path}:") and "is not a byte count; the event is kept" in w]
    assert len(flagged) == 5 and all(w.startswith(f"{path}:") for w in flagged)  # five named, the rest counted
    assert [w.split(":")[1] for w in flagged] == [str(n) for n in range(4, 9)]
    assert any("1 more events with a bytes value" in w for w in src.warnings)
