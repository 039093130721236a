"""Start a benchmark run as a user would: ``mpiexec -n N timelogger run -o RUN [layers] -- python -m ...``.

Executables are taken from the bin directory next to ``sys.executable`` (the venv), so the MPI, launcher and Python
of one environment are used together.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TextIO

from benchmarks.common.errors import BenchmarkError


def venv_tool(name: str) -> str:
    """``<dir of sys.executable>/<name>`` when it exists, else ``name`` from PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise BenchmarkError(f"{name}: not found next to {sys.executable} nor on PATH")
    return found


@dataclass
class Layers:
    """Which capture layers the launcher switches on (the app layer, TimeLogger, is always on)."""

    posix: bool = False
    posix_filter: str | None = None
    horovod_timeline: bool = False
    #: ``--noise KIND:LEVEL[,...]`` and its settings (``docs/noise.md``) when set
    noise: str | None = None
    noise_dir: str | None = None
    noise_cpus: str | None = None
    noise_io_mode: str | None = None


def run_command(ranks: int, run_dir: Path, program: Sequence[str], layers: Layers) -> list[str]:
    """The full command line of one run of ``program`` (a list starting with the Python module invocation)."""
    return [venv_tool("mpiexec"), "-n", str(ranks), *launcher_command(run_dir, program, layers)]


def launcher_command(run_dir: Path, program: Sequence[str], layers: Layers) -> list[str]:
    """``timelogger run -o RUN [layers] -- program``: one process, without ``mpiexec``."""
    cmd = [venv_tool("timelogger"), "run", "-o", str(run_dir)]
    if layers.posix:
        cmd.append("--posix")
        if layers.posix_filter:
            cmd += ["--posix-filter", layers.posix_filter]
    if layers.horovod_timeline:
        cmd.append("--horovod-timeline")
    if layers.noise:
        cmd += ["--noise", layers.noise]
        if layers.noise_dir and "io:" in layers.noise:
            cmd += ["--noise-dir", layers.noise_dir]
        if layers.noise_cpus:
            cmd += ["--noise-cpus", layers.noise_cpus]
        if layers.noise_io_mode:
            cmd += ["--noise-io-mode", layers.noise_io_mode]
    return cmd + ["--", *program]


def stream(cmd: Sequence[str], env: dict[str, str] | None = None, prefix: str = "", log: Path | None = None,
           echo: TextIO | None = None) -> float:
    """Run ``cmd``, echoing its output line by line as it comes (with ``prefix``) to ``echo`` (default stdout);
    copy it to ``log``.

    Returns
    -------
    float
        Wall time of the command, seconds.

    Raises
    ------
    BenchmarkError
        When the command exits non-zero (the message names the log file and the last output line).
    """
    full_env = dict(os.environ)
    # TF's C++ INFO lines (oneDNN, CPU features) would drown the ranks' progress lines.
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    full_env["PYTHONUNBUFFERED"] = "1"
    full_env.update(env or {})
    t0 = time.perf_counter()
    last = ""
    sink = open(log, "w") if log is not None else None
    try:
        if sink is not None:
            sink.write(" ".join(cmd) + "\n")
        with subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                              env=full_env, stdin=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if sink is not None:
                    sink.write(line)
                    sink.flush()
                if line.strip():
                    last = line.rstrip()
                    print(prefix + line, end="", flush=True, file=echo or sys.stdout)
            rc = proc.wait()
    finally:
        if sink is not None:
            sink.close()
    if rc != 0:
        where = f" (output in {log})" if log is not None else ""
        raise BenchmarkError(f"run failed with exit status {rc}{where}: {last}")
    return time.perf_counter() - t0
