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
