"""The logger in a shared directory and under faults: nothing written outside the run, nothing lost uncounted.

Each case runs in a real child interpreter: links planted in the run directory, a run directory renamed while a
write fails (``RLIMIT_FSIZE`` gives the short write and ``EFBIG`` a full disk gives), threads recording while the
disk fills, ``close()`` from a signal handler inside a flush, and an argument whose ``__str__`` raises a
``BaseException``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.tools import run_py
from tests.helpers.traces import app_files, intervals, meta, read_pfw


def _counts(stdout: str) -> list:
    """The ``COUNTS`` line a child script prints: ``tl.events_written`` and ``tl.dropped``."""
    return [int(x) for x in stdout.split("COUNTS")[1].split()]


def _lost(events: list) -> int:
    return sum(e["args"]["lost"] for e in meta(events, "timelogger_lost"))


def test_an_app_directory_planted_as_a_link_is_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "app").symlink_to(outside)
    out = run_py(f"""
from timelogger import TimeLogger
tl = TimeLogger({str(run)!r}, rank=0, world_size=1)
with tl.phase("x", cat="io"):
    pass
tl.close()
print("ENABLED", tl.enabled)
""", tmp_path)
    assert not list(outside.iterdir())
    assert "is a link or not a directory" in out.stderr and str(run / "app") in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the app directory to another user")
def test_an_app_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "app").mkdir(parents=True)
    os.chown(run / "app", 54321, 54321)  # a uid no file of ours has: another user's directory
    out = run_py(f"""
from timelogger import TimeLogger
tl = TimeLogger({str(run)!r}, rank=0, world_size=1)
print("ENABLED", tl.enabled)
""", tmp_path)
    assert "ENABLED False" in out.stdout and not list((run / "app").iterdir())
    assert "owned by another user (uid 54321)" in out.stderr


def test_the_lost_record_goes_to_the_file_written_not_to_its_old_path(tmp_path: Path) -> None:
    """The run directory is renamed while the job runs and another file appears at the app file's old path; then
    a write fails. The count of lost intervals lands in the logger's own file; the other file is untouched."""
    script = f"""
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from timelogger import TimeLogger
run = {str(tmp_path / "run")!r}
tl = TimeLogger(run, rank=0, world_size=1, flush_interval=3600)
old = tl.path
os.rename(run, run + "-moved")
os.makedirs(os.path.dirname(old))
with open(old, "w") as fh:
    fh.write("x" * 4096)  # someone else's file, now where the app file was
os.chmod(old, 0o600)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
for i in range(5000):
    with tl.phase("Load", cat="io"):
        pass
tl.close()
print("COUNTS", tl.events_written, tl.dropped)
"""
    out = run_py(script, tmp_path)
    written, dropped = _counts(out.stdout)
    assert dropped > 0 and written + dropped == 5000
    [other] = app_files(tmp_path / "run")
    assert other.read_text() == "x" * 4096
    [mine] = app_files(tmp_path / "run-moved")
    events = read_pfw(mine, allow_partial_last=True)
    assert len(intervals(events, "Load")) == written and _lost(events) == dropped


def test_threads_recording_while_the_disk_fills_lose_nothing_uncounted(tmp_path: Path) -> None:
    script = f"""
import resource, signal, sys, threading
sys.setswitchinterval(1e-6)  # threads switch as often as on a busy many-core node
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, resource.RLIM_INFINITY))
from timelogger import TimeLogger
tl = TimeLogger({str(tmp_path / "run")!r}, rank=0, world_size=1, flush_interval=0.01)
N = 60_000

def produce(k):
    for i in range(N):
        with tl.phase("Read Sample", cat="io") as p:
            p.update(bytes=i)

threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
tl.close()
print("COUNTS", tl.events_written, tl.dropped)
"""
    out = run_py(script, tmp_path, timeout=120)
    written, dropped = _counts(out.stdout)
    [path] = app_files(tmp_path / "run")
    events = read_pfw(path, allow_partial_last=True)
    on_disk = len(intervals(events, "Read Sample"))
    assert on_disk == written and _lost(events) == dropped > 0
    assert on_disk + dropped == 4 * 60_000  # every interval on disk or counted: none neither


def test_close_from_a_signal_handler_inside_a_flush_still_writes_the_close_record(tmp_path: Path) -> None:
    """The main thread is inside ``flush()`` (each interval's argument is slow to turn into text) when a signal
    handler of the program calls ``close()``: the flush finishes, then the close record is written."""
    script = f"""
import os, signal, threading, time
from timelogger import TimeLogger

class Slow:
    def __str__(self):
        time.sleep(0.0002)
        return "slow"

tl = TimeLogger({str(tmp_path / "run")!r}, rank=0, world_size=1, flush_interval=3600)
signal.signal(signal.SIGUSR1, lambda *a: tl.close())
main = threading.get_ident()
for i in range(2000):  # under one writer chunk: the background thread leaves them to the flush below
    with tl.phase("Load", cat="io") as p:
        p.update(value=Slow())

def send_during_flush():
    while tl.writer.owner != main:  # the main thread holds the write lock: it is inside flush()
        time.sleep(0.0001)
    os.kill(os.getpid(), signal.SIGUSR1)

t = threading.Thread(target=send_during_flush)
t.start()
tl.flush()
t.join()
print("CLOSED", tl.enabled, tl.events_written, tl.dropped)
"""
    out = run_py(script, tmp_path)
    enabled, written, dropped = out.stdout.split("CLOSED")[1].split()
    assert enabled == "False"
    [path] = app_files(tmp_path / "run")
    events = read_pfw(path)
    assert meta(events, "timelogger_close"), "no close record"
    assert len(intervals(events, "Load")) == int(written) and int(written) + int(dropped) == 2000


def test_an_argument_whose_str_raises_a_base_exception_drops_that_interval_only(tmp_path: Path) -> None:
    script = f"""
from timelogger import TimeLogger

class Hostile:
    def __str__(self):
        raise SystemExit("no string for you")

tl = TimeLogger({str(tmp_path / "run")!r}, rank=0, world_size=1, flush_interval=0.05)
with tl.phase("bad", cat="io") as p:
    p.update(value=Hostile())
tl.flush()
for i in range(100):
    with tl.phase("good", cat="io"):
        pass
tl.close()
print("COUNTS", tl.events_written, tl.dropped)
"""
    out = run_py(script, tmp_path)
    assert _counts(out.stdout) == [100, 1]
    [path] = app_files(tmp_path / "run")
    events = read_pfw(path)
    assert len(intervals(events, "good")) == 100 and not intervals(events, "bad")
    assert json.loads(json.dumps(meta(events, "timelogger_close")[0]["args"]))["dropped"] == 1
    assert "could not serialise an interval" in out.stderr
