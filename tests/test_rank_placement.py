"""Ranks of a run whose program writes no TimeLogger file come from the launcher's pid records; rows nothing places
are never pooled silently; the benchmarks' ``--help`` exits 0; reading a TF profile prints no TF start-up lines."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import REPO, clean_env
from timelogger.cli import _dftracer_preload
from trace_merge.cli import main as trace_merge
from trace_merge.run import Run

BIN = Path(sys.executable).parent
PLAIN_READER = """
import os, sys
data = sys.argv[1]
for name in sorted(os.listdir(data)):
    with open(os.path.join(data, name), "rb") as fh:
        fh.read()
"""


@pytest.fixture()
def plain_run(tmp_path: Path) -> Path:
    """``mpiexec -n 2 timelogger run --posix --no-hooks`` around a script that knows nothing of TimeLogger (no app
    file at all: the POSIX rows take their ranks from the launch records alone)."""
    if _dftracer_preload() is None:
        pytest.skip("dftracer's libdftracer_preload.so is not installed")
    if not (BIN / "mpiexec").exists():
        pytest.skip("no mpiexec")
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"s-{i}.bin").write_bytes(bytes(100_000))
    (tmp_path / "reader.py").write_text(PLAIN_READER)
    run_dir = tmp_path / "run"
    p = subprocess.run([str(BIN / "mpiexec"), "-n", "2", str(BIN / "timelogger"), "run", "-o", str(run_dir), "--posix",
                        "--posix-filter", str(data), "--no-hooks", "--", sys.executable, "reader.py", str(data)],
                       cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert not list((run_dir / "app").glob("*.pfw")) if (run_dir / "app").exists() else True
    return run_dir


@pytest.mark.mpi
def test_posix_rows_take_their_rank_from_the_launch_records(plain_run):
    run = Run.open(plain_run)
    reads = run.frame[(run.frame["layer"] == "posix") & run.frame["name"].astype(str).str.contains("read")]
    assert sorted(reads["rank"].unique().tolist()) == [0, 1]
    assert not any("rank -1" in w for w in run.warnings), run.warnings


@pytest.mark.mpi
def test_rows_nothing_places_are_named_in_a_warning(plain_run, tmp_path, capsys):
    loose = tmp_path / "loose"
    loose.mkdir()
    trace = sorted((plain_run / "posix").glob("*.pfw*"))[0]
    shutil.copy(trace, loose / trace.name)  # no launch records, no rank in the name
    assert trace_merge(["summary", str(loose)]) == 0
    err = capsys.readouterr().err
    assert f"{loose / trace.name}: " in err and "pooled as rank -1" in err and "process(es)" in err


@pytest.mark.parametrize("bench", ["hepcnn", "climate"])
def test_benchmark_help_exits_zero(bench):
    p = subprocess.run([sys.executable, "-m", f"benchmarks.{bench}", "--help"], cwd=REPO, env=clean_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "usage:" in p.stdout and "train" in p.stdout


@pytest.mark.tf
def test_summary_of_a_tf_profile_prints_no_tensorflow_start_up_lines(tmp_path):
    """The xplane reader imports TensorFlow's protobufs; their INFO lines (oneDNN, CPU features) are not the
    user's business."""
    pytest.importorskip("tensorflow")
    workload = Path(__file__).resolve().parent / "workloads" / "tfdata_guide.py"
    run_dir = tmp_path / "run"
    env = clean_env(PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, str(workload), str(run_dir), "--instrument", "readme", "--profile"], env=env,
                   capture_output=True, text=True, timeout=180, check=True)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    p = subprocess.run([str(BIN / "trace-merge"), "summary", str(run_dir)], env=env, capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0 and list(run_dir.glob("tf/**/*.xplane.pb"))
    assert "oneDNN" not in p.stderr and "cpu_feature_guard" not in p.stderr, p.stderr
