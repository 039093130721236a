"""DLIO 2.0.0 as the tests run it: installed once beside the checkout (``.cache/dlio-2.0.0``, ``pip install --no-deps
--target`` with the three pure-Python packages it needs beyond the pinned environment), its command line
(``tests/workloads/dlio/run_dlio.py`` with a tiny workload of ``tests/workloads/dlio/workload``) and its own AU."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import REPO, clean_env

WORKLOADS = REPO / "tests" / "workloads" / "dlio"
DLIO_PACKAGES = ("dlio_benchmark==2.0.0", "hydra-core==1.3.2", "omegaconf==2.3.0", "antlr4-python3-runtime==4.9.3")
SITE = REPO / ".cache" / "dlio-2.0.0"


def dlio_site(bin_dir: Path) -> Path:
    """DLIO 2.0.0 and what it needs beyond the pinned environment, installed once beside the checkout (skips without
    ``mpiexec`` in ``bin_dir`` or when the package index cannot be reached)."""
    if not (bin_dir / "mpiexec").exists():
        pytest.skip("no mpiexec in the environment")
    if not (SITE / "dlio_benchmark" / "main.py").exists():
        tmp = SITE.with_name(SITE.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp),
                            *DLIO_PACKAGES], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.skip(f"could not install DLIO from the package index: {p.stderr.strip()[-300:]}")
        shutil.rmtree(SITE, ignore_errors=True)
        tmp.rename(SITE)
    return SITE


def dlio_env(site: Path, **extra: str) -> dict:
    """The environment DLIO runs in: its site and this checkout first on ``PYTHONPATH`` (what was there after)."""
    path = os.pathsep.join(x for x in (str(site), str(REPO), os.environ.get("PYTHONPATH", "")) if x)
    return clean_env(PYTHONPATH=path, **extra)


def dlio_args(workload: str, data: Path, out: Path, *extra: str) -> list:
    """DLIO's arguments for ``workload`` (``tiny_compute``, ...) on the data set in ``data``, writing into ``out``."""
    return [str(WORKLOADS / "run_dlio.py"), "--config-dir", str(WORKLOADS), f"workload={workload}",
            f"++workload.dataset.data_folder={data}", f"++workload.output.folder={out}",
            f"++workload.checkpoint.checkpoint_folder={out.parent / 'checkpoints'}", f"hydra.run.dir={out}/hydra",
            *extra]


def check(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 0, f"rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"


def dlio_au(out: Path) -> float:
    """The AU DLIO itself reports (``summary.json``: ``train_au_mean_percentage``)."""
    return float(json.loads((out / "summary.json").read_text())["metric"]["train_au_mean_percentage"])
