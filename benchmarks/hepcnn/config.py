"""Benchmark configuration: one small dataclass, its command-line flags and the presets."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from benchmarks.common.config import RunConfig, add_common_flags
from benchmarks.common.config import config_from_args as common_config_from_args
from benchmarks.hepcnn.data import GenSpec
from benchmarks.hepcnn.loaders import LOADERS, READ_METHODS


@dataclass(frozen=True)
class TrainConfig(RunConfig):
    """One training run. Defaults are the original ``cori_knl_224_adam`` configuration (image size comes from the
    files when not given); the fields every benchmark has are :class:`~benchmarks.common.config.RunConfig`'s."""

    batch: int = 128
    checkpoint_every: int = 1
    width: int = 128
    dropout: float = 0.5
    image_size: int | None = None
    loader: str = "whole-file"
    loader_threads: int = 2
    read_method: str = "h5py"


#: tiny: a whole 2-rank run takes seconds after the TensorFlow import
SMOKE = TrainConfig(epochs=2, batch=8, width=8)
SMOKE_DATA = GenSpec(files=4, samples_per_file=16, image_size=32, seed=0, validation_files=2)

#: `make demo`: reads are a measurable share of an epoch on a 2-core machine, 2 ranks x 2 shuffle modes in minutes
DEMO = TrainConfig(epochs=3, batch=16, width=16, tf_profile_steps=(40, 44))
DEMO_DATA = GenSpec(files=16, samples_per_file=64, image_size=96, seed=0, validation_files=2)

PRESETS = {"smoke": (SMOKE, SMOKE_DATA), "demo": (DEMO, DEMO_DATA)}


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """Flags of :class:`TrainConfig`; unset flags stay None so a preset can fill them."""
    add_common_flags(p)
    p.add_argument("--width", type=int, help="filters per conv layer (128 in the original)")
    p.add_argument("--dropout", type=float)
    p.add_argument("--image-size", type=int, help="expected image size; files that differ are an error")
    p.add_argument("--loader", choices=LOADERS)
    p.add_argument("--loader-threads", type=int,
                   help="files the tfdata loader reads at once (interleave cycle length and parallel calls; 2)")
    p.add_argument("--read-method", choices=READ_METHODS,
                   help="h5py: read 'data' through HDF5 (original); direct: HDF5 for metadata, one plain read "
                        "of the contiguous bytes")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return common_config_from_args(args, TrainConfig(), SMOKE, DEMO)
