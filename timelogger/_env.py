"""Where this process sits in a job: rank, world size, host and launcher, read from the environment.

Only the standard library is used so that the capture side can be imported on any compute node before MPI,
TensorFlow or Horovod are.
"""
from __future__ import annotations

import os
import socket
from typing import Mapping, Optional, Tuple

# (rank variable, size variable, launcher name), first match wins. torchrun (torch.distributed.run, the elastic agent)
# sets RANK/WORLD_SIZE for each process it starts, with TORCHELASTIC_RUN_ID: it is the innermost launcher when it runs
# under srun or mpiexec (one agent per node), so its numbering wins. Open MPI and Slurm set both; MPICH's Hydra sets
# PMI_RANK/PMI_SIZE; PMIx-only launchers set PMIX_RANK (the size then comes from a later pair or defaults to 1).
# RANK/WORLD_SIZE without torchrun count last, and only with MASTER_ADDR (torch.distributed's env:// rendezvous):
# RANK alone is too common a name to trust.
_TORCHRUN = ("RANK", "WORLD_SIZE", "torchrun")
_TORCH_ENV = ("RANK", "WORLD_SIZE", "torch-env")
_RANK_SOURCES: Tuple[Tuple[str, Optional[str], str], ...] = (
    _TORCHRUN,
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"),
    ("PMI_RANK", "PMI_SIZE", "mpich-hydra"),
    ("PMIX_RANK", None, "pmix"),
    ("SLURM_PROCID", "SLURM_NTASKS", "slurm"),
    ("HOROVOD_RANK", "HOROVOD_SIZE", "horovod"),
    _TORCH_ENV,
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
        if (launcher == "torchrun" and "TORCHELASTIC_RUN_ID" not in env) or \
                (launcher == "torch-env" and not (env.get("MASTER_ADDR") and _int_env(env, size_key) is not None)):
            continue
        rank = _int_env(env, rank_key)
        if rank is None:
            continue
        size = _int_env(env, size_key)
        if size is None:
            size = next((s for s in (_int_env(env, k) for k in _SIZE_FALLBACKS) if s is not None), None)
        if size is None or size <= rank:
            size = rank + 1
        if launcher == "mpich-hydra" and _srun_started(env, rank, size):
            launcher = "slurm-pmi"  # srun --mpi=pmi2/pmix gave this rank its PMI_RANK, not MPICH's mpiexec
        return rank, size, launcher
    return 0, 1, "none"


def _srun_started(env: Mapping[str, str], rank: int, size: int) -> bool:
    """Whether srun itself started this MPI rank (its task numbering is the MPI one), rather than an ``mpiexec``
    whose per-node proxies srun started inside the allocation."""
    return _int_env(env, "SLURM_PROCID") == rank and _int_env(env, "SLURM_STEP_NUM_TASKS") == size


#: Slurm's job context, as the manifest and the launch records keep it (key there: variable).
SLURM_VARS: Tuple[Tuple[str, str], ...] = (
    ("job_id", "SLURM_JOB_ID"), ("job_name", "SLURM_JOB_NAME"), ("nodelist", "SLURM_JOB_NODELIST"),
    ("num_nodes", "SLURM_JOB_NUM_NODES"), ("ntasks", "SLURM_NTASKS"), ("partition", "SLURM_JOB_PARTITION"),
    ("account", "SLURM_JOB_ACCOUNT"), ("cluster", "SLURM_CLUSTER_NAME"), ("submit_dir", "SLURM_SUBMIT_DIR"),
    ("array_job_id", "SLURM_ARRAY_JOB_ID"), ("array_task_id", "SLURM_ARRAY_TASK_ID"),
    ("step_id", "SLURM_STEP_ID"), ("step_nodelist", "SLURM_STEP_NODELIST"), ("procid", "SLURM_PROCID"),
    ("localid", "SLURM_LOCALID"), ("nodeid", "SLURM_NODEID"), ("cpus_per_task", "SLURM_CPUS_PER_TASK"),
)

#: the per-task part of :data:`SLURM_VARS`: in each launch record, not in the manifest's job context
SLURM_TASK_KEYS = ("procid", "localid", "nodeid")


def slurm_context(env: Optional[Mapping[str, str]] = None) -> dict:
    """Slurm's job context from the environment: ``{"job_id": "123", "nodelist": "nid[001-004]", ...}``, only the
    variables that are set; empty outside a Slurm job. ``SLURM_NODELIST`` (the older name) stands in for
    ``SLURM_JOB_NODELIST``."""
    env = os.environ if env is None else env
    out = {key: env[var] for key, var in SLURM_VARS if env.get(var, "").strip()}
    if "nodelist" not in out and env.get("SLURM_NODELIST", "").strip():
        out["nodelist"] = env["SLURM_NODELIST"]
    return out


def hostname() -> str:
    """Short host name, as DFTracer and the TF profiler name hosts."""
    return socket.gethostname()
