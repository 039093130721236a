"""The climate input pipeline: parallel reads of whole images in worker processes (the original design) or threads.

files -> shard by rank -> shuffle (:mod:`benchmarks.common.shuffle`) -> ``tf.data`` map over ``--readers N``
parallel calls -> prefetch -> batch. Each map call runs ``Parallel Read Images`` (io) in the parent; with
``--read-in processes`` it hands the image to a ``multiprocessing.Pool(N)`` of forked workers and waits, with
``--read-in threads`` it reads in the tf.data thread itself. The read is :func:`read_sample`: ``Time to Read Single
Image`` (io) ⊃ ``Read Image`` (io: the HDF5 read of the used channels, labels and stats) → ``Normalise``
(preprocess: min/max with the file's stats, NCHW -> NHWC) → ``Per-pixel Weights`` (preprocess: class weight of
each pixel's label). Forked workers log into their own TimeLogger files (same rank, own pid), and the DFTracer
preload follows them, so the merge attributes their POSIX reads to the rank.

The pool is forked before TensorFlow and MPI are started: a fork of a process running TF's thread pools or an MPI
library is not safe.
"""
from __future__ import annotations

import multiprocessing
import zlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from benchmarks.common.modes import RUN_MODES, reads_data

READ_IN = ("processes", "threads")
PARENT_PHASE = "Parallel Read Images"
WORKER_PHASE = "Time to Read Single Image"
Sample = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class SampleSpec:
    """What one read returns: ``x`` float32 (H, W, len(channels)), ``labels`` int32 (H, W), ``weights`` float32."""

    height: int
    width: int
    channels: tuple[int, ...]
    class_weights: tuple[float, ...]
    class_frequencies: tuple[float, ...]
    mode: str = "full"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in RUN_MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {RUN_MODES}")


def read_sample(tl: Any, path: str, epoch: int, position: int, spec: SampleSpec) -> Sample:
    """Read, normalise and weight one image, in TimeLogger phases (see the module docstring)."""
    with tl.phase(WORKER_PHASE, cat="io") as whole:
        whole.update(file=path)
        with tl.phase("Read Image", cat="io") as read:
            read.update(file=path)
            if reads_data(spec.mode):
                data, labels, stats = _read_hdf5(path, spec.channels)
                read.update(bytes=int(data.nbytes + labels.nbytes + stats.nbytes))
            else:
                data, labels, stats = _fabricate(path, epoch, position, spec)
        with tl.phase("Normalise", cat="preprocess"):
            lo, hi = stats[:, 0], stats[:, 1]
            scale = 1.0 / np.where(hi > lo, hi - lo, 1.0).astype(np.float32)
            data -= lo[:, None, None]
            data *= scale[:, None, None]
            x = np.ascontiguousarray(data.transpose(1, 2, 0))
        with tl.phase("Per-pixel Weights", cat="preprocess"):
            label_ids = labels.astype(np.int32)
            weights = np.asarray(spec.class_weights, dtype=np.float32)[label_ids]
    return x, label_ids, weights


def _read_hdf5(path: str, channels: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The used channels of ``/climate/data`` (one contiguous slab each), ``labels`` and their rows of ``stats``."""
    import h5py

    with h5py.File(path, "r") as f:
        dset = f["climate/data"]
        data = np.empty((len(channels), *dset.shape[1:]), dtype=np.float32)
        for i, c in enumerate(channels):
            dset.read_direct(data, np.s_[c], np.s_[i])
        labels = f["climate/labels"][...]
        stats = f["climate/stats"][...][list(channels)]
    return data, labels, stats


def _fabricate(path: str, epoch: int, position: int, spec: SampleSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random tensors of the sample's shape (``no-io``); ``metadata-only`` first opens the file and inspects it."""
    c, h, w = len(spec.channels), spec.height, spec.width
    if spec.mode == "metadata-only":
        import h5py

        with h5py.File(path, "r") as f:
            shapes = {name: f[f"climate/{name}"].shape for name in ("data", "labels", "stats")}
        if shapes["data"][1:] != (h, w) or shapes["labels"] != (h, w):
            raise OSError(f"{path}: shapes {shapes} do not match {h}x{w}")
    rng = np.random.default_rng([spec.seed, epoch, position, zlib.crc32(path.encode())])  # differs per file
    data = rng.random((c, h, w), dtype=np.float32)
    u = rng.random((h, w), dtype=np.float32)
    cyclone, river = spec.class_frequencies[1], spec.class_frequencies[2]
    labels = np.where(u < cyclone, 1, np.where(u < cyclone + river, 2, 0)).astype(np.float32)
    stats = np.tile(np.array([0.0, 1.0, 0.5, 0.29], dtype=np.float32), (c, 1))
    return data, labels, stats


# Forked workers find their logger and spec here (set in the parent before the pool forks).
_WORKER: dict[str, Any] = {}


def _worker_read(path: str, epoch: int, position: int) -> Sample:
    tl = _WORKER["tl"]
    tl.set_epoch(epoch)  # the worker's intervals carry the epoch the parent is in
    return read_sample(tl, path, epoch, position, _WORKER["spec"])


class Readers:
    """``n`` parallel readers of images, in forked worker processes or in the calling threads.

    Create before TensorFlow and MPI are imported (processes are forked at once); :meth:`close` before exit.
    """

    def __init__(self, tl: Any, read_in: str, n: int, spec: SampleSpec) -> None:
        if read_in not in READ_IN:
            raise ValueError(f"unknown --read-in {read_in!r}; expected one of {READ_IN}")
        if n < 1:
            raise ValueError(f"need at least 1 reader, got {n}")
        self.tl, self.read_in, self.n, self.spec = tl, read_in, n, spec
        self.pool = None
        if read_in == "processes":
            _WORKER.update(tl=tl, spec=spec)
            self.pool = multiprocessing.get_context("fork").Pool(n)

    def read(self, path: str, epoch: int, position: int) -> Sample:
        """One sample, timed as ``Parallel Read Images`` in the calling (tf.data) thread."""
        with self.tl.phase(PARENT_PHASE, cat="io") as phase:
            phase.update(file=path)
            if self.pool is not None:
                return self.pool.apply(_worker_read, (path, epoch, position))
            return read_sample(self.tl, path, epoch, position, self.spec)

    def close(self) -> None:
        """Let the workers finish and exit (their TimeLogger files are complete afterwards)."""
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool = None


def epoch_dataset(tf: Any, readers: Readers, files: Sequence[str], epoch: int, steps: int, batch: int,
                  prefetch: int) -> Any:
    """A ``tf.data.Dataset`` of exactly ``steps`` batches ``(x, labels, weights)`` from ``files`` in order."""
    spec = readers.spec
    h, w, c = spec.height, spec.width, len(spec.channels)

    def read(path: Any, position: Any) -> Sample:
        name = path.decode() if isinstance(path, bytes) else str(path)
        return readers.read(name, epoch, int(position))

    def one(path: Any, position: Any) -> Any:
        x, y, wt = tf.numpy_function(read, [path, position], [tf.float32, tf.int32, tf.float32], stateful=False)
        x.set_shape([h, w, c])
        y.set_shape([h, w])
        wt.set_shape([h, w])
        return x, y, wt

    names = tf.data.Dataset.from_tensor_slices((list(files), np.arange(len(files), dtype=np.int64)))
    ds = names.map(one, num_parallel_calls=readers.n, deterministic=True).prefetch(prefetch)
    return ds.batch(batch, drop_remainder=True).take(steps)
