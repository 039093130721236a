"""The input-bound ``model.fit`` workload (``tests/workloads/keras_slow_input.py``) under ``timelogger run``: 2 epochs
x 8 steps of a ``from_generator`` pipeline whose HDF5 read sleeps 100 ms per batch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import BIN, REPO, clean_env
from timelogger.cli import _dftracer_preload

WORKLOAD = REPO / "tests" / "workloads" / "keras_slow_input.py"
EPOCHS, STEPS, SLEEP_MS = 2, 8, 100


def fit_env() -> dict:
    """The clean test environment, importing this checkout's timelogger in the launched job."""
    return clean_env(PYTHONPATH=os.pathsep.join(x for x in (str(REPO), os.environ.get("PYTHONPATH", "")) if x))


def check(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def launch(data: Path, name: str, *launch_opts: str, train_opts: tuple = ()) -> Path:
    """``timelogger run`` with ``launch_opts`` around the fit on ``data`` (``make-data``'s), into ``data/../name``."""
    posix = "--posix" in launch_opts
    if posix and _dftracer_preload() is None:
        pytest.skip("dftracer's libdftracer_preload.so is not installed (pip install .[posix])")
    run_dir = data.parent / name
    cmd = [str(BIN / "timelogger"), "run", "-o", str(run_dir), *launch_opts]
    if posix:
        cmd += ["--posix-filter", str(data)]
    cmd += ["--", sys.executable, str(WORKLOAD), "train", str(data), "--epochs", str(EPOCHS), "--batch", "16",
            "--sleep-ms", str(SLEEP_MS), *train_opts]
    p = check(subprocess.run(cmd, env=fit_env(), capture_output=True, text=True, timeout=180, cwd=data.parent))
    result = json.loads(p.stdout.split("RESULT", 1)[1])
    assert result["steps"] == EPOCHS * STEPS
    return run_dir
