"""The environment of the subprocesses that tests run: this checkout, the virtualenv's tools, a clean environment."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: the repository root
REPO = Path(__file__).resolve().parents[2]

#: the virtualenv's bin directory (console scripts, DFTracer tools, mpiexec)
BIN = Path(sys.executable).parent


def env_with_bin() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def need_tool(name: str) -> Path:
    exe = BIN / name
    if not exe.exists():
        pytest.skip(f"{name} not installed in {BIN}")
    return exe


def mpiexec() -> str:
    exe = BIN / "mpiexec"
    if not exe.exists():
        pytest.skip(f"no mpiexec beside {sys.executable}")
    return str(exe)


def clean_env(**extra: str) -> dict[str, str]:
    """The test environment without launcher/timelogger variables (MPI's, Slurm's, torchrun's), plus ``extra``; venv
    bin first on PATH. ``TIMELOGGER_PURE_PYTHON`` stays: a run of the tests on the pure capture path is one in every
    process."""
    env = {k: v for k, v in os.environ.items()
           if k == "TIMELOGGER_PURE_PYTHON"
           or not k.startswith(("TIMELOGGER_", "PMI_", "PMIX_", "OMPI_", "SLURM_", "HOROVOD_", "DFTRACER_",
                                "TORCHELASTIC_"))
           and k not in ("LD_PRELOAD", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                         "MASTER_PORT")}
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def run_py(script: str, cwd: Path, timeout: float = 60, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """Run ``script`` with this interpreter in a clean environment."""
    p = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=clean_env(**env), capture_output=True,
                       text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p
