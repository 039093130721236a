"""A killed merge leaves nothing running and nothing on disk for good: the local pool's forkserver and workers die
with their driver (kill -9 included), and the next merge removes the spill directory a killed one left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.tools import REPO, clean_env

psutil = pytest.importorskip("psutil")

DRIVER = textwrap.dedent("""
    import sys, time
    from trace_merge import engines, partitioned
    spill = partitioned.new_spill_dir(sys.argv[1])
    print(spill, flush=True)
    engines.LocalPool(2).map(time.sleep, [60, 60])  # busy workers, as in a long merge
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_kill_9_of_the_driver_takes_its_pool_and_the_next_merge_its_spill(tmp_path, caplog):
    from trace_merge.partitioned import new_spill_dir

    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], env=clean_env(PYTHONPATH=str(REPO)),
                              stdout=subprocess.PIPE, text=True)
    spill = Path(driver.stdout.readline().strip())
    helpers: list = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the forkserver and both workers (forked from it: its command line) are up
        helpers = psutil.Process(driver.pid).children(recursive=True)
        if sum("resource_tracker" not in " ".join(p.cmdline()) for p in helpers) >= 3:
            break
        time.sleep(0.1)
    assert len(helpers) >= 3, [p.cmdline() for p in helpers]
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    gone, alive = psutil.wait_procs(helpers, timeout=20)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]  # forkserver, workers and resource tracker
    assert spill.is_dir() and spill.name.startswith("trace-merge-") and f"-{driver.pid}-" in spill.name
    fresh = new_spill_dir(tmp_path)
    assert not spill.exists() and fresh.is_dir()
    assert any(str(spill) in r.getMessage() and "no longer runs" in r.getMessage() for r in caplog.records)


def test_a_worker_that_dies_is_named_in_a_one_line_error():
    """A pool worker killed mid-task (the OOM killer, an operator): the error names what it was working on (a source
    file, a rank), not a bare ``internal error: BrokenProcessPool``."""
    import os

    from trace_merge.engines import LocalPool
    from trace_merge.errors import TraceInputError

    with pytest.raises(TraceInputError) as err:
        LocalPool(2).map(os._exit, [7, 7])
    assert str(err.value).startswith("7: a merge worker process died while working on it (killed, or out of memory")


def test_a_waves_workers_end_with_it_and_the_next_wave_has_its_own():
    """No worker outlives its wave (:meth:`LocalPool.map`): none is left idle between waves, holding what its
    allocators kept of the last wave's tasks (or to be killed there), and the next wave runs in new processes."""
    import operator
    import os

    from trace_merge.engines import LocalPool

    pool = LocalPool(2)
    try:
        first = pool.map(operator.call, [os.getpid] * 4)
        assert pool._pool is None and os.getpid() not in first
        for pid in set(first):  # gone: not even a zombie (the pool joined them)
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        second = pool.map(operator.call, [os.getpid] * 4)
        assert not set(first) & set(second) and os.getpid() not in second
    finally:
        pool.close()


def test_a_pool_worker_leaves_what_it_inherited_out_of_its_collections() -> None:
    """A worker freezes the objects it was forked with (the modules the fork server imported): its collections,
    one after every task, then walk only what its tasks made (they had walked every module object, 14-28 ms a
    task) and never write to the inherited objects' pages."""
    import gc
    import operator

    from trace_merge.engines import LocalPool

    pool = LocalPool(2)
    try:
        frozen = pool.map(operator.call, [gc.get_freeze_count] * 2)
    finally:
        pool.close()
    assert min(frozen) > 20_000, frozen  # pandas, numpy and pyarrow's objects among them (62 k here)


