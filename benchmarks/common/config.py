"""Flags both benchmarks' ``train`` share, and filling a config dataclass from flags and a preset."""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from benchmarks.common.dist import BACKENDS
from benchmarks.common.modes import RUN_MODES
from benchmarks.common.node_cache import NODE_CACHE
from benchmarks.common.shuffle import MODES


@dataclass(frozen=True)
class RunConfig:
    """The fields :func:`add_common_flags` sets, with their defaults; each benchmark's config extends it (and
    re-declares a field to change its default)."""

    epochs: int = 5
    batch: int = 1
    lr: float = 1e-3
    shuffle: str = "local"
    mode: str = "full"
    node_cache: str = "off"
    dist: str = "auto"
    seed: int = 0
    checkpoint_every: int = 0
    tf_profile_steps: tuple[int, int] | None = None
    log_every: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def parse_steps(text: str) -> tuple[int, int]:
    """``A:B`` -> (A, B): profile global steps A (inclusive) to B (exclusive)."""
    try:
        a, b = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B (two step numbers), got {text!r}") from None
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"need 0 <= A < B, got {text!r}")
    return a, b


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """Flags of fields every benchmark config has; unset flags stay None so a preset can fill them."""
    p.add_argument("--smoke", action="store_true", help="tiny preset for tests")
    p.add_argument("--demo-preset", action="store_true", help="the `demo` subcommand's training preset")
    p.add_argument("--mode", choices=RUN_MODES,
                   help="ablation: full (default), io-only (no training), no-io (random tensors, no file "
                        "access), metadata-only (open and inspect the files, read no data)")
    p.add_argument("--node-cache", choices=NODE_CACHE,
                   help="off (default): the page cache as it is; emulate: before each epoch a rank evicts the files "
                        "new to it, as if each rank had its own node's cache; drop: drop all caches before the "
                        "run (root only)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch", type=int, help="samples per rank and step")
    p.add_argument("--lr", type=float)
    p.add_argument("--shuffle", choices=MODES)
    p.add_argument("--dist", choices=BACKENDS)
    p.add_argument("--seed", type=int)
    p.add_argument("--checkpoint-every", type=int, help="epochs between checkpoints on rank 0; 0 = none")
    p.add_argument("--tf-profile-steps", type=parse_steps, metavar="A:B",
                   help="TF profiler window over global steps [A, B) into RUN/tf/rank-<r>")
    p.add_argument("--log-every", type=int, help="steps between progress lines (0: four per epoch)")


def config_from_args(args: argparse.Namespace, default: Any, smoke: Any, demo: Any) -> Any:
    """The preset chosen by ``--smoke``/``--demo-preset`` (else ``default``) with every given flag applied."""
    base = demo if args.demo_preset else smoke if args.smoke else default
    given = {f.name: getattr(args, f.name) for f in fields(base) if getattr(args, f.name, None) is not None}
    return replace(base, **given)
