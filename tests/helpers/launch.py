"""Running a workload under ``timelogger run`` as a user would: the launcher of this checkout, a clean environment."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from tests.helpers.tools import BIN, REPO, clean_env

#: the workloads the zero-code tests run (scripts with no TimeLogger code, and their own clocks)
WORKLOADS = REPO / "tests" / "workloads"


def launch_env(**extra: str) -> dict:
    """A clean environment with this checkout first on ``PYTHONPATH`` and the virtualenv's tools on ``PATH``."""
    path = os.pathsep.join(x for x in (str(REPO), os.environ.get("PYTHONPATH", "")) if x)
    return clean_env(**{"PYTHONPATH": path, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **extra})


def launcher(run_dir: Path, options: Sequence[str] = ()) -> list[str]:
    """``python -m timelogger run -o RUN_DIR OPTIONS --``: what goes before the program (after ``mpiexec -n N``)."""
    return [sys.executable, "-m", "timelogger", "run", "-o", str(run_dir), *options, "--"]


def launch(run_dir: Path, *cmd: str, options: Sequence[str] = (), env: Optional[dict] = None,
           before: Sequence[str] = (), timeout: float = 240) -> subprocess.CompletedProcess:
    """``[BEFORE...] python -m timelogger run -o RUN_DIR OPTIONS -- CMD...`` from the run directory's parent; asserts
    it succeeded. ``before``: a launcher of ranks (``mpiexec -n 2``, ``torchrun ... --no-python``)."""
    p = subprocess.run([*before, *launcher(run_dir, options), *cmd], env=env or launch_env(), capture_output=True,
                       text=True, timeout=timeout, cwd=run_dir.parent)
    assert p.returncode == 0, f"rc={p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


def truths(stdout: str) -> list[dict]:
    """The ``TRUTH {json}`` lines a workload printed (one per rank), in rank order when they carry one."""
    found = [json.loads(m) for m in re.findall(r"TRUTH (\{.*?\})\s*$", stdout, re.M)]
    return sorted(found, key=lambda t: t.get("rank", 0))


def free_port() -> int:
    """A TCP port nobody listens on now (a rendezvous for ``torch.distributed``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
