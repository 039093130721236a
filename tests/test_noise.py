"""Noise generators (``timelogger run --noise``, :mod:`timelogger.noise`) and their comparison
(:mod:`trace_merge.noise`, ``trace-merge noise``): achieved load, cleanup on kill, bad input, the noise layer in a
merge and the calls of the table. The machine may be shared: the load thresholds are loose (docs/noise.md)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from timelogger import cli, noise
from trace_merge import noise as tm_noise

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH", "")) if x)}


def _generate(tmp_path: Path, kind: str, level: float, seconds: float = 2.6, *extra: str) -> dict:
    """Run one generator for ``seconds``; its header's noise settings and the achieved load of each full period."""
    subprocess.run([sys.executable, "-m", "timelogger.noise", "--kind", kind, "--level", str(level),
                    "--run-dir", str(tmp_path), "--duration", str(seconds), *extra], env=ENV, check=True,
                   timeout=30, capture_output=True)
    (path,) = (tmp_path / "noise").glob(f"{kind}-rank-0-pid-*.pfw")
    lines = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    header = lines[0]["args"]
    assert header["layer"] == "noise" and lines[-1]["name"] == "timelogger_close"
    full = [e["args"] for e in lines if e.get("ph") == "X" and e["dur"] > 0.9e6]
    assert full, "no full recording period"
    return {"noise": header["noise"], "achieved": [a["achieved"] for a in full],
            "demand": [a.get("demand") for a in full]}


def test_cpu_noise_keeps_one_core_busy(tmp_path: Path) -> None:
    got = _generate(tmp_path, "cpu", 1)
    assert got["noise"]["calibrated_max"] == len(os.sched_getaffinity(0))
    # core-seconds per second. On a shared machine the scheduler may hand part of the core to others: the
    # generator then still asks for it (runs or waits in the run queue), which its `demand` shows
    assert max(got["achieved"]) >= 0.8 or min(got["demand"]) >= 0.9, got
    assert all(a <= 1.1 for a in got["achieved"]), got


def test_io_noise_reaches_its_rate(tmp_path: Path) -> None:
    got = _generate(tmp_path, "io", 20, 2.6, "--dir", str(tmp_path), "--io-mode", "evict")
    assert got["noise"]["io_mode"] == "evict" and got["noise"]["calibrated_max"] > 20
    assert all(10 <= a <= 40 for a in got["achieved"]), got
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".timelogger-noise")]  # unlinked at once


def test_memory_noise_streams(tmp_path: Path) -> None:
    got = _generate(tmp_path, "memory", 1)
    assert got["noise"]["calibrated_max"] > 1
    assert all(0.5 <= a <= 2 for a in got["achieved"]), got


def test_net_noise_sends_over_loopback(tmp_path: Path) -> None:
    got = _generate(tmp_path, "net", 50)
    assert all(25 <= a <= 100 for a in got["achieved"]), got


