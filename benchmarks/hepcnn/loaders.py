"""The two input pipelines: the original whole-file loader and a tf.data pipeline.

Both read whole files with h5py inside ``Load File (io) ⊃ HDF5 File Read (io)`` intervals (bytes = what h5py
returned, file = path), transpose NCHW -> NHWC and permute the samples of a file; both deliver exactly ``steps`` full
batches per epoch so that every rank steps the same number of times.
"""
from __future__ import annotations

import os
import threading
import zlib
from typing import Any, Iterator, Mapping, Sequence

import h5py
import numpy as np

from benchmarks.common.modes import RUN_MODES, reads_data
from benchmarks.common.shuffle import sample_order

LOADERS = ("whole-file", "tfdata")
Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


READ_METHODS = ("h5py", "direct")


class FileReader:
    """Reads one whole HEP-CNN file into NHWC arrays, recording the read in the TimeLogger ``tl``.

    ``method="h5py"`` reads ``data`` with h5py (the original loader). ``method="direct"`` uses the dataset
    layout found when the files were checked (``layout``: path -> :class:`~benchmarks.hepcnn.data.FileInfo`) and
    reads ``data``, ``label`` and ``normweight`` with plain reads at their offsets, without opening the file
    through HDF5 again; files without a known layout are opened with h5py for the offset only. On a warm page cache
    HDF5's open and its buffered read path cost about half the bandwidth of a raw read for files of a few MiB
    (see ``benchmarks/perf/reader_efficiency.py``).

    ``mode`` (:mod:`benchmarks.common.modes`) ``no-io`` returns random arrays of the file's shape (from
    ``layout``) without touching the file; ``metadata-only`` also opens it with h5py and inspects its datasets.
    Neither records bytes: nothing was read.
    """

    def __init__(self, tl: Any, seed: int, rank: int, method: str = "h5py",
                 layout: "Mapping[str, Any] | None" = None, mode: str = "full") -> None:
        if method not in READ_METHODS:
            raise ValueError(f"unknown read method {method!r}; expected one of {READ_METHODS}")
        if mode not in RUN_MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {RUN_MODES}")
        self.mode = mode
        self.tl = tl
        self.seed = seed
        self.rank = rank
        self.method = method
        self.layout = dict(layout or {})
        # One read buffer per thread, re-used: the NCHW data is copied out (transposed) before the next read, and
        # a fresh 10-400 MiB array per file would cost a page fault per 4 KiB inside the read interval.
        self._buffers = threading.local()

    def _buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        buf = getattr(self._buffers, "array", None)
        if buf is None or buf.shape != shape:
            buf = self._buffers.array = np.empty(shape, dtype=np.float32)
        return buf

    def read(self, path: str, epoch: int | None, position: int) -> Batch:
        """Return ``(x NHWC float32, label int32, normweight float32)``, the samples permuted unless ``epoch`` is
        None (evaluation)."""
        with self.tl.phase("Load File", cat="io") as load:
            load.update(file=path)
            with self.tl.phase("HDF5 File Read", cat="io") as read:
                read.update(file=path)
                info = self.layout.get(path) if self.method == "direct" else None
                if not reads_data(self.mode):
                    data, label, weight = self._fabricate(path)
                elif info is not None and info.extents:
                    data, label, weight = self._read_known(path, info)
                else:
                    data, label, weight = self._read_hdf5(path)
                if reads_data(self.mode):
                    read.update(bytes=int(data.nbytes + label.nbytes + weight.nbytes))
            if epoch is None:
                return np.ascontiguousarray(data.transpose(0, 2, 3, 1)), label, weight
            order = sample_order(len(label), self.seed, epoch, self.rank, position)
            x = np.ascontiguousarray(data[order].transpose(0, 2, 3, 1))
        return x, label[order], weight[order]

    def _fabricate(self, path: str) -> Batch:
        """Random arrays of the file's shape; ``metadata-only`` first opens the file and inspects its datasets."""
        info = self.layout[path]
        shape = (info.samples, 3, info.image_size, info.image_size)
        if self.mode == "metadata-only":
            with h5py.File(path, "r") as f:
                found = f["data"].shape, f["label"].shape, f["normweight"].shape
            if found[0] != shape:
                raise OSError(f"{path}: 'data' has shape {found[0]}, expected {shape}")
        rng = np.random.default_rng([self.seed, self.rank, zlib.crc32(path.encode())])  # differs per file
        data = rng.random(dtype=np.float32, out=self._buffer(shape))
        label = rng.integers(0, 2, size=info.samples, dtype=np.int32)
        return data, label, np.ones(info.samples, dtype=np.float32)

    def _read_known(self, path: str, info: Any) -> Batch:
        """All three datasets by plain reads at the offsets recorded when the file was checked."""
        s = info.image_size
        data = self._buffer((info.samples, 3, s, s))
        small = {}
        with open(path, "rb", buffering=0) as f:
            _read_at(f, path, info.data_offset, data)
            for name, offset, nbytes, dtype in info.extents:
                small[name] = np.frombuffer(os.pread(f.fileno(), nbytes, offset), dtype=dtype)
        return (data, small["label"].astype(np.int32, copy=False),
                small["normweight"].astype(np.float32, copy=False))

    def _read_hdf5(self, path: str) -> Batch:
        """``data`` through h5py (or, for ``direct``, one plain read at the offset HDF5 reports)."""
        with h5py.File(path, "r") as f:
            dset = f["data"]
            data = self._buffer(dset.shape)
            offset = dset.id.get_offset() if self.method == "direct" else None
            if offset is None:
                dset.read_direct(data)
            label = f["label"][...].astype(np.int32, copy=False)
            weight = f["normweight"][...].astype(np.float32, copy=False)
        if offset is not None:
            with open(path, "rb", buffering=0) as raw:
                _read_at(raw, path, offset, data)
        return data, label, weight


