"""The four ablation modes both benchmarks run in (``--mode``), after the original study's ablations.

* ``full``: read the files, train.
* ``io-only``: read the files, do not train (the original HEP-CNN's ``--disable_training``): what the input
  pipeline alone costs.
* ``no-io``: no file access at all -- every read is replaced by random tensors of the same shape, everything else
  (decoding, normalisation, worker IPC, training) unchanged (the original's ``--dummy_data``). Whatever the read
  phases still take is not the file system.
* ``metadata-only``: open and inspect every file (HDF5 superblock, object headers, dataset shapes) but read no
  data, then continue with random tensors as ``no-io``: the cost of opening files.
"""
from __future__ import annotations

RUN_MODES = ("full", "io-only", "no-io", "metadata-only")


def trains(mode: str) -> bool:
    """Whether the mode runs the training step."""
    return mode != "io-only"


def reads_data(mode: str) -> bool:
    """Whether the mode reads the data bytes of the files."""
    return mode in ("full", "io-only")


def opens_files(mode: str) -> bool:
    """Whether the mode touches the data files at all during training."""
    return mode != "no-io"