def _faults_of_a_block(size: int) -> int:
    """In a pool worker: the page faults of taking ``size`` bytes of the heap, writing them, and freeing them."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytearray(size)  # zeroed: every page written
    del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_worker_keeps_its_heap_for_the_next_task_but_after_a_big_rank() -> None:
    """A pool worker keeps what a task freed for its next task, which needs as much: a file's blocks (handing it
    back made every 620 k-event file pay its 28 k page faults again), a rank whose columns all come from the heap.
    After a big rank's task (its whole columns mapped) it hands the heap back, so that it does not sit under the
    next rank's columns."""
    from trace_merge.engines import RELEASE_AFTER_ROWS, LocalPool

    size = 12 << 20  # from the heap in both kinds of wave (3 k pages)
    pool = LocalPool(1)
    try:
        files = pool.map(_faults_of_a_block, [size] * 3)
        ranks = pool.map(_faults_of_a_block, [size] * 3, sizes=[1000] * 3)
        big_ranks = pool.map(_faults_of_a_block, [size] * 3, sizes=[RELEASE_AFTER_ROWS] * 3)
    finally:
        pool.close()
    assert files[0] > 2_500 and max(files[1:]) < 500, files
    assert ranks[0] > 2_500 and max(ranks[1:]) < 500, ranks
    assert min(big_ranks) > 2_500, big_ranks


def test_pool_processes_load_openblas_with_one_thread_and_the_user_environment_is_left_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork server and its workers start with ``OPENBLAS_NUM_THREADS=1`` (OpenBLAS' threads spun 0.08-0.15
    CPU-s of each process' start); this process' environment, which the commands it runs for the user inherit,
    is as it was before and after."""
    from timelogger import TimeLogger
    from trace_merge import engines
    from trace_merge.cli import main as trace_merge

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    pool = engines.LocalPool(1)
    try:
        seen = pool.map(os.getenv, ["OPENBLAS_NUM_THREADS"] * 2)
    finally:
        pool.close()
    assert seen == ["1", "1"]
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    tl = TimeLogger(tmp_path / "run", rank=0, world_size=1)
    with tl.phase("x", cat="compute"):
        pass
    tl.close()
    assert trace_merge(["summary", str(tmp_path / "run")]) == 0
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    with engines.one_blas_thread():
        assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert os.environ["OPENBLAS_NUM_THREADS"] == "3"


def test_a_tls_scheduler_without_a_tls_config_is_a_one_line_error(tmp_path, capsys):
    pytest.importorskip("distributed")
    from timelogger import TimeLogger
    from trace_merge.cli import main as trace_merge

    tl = TimeLogger(tmp_path / "run", rank=0, world_size=1)
    with tl.phase("x", cat="compute"):
        pass
    tl.close()
    assert trace_merge(["summary", str(tmp_path / "run"), "--scheduler", "tls://127.0.0.1:1"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" not in line]
    assert len(err) == 1 and err[0].startswith("trace-merge: error: tls://127.0.0.1:1: cannot reach the Dask "
                                               "scheduler (TypeError: TLS expects"), err


def test_the_fork_server_started_early_serves_the_pools_waves(tmp_path: Path) -> None:
    """``trace-merge`` starts the fork server while it imports the analysis; the pool's waves then fork from that
    server, not from another. The size test that decides it counts every file, and stops at the threshold."""
    from trace_merge import engines

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.pfw.gz").write_bytes(b"x" * 3000)
    (tmp_path / "y.bin").write_bytes(b"y" * 2000)
    assert engines.holds_at_least(tmp_path, 5000) and not engines.holds_at_least(tmp_path, 5001)
    assert engines.holds_at_least(tmp_path / "y.bin", 2000) and not engines.holds_at_least(tmp_path / "none", 1)
    (tmp_path / "early_task.py").write_text("import os\n\ndef parent(_):\n    return os.getppid()\n")
    script = tmp_path / "early.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing.forkserver as fs
        from trace_merge import engines
        import early_task

        engines.start_fork_server()
        first = fs._forkserver._forkserver_pid
        pool = engines.LocalPool(2)
        try:
            parents = {p for wave in range(2) for p in pool.map(early_task.parent, [1, 2, 3])}
        finally:
            pool.close()
        print(first, fs._forkserver._forkserver_pid, *sorted(parents))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[0] == out[1] == out[2] and len(out) == 3, out
