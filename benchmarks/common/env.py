"""Rank and world size before MPI is initialised, from the variables MPI launchers export.

Used to validate inputs (e.g. "fewer files than ranks") before TensorFlow or MPI is imported, and to print errors
once instead of once per rank.
"""
from __future__ import annotations

import os

# Hydra/MPICH (PMI), Open MPI, Slurm, and MPICH's PMIx mode.
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")


def _first_int(names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return default


def env_rank() -> int:
    """This process's rank as told by the launcher, 0 when not launched by one."""
    return _first_int(_RANK_VARS, 0)


def env_world_size() -> int:
    """The job's number of ranks as told by the launcher, 1 when not launched by one."""
    return _first_int(_SIZE_VARS, 1)
