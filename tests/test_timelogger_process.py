"""Process life cycle: fork, kill -9, SIGTERM, atexit — each in a real child interpreter."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.tools import clean_env, run_py
from tests.helpers.traces import app_files, intervals, meta, read_pfw


@pytest.mark.parametrize("ending", ["close_join", "terminate"])
def test_fork_pool_children_write_own_files(tmp_path: Path, ending: str) -> None:
    # close+join: workers leave normally (multiprocessing finalizers); terminate: workers get SIGTERM
    finish = "pool.close(); pool.join()" if ending == "close_join" else "pool.terminate(); pool.join()"
    script = f"""
import multiprocessing as mp, os, time
from timelogger import TimeLogger
tl = TimeLogger({str(tmp_path)!r}, rank=3, world_size=4)

@tl.timed("Time to Read Single Image", cat="io")
def read_one(i):
    time.sleep(0.01)
    return os.getpid()

if __name__ == "__main__":
    with tl.phase("Parallel Read Images", cat="io"):
        pool = mp.get_context("fork").Pool(2)
        pids = set(pool.map(read_one, range(8), chunksize=1))
        {finish}
    print("CHILDREN", sorted(pids))
    tl.close()
"""
    out = run_py(script, tmp_path)
    children = {int(x) for x in out.stdout.split("CHILDREN")[1].strip(" []\n").split(",")}
    files = {int(p.name.split("-")[3].split(".")[0]): p for p in app_files(tmp_path)}
    parent_pid = next(pid for pid in files if pid not in children)
    assert children <= set(files) and len(files) == len(children) + 1
    total = 0
    for pid in children:
        ev = read_pfw(files[pid])
        hdr = ev[0]["args"]
        assert files[pid].name.startswith("rank-3-pid-")
        assert hdr["rank"] == 3 and hdr["pid"] == pid and hdr["ppid"] == parent_pid
        assert hdr["anchor"]["wall_ns"] > read_pfw(files[parent_pid])[0]["args"]["anchor"]["wall_ns"]
        reads = intervals(ev, "Time to Read Single Image")
        assert all(e["pid"] == pid and e["args"]["rank"] == 3 for e in reads)
        total += len(reads)
        assert ev[-1]["name"] == "timelogger_close"  # closed by multiprocessing's exit finalizers
    assert total == 8
    parent = read_pfw(files[parent_pid])
    assert len(intervals(parent, "Parallel Read Images")) == 1
    assert not intervals(parent, "Time to Read Single Image")  # nothing duplicated into the parent


_BUSY = """
import sys, time
from timelogger import TimeLogger
tl = TimeLogger(sys.argv[1], flush_interval=0.5)
with tl.phase("early", cat="io"):
    pass
print("READY", flush=True)
i = 0
while True:
    with tl.phase("busy", cat="compute") as p:
        p.update(i=i)
    i += 1
    time.sleep(0.001)
"""


def _start_busy(tmp_path: Path, script: str = _BUSY) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
    return proc


def test_kill_9_loses_at_most_the_last_second(tmp_path: Path) -> None:
    proc = _start_busy(tmp_path)
    time.sleep(2.0)
    kill_us = time.time_ns() / 1000
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    (path,) = app_files(tmp_path)
    ev = read_pfw(path, allow_partial_last=True)
    assert intervals(ev, "early") and not meta(ev, "timelogger_close")
    busy = intervals(ev, "busy")
    assert [e["args"]["i"] for e in busy] == list(range(len(busy)))  # a gap-free prefix
    last_end = busy[-1]["ts"] + busy[-1]["dur"]
    assert kill_us - last_end < 1_000_000, f"lost {(kill_us - last_end) / 1e6:.2f} s before kill -9"


def test_sigterm_flushes_and_exits_like_default(tmp_path: Path) -> None:
    proc = _start_busy(tmp_path)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGTERM  # still dies of SIGTERM, as without timelogger
    (path,) = app_files(tmp_path)
    ev = read_pfw(path)
    close = meta(ev, "timelogger_close")
    assert len(close) == 1 and ev[-1] is close[0]
    busy = intervals(ev, "busy")
    assert busy and close[0]["args"]["events"] == len(busy) + 1
    assert [e["args"]["i"] for e in busy] == list(range(len(busy)))


def test_sigterm_chains_existing_handler(tmp_path: Path) -> None:
    script = """
import signal, sys
def mine(signum, frame):
    print("MINE", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, mine)
