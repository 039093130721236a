"""Perfetto export: strictly valid Chrome-trace JSON, one process per rank × layer, µs relative to run start;
lanes named by rank and role; a reader pool's waitpid polling folded unless kept."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.tools import BIN, env_with_bin
from trace_merge.cli import main
from trace_merge.errors import OutputExistsError
from trace_merge.perfetto import POLL_MAX_NS, POLL_MIN_CALLS, export_perfetto
from trace_merge.run import Run

#: A TimeLogger-instrumented job whose reads run in a fork Pool: the pool's handler thread in the parent polls
#: its workers with waitpid, as the climate benchmark's reader pool does.
POOL_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, sys, time
    from timelogger import default_logger
    tl = default_logger()

    def read(path):
        with tl.phase("Read Image", cat="io") as p:
            with open(path, "rb") as fh:
                p.update(bytes=len(fh.read()), file=path)
        return path

    if __name__ == "__main__":
        pool = mp.get_context("fork").Pool(2)
        for step in range(8):
            tl.set_step(step)
            with tl.phase("Training Iteration", cat="compute"):
                with tl.phase("Parallel Read Images", cat="io"):
                    pool.map(read, sys.argv[1:], chunksize=1)
                time.sleep(0.02)
        pool.close(); pool.join()
        tl.close()
""")


def load(path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_export_real_run_is_valid_chrome_trace(real_run, tmp_path, name):
    run = Run.open(real_run[0])
    out = export_perfetto(run.frame, tmp_path / name).path
    doc = load(out)
    events = doc["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    assert len(x) == len(run.frame)
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    host = run.frame["host"].dropna().iloc[0]
    assert sorted(procs.values()) == [f"rank 0 · {host} · app", f"rank 0 · {host} · posix"]
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert {(t["pid"], t["tid"]) for t in threads} == {(e["pid"], e["tid"]) for e in x}
    t0 = doc["otherData"]["run_start_epoch_ns"]
    assert t0 == int(run.frame["start_ns"].min())
    assert min(e["ts"] for e in x) == 0.0
    latest = max(x, key=lambda e: e["ts"])
    assert latest["ts"] == pytest.approx((int(run.frame["start_ns"].max()) - t0) / 1e3, abs=1e-3)
    loads = [e for e in x if e["name"] == "Load File"]
    assert all(e["args"]["bytes"] > 0 and e["args"]["file"].endswith(".bin") and "epoch" in e["args"]
               for e in loads)
    app_pid = next(p for p, n in procs.items() if n.endswith("app"))
    assert all(e["pid"] == app_pid for e in loads)


def test_export_dftracer_set_keeps_durations(dftracer_set, tmp_path):
    run = Run.open(dftracer_set)
    doc = load(export_perfetto(run.frame, tmp_path / "t.json").path)
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sum(e["dur"] for e in x) == pytest.approx(run.frame["dur_ns"].sum() / 1e3)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"rank 0 · node-0 · posix", "rank 1 · node-0 · posix"} <= names


def test_export_refuses_existing_output(real_run, tmp_path):
    out = tmp_path / "t.json"
    out.write_text("keep")
    with pytest.raises(OutputExistsError):
        export_perfetto(Run.open(real_run[0]).frame, out)
    assert out.read_text() == "keep"


def lanes(doc) -> dict:
    """(trace pid, trace tid) -> (process name, thread name) of every lane that holds an interval."""
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["ph"] == "X"}
    assert used == set(threads)
    return {k: (procs[k[0]], threads[k]) for k in used}


def assert_named(doc, roles: re.Pattern) -> dict:
    """Every lane's process and thread name say the rank; the thread's says a role of ``roles``, never a bare
    "pid · tid"."""
    named = lanes(doc)
    for proc, thread in named.values():
        rank = re.match(r"rank (\d+) · ", proc)
        assert rank, proc
        assert thread.startswith(f"rank {rank.group(1)} · "), (proc, thread)
        assert roles.fullmatch(thread.split(" · ", 1)[1]), thread
        assert not re.search(r"pid \d+ · tid", thread), thread
    return named


OS_ROLES = re.compile(r"main|(reader worker \d+ \(pid \d+\)( · )?)?((reader |I/O )?thread \d+|[a-z0-9/]+ polling thread"
                      r"|forked child: [a-z0-9/]+) \(tid \d+\)|reader worker \d+ \(pid \d+\)")


def test_real_run_lanes_say_rank_and_role(real_run, dftracer_set, tmp_path):
    for i, src in enumerate((real_run[0], dftracer_set)):
        run = Run.open(src)
        named = assert_named(load(export_perfetto(run.frame, tmp_path / f"{i}.json").path), OS_ROLES)
        for rank in set(run.frame["rank"]):
            assert any(t == f"rank {rank} · main" for _, t in named.values())
    # the generated DFTracer set: the loading thread is not the main one and says so
    assert any(re.fullmatch(r"rank 0 · reader thread 1 \(tid \d+\)", t) for _, t in named.values())


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory):
    """A real run of :data:`POOL_SCRIPT` under ``timelogger run --posix``: reader workers and waitpid polling."""
    pytest.importorskip("dftracer")
    root = tmp_path_factory.mktemp("pool")
    data = root / "data"
    data.mkdir()
    files = []
    for i in range(4):
        (data / f"s{i}.bin").write_bytes(bytes(range(256)) * 4000)
        files.append(str(data / f"s{i}.bin"))
    (root / "pool.py").write_text(POOL_SCRIPT)
    run_dir = root / "run"
    subprocess.run([str(BIN / "timelogger"), "run", "-o", str(run_dir), "--posix", "--posix-filter", str(data), "--",
                    sys.executable, str(root / "pool.py"), *files], check=True, capture_output=True,
                   env=env_with_bin(), cwd=root, timeout=120)
    return run_dir


