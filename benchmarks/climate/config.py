"""Climate benchmark configuration: one dataclass, its command-line flags and the presets."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from benchmarks.climate.model import DEMO_MODEL, ORIGINAL_MODEL, SMOKE_MODEL
from benchmarks.climate.pipeline import READ_IN
from benchmarks.common.config import RunConfig, add_common_flags
from benchmarks.common.config import config_from_args as common_config_from_args


@dataclass(frozen=True)
class ClimateConfig(RunConfig):
    """One training run. Defaults are the original benchmark's (Tiramisu growth 16, blocks 3 3 4 4 7 7 10, batch 1,
    four readers in a process pool, prefetch 16, channels 0, 1, 2, 10); the fields every benchmark has are
    :class:`~benchmarks.common.config.RunConfig`'s."""

    lr: float = 1e-4
    blocks: tuple[int, ...] = ORIGINAL_MODEL["blocks"]
    growth: int = ORIGINAL_MODEL["growth"]
    base_filters: int = ORIGINAL_MODEL["base_filters"]
    dropout: float = 0.2
    channels: tuple[int, ...] = (0, 1, 2, 10)
    readers: int = 4
    read_in: str = "processes"
    prefetch: int = 16


#: tiny: a 2-rank run takes seconds after the TensorFlow import (images of benchmarks.climate.data.SMOKE_DATA)
SMOKE = ClimateConfig(epochs=2, lr=1e-3, readers=2, prefetch=2, **SMOKE_MODEL)
#: `make demo`: 192x288 images, reads a visible share of a step on a 2-core machine
DEMO = ClimateConfig(epochs=2, lr=1e-3, readers=2, prefetch=4, **DEMO_MODEL)


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """Flags of :class:`ClimateConfig`; unset flags stay None so a preset can fill them."""
    add_common_flags(p)
    p.add_argument("--blocks", type=_ints, help="dense block sizes, the last is the bottleneck (3,3,4,4,7,7,10)")
    p.add_argument("--growth", type=int, help="Tiramisu growth rate (16)")
    p.add_argument("--base-filters", type=int, help="filters of the first convolution (48)")
    p.add_argument("--dropout", type=float)
    p.add_argument("--channels", type=_ints, help="channels of /climate/data used (0,1,2,10)")
    p.add_argument("--readers", type=int, help="parallel image reads (tf.data num_parallel_calls and pool size)")
    p.add_argument("--read-in", choices=READ_IN,
                   help="processes: a multiprocessing pool of forked workers (original); threads: tf.data's")
    p.add_argument("--prefetch", type=int, help="images prefetched per rank (16)")
    p.add_argument("--height", type=int, help="expected image height; files that differ are an error")
    p.add_argument("--width", type=int, help="expected image width")


def config_from_args(args: argparse.Namespace) -> ClimateConfig:
    return common_config_from_args(args, ClimateConfig(), SMOKE, DEMO)
