"""Climate segmentation data generator, its shared output handling and the bad-input checks (no TensorFlow; seconds)."""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from benchmarks.climate.data import (
    CHANNEL_NAMES,
    CLASS_FREQUENCIES,
    CLASS_NAMES,
    DEMO_DATA,
    SMOKE_DATA,
    GenSpec,
    check_dataset,
    check_file,
    file_name,
    generate,
    list_files,
    make_sample,
    read_spec,
    shape_without_reading,
)
from trace_merge.errors import OutputExistsError, TraceInputError

SPEC = GenSpec(files=4, height=64, width=96, seed=3)
DATA_BYTES = 16 * 64 * 96 * 4


def _digest(directory: Path) -> dict[str, str]:
    out = {}
    for path in list_files(directory):
        with h5py.File(path, "r") as f:
            g = f["climate"]
            out[path.name] = hashlib.sha256(b"".join(g[k][...].tobytes() for k in sorted(g))).hexdigest()
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("climate") / "data", SPEC, show_progress=False)


@pytest.fixture(scope="module")
def larger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 files of 192 x 288: big enough for cyclone pixels and for class frequencies to mean something."""
    return generate(tmp_path_factory.mktemp("climate") / "larger", GenSpec(files=8, height=192, width=288, seed=1),
                    show_progress=False)


def _arrays(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for path in list_files(directory):
        with h5py.File(path, "r") as f:
            xs.append(f["climate/data"][...])
            ys.append(f["climate/labels"][...])
    return np.stack(xs), np.stack(ys)


def _copy(dataset: Path, to: Path) -> Path:
    to.mkdir()
    for path in list_files(dataset):
        shutil.copyfile(path, to / path.name)
    return to


# ---------------------------------------------------------------------------------------------- layout


def test_file_names_and_order(tmp_path: Path) -> None:
    assert file_name(0) == "data-2006-01-01-00-0.h5"
    assert file_name(9) == "data-2006-01-02-03-9.h5"  # 27 h later
    assert file_name(2920) == "data-2007-01-01-00-2920.h5"  # one year of 3-hourly steps
    for k in (10, 2, 0, 11, 1):
        (tmp_path / file_name(k)).touch()
    for other in ("data-2006-01-01-00-3.h5.part", "generator.json", "data-x.h5", "hep_train_chunk0.h5"):
        (tmp_path / other).touch()
    assert [p.name for p in list_files(tmp_path)] == [file_name(k) for k in (0, 1, 2, 10, 11)]  # by k, not by name


def test_generator_layout_and_dtypes(dataset: Path) -> None:
    assert [p.name for p in list_files(dataset)] == [file_name(k) for k in range(4)]
    assert read_spec(dataset) == SPEC
    with h5py.File(dataset / file_name(0), "r") as f:
        assert set(f) == {"climate"} and set(f["climate"]) == {"data", "labels", "stats"}
        data, labels, stats = f["climate/data"], f["climate/labels"], f["climate/stats"]
        assert data.dtype == np.float32 and data.shape == (16, 64, 96)
        assert labels.dtype == np.float32 and labels.shape == (64, 96)
        assert stats.dtype == np.float32 and stats.shape == (16, 4)
        assert np.isfinite(data[...]).all()
        assert set(np.unique(labels[...])) <= {0.0, 1.0, 2.0}
    assert len(CHANNEL_NAMES) == 16 and len(CLASS_NAMES) == len(CLASS_FREQUENCIES) == 3
    assert SMOKE_DATA == GenSpec(files=4, height=64, width=96) and DEMO_DATA == GenSpec(16, 192, 288)


def test_data_is_contiguous_and_uncompressed(dataset: Path) -> None:
    for path in list_files(dataset):
        with h5py.File(path, "r") as f:
            for name in ("data", "labels", "stats"):
                d = f["climate"][name]
                assert d.chunks is None and d.compression is None and d.id.get_offset() is not None
    info = check_dataset(dataset)
    assert (info.height, info.width, info.channels) == (64, 96, 16) and len(info.files) == 4
    assert info.paths == [str((dataset / file_name(k)).absolute()) for k in range(4)]
    assert all(os.path.isabs(p) for p in info.paths)
    for fi in info.files:
        assert fi.data_bytes == DATA_BYTES and fi.data_offset > 0
        with open(fi.path, "rb") as fh:  # the offset is where the raw array lies (the direct-read path relies on it)
            fh.seek(fi.data_offset)
            raw = np.frombuffer(fh.read(fi.data_bytes), np.float32).reshape(16, 64, 96)
        with h5py.File(fi.path, "r") as f:
            np.testing.assert_array_equal(raw, f["climate/data"][...])


def test_stats_match_the_data(dataset: Path) -> None:
    for path in list_files(dataset):
        with h5py.File(path, "r") as f:
            data, stats = f["climate/data"][...], f["climate/stats"][...]
        np.testing.assert_array_equal(stats[:, 0], data.min(axis=(1, 2)))
        np.testing.assert_array_equal(stats[:, 1], data.max(axis=(1, 2)))
        np.testing.assert_allclose(stats[:, 2], data.astype(np.float64).mean(axis=(1, 2)), rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(stats[:, 3], data.astype(np.float64).std(axis=(1, 2)), rtol=1e-4, atol=1e-12)
        assert (stats[:, 3] > 0).all()


# ---------------------------------------------------------------------------------------------- generation


def test_generator_is_deterministic_and_reuses(dataset: Path, tmp_path: Path) -> None:
    again = generate(tmp_path / "again", SPEC, show_progress=False)
    assert _digest(again) == _digest(dataset)
    # file k depends only on (seed, k): a longer dataset starts with the same files
    longer = generate(tmp_path / "longer", GenSpec(6, 64, 96, seed=3), show_progress=False)
    assert {n: d for n, d in _digest(longer).items() if n in _digest(dataset)} == _digest(dataset)
    other = generate(tmp_path / "other", GenSpec(4, 64, 96, seed=4), show_progress=False)
    assert set(_digest(other).values()).isdisjoint(_digest(dataset).values())
    mtimes = {p.name: p.stat().st_mtime_ns for p in list_files(again)}
    assert generate(again, SPEC, show_progress=False) == again  # same spec: left as it is
    assert {p.name: p.stat().st_mtime_ns for p in list_files(again)} == mtimes
    with pytest.raises(OutputExistsError):  # a different dataset is never silently replaced
        generate(again, GenSpec(4, 64, 96, seed=5), show_progress=False)
    assert _digest(again) == _digest(dataset)
    generate(again, GenSpec(2, 64, 96, seed=4), force=True, show_progress=False)
    assert read_spec(again) == GenSpec(2, 64, 96, seed=4)
    assert [p.name for p in list_files(again)] == [file_name(0), file_name(1)]  # the old 4 files are gone
    assert _digest(again) == {n: d for n, d in _digest(other).items() if n in (file_name(0), file_name(1))}
    assert not list(again.glob("*.part"))


def test_generator_refuses_foreign_or_incomplete_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("kept")  # not a data file: neither counted nor removed
    generate(out, SPEC, show_progress=False)
    assert (out / "notes.txt").read_text() == "kept"
    (out / "generator.json").unlink()  # data files of unknown origin
    with pytest.raises(OutputExistsError):
        generate(out, SPEC, show_progress=False)
    generate(out, SPEC, force=True, show_progress=False)
    (out / file_name(3)).unlink()  # same spec but incomplete: not re-used silently
    with pytest.raises(OutputExistsError):
        generate(out, SPEC, show_progress=False)
    (tmp_path / "file").write_text("")
    with pytest.raises(TraceInputError, match="not a directory"):
        generate(tmp_path / "file", SPEC, show_progress=False)
    with pytest.raises(TraceInputError, match="--height >= 8"):
        generate(tmp_path / "tiny", GenSpec(1, 4, 96), show_progress=False)


def test_class_frequencies(larger: Path) -> None:
    _, y = _arrays(larger)
    share = np.bincount(y.astype(np.int64).ravel(), minlength=3) / y.size
    assert 0.95 <= share[0] <= 0.995, share
    assert 0 < share[1] < 0.005, share
    assert 0.005 <= share[2] <= 0.04, share
    assert (y == 1).any(axis=(1, 2)).sum() >= 4  # most files have a cyclone at this size, not just one


def test_labels_are_learnable(larger: Path) -> None:
    x, y = _arrays(larger)
    tmq, psl, ubot, vbot = (x[:, CHANNEL_NAMES.index(n)] for n in ("TMQ", "PSL", "UBOT", "VBOT"))
    river, cyclone = y == 2, y == 1
    # water vapour is clearly higher inside atmospheric rivers
    assert tmq[river].mean() > tmq[~river].mean() + 1.5 * tmq[~river].std()
    # sea-level pressure is clearly lower inside cyclones, and the winds are strong there
    assert psl[cyclone].mean() < psl[~cyclone].mean() - 1.5 * psl[~cyclone].std()
    assert np.hypot(ubot, vbot)[cyclone].mean() > 2 * np.hypot(ubot, vbot)[y == 0].mean()


def test_feature_sizes_scale_with_the_image() -> None:
    def river_share(h: int, w: int) -> float:
        return float(np.mean([(make_sample(np.random.default_rng([7, k]), h, w)["labels"] == 2).mean()
                              for k in range(12)]))

    small, big = river_share(64, 96), river_share(256, 384)
    assert abs(small - big) < 0.3 * big, (small, big)


# ---------------------------------------------------------------------------------------------- bad input


def _rewrite(path: Path, **datasets: np.ndarray) -> None:
    path.unlink()
    with h5py.File(path, "w") as f:
        for name, value in datasets.items():
            f.create_dataset(f"climate/{name}", data=value)


def _good(h: int = 64, w: int = 96) -> dict[str, np.ndarray]:
    return {"data": np.zeros((16, h, w), np.float32), "labels": np.zeros((h, w), np.float32),
            "stats": np.zeros((16, 4), np.float32)}


def _raises(data_dir: Path, needle: str, path: Path, **kwargs) -> TraceInputError:
    with pytest.raises(TraceInputError) as err:
        check_dataset(data_dir, **kwargs)
    assert str(path) in str(err.value) and needle in str(err.value), str(err.value)
    return err.value


def test_bad_missing_directory_and_no_files(tmp_path: Path) -> None:
    _raises(tmp_path / "nowhere", "no such data directory", tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "hep_train_chunk0.h5").touch()
    _raises(tmp_path / "empty", "no data files", tmp_path / "empty")


def test_bad_fewer_files_than_ranks(dataset: Path) -> None:
    _raises(dataset, "4 files for 8 ranks; need at least one per rank", dataset, ranks=8)
    assert len(check_dataset(dataset, ranks=4).files) == 4


def test_bad_truncated_file(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / file_name(1)
    os.truncate(bad, bad.stat().st_size // 2)
    _raises(data, "truncated", bad)
    os.truncate(bad, 100)  # not even the superblock's end of file
    _raises(data, "not a readable HDF5 file", bad)


def test_bad_garbage_file(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / file_name(2)
    bad.write_bytes(b"not HDF5 at all " * 1000)
    _raises(data, "not a readable HDF5 file", bad)


@pytest.mark.parametrize("missing", ["data", "labels", "stats"])
def test_bad_missing_dataset(dataset: Path, tmp_path: Path, missing: str) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / file_name(2)
    _rewrite(bad, **{k: v for k, v in _good().items() if k != missing})
    _raises(data, f"no dataset '/climate/{missing}'", bad)


def test_bad_wrong_shape_and_dtype(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / file_name(2)
    _rewrite(bad, **dict(_good(), data=np.zeros((64, 96, 16), np.float32)))  # HWC instead of CHW
    _raises(data, "shape (64, 96, 16)", bad)
    _rewrite(bad, **dict(_good(), data=np.zeros((3, 64, 96), np.float32)))  # too few channels
    _raises(data, "expected (16, H, W)", bad)
    _rewrite(bad, **dict(_good(), data=np.zeros((16, 64, 96), np.float64)))
    _raises(data, "float64", bad)
    _rewrite(bad, **dict(_good(), labels=np.zeros((64, 96), np.int32)))
    _raises(data, "'/climate/labels' has dtype int32", bad)
    _rewrite(bad, **dict(_good(), labels=np.zeros((96, 64), np.float32)))
    _raises(data, "'/climate/labels' has shape (96, 64)", bad)
    _rewrite(bad, **dict(_good(), stats=np.zeros((16, 2), np.float32)))
    _raises(data, "'/climate/stats' has shape (16, 2)", bad)


def test_bad_not_contiguous(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / file_name(0)
    bad.unlink()
    with h5py.File(bad, "w") as f:
        for name, value in _good().items():
            f.create_dataset(f"climate/{name}", data=value, compression="gzip" if name == "data" else None)
    _raises(data, "not contiguous and uncompressed", bad)


def test_bad_image_size_mismatch(dataset: Path, tmp_path: Path) -> None:
    _raises(dataset, "image size 64 x 96 does not match the requested 64 x 128", dataset / file_name(0), width=128)
    _raises(dataset, "does not match the requested 32 x 96", dataset / file_name(0), height=32)
    assert check_dataset(dataset, height=64, width=96).height == 64
    data = _copy(dataset, tmp_path / "d")
    bad = data / file_name(3)
    _rewrite(bad, **_good(32, 48))
    _raises(data, f"image size 32 x 48 differs from 64 x 96 in {file_name(0)}", bad)


def test_bad_size_mismatch(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path / "d")
    bad = data / file_name(3)
    with h5py.File(bad, "a") as f:  # still a valid file, but not the size the others have
        f["climate/extra"] = np.zeros(1000, np.float32)
    check_file(bad)
    _raises(data, "bytes differs from", bad)


# ---------------------------------------------------------------------------------------------- no-io shape


def test_shape_without_reading_opens_no_data_file(dataset: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = _copy(dataset, tmp_path / "d")
    shutil.copyfile(dataset / "generator.json", data / "generator.json")
    for path in list_files(data):
        path.write_bytes(b"garbage")
        if sys.platform != "win32":
            path.chmod(0)

    def no_open(*args, **kwargs):
        raise AssertionError("opened an HDF5 file")

    monkeypatch.setattr(h5py, "File", no_open)
    found = shape_without_reading(data)
    assert found is not None
    paths, height, width = found
    assert (height, width) == (64, 96)
    assert paths == [(data / file_name(k)).absolute() for k in range(4)] and all(p.is_absolute() for p in paths)
    (data / "generator.json").unlink()
    assert shape_without_reading(data) is None
    with pytest.raises(TraceInputError, match="no such data directory"):
        shape_without_reading(tmp_path / "nowhere")


def test_unreadable_spec_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "generator.json").write_text('{"files": 4, "samples_per_file": 8}')  # a HEP-CNN spec
    with pytest.raises(TraceInputError, match="unreadable generator spec") as err:
        shape_without_reading(tmp_path)
    assert str(tmp_path / "generator.json") in str(err.value)


def test_no_tensorflow_import() -> None:
    import subprocess

    code = "import sys, benchmarks.climate.data, benchmarks.common.datasets; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1],
                   env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
