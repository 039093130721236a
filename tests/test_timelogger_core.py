"""TimeLogger recording API, file format and bad inputs (in-process; the default logger in subprocesses)."""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.tools import run_py
from tests.helpers.traces import app_files, intervals, meta, read_pfw
from timelogger import TimeLogger
from timelogger._env import detect_rank_world


def _events(tl: TimeLogger) -> list:
    tl.close()
    return read_pfw(tl.path)


def test_decorator_bare_and_with_args(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path, rank=2, world_size=4)

    @tl.timed
    def parse(x: int) -> int:
        """doc"""
        return x + 1

    @tl.timed("HDF5 File Read", cat="io")
    def read() -> str:
        return "data"

    @tl.timed(cat="preprocess")
    def transpose() -> None:
        pass

    assert parse(1) == 2 and read() == "data"
    transpose()
    assert parse.__name__ == "parse" and parse.__doc__ == "doc" and parse.__wrapped__(1) == 2
    ev = _events(tl)
    (p,) = intervals(ev, "test_decorator_bare_and_with_args.<locals>.parse")
    assert p["cat"] == "other" and p["args"] == {"rank": 2}
    (r,) = intervals(ev, "HDF5 File Read")
    assert r["cat"] == "io" and r["dur"] >= 0
    (t,) = intervals(ev, "test_decorator_bare_and_with_args.<locals>.transpose")
    assert t["cat"] == "preprocess"
    header = ev[0]
    assert header["name"] == "timelogger" and header["ph"] == "M"
    assert header["args"]["rank"] == 2 and header["args"]["world_size"] == 4
    assert tl.path.name == f"rank-2-pid-{os.getpid()}.pfw" and tl.path.parent == tmp_path / "app"


def test_context_manager_and_update(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path, rank=0, world_size=1)
    with tl.phase("Load File", cat="io") as p:
        time.sleep(0.002)
        p.update(bytes=4096, file="/data/a.h5")
        p.update(offset=512, note={"k": [1, 2]})
    with tl.timed("Global Shuffle", cat="preprocess"):
        pass
    ev = _events(tl)
    (load,) = intervals(ev, "Load File")
    assert load["args"] == {"rank": 0, "bytes": 4096, "file": "/data/a.h5", "offset": 512, "note": {"k": [1, 2]}}
    assert load["dur"] >= 2000.0  # µs
    assert len(intervals(ev, "Global Shuffle")) == 1


def test_iterate_times_next_only_and_skips_stop(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path)

    def slow_source():
        for i in range(3):
            time.sleep(0.01)
            yield i

    seen = []
    for item in tl.iterate(slow_source(), "Call to Next Batch", cat="wait"):
        seen.append(item)
        time.sleep(0.03)  # loop body: must not be inside the intervals
    assert seen == [0, 1, 2]
    ev = _events(tl)
    nexts = intervals(ev, "Call to Next Batch")
    # the call that found the data exhausted ends the iteration: recorded and said so
    assert len(nexts) == 4 and nexts[-1]["args"].get("exhausted") is True
    assert not any("exhausted" in e["args"] for e in nexts[:3])
    nexts = nexts[:3]
    for e in nexts:
        assert e["cat"] == "wait"
        assert 9_000 <= e["dur"] < 25_000, e["dur"]
    starts = [e["ts"] for e in nexts]
    assert starts == sorted(starts) and starts[1] - starts[0] >= 39_000


def test_iterate_records_a_failing_next(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path)

    def broken():
        yield 1
        raise OSError("disk gone")

    with pytest.raises(OSError):
        for _ in tl.iterate(broken(), "next", cat="wait"):
            pass
    nexts = intervals(_events(tl), "next")
    assert len(nexts) == 2 and nexts[1]["args"]["exception"] == "OSError"


def test_epoch_step_tags(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path, rank=1, world_size=2)
    with tl.phase("before"):
        pass
    for epoch in range(2):
        tl.set_epoch(epoch)
        for step in range(3):
            tl.set_step(epoch * 3 + step)
            with tl.phase("Training Iteration", cat="compute") as p:
                p.update(step=99) if (epoch, step) == (1, 2) else None
    ev = _events(tl)
    assert intervals(ev, "before")[0]["args"] == {"rank": 1}
    tags = [(e["args"]["epoch"], e["args"]["step"]) for e in intervals(ev, "Training Iteration")]
    assert tags == [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 99)]  # update() wins over the tag


