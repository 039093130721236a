"""The cpu layer (docs/cpu.md): ``timelogger run``'s CPU sampler on real processes, read back by ``trace-merge``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.tools import BIN, REPO, clean_env
from trace_merge.run import Run

#: burns known CPU (measured with time.thread_time() by each thread itself) in the main thread, a second thread and
#: two pool worker processes; prints what each measured, with its pid and native thread id
BURN = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys, threading, time
    def burn(seconds):
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass
        return time.thread_time() - t0, os.getpid(), threading.get_native_id()
    if __name__ == "__main__":
        start = time.thread_time()
        out = {"thread": None}
        burn(1.5)
        t = threading.Thread(target=lambda: out.update(thread=burn(1.0)))
        t.start(); t.join()
        with mp.get_context("fork").Pool(2) as pool:
            out["pool"] = pool.map(burn, [1.0, 1.0], chunksize=1)
        out["main"] = (time.thread_time() - start, os.getpid(), threading.get_native_id())
        print(json.dumps(out))
""")


def _launch(out: Path, script: str, *options: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "timelogger"), "run", "-o", str(out), *options, "--", sys.executable, "-c",
                           script], cwd=cwd, env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=timeout)


def test_per_thread_cpu_matches_the_threads_own_clocks(tmp_path):
    """Per thread (main, a second thread, two pool workers that end before the program), the cpu layer's CPU
    seconds are within 10 % of what the thread measured itself; the summary states cores busy of cores available."""
    p = _launch(tmp_path / "run", BURN, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    measured = json.loads(p.stdout.strip().splitlines()[-1])
    run = Run.open(tmp_path / "run")
    assert run.rows_per_layer().get("cpu")
    a = run.analyse()
    threads = a.cpu.threads.set_index(["pid", "tid"])["cpu_s"]
    cases = [("main", measured["main"]), ("thread", measured["thread"])] + [("pool", w) for w in measured["pool"]]
    for what, (seconds, pid, tid) in cases:
        assert (pid, tid) in threads.index, (what, pid, tid, threads)
        assert threads[(pid, tid)] == pytest.approx(seconds, rel=0.10), (what, threads[(pid, tid)], seconds)
    roles = a.cpu.threads.set_index(["pid", "tid"])["role"]
    assert roles[tuple(measured["main"][1:])] == "main"
    assert {roles[tuple(w[1:])] for w in measured["pool"]} == {"workers"}
    whole = a.cpu.per_epoch[a.cpu.per_epoch["epoch"].isna()].iloc[0]
    assert whole["cores_available"] == len(os.sched_getaffinity(0))
    # 4.5 s of CPU in a run of a few seconds: more than one core busy on average would be wrong on its own
    assert 0 < whole["busy_cores"] <= whole["cores_available"]
    text = subprocess.run([str(BIN / "trace-merge"), "summary", str(tmp_path / "run")], capture_output=True,
                          text=True, env=clean_env(), timeout=120).stdout
    assert "cores busy of cores available" in text and "busiest threads per rank" in text
    doc = json.loads(subprocess.run([str(BIN / "trace-merge"), "summary", "--json", str(tmp_path / "run")],
                                    capture_output=True, text=True, env=clean_env(), timeout=120).stdout)
    assert doc["rows_per_layer"]["cpu"] and doc["cpu"]["per_epoch"][0]["cores_available"] == whole["cores_available"]
    # the sampler's own cost is in its close record: well under 1 % of a core at the default period
    assert a.cpu.sampler_share_of_core is not None and a.cpu.sampler_share_of_core < 0.01


#: stops its own sampler (Ctrl-Z, a suspended batch job) past the sampler's deadline, then lets it go on
STOPPED = textwrap.dedent("""
    import json, os, signal, threading, time
    def burn(seconds):
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass
    sampler = int(os.environ["TIMELOGGER_CPU_SAMPLER"])
    burn(0.3)
    os.kill(sampler, signal.SIGSTOP)
    burn(0.6)
    os.kill(sampler, signal.SIGCONT)
    time.sleep(0.3)
    with open(f"/proc/{sampler}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    burn(0.3)
    print(json.dumps({"state": state, "cpu_s": time.thread_time(), "pid": os.getpid(),
                      "tid": threading.get_native_id()}))
""")


def test_a_sampler_stopped_and_continued_goes_on_sampling(tmp_path):
    """CPython's sigtimedwait, interrupted past its deadline, returns an unfilled siginfo: the sampler must take it
    for the timeout it is, not end on a garbage signal number. The CPU of the stopped time is counted after."""
    p = _launch(tmp_path / "run", STOPPED, "--cpu-period", "0.05", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    measured = json.loads(p.stdout.strip().splitlines()[-1])
    assert measured["state"] in ("S", "R"), measured  # still sampling, not a zombie
    (cpu_file,) = (tmp_path / "run" / "cpu").glob("rank-0-*.pfw")
    close = json.loads(cpu_file.read_text().splitlines()[-1])
    assert close["name"] == "timelogger_close" and close["args"]["exit"]["stopped_by"] == "program at exit"
    threads = Run.open(tmp_path / "run").analyse().cpu.threads.set_index(["pid", "tid"])["cpu_s"]
    assert threads[(measured["pid"], measured["tid"])] == pytest.approx(measured["cpu_s"], rel=0.10)


def test_no_cpu_and_the_period(tmp_path):
    script = "import time; time.sleep(0.3)"
    p = _launch(tmp_path / "off", script, "--no-cpu", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / "off" / "cpu").exists()
    manifest = json.loads((tmp_path / "off" / "manifest.json").read_text())
    assert manifest["layers"]["cpu"] is False
    p = _launch(tmp_path / "on", script, "--cpu-period", "0.05", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    manifest = json.loads((tmp_path / "on" / "manifest.json").read_text())
    assert manifest["layers"]["cpu"] == {"period_s": 0.05, "files": "cpu"}
    launch = json.loads((tmp_path / "on" / "launch" / "rank-0.json").read_text())
    header = json.loads((tmp_path / "on" / "cpu" / f"rank-0-pid-{launch['pid']}.pfw").read_text().splitlines()[1]
                        .rstrip(","))
    assert header["args"]["layer"] == "cpu" and header["args"]["cpu"]["period_s"] == 0.05
    assert isinstance(launch["cpu_sampler"], int)


@pytest.mark.parametrize("period", ["0", "abc", "100"])
def test_a_bad_cpu_period_is_one_line_and_nothing_runs(tmp_path, period):
    p = _launch(tmp_path / "run", "print('ran')", "--cpu-period", period, cwd=tmp_path)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert "--cpu-period" in p.stderr and len(p.stderr.strip().splitlines()) <= 2, p.stderr
    assert not (tmp_path / "run").exists()


KERAS_JPEG = REPO / "tests" / "workloads" / "keras_jpeg.py"


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("jpeg") / "images"
    p = subprocess.run([sys.executable, str(KERAS_JPEG), str(d), "--make"], capture_output=True, text=True,
                       timeout=300, env=clean_env())
    assert p.returncode == 0, p.stderr[-2000:]
    return d


@pytest.mark.tf
@pytest.mark.findings_real
@pytest.mark.parametrize("memory", [False, True])
def test_contention_on_a_real_keras_image_pipeline(jpegs, tmp_path, memory):
    """The Keras guide's pattern (``image_dataset_from_directory`` over JPEGs, ``.prefetch(AUTOTUNE)``) decodes on
    tf.data's threads while the step computes: a contention finding with the input side's share of the cores; the
    same model on an in-memory dataset of the same shapes has none."""
    pytest.importorskip("tensorflow")
    out = tmp_path / "run"
    p = subprocess.run([str(BIN / "timelogger"), "run", "-o", str(out), "--tf-profile", "--", sys.executable,
                        str(KERAS_JPEG), str(jpegs), *(["--memory"] if memory else [])],
                       env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "s_per_step" in p.stdout, p.stderr[-3000:]
    run = Run.open(out)
    a = run.analyse()
    dc = a.cpu.during_compute.iloc[0]
    keys = {f.key for f in run.findings(a)}
    share = max(dc["input_pct"], dc["profiled_input_pct"])  # TensorFlow's threads: its profile's busy time
    if memory:
        assert share < 10 and "cpu_contention" not in keys, dc
    else:
        assert share >= 25 and "cpu_contention" in keys, dc


def test_idle_cores_of_a_loop_that_sleeps(tmp_path):
    """A README-pattern loop whose steps sleep leaves the node's cores idle (nothing else runs on them in a quiet
    test; every process counted): an idle-cores finding; the busy loop of the first test gets none."""
    script = textwrap.dedent("""
        import time
        from timelogger import default_logger
        tl = default_logger()
        for epoch in range(2):
            tl.set_epoch(epoch)
            for step in range(8):
                with tl.phase("Training Iteration", cat="compute"):
                    time.sleep(0.1)
    """)
    p = _launch(tmp_path / "run", script, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    run = Run.open(tmp_path / "run")
    a = run.analyse()
    node = a.cpu.nodes.iloc[0]
    assert node["cores"] == len(os.sched_getaffinity(0)) and node["job_busy_cores"] < 0.3
    found = {f.key: f for f in run.findings(a)}
    if node["idle_cores"] >= max(1.0, 0.25 * node["cores"]):  # a machine busy with other work has no idle cores
        assert "idle_cores" in found and f"of {node['cores']:g} cores idle" in found["idle_cores"].evidence
    else:
        assert "idle_cores" not in found
    # the phase's CPU: a sleeping step uses almost none of a core
    phases = a.cpu.phases.set_index("phase")
    assert phases.loc["Training Iteration", "cores"] < 0.3
