"""Waiting for other ranks is not communication: real 2-rank Horovod runs (``mpiexec -n 2 timelogger run
--horovod-timeline``), one with rank 1 sleeping before each allreduce (rank 0 waits in Horovod's ``NEGOTIATE_*``),
one with rank 0 sleeping (the timeline's own rank is the straggler: rank 1 waits), one balanced."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import mpiexec
from trace_merge.run import Run

pytestmark = [pytest.mark.horovod, pytest.mark.mpi, pytest.mark.tf, pytest.mark.findings_real]

#: each step: 60 ms of work on every rank (long against a loaded machine's scheduling jitter), the straggler's
#: extra time on one rank, then the allreduce
HVD_STEPS = Path(__file__).resolve().parent / "workloads" / "hvd_steps.py"


def _run(tmp: Path, slow_s: float, slow_rank: int = 1, *flags: str) -> Run:
    pytest.importorskip("horovod.tensorflow")
    bindir = Path(sys.executable).parent
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run([mpiexec(), "-n", "2", str(bindir / "timelogger"), "run", "-o", str(tmp / "run"),
                    "--horovod-timeline", *flags, "--", sys.executable, str(HVD_STEPS), "--steps", "6",
                    "--work-ms", "60", "--slow-ms", str(1000 * slow_s), "--slow-rank", str(slow_rank)],
                   check=True, env=env, timeout=120, capture_output=True)
    return Run.open(tmp / "run")


def test_a_slow_rank_is_a_straggler_not_communication(tmp_path: Path) -> None:
    run = _run(tmp_path, 0.1)
    a = run.analyse()
    found = {f.key: f for f in run.findings(a)}
    steps = a.layered[a.layered["phase"] == "Training Iteration"]
    # the executing allreduce is < 1 ms a step: communication is small, and no fusion-buffer advice
    assert steps["comm_s"].sum() < 0.05 * steps["time_s"].sum() and "comm_exposed" not in found
    per = a.input_bound.set_index("rank")
    # rank 0 waits ~100 of ~160 ms of each step for rank 1
    assert per.loc[0, "sync_wait_pct"] >= 40 and per.loc[1, "sync_wait_pct"] == 0
    wait = found["ranks_wait_for_straggler"]
    assert "straggler is rank 1" in wait.title and "rank 0 " in wait.evidence
    assert "fusion buffer will not help" in wait.action
    # the wait is its own term of the step cycles: input wait + compute + sync wait + other = the cycle
    s = a.steps[a.steps["counted"]]
    total = s["input_wait_s"] + s["compute_s"] + s["sync_wait_s"] + s["other_s"]
    assert ((total - s["step_s"]).abs() < 1e-6).all()


@pytest.mark.parametrize("flags", [(), ("--horovod-ready-marks",)], ids=["cached", "marks"])
def test_a_slow_rank_0_is_the_straggler_and_does_not_wait(tmp_path: Path, flags: tuple) -> None:
    """Rank 0 writes the timeline; when it is the late one its negotiations are the others' wait, not its own.
    Horovod's per-rank ready marks name rank 0 the last ready: by default only in the first negotiation (the rest
    come from its response cache, and take its word), with ``--horovod-ready-marks`` in every one."""
    run = _run(tmp_path, 0.1, 0, *flags)
    a = run.analyse()
    per = a.input_bound.set_index("rank")
    assert per.loc[0, "sync_wait_pct"] < 5 and per.loc[1, "sync_wait_pct"] == 0
    # rank 1 waited ~100 of ~160 ms of each step for rank 0
    assert per.loc[0, "others_wait_s"] >= 0.4 * per.loc[0, "step_s"]
    wait = {f.key: f for f in run.findings(a)}["ranks_wait_for_straggler"]
    assert "straggler is rank 0" in wait.title and "rank 1" not in wait.title and "rank 0 " in wait.evidence
    s = a.steps[a.steps["counted"]]
    total = s["input_wait_s"] + s["compute_s"] + s["sync_wait_s"] + s["other_s"]
    assert ((total - s["step_s"]).abs() < 1e-6).all()


def test_a_balanced_run_waits_little_and_has_no_straggler(tmp_path: Path) -> None:
    run = _run(tmp_path, 0.0)
    a = run.analyse()
    per = a.input_bound.set_index("rank")
    assert per.loc[0, "sync_wait_pct"] < 10  # Horovod's cycle time between the ranks' arrivals
    assert "ranks_wait_for_straggler" not in {f.key for f in run.findings(a)}