""" + _BUSY
    proc = _start_busy(tmp_path, script)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 7 and "MINE" in out
    (path,) = app_files(tmp_path)
    ev = read_pfw(path)
    assert ev[-1]["name"] == "timelogger_close" and intervals(ev, "busy")  # closed by atexit after sys.exit


# The main thread blocks SIGTERM and waits on a lock nobody releases; a thread of the program takes the signal. The
# handler can only run in the main thread, which never runs again (as a pool worker blocked on the task queue's
# lock while Pool.terminate() holds it): only the flush thread can end the process.
_STALLED = """
import signal, sys, threading, time
from timelogger import TimeLogger
{mine}
tl = TimeLogger(sys.argv[1], rank=0, world_size=1)
for i in range(100):
    with tl.phase("Read Sample", cat="io"):
        pass
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # SIGTERM is not blocked there
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}})
held = threading.Lock()
held.acquire()
print("READY", flush=True)
held.acquire()
"""


def _start_stalled(tmp_path: Path, mine: str) -> subprocess.Popen:
    """:data:`_STALLED`, once its main thread is asleep in its lock: a SIGTERM sent between its READY and that
    wait would run the handler in the main thread, between two bytecodes, and the stall would not be tested."""
    proc = _start_busy(tmp_path, _STALLED.format(mine=mine))
    stat = Path(f"/proc/{proc.pid}/task/{proc.pid}/stat")
    deadline, asleep = time.monotonic() + 10, 0
    while asleep < 3 and time.monotonic() < deadline:  # three looks 20 ms apart: not a wait for the GIL
        asleep = asleep + 1 if stat.read_text().rsplit(")", 1)[1].split()[0] == "S" else 0
        time.sleep(0.02)
    return proc


def test_a_sigterm_the_blocked_main_thread_cannot_take_still_ends_the_process(tmp_path: Path) -> None:
    proc = _start_stalled(tmp_path, "")
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    finally:
        proc.kill()  # a no-op once it has ended; on failure no process is left behind
    assert proc.returncode == -signal.SIGTERM  # as the default action would have, with the file closed first
    (path,) = app_files(tmp_path)
    ev = read_pfw(path)
    close = meta(ev, "timelogger_close")
    assert close and close[0]["args"]["exit"] == {"reason": "signal", "signal": "SIGTERM"}
    assert len(intervals(ev, "Read Sample")) == 100


def test_a_stalled_sigterm_waits_for_the_programs_own_handler(tmp_path: Path) -> None:
    proc = _start_stalled(tmp_path, "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))")
    proc.send_signal(signal.SIGTERM)
    try:
        with pytest.raises(subprocess.TimeoutExpired):  # its handler waits for the main thread, as without timelogger
            proc.wait(timeout=1.5)  # three times the flush threads' grace
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_atexit_flushes_without_close(tmp_path: Path) -> None:
    run_py(f"""
from timelogger import TimeLogger
tl = TimeLogger({str(tmp_path)!r}, flush_interval=60)
for i in range(100):
    with tl.phase("p", cat="io") as p:
        p.update(i=i)
""", tmp_path)
    (path,) = app_files(tmp_path)
    ev = read_pfw(path)
    assert len(intervals(ev, "p")) == 100
    assert ev[-1]["name"] == "timelogger_close" and ev[-1]["args"]["events"] == 100


def test_a_child_forked_from_another_thread_exits_when_that_thread_returns(tmp_path: Path) -> None:
    """``os.fork()`` in a thread that is not the main one: in the child that thread is the only one the program
    has, and the child ends when it returns -- the logger's writer thread must not keep it alive (the parent's
    ``waitpid`` hung). The child's interval and its close record are written."""
    script = f"""
import os, threading
from timelogger import TimeLogger
tl = TimeLogger({str(tmp_path)!r}, rank=0, world_size=1)
with tl.phase("parent", cat="other"):
    pass
def work():
    pid = os.fork()
    if pid == 0:
        with tl.phase("child", cat="other"):
            pass
        return
    print("STATUS", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
t = threading.Thread(target=work)
t.start()
t.join()
tl.close()
"""
    out = run_py(script, tmp_path, timeout=30)
    assert "STATUS 0" in out.stdout
    files = app_files(tmp_path)
    assert len(files) == 2
    child = next(read_pfw(p) for p in files if intervals(read_pfw(p), "child"))
    assert len(intervals(child, "child")) == 1 and meta(child, "timelogger_close")


_POOL = """
import multiprocessing as mp, sys
from timelogger import TimeLogger
TL = None

def work(n):
    global TL
    if TL is None:  # made in the worker: the parent has no logger
        TL = TimeLogger(sys.argv[1], rank=0, world_size=1)
    for i in range(n):
        with TL.phase("Read Sample", cat="io"):
            pass
    return n

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[2])
    if sys.argv[3] == "with":  # the context manager terminates the pool: SIGTERM to every worker
        with ctx.Pool(8) as pool:
            total = sum(pool.map(work, [1000] * 48, chunksize=1))
    else:
        pool = ctx.Pool(8)
        total = sum(pool.map(work, [1000] * 48, chunksize=1))
        pool.close()
        pool.join()
    print("RECORDED", total)
"""


@pytest.mark.parametrize("method,ending", [("fork", "close"), ("fork", "with"), ("forkserver", "close"),
                                           ("forkserver", "with"), ("spawn", "close")])
def test_a_pool_of_workers_that_log_loses_no_interval_uncounted(tmp_path: Path, method: str, ending: str) -> None:
    """Pool workers leave through os._exit (no atexit): every interval is on disk or counted lost, and every
    worker's file ends with its close record (the summary would call a worker without one crashed)."""
    script = tmp_path / "pool.py"
    script.write_text(_POOL)
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "run"), method, ending], cwd=tmp_path,
                       env=clean_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    recorded = int(p.stdout.split("RECORDED")[1])
    files = app_files(tmp_path / "run")
    assert files and recorded == 48_000
    on_disk = lost = 0
    for f in files:
        ev = read_pfw(f)
        on_disk += len(intervals(ev, "Read Sample"))
        lost += sum(e["args"]["lost"] for e in meta(ev, "timelogger_lost"))
        assert meta(ev, "timelogger_close"), f.name
    assert on_disk + lost == recorded and lost == 0