def _read_at(f: Any, path: str, offset: int, out: np.ndarray) -> None:
    """Fill ``out`` from the open unbuffered file ``f`` at ``offset`` (a contiguous, uncompressed dataset)."""
    f.seek(offset)
    got = f.readinto(out)  # one read(2) for a regular file
    if got != out.nbytes:  # short read: finish it, or the file is truncated
        view = memoryview(out).cast("B")
        while got < out.nbytes:
            n = f.readinto(view[got:])
            if not n:
                raise OSError(f"{path}: file ends {out.nbytes - got} bytes before the end of 'data'")
            got += n


class WholeFileLoader:
    """The original loader: read a file, yield its (permuted) samples as batches, carry the remainder over."""

    def __init__(self, reader: FileReader, batch: int) -> None:
        self.reader = reader
        self.batch = batch

    def epoch(self, files: Sequence[str], epoch: int, steps: int) -> Iterator[Batch]:
        """Exactly ``steps`` batches from ``files`` (read lazily, so reads happen inside the caller's wait)."""
        if steps <= 0:
            return
        pending: list[Batch] = []
        have = 0
        made = 0
        for position, path in enumerate(files):
            part = self.reader.read(path, epoch, position)
            pending.append(part)
            have += len(part[1])
            while have >= self.batch:
                joined = tuple(np.concatenate(cols) for cols in zip(*pending)) if len(pending) > 1 else pending[0]
                yield tuple(col[:self.batch] for col in joined)
                made += 1
                if made == steps:
                    return
                rest = tuple(col[self.batch:] for col in joined)
                pending, have = [rest], len(rest[1])


class TFDataLoader:
    """tf.data: interleave over files with parallel reads through ``tf.numpy_function``, batch, prefetch (AUTOTUNE).

    Reads run on tf.data's threads; their intervals carry those threads' ids, so overlap with compute is visible.
    ``threads`` files are read at once (interleave's cycle length and parallel calls: the loader-threads knob).
    """

    def __init__(self, reader: FileReader, batch: int, image_size: int, threads: int = 2) -> None:
        self.reader = reader
        self.batch = batch
        self.image_size = image_size
        self.threads = threads

    def epoch(self, files: Sequence[str], epoch: int, steps: int) -> Any:
        """A ``tf.data.Dataset`` of exactly ``steps`` batches ``(x, label, weight)``."""
        import tensorflow as tf

        s = self.image_size

        def read(path: Any, position: Any) -> Batch:
            name = path.decode() if isinstance(path, bytes) else str(path)
            return self.reader.read(name, epoch, int(position))

        def one_file(path: Any, position: Any) -> Any:
            x, y, w = tf.numpy_function(read, [path, position], [tf.float32, tf.int32, tf.float32],
                                        stateful=False)
            x.set_shape([None, s, s, 3])
            y.set_shape([None])
            w.set_shape([None])
            return tf.data.Dataset.from_tensor_slices((x, y, w))

        names = tf.data.Dataset.from_tensor_slices((list(files), np.arange(len(files), dtype=np.int64)))
        ds = names.interleave(one_file, cycle_length=self.threads, block_length=self.batch,
                              num_parallel_calls=self.threads, deterministic=True)
        return ds.batch(self.batch, drop_remainder=True).take(steps).prefetch(tf.data.AUTOTUNE)


def make_loader(kind: str, reader: FileReader, batch: int, image_size: int,
                threads: int = 2) -> WholeFileLoader | TFDataLoader:
    if kind == "whole-file":
        return WholeFileLoader(reader, batch)
    if kind == "tfdata":
        return TFDataLoader(reader, batch, image_size, threads)
    raise ValueError(f"unknown --loader {kind!r}; expected one of {LOADERS}")
