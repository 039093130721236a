"""Where this process sits in a job: rank, world size, host and launcher, read from the environment.

Only the standard library is used so that the capture side can be imported on any compute node before MPI,
TensorFlow or Horovod are.
"""
from __future__ import annotations

import os
import socket
from typing import Mapping, Optional, Tuple

# (rank variable, size variable, launcher name), first match wins. Open MPI and Slurm set both; MPICH's Hydra sets
# PMI_RANK/PMI_SIZE; PMIx-only launchers set PMIX_RANK (the size then comes from a later pair or defaults to 1).
_RANK_SOURCES: Tuple[Tuple[str, Optional[str], str], ...] = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"),
    ("PMI_RANK", "PMI_SIZE", "mpich-hydra"),
    ("PMIX_RANK", None, "pmix"),
    ("SLURM_PROCID", "SLURM_NTASKS", "slurm"),
    ("HOROVOD_RANK", "HOROVOD_SIZE", "horovod"),
)

_SIZE_FALLBACKS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "HOROVOD_SIZE")


def _int_env(env: Mapping[str, str], key: Optional[str]) -> Optional[int]:
    if key is None:
        return None
    value = env.get(key)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        return None


def detect_rank_world(env: Optional[Mapping[str, str]] = None) -> Tuple[int, int, str]:
    """Rank, world size and launcher of this process as the launcher advertised them.

    Parameters
    ----------
    env
        Environment to read; ``os.environ`` when None.

    Returns
    -------
    tuple
        ``(rank, world_size, launcher)``; ``(0, 1, "none")`` when no launcher variable is set.
    """
    env = os.environ if env is None else env
    for rank_key, size_key, launcher in _RANK_SOURCES:
        rank = _int_env(env, rank_key)
        if rank is None:
            continue
        size = _int_env(env, size_key)
        if size is None:
            size = next((s for s in (_int_env(env, k) for k in _SIZE_FALLBACKS) if s is not None), None)
        if size is None or size <= rank:
            size = rank + 1
        return rank, size, launcher
    return 0, 1, "none"


def hostname() -> str:
    """Short host name, as DFTracer and the TF profiler name hosts."""
    return socket.gethostname()
