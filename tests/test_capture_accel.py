"""The capture accelerator (timelogger/_capture.c) and the pure Python path write the same bytes, the pure path is
forced by ``TIMELOGGER_PURE_PYTHON`` and taken by itself where the extension is missing. (The other capture tests
run on whichever path the process has: run them once more with ``TIMELOGGER_PURE_PYTHON=1``.)"""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tools import run_py
from timelogger import CATS, TimeLogger, writer

NAMES = ['quote"d', "back\\slash\\", "ctl\x00\x01\x1f\n\t\r\x7f", "ünïcødé 日本語", "lone \udcff\udcfe surrogates",
         "emoji 😀", "pair as two \ud83d\ude00", "</script>\u2028\u2029", ""]


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")


ARGS: list[dict[str, Any]] = [
    {}, {"x": float("nan"), "y": float("inf"), "z": float("-inf")}, {"big": 2**70, "neg": -(2**65)},
    {"nested": [1, {"b": "\udcfe", "c": [None, True, 1.5]}], "t": (1, 2)}, {"step": 99, "file": "a\"b"},
    {"bad": _Unprintable()}, {"bytes": 4096}]


def _record(tl: TimeLogger, t: int) -> None:
    """The same intervals, times given (wall-clock ns, so the file's ts and dur do not depend on the logger)."""
    for i in range(10_000):  # several writer chunks of plain intervals
        tl.record(NAMES[i % len(NAMES)], t + 1000 * i, t + 1000 * i + i % 7_777, CATS[i % len(CATS)])
    tl.set_epoch(2)
    for i, args in enumerate(ARGS * 3):
        tl.set_step(i)
        tl.record(NAMES[i % len(NAMES)], t + i, t + 3 * i + 1, "io", **args)
    tl.set_step(None)
    tl.flush()  # what follows ended long ago, and a backlog of one chunk is always written, never dropped
    for start, end in ((-5_000_123, -5_000_123), (-1, 1), (0, 999), (2**70, 2**70 + 5), (-(2**64), 0)):
        tl.record("edge", start, end, "other")  # negative (floor) and beyond 64 bits (the Python fallback)


def _by_thread(tl: TimeLogger) -> dict:
    """The file's lines per top-level tid, in file order (threads' chunks may interleave differently), and the
    counts. The header (anchor, argv) and the close record (anchor) are the logger's own and left out."""
    assert tl.path is not None
    lines = tl.path.read_bytes().splitlines(keepends=True)
    assert b'"name":"timelogger"' in lines[1] and b'"name":"timelogger_close"' in lines[-1]
    out: dict = {"counts": (tl.events_written, tl.dropped)}
    for line in [lines[0], *lines[2:-1]]:
        m = re.search(rb',"tid":(\d+),', line)
        out.setdefault(m.group(1) if m else None, []).append(line)
    return out


@pytest.mark.skipif(writer.ACCEL is None, reason="timelogger._capture is not built or TIMELOGGER_PURE_PYTHON is set")
def test_the_accelerated_and_the_pure_writer_write_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    fast = TimeLogger(tmp_path / "fast", rank=3, world_size=4, max_lag=3600)
    monkeypatch.setattr(writer, "ACCEL", None)  # this logger's writer serialises in pure Python
    pure = TimeLogger(tmp_path / "pure", rank=3, world_size=4, max_lag=3600)
    t = time.time_ns()
    assert fast.writer._format is not None and pure.writer._format is None

    def both() -> None:
        _record(fast, t)
        _record(pure, t)

    both()
    worker = threading.Thread(target=both, name="worker \udcff")  # one thread: the same tid in both files
    worker.start()
    worker.join()
    fast.close()
    pure.close()
    a, b = _by_thread(fast), _by_thread(pure)
    assert a["counts"] == b["counts"] == (2 * (10_000 + 18 + 5), 2 * 3)  # the unprintable value: dropped, counted
    assert a == b and len(a) == 5  # [ and the lost record (no tid), tid 0, two threads
    assert any("\\udcff".encode() in line for line in a[str(worker.native_id).encode()])  # escaped surrogate


def test_the_pure_path_is_forced_by_the_environment(tmp_path: Path) -> None:
    p = run_py("import timelogger, timelogger.logger as lg, timelogger.writer as w, tempfile\n"
               "tl = timelogger.TimeLogger(tempfile.mkdtemp(), rank=0, world_size=1)\n"
               "f = tl.timed(lambda: 1)\n"
               "print(w.ACCEL is None, type(f).__name__, type(tl.iterate([], 'n')).__name__,"
               " [c.__name__ for c in lg.Phase.__mro__])\n", tmp_path, TIMELOGGER_PURE_PYTHON="1")
    assert p.stdout.split() == ["True", "function", "generator", "['Phase',", "'_PhaseCore',", "'object']"]


def test_without_the_extension_capture_runs_in_pure_python(tmp_path: Path) -> None:
    p = run_py("import sys\n"
               "sys.modules['timelogger._capture'] = None  # what an install without a C compiler has\n"
               "import timelogger, timelogger.writer as w\n"
               "tl = timelogger.TimeLogger('run', rank=0, world_size=1)\n"
               "with tl.phase('a', cat='io'): pass\n"
               "for _ in tl.iterate([1, 2], 'n'): pass\n"
               "tl.timed(lambda: 1)()\n"
               "tl.close()\n"
               "print(w.ACCEL is None, tl.events_written, tl.dropped)\n", tmp_path)
    assert p.stdout.split() == ["True", "5", "0"]


@pytest.mark.skipif(not hasattr(writer.ACCEL, "Interval"), reason="the C record path is not built or not in use")
def test_the_record_paths_interval_is_written_as_its_tuple() -> None:
    """The C record path buffers an Interval where the pure one buffers (spec, t0, t1, tags): same line."""
    from timelogger.writer import Writer, interval_head

    tuples = [(interval_head(name, cat), t0, t0 + d, tags)
              for name in NAMES for cat in ("io", "other")
              for t0, d in ((0, 0), (-1, 1), (-5_000_123, 999), (2**62, 1001), (-(2**62), 123_456_789))
              for tags in ('"rank":0', '"rank":1,"epoch":2,"step":3')]
    intervals = [writer.ACCEL.Interval(*t) for t in tuples]
    assert [tuple(iv) for iv in intervals] == tuples and all(len(iv) == 4 for iv in intervals)
    off, mid = 1_700_000_000_000_000_000, ',"pid":7,"tid":8,"args":{'
    pure = "".join(Writer._line(t, off, mid) for t in tuples).encode("utf-8", "backslashreplace")
    for items in (tuples, intervals):
        assert writer.ACCEL.format_intervals(items, off, mid, Writer._line) == (pure, len(tuples), [])


def test_a_phase_still_held_is_never_handed_out_again(tmp_path: Path) -> None:
    """tl.phase may hand out a finished phase again (the C record path does): never one that is still held."""
    tl = TimeLogger(tmp_path, rank=0, world_size=1)
    with tl.phase("a", cat="io") as outer:
        with tl.phase("a", cat="io") as inner:
            assert inner is not outer
    kept = tl.phase("a", cat="io")
    kept.update(bytes=1)
    again = tl.phase("a", cat="io")
    assert again is not kept and again._args is None
    with kept:
        pass
    for _ in range(3):
        with tl.phase("a", cat="io"):
            pass
    tl.close()
    assert tl.events_written == 6 and tl.dropped == 0
