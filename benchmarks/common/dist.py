"""Distributed backends: Horovod, plain mpi4py gradient averaging (for TF versions Horovod does not build against),
or a single process. Chosen with ``--dist``; ``auto`` takes Horovod when importable and the job has > 1 rank."""
from __future__ import annotations

import importlib.util
import logging
from typing import Any, Sequence

import numpy as np

from benchmarks.common.env import env_world_size
from benchmarks.common.errors import BenchmarkError

log = logging.getLogger(__name__)
BACKENDS = ("auto", "horovod", "mpi", "none")


def resolve(kind: str) -> str:
    """Turn ``auto`` into a concrete backend without importing TensorFlow or MPI."""
    if kind != "auto":
        return kind
    if env_world_size() > 1:
        if importlib.util.find_spec("horovod") is not None:
            return "horovod"
        return "mpi"
    return "none"


class Dist:
    """What the training loop needs from a backend.

    Attributes
    ----------
    kind
        ``horovod``, ``mpi`` or ``none``.
    rank, size, local_size
        This process's rank, the number of ranks, and the number of ranks on this node.
    comm
        The mpi4py communicator (also under Horovod, for clock sync and metric sums), or None.
    """

    def __init__(self, kind: str) -> None:
        self.kind = resolve(kind)
        self.comm = None
        self.hvd = None
        self.rank, self.size, self.local_size = 0, 1, 1
        if self.kind in ("horovod", "mpi"):
            try:
                from mpi4py import MPI
            except ImportError as err:
                raise BenchmarkError(f"--dist {self.kind} needs mpi4py: pip install .[mpi] ({err})") from None
            self.comm = MPI.COMM_WORLD
            self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
            node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
            self.local_size = node.Get_size()
            node.Free()
        if self.kind == "horovod":
            try:
                import horovod.tensorflow as hvd
            except ImportError as err:
                raise BenchmarkError(f"--dist horovod needs Horovod built with TensorFlow: pip install .[horovod] "
                                  f"({err})") from None
            hvd.init()  # re-uses the MPI that mpi4py initialised
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
        elif self.kind != "mpi" and self.kind != "none":
            raise ValueError(f"unknown --dist {self.kind!r}; expected one of {BACKENDS}")

    def broadcast_variables(self, variables: Sequence[Any]) -> None:
        """Give every rank rank 0's initial values."""
        if self.kind == "horovod":
            self.hvd.broadcast_variables(variables, root_rank=0)
        elif self.kind == "mpi":
            for v in variables:
                v.assign(self.comm.bcast(v.numpy() if self.rank == 0 else None, root=0))

    def average(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Average arrays over ranks with one MPI allreduce of a flat buffer (the ``mpi`` backend's gradients)."""
        if self.comm is None or self.size == 1:
            return arrays
        from mpi4py import MPI

        flat = np.concatenate([a.ravel() for a in arrays]).astype(np.float32, copy=False)
        out = np.empty_like(flat)
        self.comm.Allreduce(flat, out, op=MPI.SUM)
        out /= self.size
        parts, pos = [], 0
        for a in arrays:
            parts.append(out[pos:pos + a.size].reshape(a.shape))
            pos += a.size
        return parts

    def sum(self, values: Sequence[float]) -> np.ndarray:
        """Element-wise sum of a few numbers over ranks (metrics)."""
        arr = np.asarray(values, dtype=np.float64)
        if self.comm is None or self.size == 1:
            return arr
        from mpi4py import MPI

        out = np.empty_like(arr)
        self.comm.Allreduce(arr, out, op=MPI.SUM)
        return out

    def barrier(self) -> None:
        if self.comm is not None:
            self.comm.Barrier()

    def shutdown(self) -> None:
        """Let Horovod flush its timeline before the process ends."""
        if self.hvd is not None:
            self.hvd.shutdown()
