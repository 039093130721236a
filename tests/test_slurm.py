"""The batch scripts on a real Slurm cluster, as docs/cluster.md tells users to run them.

`make test-slurm` brings up a one-node cluster (tools/slurm/cluster.sh: slurmctld, slurmd and munged on this machine)
and runs this module in it; everywhere else (`make test`) it is skipped. Nothing of Slurm is mocked: jobs go through
sbatch, ranks are started by srun (--mpi=pmi2) with MPICH, Horovod, the launcher and DFTracer's POSIX layer, and the
Dask workers of the partitioned merge run as a Slurm job.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not os.environ.get("TEST_SLURM_BASE") or not shutil.which("sbatch"),
                       reason="needs the one-node Slurm cluster of `make test-slurm`"),
]

#: sizing for this machine (2 cores): the scripts' #SBATCH lines are for a real cluster; options on the sbatch
#: command line override them (docs/cluster.md, "A small test allocation")
SMALL = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=00:15:00"]
ONE = ["--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--cpus-per-task=1", "--time=00:10:00"]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment docs/cluster.md exports before sbatch (sbatch passes it on to the job)."""
    env = dict(os.environ, VENV=str(VENV), RUNS=str(tmp / "runs"), PRESET="smoke")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _here(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with this checkout's packages first, as the batch scripts have them."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def submit(script: str, env: dict[str, str], opts: list[str], out: Path) -> str:
    """sbatch a script of the repo by its absolute path, from the directory of ``out``; returns the job id."""
    proc = subprocess.run(["sbatch", "--parsable", f"--output={out}", *opts, str(REPO / script)], cwd=out.parent,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{script}: sbatch exit {proc.returncode}: {proc.stderr}"
    return proc.stdout.strip().split(";")[0]


def wait(job: str, timeout: float = 600) -> tuple[str, str]:
    """The job's final state and exit code, polled every half second (``sbatch --wait`` polls with growing
    intervals, up to half a minute late)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout
        state = re.search(r"JobState=(\S+)", info)
        if state and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state.group(1), re.search(r" ExitCode=(\S+)", info).group(1)
        time.sleep(0.5)
    subprocess.run(["scancel", job])
    raise AssertionError(f"job {job} did not end within {timeout} s")


def sbatch(script: str, env: dict[str, str], opts: list[str], out: Path, check: bool = True) -> tuple[str, str]:
    """Submit, wait for the end; returns the job id and the job's output."""
    job = submit(script, env, opts, out)
    state, code = wait(job)
    text = out.read_text(errors="replace") if out.exists() else ""
    if check:
        assert (state, code) == ("COMPLETED", "0:0"), f"{script}: job {job} {state} {code}\n{text[-4000:]}"
    return job, text


def _run_dir(text: str) -> Path:
    found = re.findall(r"^run directory: (.+)$", text, re.M)
    assert found, text[-3000:]
    return Path(found[-1])


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slurm")


@pytest.fixture(scope="module")
def hep_run(work: Path) -> tuple[str, Path, str]:
    """stripe-and-generate then hepcnn.sbatch, as docs/cluster.md: (job id, run directory, job output)."""
    env = _env(work, DATA=str(work / "hep-data"))
    _, gen = sbatch("benchmarks/hepcnn/slurm/stripe-and-generate.sbatch", env, ONE, work / "hep-gen.out")
    assert sorted(p.name for p in (work / "hep-data").glob("hep_train_chunk*.h5")) == \
        [f"hep_train_chunk{k}.h5" for k in range(4)], gen
    job, text = sbatch("benchmarks/hepcnn/slurm/hepcnn.sbatch", env, SMALL, work / "hepcnn.out")
    return job, _run_dir(text), text


def _check_run(job: str, run: Path, text: str) -> None:
    """Both ranks in the manifest with their host and Slurm's job context; the layers captured; the breakdown."""
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["launcher"] == "slurm-pmi"
    assert sorted(r["rank"] for r in manifest["ranks"]) == [0, 1]
    assert all(r["hostname"] for r in manifest["ranks"]) and manifest["hosts"]
    slurm = manifest["slurm"]
    assert slurm["job_id"] == job and slurm["ntasks"] == "2" and slurm["nodelist"] and slurm["job_name"]
    for rank in (0, 1):
        record = json.loads((run / "launch" / f"rank-{rank}.json").read_text())
        assert record["slurm"]["job_id"] == job and record["slurm"]["procid"] == str(rank), record
    assert manifest["layers"]["posix"] and manifest["layers"]["horovod_timeline"]
    assert list((run / "posix").glob("*.pfw*")), "no POSIX (DFTracer) traces"
    assert (run / "horovod" / "timeline.json").stat().st_size > 0
    assert {p.name.split("-pid-")[0] for p in (run / "app").glob("rank-*.pfw*")} == {"rank-0", "rank-1"}
    # the job's own merge: the breakdown table with both ranks, and the report
    assert re.search(r"^rank\s+epoch\s+wall s", text, re.M), text[-3000:]
    assert re.search(r"^\s+1\s+all\s", text, re.M), text[-3000:]
    assert (run / "merged.parquet").exists() and (run / "report.html").exists()
    head = f"Slurm job {job} ({slurm['job_name']}), nodes {slurm['nodelist']}"
    assert head in (run / "report.html").read_text()
    summary = subprocess.run([str(BIN / "trace-merge"), "summary", str(run)], capture_output=True, text=True,
                             timeout=300, env=_here())
    assert summary.returncode == 0, summary.stderr
    assert head in "\n".join(summary.stdout.splitlines()[:3]), summary.stdout[:2000]
    assert "breakdown" in summary.stdout


def test_hepcnn_sbatch_two_ranks(hep_run: tuple[str, Path, str]) -> None:
    job, run, text = hep_run
    # no lfs on this machine: the stripe step said so in one line and the job went on (see the fixture)
    _check_run(job, run, text)


def test_climate_sbatch_two_ranks(work: Path) -> None:
    env = _env(work, DATA=str(work / "climate-data"))
    _, gen = sbatch("benchmarks/climate/slurm/stripe-and-generate.sbatch", env, ONE, work / "climate-gen.out")
    assert list((work / "climate-data").glob("*.h5")), gen
    job, text = sbatch("benchmarks/climate/slurm/climate.sbatch", env, SMALL, work / "climate.out")
    _check_run(job, _run_dir(text), text)


def test_stripe_step_without_lfs_is_one_line(hep_run: tuple[str, Path, str], work: Path) -> None:
    gen = (work / "hep-gen.out").read_text()
    lines = [line for line in gen.splitlines() if "lfs" in line]
    assert lines == [f"stripe_data: no lfs command (not a Lustre client): {work / 'hep-data'} keeps its file "
                     "system's default layout"], gen


def test_stripe_step_with_failing_lfs_is_one_line(work: Path) -> None:
    """An `lfs` that cannot stripe the directory (not on Lustre): one line, and the data is still generated."""
    fake = work / "fake-lfs"
    fake.mkdir(exist_ok=True)
    (fake / "lfs").write_text("#!/bin/sh\necho \"lfs setstripe: $4: Inappropriate ioctl for device\" >&2\nexit 25\n")
    (fake / "lfs").chmod(0o755)
    env = _env(work, DATA=str(work / "hep-data-2"), FILES="1", VALIDATION_FILES="1")
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    _, gen = sbatch("benchmarks/hepcnn/slurm/stripe-and-generate.sbatch", env, ONE, work / "hep-gen-2.out")
    lines = [line for line in gen.splitlines() if "lfs" in line]
    assert len(lines) == 1 and lines[0].startswith("stripe_data: lfs setstripe failed on "), gen
    assert (work / "hep-data-2" / "hep_train_chunk0.h5").exists(), gen


@pytest.mark.parametrize("unset, message", [("DATA", "DATA: set DATA to the data directory"),
                                            ("VENV", "VENV: set VENV to the toolkit environment")])
def test_missing_setting_is_one_line(work: Path, unset: str, message: str) -> None:
    env = _env(work, DATA=str(work / "nowhere"))
    env.pop(unset)
    _, text = sbatch("benchmarks/hepcnn/slurm/hepcnn.sbatch", env, SMALL, work / f"no-{unset}.out", check=False)
    assert len(text.strip().splitlines()) == 1 and message in text, text
    assert "Traceback" not in text


def _scheduler_address(path: Path, job: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            try:
                return json.loads(path.read_text())["address"]
            except (ValueError, KeyError):
                pass
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout
        assert state.strip() in ("PENDING", "RUNNING", "CONFIGURING"), f"dask job {job}: {state or 'gone'}"
        time.sleep(0.5)
    raise AssertionError(f"no scheduler file {path} after {timeout} s")


def _summary(run: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(BIN / "trace-merge"), "summary", str(run), *extra], capture_output=True, text=True,
                          timeout=300, env=_here(env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_summary_on_dask_workers_started_as_a_slurm_job(hep_run: tuple[str, Path, str], work: Path) -> None:
    """tools/slurm/dask-workers.sbatch (docs/cluster.md): the scheduler and srun's workers in one job; the summary
    the driver gets through them equals the one made on this machine."""
    from distributed import Client

    _, run, _ = hep_run
    sched = work / "dask-scheduler.json"
    env = _env(work, SCHEDULER_FILE=str(sched))
    job = submit("tools/slurm/dask-workers.sbatch", env, SMALL, work / "dask.out")
    try:
        address = _scheduler_address(sched, job)
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            hosts = {w["host"] for w in client.scheduler_info()["workers"].values()}
        assert hosts
        # the driver's spill directory must be seen by the workers: TMPDIR on the shared file system
        spill = work / "spill"
        spill.mkdir(exist_ok=True)
        remote = _summary(run, "--scheduler", address, env=dict(os.environ, TMPDIR=str(spill)))
        local = _summary(run)
        assert remote == local
        assert f"Slurm job {hep_run[0]}" in remote.splitlines()[1]
    finally:
        subprocess.run(["scancel", job], capture_output=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
            time.sleep(0.5)
    assert not sched.exists(), "the job's scheduler file outlived it"
