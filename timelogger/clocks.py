"""Clock offset of each MPI rank to rank 0, by ping-pong on ``time.time_ns()`` (NTP-style, minimum round trip)."""
from __future__ import annotations

import struct
import time
from typing import Any, Tuple

_TAG = 0x7106  # private tag so the exchange cannot match the application's own messages
_PACK = struct.Struct("<q")


def measure_offset(comm: Any, rounds: int = 10) -> Tuple[int, int]:
    """Estimate ``time_ns`` of this rank minus ``time_ns`` of rank 0 of ``comm``.

    Rank 0 serves the other ranks one after the other; each does ``rounds`` exchanges
    ``t_send -> (rank 0 reads t_remote) -> t_recv`` and keeps the one with the smallest round trip, for which
    ``offset = (t_send + t_recv) / 2 - t_remote`` is off by at most half that round trip.
    Collective: every rank of ``comm`` must call it.

    Parameters
    ----------
    comm
        An mpi4py communicator (``MPI.COMM_WORLD`` or a sub-communicator; offsets are to its rank 0).
    rounds
        Exchanges per rank (at least 1).

    Returns
    -------
    tuple
        ``(offset_ns, rtt_ns)``; ``(0, 0)`` on rank 0.
    """
    rounds = max(1, int(rounds))
    rank = comm.Get_rank()
    size = comm.Get_size()
    buf = bytearray(8)
    comm.Barrier()
    best = (0, 0)
    if rank == 0:
        for peer in range(1, size):
            for _ in range(rounds):
                comm.Recv(buf, source=peer, tag=_TAG)
                comm.Send(_PACK.pack(time.time_ns()), dest=peer, tag=_TAG)
    else:
        best_rtt = None
        ping = _PACK.pack(0)
        for _ in range(rounds):
            t_send = time.time_ns()
            comm.Send(ping, dest=0, tag=_TAG)
            comm.Recv(buf, source=0, tag=_TAG)
            t_recv = time.time_ns()
            rtt = t_recv - t_send
            if best_rtt is None or rtt < best_rtt:
                best_rtt = rtt
                (t_remote,) = _PACK.unpack(bytes(buf))
                best = ((t_send + t_recv) // 2 - t_remote, rtt)
    comm.Barrier()
    return best