def test_pool_run_names_workers_and_folds_polling(pool_run, tmp_path):
    run = Run.open(pool_run)
    f = run.frame
    waits = f[(f["layer"] == "posix") & (f["name"] == "waitpid")]
    poller = waits.groupby("tid").size().idxmax()
    short = waits[(waits["tid"] == poller) & (waits["dur_ns"] < POLL_MAX_NS)]
    polls = len(short)
    assert polls >= POLL_MIN_CALLS  # the pool's handler thread really polled; the main thread waits a few times
    done = export_perfetto(run.frame, tmp_path / "t.json")
    doc = load(done.path)
    named = assert_named(doc, OS_ROLES)
    threads = {t for _, t in named.values()}
    workers = sorted(t for t in threads if re.fullmatch(r"rank 0 · reader worker \d+ \(pid \d+\)", t))
    assert [w.split()[5] for w in workers] == ["1", "2"]
    assert f"rank 0 · waitpid polling thread (tid {poller})" in threads
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    # folded by default: what stays is the main thread's few waits for its workers and the poller's long waits
    left = [e for e in x if e["name"] == "waitpid"]
    assert len(left) == len(waits) - polls
    assert all(e["dur"] >= POLL_MAX_NS / 1e3 for e in left if named[e["pid"], e["tid"]][1] != "rank 0 · main")
    slices = [e for e in x if e["name"].startswith("waitpid polling ×")]
    assert sum(e["args"]["source"]["folded_calls"] for e in slices) == polls
    assert doc["otherData"]["polling_folded"] == {"calls": polls, "slices": len(slices), "by_name": {"waitpid": polls}}
    # every row but the cpu layer's (CPU time per sample window is not a slice of work)
    assert done.events == len(x) == (f["layer"] != "cpu").sum() - polls + len(slices)
    # ... kept with the flag, and the CLI says how many it folded
    kept = load(export_perfetto(run.frame, tmp_path / "k.json", keep_polling=True).path)
    assert kept["otherData"]["polling_folded"]["calls"] == 0
    assert sum(e["name"] == "waitpid" for e in kept["traceEvents"] if e["ph"] == "X") == len(waits)


def test_cli_export_counts_folded_polls(pool_run, tmp_path, capsys):
    polls = export_perfetto(Run.open(pool_run).frame, tmp_path / "api.json").polling_folded["calls"]
    waits = (Run.open(pool_run).frame["name"] == "waitpid").sum()
    assert main(["export", str(pool_run), "--perfetto", str(tmp_path / "t.json.gz")]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(rf"wrote .*t\.json\.gz \([\d,]+ events; {polls:,} polls \(waitpid\) folded into \d+ slices, "
                        r"--keep-polling keeps them\)", line), line
    assert main(["export", str(pool_run), "--perfetto", str(tmp_path / "k.json"), "--keep-polling"]) == 0
    rows = (Run.open(pool_run).frame["layer"] != "cpu").sum()
    assert capsys.readouterr().out.strip().endswith(f"k.json ({rows:,} events)")
    assert sum(e["name"] == "waitpid" for e in load(tmp_path / "k.json")["traceEvents"]) == waits


@pytest.mark.horovod
@pytest.mark.mpi
def test_horovod_run_names_op_lanes(hvd_run, tmp_path):
    run = Run.open(hvd_run)
    named = assert_named(load(export_perfetto(run.frame, tmp_path / "t.json").path),
                         re.compile(r"main|Horovod \w+ lane \d+(: \S+)?|(reader |I/O )?thread \d+ \(tid \d+\)"))
    comm = [t for p, t in named.values() if p.endswith(" · comm")]
    # eager hvd.allreduce names its tensor after the op only: the lane says the op
    assert comm and all(re.fullmatch(r"rank 0 · Horovod allreduce lane \d+", t) for t in comm), comm
    assert {t for _, t in named.values() if t.endswith("main")} == {"rank 0 · main", "rank 1 · main"}


@pytest.fixture(scope="module")
def keras_profiled(tmp_path_factory):
    """The input-bound Keras fit of ``test_keras_input_bound`` under ``timelogger run --tf-profile``."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("h5py")
    from tests.helpers import keras_fit as k

    data = tmp_path_factory.mktemp("keras_pf") / "data"
    k.check(subprocess.run([sys.executable, str(k.WORKLOAD), "make-data", str(data), "--files", "4",
                            "--batches-per-file", str(k.STEPS // 4), "--batch", "16"],
                           env=k.fit_env(), capture_output=True, text=True, timeout=60))
    return k.launch(data, "run", "--tf-profile")


@pytest.mark.tf
def test_tf_profiled_run_names_framework_threads(keras_profiled, tmp_path):
    run = Run.open(keras_profiled)
    named = assert_named(load(export_perfetto(run.frame, tmp_path / "t.json").path), re.compile(
        r"main|tf\.data( \d+)?|tf\.data consumer( \d+)?|TF eager \(Python main\)( \d+)?|TF executor( \d+)?"
        r"|TF thread( \d+)?|(reader |I/O )?thread \d+ \(tid \d+\)"))
    framework = {t for p, t in named.values() if p.endswith(" · framework")}
    assert any(t.startswith("rank 0 · tf.data") for t in framework), framework
