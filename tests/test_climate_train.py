"""Climate benchmark runs for real: 2 ranks under mpiexec with Horovod, a forked reader pool and the DFTracer POSIX
preload in the full and no-io modes (checked from the merged frame), the other modes and thread readers in one
process, the ablation table, and bad input (one line, exit 2, before TensorFlow is imported)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from benchmarks.climate.data import SMOKE_DATA, generate
from benchmarks.climate.sweep import ABLATION_ROWS
from benchmarks.common.ablate import ablation_table, format_ablation
from benchmarks.common.sweep import Point, layers_for, run_point
from trace_merge.analysis import COMPONENTS
from trace_merge.intervals import union_ns
from trace_merge.schema import FS_LAYERS

REPO = Path(__file__).resolve().parents[1]
PARENT, WORKER = "Parallel Read Images", "Time to Read Single Image"


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("climdata") / "data", SMOKE_DATA, show_progress=False)


@pytest.fixture(scope="module")
def hvd_runs(smoke_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    pytest.importorskip("horovod.tensorflow")
    out = tmp_path_factory.mktemp("climruns")
    layers = layers_for(smoke_data, posix=True, horovod_timeline=False)
    return {mode: run_point(Point(2, "local", mode), smoke_data, out / mode, ["--smoke"], layers, dist="horovod",
                            benchmark="climate")
            for mode in ("full", "no-io")}


def _data_rows(frame: pd.DataFrame, data_dir: Path) -> pd.DataFrame:
    """File-system calls on the data files (not generator.json)."""
    fs = frame[frame["layer"].isin(FS_LAYERS) & (frame["cat"] == "io")]
    files = fs["file"].astype(str)
    return fs[files.str.startswith(str(data_dir.resolve())) & files.str.endswith(".h5")]


def _main_pids(frame: pd.DataFrame) -> dict[int, int]:
    """rank -> pid of the training process (the one with the Training Loop)."""
    loops = frame[(frame["layer"] == "app") & (frame["name"] == "Training Loop")]
    return {int(r): int(p) for r, p in zip(loops["rank"], loops["pid"])}


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_worker_intervals_lie_inside_the_parent_read_phase(hvd_runs: dict) -> None:
    for mode, parts in hvd_runs.items():
        frame = parts["run"].frame
        app = frame[frame["layer"] == "app"]
        main = _main_pids(frame)
        assert sorted(main) == [0, 1], mode
        for rank, pid in main.items():
            mine = app[app["rank"] == rank]
            workers = mine[(mine["name"] == WORKER)]
            assert len(workers) == 2 * 2, mode  # 2 files per rank x 2 epochs (smoke: 4 files, 2 ranks)
            assert (workers["pid"] != pid).all() and workers["pid"].nunique() >= 1, mode
            for sub in ("Read Image", "Normalise", "Per-pixel Weights"):
                assert (mine[mine["name"] == sub]["pid"] != pid).all(), (mode, sub)
            parents = mine[(mine["name"] == PARENT) & (mine["pid"] == pid)]
            assert len(parents) == len(workers), mode
            ps, pe = parents["start_ns"].to_numpy(), parents["end_ns"].to_numpy()
            for s, e in zip(workers["start_ns"], workers["end_ns"]):
                assert ((ps <= s) & (e <= pe)).any(), (mode, rank, s, e)
            assert workers["epoch"].notna().all(), mode  # the parent's epoch reaches the workers


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_no_io_reads_no_data_files_yet_the_read_phase_takes_time(hvd_runs: dict, smoke_data: Path) -> None:
    frame = hvd_runs["no-io"]["run"].frame
    assert len(_data_rows(frame, smoke_data)) == 0
    app = frame[(frame["layer"] == "app") & (frame["name"] == PARENT)]
    assert (app["dur_ns"] > 0).all() and len(app) == 8
    layered = hvd_runs["no-io"]["analysis"].layered
    read = layered[layered["phase"] == PARENT]
    assert read["time_s"].sum() > 0 and read["fs_s"].sum() == 0
    assert hvd_runs["no-io"]["summary"]["read_bytes"] == 0
    # the full run did read them, from the workers
    full = _data_rows(hvd_runs["full"]["run"].frame, smoke_data)
    main = _main_pids(hvd_runs["full"]["run"].frame)
    reads = full[full["name"].astype(str).str.contains("read") & full["epoch"].notna()]
    assert len(reads) and not reads["pid"].isin(list(main.values())).any()  # (the parent checked headers before)


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_file_system_time_of_the_read_phase_is_the_workers_posix_time(hvd_runs: dict, smoke_data: Path) -> None:
    parts = hvd_runs["full"]
    frame = parts["run"].frame
    main = _main_pids(frame)
    layered = parts["analysis"].layered
    fs = _data_rows(frame, smoke_data)
    for rank, pid in main.items():
        workers_fs = fs[(fs["rank"] == rank) & (fs["pid"] != pid) & fs["epoch"].notna()]
        posix_s = union_ns(workers_fs["start_ns"], workers_fs["end_ns"]) / 1e9
        phase_fs = layered[(layered["rank"] == rank) & (layered["phase"] == PARENT)]["fs_s"].sum()
        assert posix_s > 0
        assert abs(phase_fs - posix_s) < 1e-3, (rank, phase_fs, posix_s)
    for name in (PARENT, WORKER):
        rows = layered[layered["phase"] == name]
        assert np.allclose(rows[[f"{c}_s" for c in COMPONENTS]].sum(axis=1), rows["time_s"], atol=1e-9)


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_breakdown_rows_sum_to_100_and_summary(hvd_runs: dict) -> None:
    for mode, parts in hvd_runs.items():
        bd = parts["analysis"].breakdown
        pct = [c for c in bd.columns if c.endswith("_pct")]
        assert np.allclose(bd[pct].sum(axis=1), 100.0, atol=1e-6), mode
        s = parts["summary"]
        assert s["benchmark"] == "climate" and s["mode"] == mode and s["ranks"] == 2 and s["dist"] == "horovod"
        assert s["read_in"] == "processes" and s["readers"] == 2 and s["samples_trained"] == 2 * 2 * 2
        assert np.isfinite(s["final_loss"]) and 0 <= s["final_pixel_accuracy"] <= 1
        assert not [w for w in s["merge_warnings"] if "dropped" in w], s["merge_warnings"]
    assert hvd_runs["full"]["summary"]["read_bytes"] > 0
    assert hvd_runs["full"]["summary"]["files_checked_before_training"] is True
    assert hvd_runs["no-io"]["summary"]["files_checked_before_training"] is False


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_ablation_table_of_the_two_modes(hvd_runs: dict) -> None:
    table = ablation_table(hvd_runs, ABLATION_ROWS)
    assert list(table.columns) == ["full", "no-io"]
    assert table.at[f"  {PARENT}: file system", "no-io"] == 0
    assert table.at[f"  {PARENT}: file system", "full"] > 0
    assert table.at[PARENT, "no-io"] > 0 and table.at["Train Step", "full"] > 0
    split = table.at[f"  {PARENT}: file system", "full"] + table.at[f"  {PARENT}: outside the file system", "full"]
    assert split == pytest.approx(table.at[PARENT, "full"])
    assert np.isnan(table.at["Compute Gradients", "full"])  # Horovod fuses the step
    text = format_ablation(table, title="t")
    assert "Parallel Read Images: file system" in text and "%" in text


def _launch(args: list[str], run_dir: Path, env: dict[str, str] | None = None, posix: str | None = None,
            timeout: int = 240) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "timelogger"), "run", "-o", str(run_dir)]
    if posix:
        cmd += ["--posix", "--posix-filter", posix]
    cmd += ["--", sys.executable, "-m", "benchmarks.climate", "train", *args]
    return subprocess.run(cmd, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("mode,read_in", [("io-only", "threads"), ("metadata-only", "processes")])
def test_other_modes_in_one_process(smoke_data: Path, tmp_path: Path, mode: str, read_in: str) -> None:
    from trace_merge.run import Run

    run_dir = tmp_path / "run"
    proc = _launch(["--data", str(smoke_data), "--smoke", "--dist", "none", "--mode", mode, "--read-in", read_in,
                    "--no-merge"], run_dir, posix=str(smoke_data.resolve()))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == mode and summary["read_in"] == read_in and summary["samples_trained"] == 8
    frame = Run.open(run_dir).frame
    app = frame[frame["layer"] == "app"]
    names = set(app["name"].astype(str))
    assert {PARENT, WORKER, "Read Image", "Normalise", "Per-pixel Weights"} <= names
    main_pid = int(app[app["name"] == "Training Loop"]["pid"].iloc[0])
    reads = _data_rows(frame, smoke_data)
    reads = reads[reads["name"].astype(str).str.contains("read") & reads["epoch"].notna()]
    if mode == "io-only":
        assert "Train Step" not in names and summary["final_loss"] is None
        assert (app[app["name"] == WORKER]["pid"] == main_pid).all()  # threads: read in the training process
        with h5py.File(next(smoke_data.glob("data-*.h5")), "r") as f:
            used = 4 * f["climate/data"][0].nbytes
        assert reads["bytes"].sum() >= 8 * used  # every image's channels were read, in both epochs
    else:
        assert "Train Step" in names
        assert (app[app["name"] == WORKER]["pid"] != main_pid).all()
        # HDF5 reads the superblock and object headers of each of the 8 opens, not the data: less than one channel
        assert 0 < reads["bytes"].sum() / 8 < SMOKE_DATA.height * SMOKE_DATA.width * 4


# ---------------------------------------------------------------------------------------------- bad input

def _fake_tensorflow(tmp_path: Path) -> Path:
    """A ``tensorflow`` package that fails loudly: a run that imports TF gets a traceback, not the one-line error."""
    pkg = tmp_path / "fake_tf" / "tensorflow"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('tensorflow imported before the input was checked')\n")
    return pkg.parent


def _train_error(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_fake_tensorflow(tmp_path)), str(REPO)]), **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.climate", "train", "--run-dir", str(tmp_path / "run"),
                           *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _copy(smoke_data: Path, to: Path) -> Path:
    to.mkdir()
    for path in smoke_data.glob("data-*.h5"):
        (to / path.name).write_bytes(path.read_bytes())
    return to


def test_bad_readers_and_flags(smoke_data: Path, tmp_path: Path) -> None:
    assert "--readers: must be at least 1, got 0" in _train_error(tmp_path, ["--data", str(smoke_data), "--smoke",
                                                                             "--readers", "0"])
    assert "--channels" in _train_error(tmp_path, ["--data", str(smoke_data), "--smoke", "--channels", "0,16"])
    line = _train_error(tmp_path, ["--data", str(smoke_data), "--smoke", "--blocks", "2,2,2,2,2,2,3"])
    assert str(smoke_data) in line and "multiples of 64" in line


def test_bad_missing_directory_and_fewer_files_than_ranks(smoke_data: Path, tmp_path: Path) -> None:
    assert "no such data directory" in _train_error(tmp_path, ["--data", str(tmp_path / "nope"), "--smoke"])
    line = _train_error(tmp_path, ["--data", str(smoke_data), "--smoke"], env={"PMI_SIZE": "8", "PMI_RANK": "0"})
    assert "4 files for 8 ranks" in line
    # no-io takes the list from generator.json, and still counts the files against the ranks
    line = _train_error(tmp_path, ["--data", str(smoke_data), "--smoke", "--mode", "no-io"],
                        env={"PMI_SIZE": "8", "PMI_RANK": "0"})
    assert "4 files for 8 ranks" in line


def test_bad_truncated_and_wrong_files(smoke_data: Path, tmp_path: Path) -> None:
    bad = _copy(smoke_data, tmp_path / "truncated")
    victim = sorted(bad.glob("data-*.h5"))[1]
    os.truncate(victim, victim.stat().st_size // 2)
    line = _train_error(tmp_path, ["--data", str(bad), "--smoke"])
    assert victim.name in line
    bad = _copy(smoke_data, tmp_path / "nostats")
    victim = sorted(bad.glob("data-*.h5"))[2]
    with h5py.File(victim, "a") as f:
        del f["climate/stats"]
    line = _train_error(tmp_path, ["--data", str(bad), "--smoke"])
    assert victim.name in line and "stats" in line
    bad = _copy(smoke_data, tmp_path / "shape")
    victim = sorted(bad.glob("data-*.h5"))[0]
    with h5py.File(victim, "a") as f:
        del f["climate/data"]
        f.create_dataset("climate/data", data=np.zeros((16, 32, 96), dtype=np.float32))
    line = _train_error(tmp_path, ["--data", str(bad), "--smoke"])
    assert victim.name in line


@pytest.mark.mpi
@pytest.mark.slow
def test_mpi4py_backend_two_ranks(smoke_data: Path, tmp_path: Path) -> None:
    """``--dist mpi`` (the backend for TF versions Horovod does not build against, run here on whichever TF the
    environment has): gradients averaged with mpi4py between the phases, reader processes on both ranks."""
    from trace_merge.run import Run

    bindir = Path(sys.executable).parent
    run_dir = tmp_path / "run"
    cmd = [str(bindir / "mpiexec"), "-n", "2", str(bindir / "timelogger"), "run", "-o", str(run_dir), "--",
           sys.executable, "-m", "benchmarks.climate", "train", "--data", str(smoke_data), "--smoke", "--dist",
           "mpi", "--no-merge"]
    proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["dist"] == "mpi" and summary["ranks"] == 2 and np.isfinite(summary["final_loss"])
    app = Run.open(run_dir).frame
    app = app[app["layer"] == "app"]
    for name in ("Compute Gradients", "Allreduce Gradients", "Apply Gradients", WORKER):
        assert set(app[app["name"] == name]["rank"]) == {0, 1}, name


def test_find_modes_reads_the_modes_and_names_a_bad_summary(tmp_path: Path) -> None:
    from benchmarks.common.ablate import find_modes
    from trace_merge.errors import TraceInputError

    for name, mode in (("b", "no-io"), ("a", "full"), ("c", "sideways")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"mode": mode}))
    (tmp_path / "d").mkdir()  # not a run
    assert find_modes(tmp_path) == {"full": tmp_path / "a", "no-io": tmp_path / "b"}
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "summary.json").write_text("{not json")
    with pytest.raises(TraceInputError, match="summary.json: unreadable run summary"):
        find_modes(tmp_path)
