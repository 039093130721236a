"""Benchmark configuration: one small dataclass, its command-line flags and the presets."""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace

from benchmarks.hepcnn.data import GenSpec
from benchmarks.hepcnn.dist import BACKENDS
from benchmarks.hepcnn.loaders import LOADERS, READ_METHODS
from benchmarks.hepcnn.shuffle import MODES


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Defaults are the original ``cori_knl_224_adam`` configuration (image size comes from the
    files when not given)."""

    epochs: int = 5
    batch: int = 128
    width: int = 128
    dropout: float = 0.5
    lr: float = 1e-3
    image_size: int | None = None
    shuffle: str = "local"
    loader: str = "whole-file"
    read_method: str = "h5py"
    dist: str = "auto"
    seed: int = 0
    checkpoint_every: int = 1
    tf_profile_steps: tuple[int, int] | None = None
    log_every: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


#: tiny: a whole 2-rank run takes seconds after the TensorFlow import
SMOKE = TrainConfig(epochs=2, batch=8, width=8)
SMOKE_DATA = GenSpec(files=4, samples_per_file=16, image_size=32, seed=0, validation_files=2)

#: `make demo`: reads are a measurable share of an epoch on a 2-core machine, 2 ranks x 2 shuffle modes in minutes
DEMO = TrainConfig(epochs=3, batch=16, width=16, tf_profile_steps=(40, 44))
DEMO_DATA = GenSpec(files=16, samples_per_file=64, image_size=96, seed=0, validation_files=2)

PRESETS = {"smoke": (SMOKE, SMOKE_DATA), "demo": (DEMO, DEMO_DATA)}


def parse_steps(text: str) -> tuple[int, int]:
    """``A:B`` -> (A, B): profile global steps A (inclusive) to B (exclusive)."""
    try:
        a, b = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B (two step numbers), got {text!r}") from None
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"need 0 <= A < B, got {text!r}")
    return a, b


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """Flags of :class:`TrainConfig`; unset flags stay None so a preset can fill them."""
    p.add_argument("--smoke", action="store_true", help="tiny preset for tests (2 epochs, batch 8, width 8)")
    p.add_argument("--demo-preset", action="store_true", help="the `demo` subcommand's training preset")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch", type=int, help="samples per rank and step")
    p.add_argument("--width", type=int, help="filters per conv layer (128 in the original)")
    p.add_argument("--dropout", type=float)
    p.add_argument("--lr", type=float)
    p.add_argument("--image-size", type=int, help="expected image size; files that differ are an error")
    p.add_argument("--shuffle", choices=MODES)
    p.add_argument("--loader", choices=LOADERS)
    p.add_argument("--read-method", choices=READ_METHODS,
                   help="h5py: read 'data' through HDF5 (original); direct: HDF5 for metadata, one plain read "
                        "of the contiguous bytes")
    p.add_argument("--dist", choices=BACKENDS)
    p.add_argument("--seed", type=int)
    p.add_argument("--checkpoint-every", type=int, help="epochs between checkpoints on rank 0; 0 = none")
    p.add_argument("--tf-profile-steps", type=parse_steps, metavar="A:B",
                   help="TF profiler window over global steps [A, B) into RUN/tf/rank-<r>")
    p.add_argument("--log-every", type=int, help="steps between progress lines (0: four per epoch)")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    base = DEMO if args.demo_preset else SMOKE if args.smoke else TrainConfig()
    given = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}
    return replace(base, **given)
