"""Imported only by the local pool's forkserver (its preload): that server dies with the merge that started it.

Linux's ``PR_SET_PDEATHSIG`` sends the process SIGKILL when its parent dies, so a ``kill -9`` of a merge's driver
does not leave the forkserver -- and, through :func:`die_with_parent` in each worker, its workers (~0.8 GB) --
running with no one to serve. Elsewhere (no ``prctl``) this does nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: "int | None" = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent exits; exit at once if it already has.

    ``parent``: the pid the parent must have (a worker passes its forkserver's, :data:`SERVER`). Without it, a worker
    whose forkserver died between the fork and this call would ask to die with its new parent (init) and live on.
    """
    parent = os.getppid() if parent is None else parent
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


die_with_parent()
#: the forkserver's pid, inherited by the workers it forks (they check they are still its children)
SERVER = os.getpid()