def test_nested_phases(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path)
    with tl.phase("Load File", cat="io"):
        with tl.phase("HDF5 File Read", cat="io"):
            time.sleep(0.001)
        with tl.phase("Transpose", cat="preprocess"):
            pass
    ev = _events(tl)
    names = [e["name"] for e in intervals(ev)]
    assert names == ["HDF5 File Read", "Transpose", "Load File"]  # written when they end
    outer = intervals(ev, "Load File")[0]
    for inner in intervals(ev)[:2]:
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def test_exceptions_close_intervals(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path)

    @tl.timed("decorated", cat="io")
    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        boom()
    with pytest.raises(ValueError):
        with tl.phase("with-block", cat="compute"):
            raise ValueError("y")
    ev = _events(tl)
    assert intervals(ev, "decorated")[0]["args"]["exception"] == "KeyError"
    assert intervals(ev, "with-block")[0]["args"]["exception"] == "ValueError"


def test_threads_concurrently(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path, flush_interval=0.05)
    n_threads, per_thread = 4, 500
    barrier = threading.Barrier(n_threads)

    @tl.timed("work", cat="compute")
    def work(i: int) -> int:
        return i

    def body(k: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            with tl.phase("phase", cat="io") as p:
                p.update(thread=k, i=i)
            work(i)

    threads = [threading.Thread(target=body, args=(k,), name=f"loader-{k}") for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ev = _events(tl)
    phases = intervals(ev, "phase")
    assert len(phases) == n_threads * per_thread and len(intervals(ev, "work")) == n_threads * per_thread
    by_thread = {}
    for e in phases:
        by_thread.setdefault(e["args"]["thread"], set()).add(e["tid"])
        assert e["pid"] == os.getpid()
    tids = [next(iter(s)) for s in by_thread.values()]
    assert all(len(s) == 1 for s in by_thread.values()) and len(set(tids)) == n_threads
    names = {m["args"]["tid"]: m["args"]["name"] for m in meta(ev, "thread_name")}
    assert {names[t] for t in tids} == {f"loader-{k}" for k in range(n_threads)}
    for k in range(n_threads):  # each thread's events in order, none lost
        assert [e["args"]["i"] for e in phases if e["args"]["thread"] == k] == list(range(per_thread))
    assert ev[-1]["name"] == "timelogger_close" and ev[-1]["args"]["events"] == 2 * n_threads * per_thread


def test_time_base_and_line_format(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path)
    before_us = time.time_ns() / 1000
    with tl.phase("p", cat="io"):
        time.sleep(0.005)
    after_us = time.time_ns() / 1000
    tl.close()
    lines = tl.path.read_text().splitlines()
    assert lines[0] == "["
    x_line = next(line for line in lines if '"ph":"X"' in line)
    assert re.search(r'"ts":\d+\.\d{3},"dur":\d+\.\d{3},', x_line), x_line
    ev = read_pfw(tl.path)
    (p,) = intervals(ev)
    assert before_us - 50 <= p["ts"] and p["ts"] + p["dur"] <= after_us + 50
    close = meta(ev, "timelogger_close")[0]["args"]
    assert close["anchor"]["wall_ns"] > ev[0]["args"]["anchor"]["wall_ns"] and close["dropped"] == 0
    assert all("pid" in e and "tid" in e and "ts" in e for e in ev)


def test_background_flush_without_flush_call(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path, flush_interval=0.1)
    with tl.phase("early", cat="io"):
        pass
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not intervals(read_pfw(tl.path), "early"):
        time.sleep(0.05)
    assert intervals(read_pfw(tl.path), "early"), "the flusher did not write within 3 s"
    tl.close()


def test_header_written_at_open(tmp_path: Path) -> None:
    tl = TimeLogger(tmp_path, rank=5, world_size=8)
    ev = read_pfw(tl.path)  # before any interval and before close: never a silently empty file
    # the header, then the reserved lost-interval record (rewritten in place if a write ever fails)
    assert [e["name"] for e in ev] == ["timelogger", "timelogger_lost"] and ev[1]["args"]["lost"] == 0
    args = ev[0]["args"]
    assert {"rank", "world_size", "hostname", "pid", "ppid", "anchor", "versions", "argv"} <= set(args)
    assert set(args["anchor"]) == {"wall_ns", "perf_ns"} and args["versions"]["timelogger"]
    tl.close()
    tl.close()  # idempotent
    assert [e["name"] for e in read_pfw(tl.path)] == ["timelogger", "timelogger_lost", "timelogger_close"]


# ---------------------------------------------------------------- bad input
def test_unwritable_output_dir_disables_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    caplog.set_level(logging.WARNING, logger="timelogger")
    tl = TimeLogger(blocker / "run")  # parent is a file: cannot be created, even as root
    assert not tl.enabled and tl.path is None

    @tl.timed("read", cat="io")
    def read() -> int:
        return 7

    assert read() == 7
    with tl.phase("x") as p:
        p.update(bytes=1)
    list(tl.iterate([1, 2], "n"))
    tl.flush()
    tl.close()
    warnings = [r for r in caplog.records if "logging disabled" in r.getMessage()]
    assert len(warnings) == 1 and str(blocker) in warnings[0].getMessage()


def test_rank_collision_gets_suffixed_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    taken = tmp_path / "app" / f"rank-0-pid-{os.getpid()}.pfw"
    taken.parent.mkdir(parents=True)
    taken.write_text("previous content\n")
    caplog.set_level(logging.WARNING, logger="timelogger")
    tl = TimeLogger(tmp_path, rank=0)
    with tl.phase("p"):
        pass
    tl.close()
    assert taken.read_text() == "previous content\n"
    assert tl.path.name == f"rank-0-pid-{os.getpid()}-1.pfw"
    assert len(intervals(read_pfw(tl.path), "p")) == 1
    assert any("already exists" in r.getMessage() for r in caplog.records)


def test_recording_after_close_is_ignored_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tl = TimeLogger(tmp_path)

    @tl.timed("late", cat="io")
    def late() -> int:
        return 3

    still_open = tl.phase("straddles")
    still_open.__enter__()
    tl.close()
    size = tl.path.stat().st_size
    caplog.set_level(logging.WARNING, logger="timelogger")
    assert late() == 3
    with tl.phase("after"):
        pass
    still_open.__exit__(None, None, None)
    assert list(tl.iterate([1, 2], "n")) == [1, 2]
    assert tl.path.stat().st_size == size
    assert len([r for r in caplog.records if "after close" in r.getMessage()]) == 1


def test_exit_without_enter_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tl = TimeLogger(tmp_path)
    caplog.set_level(logging.WARNING, logger="timelogger")
    p = tl.phase("never entered", cat="io")
    p.__exit__(None, None, None)
    with p:
        pass
    p.__exit__(None, None, None)  # second exit of the same interval
    ev = _events(tl)
    assert len(intervals(ev, "never entered")) == 1
    assert len([r for r in caplog.records if "without being entered" in r.getMessage()]) == 1


def test_unknown_cat_becomes_other(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tl = TimeLogger(tmp_path)
    caplog.set_level(logging.WARNING, logger="timelogger")
    with tl.phase("x", cat="data"):
        pass
    assert intervals(_events(tl), "x")[0]["cat"] == "other"
    assert any("unknown cat" in r.getMessage() for r in caplog.records)


def test_rank_and_world_from_launcher_env() -> None:
    assert detect_rank_world({}) == (0, 1, "none")
    assert detect_rank_world({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}) == (3, 8, "openmpi")
    assert detect_rank_world({"PMI_RANK": "1", "PMI_SIZE": "2"}) == (1, 2, "mpich-hydra")
    assert detect_rank_world({"PMIX_RANK": "2", "SLURM_NTASKS": "4"}) == (2, 4, "pmix")
    assert detect_rank_world({"SLURM_PROCID": "5", "SLURM_NTASKS": "6"}) == (5, 6, "slurm")
    assert detect_rank_world({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "3"}) == (1, 3, "horovod")
    assert detect_rank_world({"PMI_RANK": "junk"}) == (0, 1, "none")
    # torchrun: its numbering wins over the MPI launcher or srun that started its agent (one per node)
    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "h"}
    assert detect_rank_world(torchrun) == (3, 4, "torchrun")
    assert detect_rank_world({**torchrun, "PMI_RANK": "1", "PMI_SIZE": "2"}) == (3, 4, "torchrun")
    # torch.distributed's env:// variables without torchrun count after every launcher's, and only all together
    assert detect_rank_world({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}) == (1, 2, "torch-env")
    assert detect_rank_world({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "SLURM_PROCID": "0",
                              "SLURM_NTASKS": "2"}) == (0, 2, "slurm")
    assert detect_rank_world({"RANK": "1", "WORLD_SIZE": "2"}) == (0, 1, "none")


# ---------------------------------------------------------------- the default logger (fresh interpreters)
_DEFAULT_SCRIPT = """
import sys, timelogger
tl = timelogger.default_logger()
assert tl is timelogger.default_logger()

@timelogger.timed
def f():
    return 1

@timelogger.timed("read", cat="io")
def g():
    return 2

with timelogger.phase("load", cat="io") as p:
    p.update(bytes=3)
assert f() == 1 and g() == 2
assert list(timelogger.iterate(range(2), "next")) == [0, 1]
print("ENABLED", tl.enabled, tl.rank, tl.world_size)
assert "tensorflow" not in sys.modules and "mpi4py" not in sys.modules
"""


def test_default_logger_disabled_without_env(tmp_path: Path) -> None:
    out = run_py(_DEFAULT_SCRIPT, tmp_path)
    assert "ENABLED False" in out.stdout
    assert not list(tmp_path.rglob("*.pfw"))


def test_default_logger_enabled_by_env(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = run_py(_DEFAULT_SCRIPT, tmp_path, TIMELOGGER_DIR=str(run_dir), PMI_RANK="1", PMI_SIZE="2")
    assert "ENABLED True 1 2" in out.stdout
    (path,) = app_files(run_dir)
    assert path.name.startswith("rank-1-pid-")
    ev = read_pfw(path)
    assert sorted(e["name"] for e in intervals(ev)) == ["f", "load", "next", "next", "next", "read"]  # + exhausted
    assert ev[-1]["name"] == "timelogger_close"  # closed by atexit


def test_import_timelogger_and_keras_module_without_tensorflow(tmp_path: Path) -> None:
    run_py("import sys, timelogger, timelogger.keras, timelogger.tf, timelogger.cli, timelogger.clocks\n"
           "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, sorted(sys.modules)\n", tmp_path)


def test_disabled_logger_phase_is_a_working_no_op(tmp_path: Path) -> None:
    tl = TimeLogger(None)
    assert not tl.enabled
    with tl.phase("x", cat="io") as p:
        assert p.update(bytes=1) is p
    with pytest.raises(ZeroDivisionError):  # exceptions are not swallowed by the no-op exit
        with tl.phase("x"):
            raise ZeroDivisionError

    def f() -> int:
        return 1

    assert tl.timed(f) is f and tl.timed("n", cat="io")(f) is f
    data = [1, 2]
    it = tl.iterate(data, "n")
    assert next(it) == 1 and list(it) == [2]
    tl.set_epoch(1)
    tl.flush()
    tl.close()
    assert not list(tmp_path.iterdir())


def test_record_logs_an_interval_timed_elsewhere(tmp_path) -> None:
    """``record`` takes wall-clock ns from another tool, keeps them exactly, carries the tags and the args."""
    import time

    from timelogger import TimeLogger
    from trace_merge.readers import read_any

    tl = TimeLogger(tmp_path, rank=0, world_size=1)
    now = time.time_ns()
    tl.set_epoch(2)
    tl.record("Read File", now - 5_000_000, now - 2_000_000, cat="io", file="/d/x.h5", bytes=7)
    tl.record("Tick", now - 1_000_000, now - 1_000_000)
    import pytest as _pytest

    with _pytest.raises(ValueError):
        tl.record("Backwards", now, now - 1)
    tl.close()
    frame = read_any(str(tl.path)).frame.set_index("name")
    assert frame.at["Read File", "start_ns"] == now - 5_000_000 and frame.at["Read File", "dur_ns"] == 3_000_000
    assert frame.at["Read File", "epoch"] == 2 and frame.at["Read File", "bytes"] == 7
    assert frame.at["Read File", "file"] == "/d/x.h5" and frame.at["Tick", "dur_ns"] == 0


def test_number_like_values_are_written_as_json_numbers(tmp_path: Path) -> None:
    """``p.update(bytes=np.int64(n))`` is what a loader passes: a number in the file (the merge counts its bytes),
    not the string ``"4096"``; numpy floats, NaN and booleans likewise, anything else as its text."""
    np = pytest.importorskip("numpy")
    tl = TimeLogger(tmp_path)
    with tl.phase("Load File", cat="io") as p:
        p.update(bytes=np.int64(4096), secs=np.float32(0.5), bad=np.float64("nan"), ok=np.bool_(True),
                 file=Path("/data/x.h5"))
    (e,) = intervals(_events(tl), "Load File")
    assert e["args"]["bytes"] == 4096 and isinstance(e["args"]["bytes"], int)
    assert e["args"]["secs"] == 0.5 and e["args"]["bad"] is None and e["args"]["ok"] is True
    assert e["args"]["file"] == "/data/x.h5"


@pytest.mark.parametrize("kwargs", [{"flush_interval": 0}, {"flush_interval": -1}, {"flush_interval": "soon"},
                                    {"flush_interval": float("nan")}, {"max_lag": -0.5}])
def test_flush_settings_outside_a_sane_range_are_refused_in_one_line(tmp_path: Path, kwargs: dict) -> None:
    """``flush_interval=0`` busy-looped a core and a negative one dropped most intervals: refused, nothing made."""
    refused = r"^TimeLogger: (flush_interval|max_lag)=.* is outside [\d.]+\.\.3600 seconds$"
    with pytest.raises(ValueError, match=refused):
        TimeLogger(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()
