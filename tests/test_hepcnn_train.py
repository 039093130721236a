"""HEP-CNN runs for real: 2 ranks under mpiexec with Horovod and the DFTracer POSIX preload (checked from the POSIX
layer of the merged frame), the mpi4py backend (also on the newest TF), and a single-process learnability run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.common.shuffle import epoch_files
from benchmarks.common.sweep import Point, layers_for, run_point
from benchmarks.hepcnn.config import SMOKE_DATA
from benchmarks.hepcnn.data import GenSpec, check_dataset, generate
from trace_merge.analysis import COMPONENTS

REPO = Path(__file__).resolve().parents[1]
EPOCHS = 3


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("hepdata") / "data", SMOKE_DATA, show_progress=False)


@pytest.fixture(scope="module")
def hvd_runs(smoke_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    pytest.importorskip("horovod.tensorflow")
    out = tmp_path_factory.mktemp("hepruns")
    layers = layers_for(smoke_data, posix=True, horovod_timeline=True)
    runs = {}
    for mode in ("local", "global"):
        runs[mode] = run_point(Point(2, mode), smoke_data, out / mode,
                               ["--smoke", "--epochs", str(EPOCHS), "--tf-profile-steps", "1:3"], layers,
                               dist="horovod")
    return runs


def _posix_reads(frame: pd.DataFrame, data_dir: Path) -> pd.DataFrame:
    """POSIX read calls on training files, with the epoch propagated from the app intervals."""
    posix = frame[(frame["layer"] == "posix") & frame["bytes"].notna() & frame["epoch"].notna()]
    posix = posix[posix["name"].astype(str).str.contains("read")]
    files = posix["file"].astype(str)
    return posix[files.str.startswith(str(data_dir.resolve())) & files.str.contains("hep_train_")]


def _sets(reads: pd.DataFrame) -> dict[tuple[int, int], frozenset]:
    return {(int(r), int(e)): frozenset(Path(f).name for f in g["file"].astype(str))
            for (r, e), g in reads.groupby(["rank", "epoch"], observed=True)}


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_global_shuffle_moves_files_between_ranks(hvd_runs: dict, smoke_data: Path) -> None:
    run = hvd_runs["global"]["run"]
    sets = _sets(_posix_reads(run.frame, smoke_data))
    every = frozenset(Path(p).name for p in check_dataset(smoke_data).train_files)
    assert sorted(sets) == [(r, e) for r in range(2) for e in range(EPOCHS)]
    for epoch in range(EPOCHS):
        assert sets[(0, epoch)] | sets[(1, epoch)] == every  # the ranks cover the dataset every epoch
        for rank in range(2):  # and read what the global permutation assigns
            want = epoch_files(sorted(every), rank, 2, epoch, "global", seed=0)
            assert sets[(rank, epoch)] == frozenset(want)
    assert any(sets[(0, e)] != sets[(0, e + 1)] for e in range(EPOCHS - 1))  # a rank's files change


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_local_shuffle_keeps_files_and_bytes_match(hvd_runs: dict, smoke_data: Path) -> None:
    run = hvd_runs["local"]["run"]
    reads = _posix_reads(run.frame, smoke_data)
    sets = _sets(reads)
    for rank in range(2):
        assert len({sets[(rank, e)] for e in range(EPOCHS)}) == 1  # fixed shard
    assert sets[(0, 0)].isdisjoint(sets[(1, 0)])
    # bytes read per epoch = the files' data (+ labels, weights and HDF5 metadata: a few KiB per file)
    info = check_dataset(smoke_data)
    data_bytes = sum(f.data_bytes for f in info.train)
    n = len(info.train)
    for epoch, got in reads.groupby("epoch", observed=True)["bytes"].sum().items():
        assert data_bytes <= int(got) <= data_bytes + n * 16 * 1024, (epoch, got, data_bytes)


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_breakdown_rows_sum_to_100_and_summary(hvd_runs: dict) -> None:
    for mode, parts in hvd_runs.items():
        bd = parts["run"].breakdown()
        pct = bd[[c for c in bd.columns if c.endswith("_pct")]].sum(axis=1).to_numpy(dtype=float)
        assert len(bd) >= 2 * EPOCHS and np.allclose(pct, 100.0, atol=0.01), (mode, pct)
        s = json.loads((parts["run"].path / "summary.json").read_text())
        assert s["ranks"] == 2 and s["dist"] == "horovod" and s["shuffle"] == mode and s["epochs"] == EPOCHS
        assert s["read_layer"] == "posix" and s["read_bytes"] > 0 and s["read_bandwidth_bytes_per_s"] > 0
        assert s["throughput_samples_per_s"] > 0 and 0 <= s["final_accuracy"] <= 1
        run_dir = parts["run"].path
        assert (run_dir / "horovod" / "timeline.json").is_file()
        assert sorted(p.parents[3].name for p in run_dir.glob("tf/rank-*/plugins/profile/*/*.xplane.pb")) \
            == ["rank-0", "rank-1"]  # one logdir per rank
        assert set(parts["run"].frame["layer"].astype(str)) >= {"app", "posix", "comm", "framework"}
        # the TF profiler's step markers fall inside the app's Training Iteration of the same step
        residual = parts["run"].residual
        assert residual.checked == 2 * 2 and residual.outside == 0 and residual.unmatched == 0
        # layered: the allreduce inside each rank's Train Step shows as communication on every rank
        lay = parts["run"].layered_breakdown()
        step = lay[lay["phase"] == "Train Step"].groupby("rank")[["time_s", "comm_s"]].sum()
        assert step.index.tolist() == [0, 1] and (step["comm_s"] > 0).all(), (mode, step)
        assert (step["comm_s"] < step["time_s"]).all()
        comp = [f"{c}_s" for c in COMPONENTS]
        np.testing.assert_allclose(lay[comp].sum(axis=1), lay["time_s"], atol=1e-9)
        # coverage: the profile window holds steps 1 and 2; only inside it is the remainder Python, outside it is
        # not observed (mapping unobserved time to python breaks the first bound)
        frame = parts["run"].frame
        ts = frame[(frame["layer"] == "app") & (frame["name"] == "Train Step")]
        inside = ts[ts["step"].isin([1, 2])].groupby("rank")["dur_ns"].sum() / 1e9
        outside = ts[~ts["step"].isin([1, 2])].groupby("rank")["dur_ns"].sum() / 1e9
        split = lay[lay["phase"] == "Train Step"].groupby("rank")[
            ["python_s", "not_observed_s", "comm_s", "fs_s", "calls", "observed_calls"]].sum()
        assert (split["python_s"] <= inside + 1e-3).all(), (mode, split, inside)
        # outside the window only the whole-run layers (Horovod's collectives, the file system) split the time
        seen_outside = split["not_observed_s"] + split["comm_s"] + split["fs_s"]
        assert (seen_outside >= 0.9 * outside - 1e-3).all(), (mode, split, outside)
        assert (split["observed_calls"] >= 2).all() and (split["observed_calls"] < split["calls"]).all()


def _launch(args: list[str], run_dir: Path, ranks: int = 2) -> subprocess.CompletedProcess:
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "mpiexec"), "-n", str(ranks), str(bindir / "timelogger"), "run", "-o", str(run_dir), "--",
           sys.executable, "-m", "benchmarks.hepcnn", "train", *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.mpi
@pytest.mark.slow
def test_mpi4py_backend_two_ranks(smoke_data: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _launch(["--data", str(smoke_data), "--smoke", "--dist", "mpi", "--shuffle", "global",
                    "--tf-profile-steps", "2:4"], run_dir)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "breakdown, % of wall time" in proc.stdout  # rank 0 merged and printed the table
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["dist"] == "mpi" and s["ranks"] == 2 and s["epochs"] == 2
    # no POSIX layer here: bytes come from the app layer's HDF5 File Read, i.e. exactly what h5py returned
    info = check_dataset(smoke_data)
    per_file = info.train[0].data_bytes + 2 * 4 * info.train[0].samples
    val = sum(f.data_bytes + 8 * f.samples for f in info.validation)
    assert s["read_layer"] == "app" and s["read_bytes"] == 2 * len(info.train) * per_file + val
    from trace_merge.run import Run

    run = Run.open(run_dir)
    frame = run.frame
    comm = frame[(frame["layer"] == "app") & (frame["name"] == "Allreduce Gradients")]
    assert sorted(comm["rank"].unique()) == [0, 1] and (comm["bytes"].fillna(0) > 0).all()  # <NA> fails
    assert sorted(p.parents[3].name for p in run_dir.glob("tf/rank-*/plugins/profile/*/*.xplane.pb")) \
        == ["rank-0", "rank-1"]
    assert run.residual.checked == 2 * 2 and run.residual.outside == 0


@pytest.mark.tf
@pytest.mark.slow
def test_learns_better_than_chance(tmp_path: Path) -> None:
    data = generate(tmp_path / "data", GenSpec(files=6, samples_per_file=32, image_size=32, seed=5,
                                               validation_files=2), show_progress=False)
    run_dir = tmp_path / "run"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.hepcnn", "train", "--data", str(data), "--run-dir",
                           str(run_dir), "--dist", "none", "--epochs", "6", "--batch", "16", "--width", "16",
                           "--dropout", "0.25",
                           "--checkpoint-every", "0", "--no-merge"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["final_metrics_on"] == "validation"
    assert s["final_accuracy"] > 0.75, s  # balanced classes: chance is 0.5


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
def test_comparison_table_and_figure(hvd_runs: dict) -> None:
    from benchmarks.common.plots import sweep_figure
    from benchmarks.common.runs import format_breakdown, side_by_side
    from benchmarks.common.sweep import comparison_rows, format_comparison

    points = [Point(2, mode) for mode in hvd_runs]
    rows = comparison_rows(points, [hvd_runs[p.shuffle] for p in points])
    assert [r["point"] for r in rows] == ["n2-local", "n2-global"]
    assert all(r["read_bandwidth_bytes_per_s"] > 0 and r["read_layer"] == "posix" for r in rows)
    text = format_comparison(rows)
    assert text.splitlines()[1].startswith("n2-local") and len(text.splitlines()) == 3
    tables = [format_breakdown(hvd_runs[p.shuffle], title=p.shuffle) for p in points]
    both = side_by_side(tables).splitlines()
    assert len(both) == max(len(t.splitlines()) for t in tables) and both[0].split() == ["local", "global"]
    fig = sweep_figure(rows, {p.name: hvd_runs[p.shuffle]["analysis"].breakdown for p in points})
    axes = fig.get_axes()
    assert len(axes) == 4 and axes[-2].get_xlabel() == "ranks"
    bw = {line.get_label() for line in axes[-2].get_lines()}
    assert bw == {f"{m}, {e}{ideal}" for m in ("local", "global") for e in ("epoch 0", "later epochs")
                  for ideal in ("", ": ideal linear")}
    share = {line.get_label(): line for line in axes[-1].get_lines()}
    assert set(share) == {"local shuffle", "global shuffle"} and list(share["local shuffle"].get_xdata()) == [2]
    assert all(r["epoch0_read_bw_MB_per_s"] > 0 and r["later_read_bw_MB_per_s"] > 0 for r in rows)
    assert all(0 < r["study_read_pct"] < 100 for r in rows)


@pytest.mark.slow
def test_no_io_mode_touches_no_data_file(smoke_data: Path, tmp_path: Path) -> None:
    """``--mode no-io``: random arrays of the files' shapes (from generator.json), read phases still timed, not one
    POSIX call on a data file; the breakdown still sums to 100 %."""
    from trace_merge.run import Run

    run_dir = tmp_path / "run"
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "timelogger"), "run", "-o", str(run_dir), "--posix", "--posix-filter",
           str(smoke_data.resolve()), "--", sys.executable, "-m", "benchmarks.hepcnn", "train", "--data",
           str(smoke_data), "--smoke", "--dist", "none", "--mode", "no-io", "--no-merge"]
    proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    frame = Run.open(run_dir).frame
    files = frame[frame["layer"] == "posix"]["file"].astype(str)
    assert not files.str.endswith(".h5").any()
    reads = frame[(frame["layer"] == "app") & (frame["name"] == "HDF5 File Read")]
    assert len(reads) > 0 and reads["bytes"].isna().all()  # timed, but nothing was read
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "no-io" and np.isfinite(summary["final_loss"])
    bd = Run.open(run_dir).breakdown()
    assert np.allclose(bd[[c for c in bd.columns if c.endswith("_pct")]].sum(axis=1), 100.0, atol=1e-6)


def test_partitioned_merge_equals_the_in_memory_one_with_every_layer(hvd_runs: dict, tmp_path: Path) -> None:
    """App, TF profiler, Horovod timeline and POSIX layers of a real 2-rank run: the partitioned merge (local pool)
    gives the in-memory merge's summary, residual, warnings and frame."""
    from tests.helpers.compare import assert_same_report, assert_same_summary
    from tests.helpers.runs import sources_only
    from trace_merge.run import Run

    run_dir = sources_only(hvd_runs["global"]["run"].path, tmp_path / "run")
    memory = Run.open(run_dir, partitioned=False)
    assert {"app", "framework", "comm", "posix"} <= set(memory.frame["layer"].astype(str))
    parted = Run.open(run_dir, partitioned=True, workers=2)
    assert_same_summary(memory, parted)
    assert_same_report(memory, parted)
    assert parted.residual.checked == 4 and parted.residual.outside == 0
    cols = [c for c in memory.frame.columns if c not in ("args", "host")]
    as_text = {c: object for c in ("layer", "cat", "name", "file")}
    pd.testing.assert_frame_equal(memory.frame[cols].astype(as_text), parted.frame[cols].astype(as_text))
