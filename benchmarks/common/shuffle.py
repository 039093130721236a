"""Which files a rank reads in which epoch, and in which order — the original benchmark's two shuffle modes.

* **local**: each rank keeps a fixed contiguous shard of the (sorted) file list for the whole run and only permutes
  its own list every epoch.
* **global**: every epoch all ranks permute the *whole* file list with the same seed (``seed + epoch``), each takes
  its contiguous slice of that permutation, then shuffles it locally — so a rank reads different files every epoch.

Pure functions of (files, rank, size, epoch, seed): every rank computes every other rank's assignment without
communication, which is also how the number of steps per epoch is agreed on.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

MODES = ("local", "global")


def shard(items: Sequence[str], rank: int, size: int) -> list[str]:
    """The contiguous slice of ``items`` owned by ``rank`` of ``size`` (sizes differ by at most one)."""
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} not in [0, {size})")
    n = len(items)
    lo = rank * n // size
    hi = (rank + 1) * n // size
    return list(items[lo:hi])


def epoch_files(files: Sequence[str], rank: int, size: int, epoch: int, mode: str, seed: int = 0) -> list[str]:
    """The files ``rank`` reads in ``epoch``, in reading order.

    Parameters
    ----------
    files
        The full training file list (same order on every rank).
    mode
        ``"local"`` or ``"global"`` (see the module docstring).
    seed
        Base seed; the global permutation uses ``seed + epoch`` on all ranks, the local one also mixes in the rank.
    """
    if mode == "global":
        order = np.random.default_rng(seed + epoch).permutation(len(files))
        mine = shard([files[i] for i in order], rank, size)
    elif mode == "local":
        mine = shard(files, rank, size)
    else:
        raise ValueError(f"unknown shuffle mode {mode!r}; expected one of {MODES}")
    local = np.random.default_rng([seed, epoch, rank, 1]).permutation(len(mine))
    return [mine[i] for i in local]


def sample_order(n: int, seed: int, epoch: int, rank: int, position: int) -> np.ndarray:
    """Permutation of a file's ``n`` samples: different for every epoch, rank and position in the rank's list."""
    return np.random.default_rng([seed, epoch, rank, position, 2]).permutation(n)


def steps_per_epoch(samples: dict[str, int], files: Sequence[str], size: int, batch: int, mode: str,
                    epoch: int, seed: int = 0) -> int:
    """Full batches every rank can make in ``epoch``: the minimum over ranks (all ranks must step together)."""
    per_rank = [sum(samples[f] for f in epoch_files(files, r, size, epoch, mode, seed)) for r in range(size)]
    return min(per_rank) // batch
