"""HEP-CNN data generator, shuffle semantics and bad-input checks (no TensorFlow; seconds)."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from benchmarks.common.shuffle import epoch_files, sample_order, shard, steps_per_epoch
from benchmarks.hepcnn.data import GenSpec, check_dataset, file_name, generate
from trace_merge.errors import OutputExistsError, TraceInputError

REPO = Path(__file__).resolve().parents[1]
SPEC = GenSpec(files=4, samples_per_file=8, image_size=16, seed=3, validation_files=1)


def _digest(directory: Path) -> dict[str, str]:
    out = {}
    for path in sorted(directory.glob("hep_*.h5")):
        with h5py.File(path, "r") as f:
            out[path.name] = hashlib.sha256(b"".join(f[k][...].tobytes() for k in sorted(f))).hexdigest()
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("hep") / "data", SPEC, show_progress=False)


def test_generator_layout_and_dtypes(dataset: Path) -> None:
    names = sorted(p.name for p in dataset.glob("hep_*.h5"))
    assert names == sorted([file_name("train", k) for k in range(4)] + [file_name("validation", 0)])
    with h5py.File(dataset / "hep_train_chunk0.h5", "r") as f:
        data = f["data"]
        assert data.dtype == np.float32 and data.shape == (8, 3, 16, 16)
        assert data.chunks is None and data.compression is None  # contiguous, uncompressed like the original
        assert f["label"].dtype.kind == "i" and f["label"].shape == (8,)
        for name in ("normweight", "weight", "psr"):
            assert f[name].dtype == np.float32 and f[name].shape == (8,)
        assert set(np.unique(f["label"][...])) <= {0, 1}
        assert np.isfinite(data[...]).all() and (data[...] >= 0).all()
    info = check_dataset(dataset)
    assert info.image_size == 16 and len(info.train) == 4 and len(info.validation) == 1
    assert all(fi.data_bytes == 8 * 3 * 16 * 16 * 4 for fi in info.train)


def test_generator_is_deterministic_and_reuses(dataset: Path, tmp_path: Path) -> None:
    again = generate(tmp_path / "again", SPEC, show_progress=False)
    assert _digest(again) == _digest(dataset)
    other = generate(tmp_path / "other", GenSpec(4, 8, 16, seed=4, validation_files=1), show_progress=False)
    assert _digest(other) != _digest(dataset)
    mtime = (again / "hep_train_chunk0.h5").stat().st_mtime_ns
    generate(again, SPEC, show_progress=False)  # same spec: left as it is
    assert (again / "hep_train_chunk0.h5").stat().st_mtime_ns == mtime
    with pytest.raises(OutputExistsError):  # a different dataset is never silently replaced
        generate(again, GenSpec(5, 8, 16, seed=3), show_progress=False)


def test_signal_and_background_differ(dataset: Path) -> None:
    # The content is learnable: signal images concentrate energy in the centre, background spreads it.
    xs, ys = [], []
    for path in sorted(dataset.glob("hep_train_*.h5")):
        with h5py.File(path, "r") as f:
            xs.append(f["data"][...])
            ys.append(f["label"][...])
    x, y = np.concatenate(xs), np.concatenate(ys)
    centre = x[:, :, 5:11, 5:11].sum(axis=(1, 2, 3)) / x.sum(axis=(1, 2, 3))
    assert centre[y == 1].mean() > centre[y == 0].mean() + 0.05


# ---------------------------------------------------------------------------------------------- shuffle

FILES = [f"f{k:02d}" for k in range(10)]


def test_shard_is_contiguous_and_complete() -> None:
    parts = [shard(FILES, r, 3) for r in range(3)]
    assert sum(parts, []) == FILES
    assert sorted(len(p) for p in parts) == [3, 3, 4]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_local_shuffle_keeps_each_rank_on_its_shard(size: int) -> None:
    for rank in range(size):
        sets = [set(epoch_files(FILES, rank, size, e, "local", seed=1)) for e in range(4)]
        assert all(s == set(shard(FILES, rank, size)) for s in sets)
    orders = [epoch_files(FILES, 0, size, e, "local", seed=1) for e in range(4)]
    assert len({tuple(o) for o in orders}) > 1  # the order within the shard changes


def test_global_shuffle_changes_sets_and_covers_dataset() -> None:
    size = 2
    changed = False
    for epoch in range(4):
        parts = [epoch_files(FILES, r, size, epoch, "global", seed=1) for r in range(size)]
        assert sorted(sum(parts, [])) == FILES  # every epoch the ranks together read every file once
        if epoch:
            changed |= set(parts[0]) != set(epoch_files(FILES, 0, size, epoch - 1, "global", seed=1))
    assert changed
    # every rank computes the same permutation: the assignment depends only on (seed + epoch)
    assert epoch_files(FILES, 1, 2, 3, "global", seed=1) == epoch_files(list(FILES), 1, 2, 3, "global", seed=1)
    assert set(epoch_files(FILES, 0, 2, 1, "global", seed=0)) == set(epoch_files(FILES, 0, 2, 0, "global", seed=1))


def test_steps_and_sample_order() -> None:
    counts = {f: 8 for f in FILES}
    assert steps_per_epoch(counts, FILES, 3, 4, "local", 0) == 6  # smallest shard: 3 files x 8 / 4
    perm = sample_order(8, 0, 1, 0, 2)
    assert sorted(perm) == list(range(8))
    assert not np.array_equal(perm, sample_order(8, 0, 2, 0, 2))
    with pytest.raises(ValueError):
        epoch_files(FILES, 0, 2, 0, "sideways")


# ---------------------------------------------------------------------------------------------- bad input

def _train(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "benchmarks.hepcnn", "train", *args], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=120)


def _assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "tensorflow/core" not in proc.stderr  # no TF log lines either
    for needle in needles:
        assert needle in lines[0], lines[0]


def _copy(dataset: Path, to: Path) -> Path:
    to.mkdir()
    for path in dataset.glob("hep_*.h5"):
        (to / path.name).write_bytes(path.read_bytes())
    return to


def test_bad_missing_directory(tmp_path: Path) -> None:
    proc = _train(["--data", str(tmp_path / "nowhere"), "--run-dir", str(tmp_path / "run")])
    _assert_one_line_error(proc, str(tmp_path / "nowhere"), "no such data directory")


def test_bad_wrong_shape_and_dtype(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / "hep_train_chunk2.h5"
    bad.unlink()
    with h5py.File(bad, "w") as f:
        f["data"] = np.zeros((8, 16, 16, 3), np.float32)  # NHWC instead of NCHW
        f["label"] = np.zeros(8, np.int32)
        f["normweight"] = np.ones(8, np.float32)
    proc = _train(["--data", str(data), "--run-dir", str(tmp_path / "run")])
    _assert_one_line_error(proc, str(bad), "shape (8, 16, 16, 3)")
    bad.unlink()
    with h5py.File(bad, "w") as f:
        f["data"] = np.zeros((8, 3, 16, 16), np.float64)
        f["label"] = np.zeros(8, np.int32)
        f["normweight"] = np.ones(8, np.float32)
    proc = _train(["--data", str(data), "--run-dir", str(tmp_path / "run")])
    _assert_one_line_error(proc, str(bad), "float64")


def test_bad_truncated_file(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / "hep_train_chunk1.h5"
    with open(bad, "r+b") as f:
        f.truncate(bad.stat().st_size // 2)
    proc = _train(["--data", str(data), "--run-dir", str(tmp_path / "run")])
    _assert_one_line_error(proc, str(bad), "truncated")


def test_bad_fewer_files_than_ranks(dataset: Path, tmp_path: Path) -> None:
    # The rank count comes from the launcher's environment, before MPI or TF are imported.
    proc = _train(["--data", str(dataset), "--run-dir", str(tmp_path / "run")], env={"PMI_SIZE": "8",
                                                                                    "PMI_RANK": "0"})
    _assert_one_line_error(proc, str(dataset), "4 training files for 8 ranks")


def test_bad_image_size_mismatch(dataset: Path, tmp_path: Path) -> None:
    proc = _train(["--data", str(dataset), "--run-dir", str(tmp_path / "run"), "--image-size", "32"])
    _assert_one_line_error(proc, "hep_train_chunk0.h5", "image size 16 does not match --image-size 32")


def test_check_dataset_raises_trace_input_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceInputError, match="no training files"):
        check_dataset(tmp_path / "empty")


def test_bad_image_too_small_for_network(tmp_path: Path) -> None:
    data = generate(tmp_path / "tiny", GenSpec(files=2, samples_per_file=4, image_size=8), show_progress=False)
    proc = _train(["--data", str(data), "--run-dir", str(tmp_path / "run")])
    _assert_one_line_error(proc, "hep_train_chunk0.h5", "below the network's minimum of 16")


@pytest.mark.skipif(importlib.util.find_spec("horovod") is not None, reason="needs an environment without Horovod")
def test_bad_dist_horovod_without_horovod(dataset: Path, tmp_path: Path) -> None:
    proc = _train(["--data", str(dataset), "--run-dir", str(tmp_path / "run"), "--dist", "horovod"])
    _assert_one_line_error(proc, "--dist horovod needs Horovod")


def test_read_methods_return_the_same_samples(dataset: Path) -> None:
    from benchmarks.hepcnn.loaders import FileReader
    from timelogger import TimeLogger

    info = check_dataset(dataset)
    assert all(f.extents for f in info.train)  # the generator's small datasets are contiguous too
    off = TimeLogger(None)
    plain = FileReader(off, seed=1, rank=0, method="h5py")
    known = FileReader(off, seed=1, rank=0, method="direct", layout=info.by_path)
    probe = FileReader(off, seed=1, rank=0, method="direct")  # no layout: HDF5 for the offset only
    for position, path in enumerate(info.train_files):
        with h5py.File(path, "r") as f:
            want_x = f["data"][...].transpose(0, 2, 3, 1)
            want_y = f["label"][...]
        for epoch in (None, 0):
            outs = [r.read(path, epoch, position) for r in (plain, known, probe)]
            for x, y, w in outs[1:]:
                for a, b in zip((x, y, w), outs[0]):
                    np.testing.assert_array_equal(a, b)
        x, y, _ = outs[0]
        order = sample_order(len(want_y), 1, 0, 0, position)
        np.testing.assert_array_equal(x, want_x[order])
        np.testing.assert_array_equal(y, want_y[order])