def _tree(pid: int) -> set:
    try:
        p = psutil.Process(pid)
        return {pid, *(c.pid for c in p.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def _alive(pids: set) -> list:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def test_kill_9_of_the_job_leaves_no_generator(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    job = subprocess.Popen([sys.executable, "-m", "timelogger", "run", "-o", str(run_dir), "--noise",
                            "cpu:1,net:20,io:5", "--noise-dir", str(tmp_path), "--", "sleep", "60"],
                           env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = run_dir / "launch" / "rank-0.json"
    deadline = time.monotonic() + 20
    started = None
    while time.monotonic() < deadline and not started:
        time.sleep(0.1)
        try:
            started = json.loads(record.read_text()).get("noise_started")
        except (OSError, ValueError):
            continue
    assert started and len(started) == 3
    time.sleep(1.0)  # the generators calibrate and fork their helpers (cpu workers, the net receiver)
    pids = set().union(*(_tree(s["pid"]) for s in started))
    assert len(pids) >= 5 and set(_alive(pids)) == pids
    os.kill(job.pid, signal.SIGKILL)  # the launcher exec'd into `sleep`: the rank's process
    job.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pids), f"left running: {_alive(pids)}"
    assert noise.wait_stopped(run_dir, 1.0) == []
    for f in (run_dir / "noise").glob("*.pfw"):  # stopped by PR_SET_PDEATHSIG's SIGTERM: closed cleanly
        assert '"timelogger_close"' in f.read_text().splitlines()[-1]


def test_kill_9_of_mpiexec_leaves_no_generator_and_one_rank_per_node_starts_them(tmp_path: Path) -> None:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip("no mpiexec beside the interpreter")
    run_dir = tmp_path / "run"
    job = subprocess.Popen([str(mpiexec), "-n", "2", sys.executable, "-m", "timelogger", "run", "-o", str(run_dir),
                            "--noise", "cpu:1,net:20", "--", "sleep", "60"], env=ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    records: dict = {}
    while time.monotonic() < deadline and not any(r.get("noise_started") for r in records.values()):
        time.sleep(0.2)
        for f in (run_dir / "launch").glob("rank-*.json") if (run_dir / "launch").is_dir() else []:
            try:
                records[f.name] = json.loads(f.read_text())
            except ValueError:
                continue
    starters = [r for r in records.values() if r.get("noise_started")]
    assert len(starters) == 1 and starters[0]["rank"] == 0  # the lowest local rank, once for the node
    time.sleep(1.0)
    pids = set().union(*(_tree(s["pid"]) for s in starters[0]["noise_started"]))
    assert len(pids) >= 4
    job.kill()
    job.wait(timeout=10)
    deadline = time.monotonic() + 8
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pids), f"left running: {_alive(pids)}"


@pytest.mark.parametrize("opts, cause", [
    (["--noise", "disk:5"], "unknown kind 'disk'"),
    (["--noise", "cpu:99"], "more cores than the noise may use"),
    (["--noise", "cpu"], "is not KIND:LEVEL"),
    (["--noise", "cpu:fast"], "is not a number"),
    (["--noise", "cpu:0"], "must be a positive number"),
    (["--noise", "cpu:1,cpu:1"], "cpu given twice"),
    (["--noise", "io:5"], "needs --noise-dir"),
    (["--noise", "io:5", "--noise-dir", "/no/such/dir"], "no such directory"),
    (["--noise", "cpu:1", "--noise-cpus", "1-0"], "is not a CPU list"),
    (["--noise", "cpu:1", "--noise-cpus", "4096"], "is not available here"),
    (["--noise-dir", "/tmp"], "needs --noise KIND:LEVEL"),
])
def test_bad_noise_settings_are_one_line_and_start_nothing(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           opts: list, cause: str) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    rc = cli.main(["run", "-o", str(tmp_path / "run"), *opts, "--", "true"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and cause in err and err.startswith("timelogger: "), err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_noise_layer_is_merged_and_recorded_in_the_manifest(tmp_path: Path) -> None:
    from trace_merge.merge import merge_path

    run_dir = tmp_path / "run"
    script = ("import time, timelogger\nwith timelogger.phase('Work', cat='compute'):\n    time.sleep(1.6)\n")
    subprocess.run([sys.executable, "-m", "timelogger", "run", "-o", str(run_dir), "--noise", "memory:0.5",
                    "--", sys.executable, "-c", script], env=ENV, check=True, timeout=60, capture_output=True)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["layers"]["noise"]["specs"] == [{"kind": "memory", "level": 0.5, "unit": "GB/s"}]
    assert tm_noise.noise_label(manifest) == "memory:0.5"
    res = merge_path(run_dir)
    layers = set(res.frame["layer"].astype(str))
    assert {"app", "noise"} <= layers
    rows = res.frame[res.frame["layer"] == "noise"]
    assert (rows["rank"] == 0).all() and len(rows) >= 1
    assert not [w for w in res.warnings if "ended early" in w]
    assert tm_noise.achieved_load(res.frame)["memory"] > 0.2


def test_the_noise_comparison_shows_the_cpu_layer_of_quiet_and_noisy_runs(tmp_path: Path) -> None:
    """A quiet run and one with ``--noise cpu:1``: the comparison puts their CPU side by side; the noise generator
    is not the job's (its CPU is in the node's figure only)."""
    from trace_merge.run import Run

    script = ("import time\nt0 = time.process_time()\nimport timelogger\nfor i in range(3):\n"
              "    with timelogger.phase('Work', cat='compute'):\n"
              "        t = time.process_time()\n        while time.process_time() - t < 0.4: pass\n"
              "print(time.process_time() - t0)\n")
    runs, own = [], []
    for name, extra in (("quiet", []), ("noisy", ["--noise", "cpu:1"])):
        runs.append(tmp_path / name)
        p = subprocess.run([sys.executable, "-m", "timelogger", "run", "-o", str(runs[-1]), *extra, "--",
                            sys.executable, "-c", script], env=ENV, check=True, timeout=60, capture_output=True,
                           text=True)
        own.append(float(p.stdout.split()[-1]))
    noise.wait_stopped(runs[-1])
    for run_dir, seconds in zip(runs, own):  # the job's CPU is its own process's, the generator's not in it
        job = float(Run.open(run_dir).analyse().cpu.threads["cpu_s"].sum())
        # the cpu layer also holds the interpreter's start, before the script's own clock starts
        assert seconds * 0.95 < job < seconds * 1.1 + 0.3, (run_dir.name, job, seconds)
    quiet, noisy = tm_noise.open_runs([runs[0]]), tm_noise.open_runs([runs[1]])
    generator = tm_noise.achieved_load(Run.open(runs[1]).frame)["cpu"]
    # the node's figure holds the generator: at least its achieved load beyond the job (every process counts)
    got = noisy[0].cpu
    assert got["node_busy_cores"] - got["job_busy_cores"] > 0.8 * generator > 0, (got, generator)
    text = tm_noise.format_noise(tm_noise.noise_table(quiet, noisy))
    assert "CPU (cpu layer" in text and "quiet" in text and "cpu:1" in text


def _cells(label: str, values: dict) -> tm_noise.RunCells:
    return tm_noise.RunCells(label, label, pd.Series(values), {})


def test_noise_table_calls_against_the_quiet_range() -> None:
    key = ("Read", "fs"), ("Read", "total"), ("Step", "compute"), ("Step", "total"), ("Tiny", "total")
    quiet = [_cells("quiet", dict(zip(key, v))) for v in
             ([1.0, 2.0, 5.0, 5.0, 1e-4], [1.1, 2.1, 5.5, 5.5, 1e-4], [0.9, 1.9, 4.5, 4.5, 1e-4])]
    noisy = [_cells("io:50", dict(zip(key, v))) for v in
             ([2.0, 3.0, 5.2, 5.2, 1e-4], [2.2, 3.2, 4.8, 4.8, 1e-4], [1.8, 2.8, 5.6, 5.6, 1e-4])]
    t = tm_noise.noise_table(quiet, noisy).set_index(["phase", "component"])
    assert t.loc[("Read", "fs"), "call"] == "slower" and t.loc[("Read", "fs"), "slowdown"] == pytest.approx(2.0)
    assert t.loc[("Read", "fs"), "lo"] == pytest.approx(2.0) and t.loc[("Read", "fs"), "paired"]
    assert t.loc[("Step", "compute"), "call"] == ""  # within the baseline's own spread
    assert t.loc[("Step", "compute"), ["quiet_lo", "quiet_hi"]].tolist() == pytest.approx([0.9, 1.1])
    assert t.loc[("Tiny", "total"), "call"] == "tiny" and np.isnan(t.loc[("Tiny", "total"), "slowdown"])
    assert "Read" in tm_noise.format_noise(t.reset_index())
    fig = tm_noise.plot_noise(t.reset_index())
    assert len(fig.axes) == 1


def test_noise_table_refuses_a_noisy_baseline_and_one_quiet_run_has_no_call() -> None:
    from trace_merge.errors import TraceInputError

    loud = tm_noise.RunCells("q", "cpu:1", pd.Series({("A", "total"): 1.0}), {})
    with pytest.raises(TraceInputError, match="lists noise generators"):
        tm_noise.noise_table([loud], [loud])
    t = tm_noise.noise_table([_cells("quiet", {("A", "total"): 1.0})], [_cells("cpu:1", {("A", "total"): 2.0})])
    assert t["call"].tolist() == ["n/a"] and t["slowdown"].tolist() == [2.0]


def test_trace_merge_noise_without_noisy_runs_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from trace_merge.cli import main

    assert main(["noise", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no noisy runs after `--`" in err


def test_parse_spec_and_cpus() -> None:
    assert noise.parse_spec("cpu:1.5, io:50") == [noise.NoiseSpec("cpu", 1.5), noise.NoiseSpec("io", 50.0)]
    assert noise.parse_cpus("0-1,3") == [0, 1, 3]
    assert noise.local_rank({"MPI_LOCALRANKID": "1"}) == 1 and noise.local_rank({}) is None
