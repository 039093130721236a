"""HEP-CNN data: a synthetic generator in the original file layout, and the checks run before training.

Layout of one file ``hep_{train,validation}_chunk<k>.h5`` (as in the original benchmark's data):

=============  ================================  ==============================================
dataset        dtype / shape                     meaning
=============  ================================  ==============================================
``data``       float32 (N, 3, S, S), contiguous  calorimeter-like images, NCHW, uncompressed
``label``      int32 (N,)                        1 = signal (new physics), 0 = background (QCD)
``normweight`` float32 (N,)                      training weight, mean 1 per file
``weight``     float32 (N,)                      "physics" event weight
``psr``        float32 (N,)                      an unused per-event quantity, kept for the layout
=============  ================================  ==============================================

Nothing here imports TensorFlow, so bad input is reported within a second of starting.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common import datasets
from benchmarks.common.datasets import atomic_path
from benchmarks.common.errors import TraceInputError

log = logging.getLogger(__name__)

SPLITS = ("train", "validation")
_NAME = re.compile(r"^hep_(train|validation|test)_chunk(\d+)\.h5$")
#: datasets every file must have; ``data`` is checked for dtype/shape separately
REQUIRED = ("data", "label", "normweight")


def file_name(split: str, k: int) -> str:
    """``hep_<split>_chunk<k>.h5``."""
    return f"hep_{split}_chunk{k}.h5"


# --------------------------------------------------------------------------------------------- generation


def make_events(rng: np.random.Generator, n: int, size: int) -> dict[str, np.ndarray]:
    """Synthesise ``n`` events of ``size`` x ``size`` pixels.

    Every image is noise plus a few energy deposits (2-D Gaussians). Background events have 1-3 wide deposits
    anywhere, mostly in the hadronic channel; signal events have 3-6 narrow, central deposits, mostly in the
    electromagnetic and track channels. A small CNN separates them within a few epochs.

    Returns
    -------
    dict
        ``data`` float32 (n, 3, size, size), ``label`` int32 (n,), ``normweight``, ``weight``, ``psr`` float32 (n,).
    """
    label = rng.integers(0, 2, size=n).astype(np.int32)
    data = rng.exponential(0.05, size=(n, 3, size, size)).astype(np.float32)
    axis = np.arange(size, dtype=np.float32)
    for i in range(n):
        signal = bool(label[i])
        n_dep = rng.integers(3, 7) if signal else rng.integers(1, 4)
        if signal:
            centre = np.clip(rng.normal(0.5, 0.12, size=(n_dep, 2)), 0.05, 0.95) * size
            sigma = rng.uniform(0.015, 0.035, size=n_dep) * size + 0.5
            channel_share = np.array([0.5, 0.15, 0.35], dtype=np.float32)
        else:
            centre = rng.uniform(0.05, 0.95, size=(n_dep, 2)) * size
            sigma = rng.uniform(0.06, 0.12, size=n_dep) * size + 0.5
            channel_share = np.array([0.2, 0.7, 0.1], dtype=np.float32)
        energy = rng.uniform(0.6, 1.4, size=n_dep)
        for c, s, e in zip(centre, sigma, energy):
            gy = np.exp(-0.5 * ((axis - c[0]) / s) ** 2)
            gx = np.exp(-0.5 * ((axis - c[1]) / s) ** 2)
            blob = (e * np.outer(gy, gx)).astype(np.float32)
            data[i] += channel_share[:, None, None] * blob[None]
    weight = rng.lognormal(0.0, 0.5, size=n).astype(np.float32)
    normweight = (weight / weight.mean()).astype(np.float32)
    psr = rng.uniform(0.0, 1.0, size=n).astype(np.float32)
    return {"data": data, "label": label, "normweight": normweight, "weight": weight, "psr": psr}


def write_file(path: Path, events: dict[str, np.ndarray]) -> None:
    """Write one file; ``data`` contiguous and uncompressed like the original (h5py's default layout)."""
    import h5py

    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for name, value in events.items():
            f.create_dataset(name, data=value)


@dataclass(frozen=True)
class GenSpec:
    """What a generated dataset is; stored in ``generator.json`` beside the files to recognise it on re-runs."""

    files: int
    samples_per_file: int
    image_size: int = 224
    seed: int = 0
    validation_files: int = 0

    def as_dict(self) -> dict:
        return {"files": self.files, "samples_per_file": self.samples_per_file, "image_size": self.image_size,
                "seed": self.seed, "validation_files": self.validation_files}


def read_spec(out: Path) -> GenSpec | None:
    """The spec of a dataset this generator wrote in ``out``, None if there is none."""
    return datasets.read_spec(out, GenSpec)


def generate(out: "str | os.PathLike[str]", spec: GenSpec, force: bool = False, show_progress: bool = True) -> Path:
    """Write a dataset to ``out``; deterministic for a given ``spec`` (file k depends only on seed, split, k).

    An existing directory holding the same spec is left as it is; one with other ``hep_*.h5`` files is an error
    unless ``force``.
    """
    from benchmarks.common.progress import progress

    if spec.files < 1 or spec.samples_per_file < 1 or spec.image_size < 4:
        raise TraceInputError(out, "need --files >= 1, --samples-per-file >= 1 and --image-size >= 4")
    out = Path(out)
    jobs = [("train", k) for k in range(spec.files)] + [("validation", k) for k in range(spec.validation_files)]
    if datasets.prepare_output(out, spec, "hep_*.h5", [file_name(split, k) for split, k in jobs], force):
        return out
    for split, k in progress(jobs, total=len(jobs), desc=f"generating {out}") if show_progress else jobs:
        rng = np.random.default_rng([spec.seed, SPLITS.index(split), k])
        write_file(out / file_name(split, k), make_events(rng, spec.samples_per_file, spec.image_size))
    datasets.write_spec(out, spec)
    return out


# --------------------------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class FileInfo:
    """One checked file: where its ``data`` lies (for byte accounting) and how many samples it holds.

    ``extents`` maps ``label``/``normweight`` to ``(offset, nbytes, dtype)`` when they are stored contiguously
    (absent when HDF5 keeps them elsewhere, e.g. compact in the object header): with them the ``direct`` read
    method reads a whole file without opening it through HDF5 again.
    """

    path: str
    samples: int
    image_size: int
    data_offset: int
    data_bytes: int
    extents: tuple[tuple[str, int, int, str], ...] = ()


@dataclass(frozen=True)
class DatasetInfo:
    """The checked training (and validation) files, sorted by chunk number."""

    train: tuple[FileInfo, ...]
    validation: tuple[FileInfo, ...]
    image_size: int

    @property
    def train_files(self) -> list[str]:
        return [f.path for f in self.train]

    @property
    def samples_per_file(self) -> dict[str, int]:
        return {f.path: f.samples for f in self.train + self.validation}

    @property
    def by_path(self) -> dict[str, FileInfo]:
        return {f.path: f for f in self.train + self.validation}


def list_files(data_dir: Path, split: str) -> list[Path]:
    """``hep_<split>_chunk<k>.h5`` in ``data_dir``, sorted by k."""
    found = []
    for path in data_dir.iterdir():
        m = _NAME.match(path.name)
        if m and m.group(1) == split:
            found.append((int(m.group(2)), path))
    return [p for _, p in sorted(found)]


def check_file(path: Path, image_size: int | None = None) -> FileInfo:
    """Check one file's layout; raise :class:`TraceInputError` naming the file and what is wrong."""
    with datasets.open_hdf5(path) as f:
        for name in REQUIRED:
            if name not in f:
                raise TraceInputError(path, f"no dataset '{name}'")
        data = f["data"]
        if data.dtype != np.float32:
            raise TraceInputError(path, f"'data' has dtype {data.dtype}, expected float32")
        shape = data.shape
        if len(shape) != 4 or shape[1] != 3 or shape[2] != shape[3] or shape[0] < 1:
            raise TraceInputError(path, f"'data' has shape {shape}, expected (N, 3, S, S)")
        if image_size is not None and shape[2] != image_size:
            raise TraceInputError(path, f"image size {shape[2]} does not match --image-size {image_size}")
        for name in REQUIRED[1:]:
            if f[name].shape != (shape[0],):
                raise TraceInputError(path, f"'{name}' has shape {f[name].shape}, expected ({shape[0]},)")
        offset, nbytes = datasets.contiguous_extent(path, data, "data")
        extents = []
        for name in REQUIRED[1:]:
            d = f[name]
            where = d.id.get_offset()
            if where is not None and d.chunks is None and d.compression is None and d.dtype.byteorder in "=<|":
                extents.append((name, int(where), int(d.id.get_storage_size()), d.dtype.str))
    datasets.check_not_truncated(path, [(offset + nbytes, "data")] + [(o + n, name) for name, o, n, _ in extents])
    return FileInfo(str(path), int(shape[0]), int(shape[2]), offset, nbytes,
                    tuple(extents) if len(extents) == len(REQUIRED) - 1 else ())


def check_dataset(data_dir: "str | os.PathLike[str]", ranks: int = 1, image_size: int | None = None) -> DatasetInfo:
    """Check a data directory before training.

    Raises
    ------
    TraceInputError
        missing directory, no training files, a file with wrong layout, dtype or shape, a truncated file, image
        sizes that differ between files or from ``image_size``, or fewer training files than ranks.
    """
    data_dir = datasets.data_directory(data_dir)
    train = _train_files(data_dir, ranks)
    infos = []
    for path in train + list_files(data_dir, "validation"):
        info = check_file(path, image_size)
        if infos and info.image_size != infos[0].image_size:
            raise TraceInputError(path, f"image size {info.image_size} differs from {infos[0].image_size} in "
                                        f"{Path(infos[0].path).name}")
        infos.append(info)
    image_size = infos[0].image_size
    return DatasetInfo(tuple(infos[:len(train)]), tuple(infos[len(train):]), int(image_size))


def _train_files(data_dir: Path, ranks: int) -> list[Path]:
    """The training files of ``data_dir``, at least one per rank."""
    train = list_files(data_dir, "train")
    if not train:
        raise TraceInputError(data_dir, "no training files (hep_train_chunk<k>.h5)")
    datasets.need_one_per_rank(data_dir, len(train), ranks, "training files")
    return train


def dataset_without_reading(data_dir: "str | os.PathLike[str]", ranks: int = 1) -> DatasetInfo | None:
    """The training files with their shapes from ``generator.json``, opening no ``.h5`` file (``--mode no-io``).

    None when ``data_dir`` has no ``generator.json`` (then only :func:`check_dataset` can tell the shapes).
    Validation files are left out: the no-io mode does not validate.

    Raises
    ------
    TraceInputError
        missing directory, unreadable ``generator.json``, no training files, fewer training files than ranks.
    """
    data_dir = datasets.data_directory(data_dir)
    spec = read_spec(data_dir)
    if spec is None:
        return None
    train = _train_files(data_dir, ranks)
    nbytes = spec.samples_per_file * 3 * spec.image_size ** 2 * 4
    return DatasetInfo(tuple(FileInfo(str(p), spec.samples_per_file, spec.image_size, 0, nbytes) for p in train), (),
                       spec.image_size)
