"""PyTorch capture (issue 48): a plain PyTorch script with no TimeLogger code under ``timelogger run`` gets its fetches,
steps, epochs and DataLoader workers recorded, on its rank, and a verdict that agrees with its own clock.

``tests/workloads/plain_torch.py`` is a map-style ``Dataset`` of small files (``__getitem__`` reads one whole file,
then sleeps: a slow decode), ``DataLoader(num_workers=2)``, a tiny model, ``backward()``, a "compute" sleep and
``optimizer.step()``; it prints its own clock (time blocked in ``next()`` against the steps, and the bytes of the files
its sampler gave it). The verdict and AU of ``trace-merge summary`` must agree with that clock within 10 points,
input-bound and compute-bound, on 1 rank and on 2 ranks of DDP over Gloo (``mpiexec -n 2`` and ``torchrun``), and
the workers' POSIX reads of the sample files must be on the rank that read them, their bytes the files' sizes times
the epochs. The workers' files are complete however the DataLoader ends them (exit, or SIGTERM at the end of a run
with persistent workers; fork, spawn, forkserver); ``--torch-profile`` writes one Kineto trace per rank; the
program's own TimeLogger code wins; ``timelogger.torch.instrument`` does the same without the launcher.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.helpers.launch import WORKLOADS, free_port, launch, launch_env, truths  # noqa: E402
from tests.helpers.tools import BIN, mpiexec, run_py  # noqa: E402
from tests.helpers.traces import app_files, intervals, meta, read_pfw  # noqa: E402
from trace_merge.analysis import verdict_label  # noqa: E402
from trace_merge.run import Run  # noqa: E402

pytestmark = [pytest.mark.torch]

SCRIPT = str(WORKLOADS / "plain_torch.py")
SAMPLES, BATCH, EPOCHS = 32, 4, 2
#: each sample's file size: all different, so that a miscounted read shows in the bytes
SIZES = [1000 + 137 * i for i in range(SAMPLES)]
#: input-bound: 2 workers decode 4 samples of 15 ms per batch (30 ms a batch) for a 10 ms step; compute-bound: an 80 ms
#: step, persistent workers (no worker start-up or shutdown at each epoch's edges: their cost is input wait too), so
#: that a fetch of a ready batch (1-2 ms: the batch's tensors handed over) stays far below 5 % of a cycle
VARIANTS = {"input": ("--item-ms", "15", "--step-ms", "10"),
            "compute": ("--item-ms", "0", "--step-ms", "80", "--persistent")}
#: the verdict's thresholds (% input wait); a truth this close to one may fall on either side of it
THRESHOLDS, NEAR = (5.0, 20.0), 1.0


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("samples")
    for i, size in enumerate(SIZES):
        (root / f"sample-{i:03d}.bin").write_bytes(os.urandom(size))
    return root


def _summary(run_dir: Path) -> dict:
    p = subprocess.run([str(BIN / "trace-merge"), "summary", str(run_dir), "--json"], env=launch_env(),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _sample_reads(run: Run, data: Path) -> dict:
    """rank -> bytes of the POSIX reads of the sample files (the merged frame's posix rows)."""
    f = run.frame
    reads = f[(f["layer"] == "posix") & f["file"].astype(str).str.startswith(str(data))
              & f["name"].astype(str).isin(["read", "pread", "pread64", "readv", "preadv", "fread"])]
    return {int(r): int(b) for r, b in reads.groupby("rank", observed=True)["bytes"].sum().items()}


def _worker_files(run_dir: Path) -> list[list[dict]]:
    """The events of each DataLoader worker's app file."""
    out = []
    for path in app_files(run_dir):
        events = read_pfw(path)
        if meta(events, "torch_dataloader_worker"):
            out.append(events)
    return out


def _agrees(row: dict, truth: dict) -> None:
    """Input wait and AU within 10 points of the script's clock, and the same verdict unless the truth lies within
    a point of a threshold."""
    assert abs(row["input_pct"] - truth["input_pct"]) <= 10, (row, truth)
    assert abs(row["au_pct"] - truth["au_pct"]) <= 10, (row, truth)
    if all(abs(truth["input_pct"] - x) > NEAR for x in THRESHOLDS):
        assert row["verdict"] == verdict_label(truth["input_pct"]), (row, truth)


@pytest.mark.parametrize("kind", ["input", "compute"])
def test_plain_loop_verdict_matches_its_own_clock_and_the_workers_reads_are_the_ranks(tmp_path, data, kind):
    run_dir = tmp_path / "run"
    p = launch(run_dir, sys.executable, SCRIPT, "--data", str(data), *VARIANTS[kind], options=("--posix",))
    (truth,) = truths(p.stdout)
    steps = SAMPLES // BATCH * EPOCHS
    assert (f"hooks saw torch DataLoader x{steps + EPOCHS}, torch Optimizer.step x{steps}; {steps} step(s), "
            f"{steps + EPOCHS} fetch(es), {EPOCHS} epoch end(s)") in p.stderr
    s = _summary(run_dir)
    v = s["verdict"]
    assert s["ranks"] == [0] and not s["warnings"], s["warnings"]
    # the workload is what it was built to be, and the verdict says so
    assert verdict_label(truth["input_pct"]) == ("highly input-bound" if kind == "input" else "not input-bound"), truth
    _agrees(v, truth)
    assert v["basis"] == "app" and v["cycles_total"] == steps
    # told a PyTorch run by the hooks' events alone (no profile): its sentences name PyTorch's parts, not tf.data's
    said = json.dumps([s["explanations"], s["next_step"], v])
    assert "tf.data" not in said and "TF profile" not in said, said
    if kind == "input":
        assert "DataLoader" in s["next_step"], s["next_step"]
    run = Run.open(run_dir)
    # the hooks' steps and epochs: 8 steps in each of 2 epochs
    assert run.step_series().groupby("epoch").size().to_dict() == {0: steps // EPOCHS, 1: steps // EPOCHS}
    # the workers' reads of the sample files, on the rank, every byte of every file once per epoch
    assert _sample_reads(run, data) == {0: sum(SIZES) * EPOCHS} and truth["read_bytes"] == sum(SIZES) * EPOCHS
    # every sample decoded by a worker, in a worker's file of the rank
    items = [e for w in _worker_files(run_dir) for e in intervals(w, "FileDataset.__getitem__")]
    assert len(items) == SAMPLES * EPOCHS and {e["args"]["rank"] for e in items} == {0}


@pytest.mark.parametrize("ranks_by", ["mpiexec", "torchrun"])
def test_ddp_over_gloo_two_ranks_each_get_their_rank_verdict_and_reads(tmp_path, data, ranks_by):
    run_dir = tmp_path / "run"
    if ranks_by == "mpiexec":
        before = [mpiexec(), "-n", "2"]
    else:
        before = [str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_port", str(free_port()), "--no-python"]
    p = launch(run_dir, sys.executable, SCRIPT, "--data", str(data), "--ddp", *VARIANTS["input"], options=("--posix",),
               before=before, env=launch_env(MASTER_PORT=str(free_port())))
    mine = truths(p.stdout)
    assert [t["rank"] for t in mine] == [0, 1], p.stdout[-2000:]
    launch_records = [json.loads((run_dir / "launch" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [(x["rank"], x["world_size"]) for x in launch_records] == [(0, 2), (1, 2)]
    assert {x["launcher"] for x in launch_records} == {"mpich-hydra" if ranks_by == "mpiexec" else "torchrun"}
    s = _summary(run_dir)
    assert s["ranks"] == [0, 1] and not s["warnings"], s["warnings"]
    for row, truth in zip(sorted(s["input_bound"], key=lambda x: x["rank"]), mine):
        assert verdict_label(truth["input_pct"]) == "highly input-bound", truth
        _agrees(row, truth)
    run = Run.open(run_dir)
    # each rank's workers read its DistributedSampler share: the bytes its own clock counted
    assert _sample_reads(run, data) == {t["rank"]: t["read_bytes"] for t in mine}
    assert sum(t["read_bytes"] for t in mine) == sum(SIZES) * EPOCHS
    workers = _worker_files(run_dir)
    assert sorted(meta(w, "timelogger")[0]["args"]["rank"] for w in workers) == [0] * 4 + [1] * 4  # 2 per epoch


@pytest.mark.parametrize("start", ["fork", "spawn", "forkserver"])
def test_persistent_workers_stopped_by_sigterm_leave_complete_files(tmp_path, data, start):
    """Persistent workers live until the program exits; Python's multiprocessing then ends them with SIGTERM. PyTorch's
    own handler would exit at once (the validation loader's workers, forked once the program's logger exists, would
    lose every interval), the loggers' default one would die of the signal (and the parent report a killed worker).
    Every interval of every worker is on disk anyway, its close record counts it, the program ends cleanly, and the
    multiprocessing helper processes (forkserver, resource tracker) are on the rank."""
    run_dir = tmp_path / "run"
    p = launch(run_dir, sys.executable, SCRIPT, "--data", str(data), "--item-ms", "1", "--step-ms", "1",
               "--persistent", "--val", "--start", start, options=("--posix",) if start == "forkserver" else ())
    assert "killed by signal" not in p.stderr, p.stderr[-3000:]
    workers = _worker_files(run_dir)
    assert len(workers) == 4  # 2 of the training loader, 2 of the validation loader
    for events in workers:
        (close,) = meta(events, "timelogger_close")
        assert close["args"]["exit"] == {"reason": "signal", "signal": "SIGTERM"}, close
        assert close["args"]["dropped"] == 0 and close["args"]["events"] == len(intervals(events)) > 0
    batches = SAMPLES // BATCH * EPOCHS * 2
    named = [e["name"] for w in workers for e in intervals(w)]
    assert named.count("FileDataset.__getitem__") == SAMPLES * EPOCHS * 2
    assert named.count("Load Batch") == named.count("Collate default_collate") == batches
    s = _summary(run_dir)
    assert s["ranks"] == [0] and not s["warnings"], s["warnings"]  # no "ended early", no rank -1
    # the validation loader's end is no epoch of training
    assert Run.open(run_dir).step_series().groupby("epoch").size().to_dict() == {0: 8, 1: 8}


@pytest.mark.parametrize("kind", ["no workers", "iterable"])
def test_a_loader_without_workers_and_an_iterable_dataset(tmp_path, data, kind):
    """Without workers the loop's own process reads, inside its fetches; an IterableDataset's workers time each
    ``next()`` of their stream. Same verdict against the script's clock, same bytes."""
    run_dir = tmp_path / "run"
    args = ("--workers", "0") if kind == "no workers" else ("--iterable",)
    p = launch(run_dir, sys.executable, SCRIPT, "--data", str(data), "--item-ms", "5", "--step-ms", "10", *args,
               options=("--posix",))
    (truth,) = truths(p.stdout)
    s = _summary(run_dir)
    assert s["ranks"] == [0] and not s["warnings"], s["warnings"]
    _agrees(s["verdict"], truth)
    assert _sample_reads(Run.open(run_dir), data) == {0: sum(SIZES) * EPOCHS}
    if kind == "no workers":
        (events,) = [read_pfw(f) for f in app_files(run_dir)]
        fetches = [(e["ts"], e["ts"] + e["dur"]) for e in intervals(events, "Fetch Batch")]
        items = intervals(events, "FileDataset.__getitem__")
        assert len(items) == SAMPLES * EPOCHS and not _worker_files(run_dir)
        assert all(any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in fetches) for e in items)
        assert {e["args"].get("epoch") for e in items} == {0, 1}  # the loop's own tags
    else:
        items = [e for w in _worker_files(run_dir) for e in intervals(w, "FileStream next")]
        assert len([e for e in items if not e["args"].get("exhausted")]) == SAMPLES * EPOCHS
        assert len([e for e in items if e["args"].get("exhausted")]) == 2 * EPOCHS  # each worker's stream ran out


def test_epochs_of_a_loop_that_breaks_off_and_a_torch_profile_window(tmp_path, data):
    """Leaving each epoch after 3 steps (the iterator never runs out): the loader's restart ends the epoch. The
    --torch-profile window follows the hooks' steps: one Chrome/Kineto trace in RUN/torch/rank-0 whose
    ProfilerStep#N are steps 1-3, named in the app file with its wall-clock marker; the workers profile nothing."""
    run_dir = tmp_path / "run"
    launch(run_dir, sys.executable, SCRIPT, "--data", str(data), "--epochs", "3", "--break-after", "3",
           "--item-ms", "1", "--step-ms", "2", options=("--torch-profile=1:4",))
    run = Run.open(run_dir)
    assert run.step_series().groupby("epoch").size().to_dict() == {0: 3, 1: 3, 2: 3}
    assert json.loads((run_dir / "manifest.json").read_text())["layers"]["torch_profile"] == "1:4"
    (trace,) = (run_dir / "torch" / "rank-0").glob("*.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {f"ProfilerStep#{n}" for n in (1, 2, 3)} <= names and "ProfilerStep#4" not in names
    assert "timelogger_anchor" in names and isinstance(doc["baseTimeNanoseconds"], int)
    main = [read_pfw(f) for f in app_files(run_dir)]
    (prof,) = [m["args"] for events in main for m in meta(events, "torch_profile")]
    assert Path(prof["trace"]) == trace.resolve() and (prof["first_step"], prof["last_step"]) == (1, 3)
    assert prof["start_wall_ns"] <= prof["marker_wall_ns"] <= prof["stop_wall_ns"]
    assert not [m for events in main for m in meta(events, "torch_profile_missed")]


_OWN_CODE = """
import sys, torch
sys.path.insert(0, {workloads!r})
from plain_torch import FileDataset
import timelogger
tl = timelogger.default_logger()
loader = torch.utils.data.DataLoader(FileDataset({data!r}, 0.0), batch_size=4, num_workers=2)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    tl.set_epoch(epoch)
    for x, y in tl.iterate(loader, "Next Batch"):
        with tl.phase("Train Step", cat="compute"):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
"""


def test_the_programs_own_timelogger_code_wins_over_the_hooks(tmp_path, data):
    run_dir = tmp_path / "run"
    p = launch(run_dir, sys.executable, "-c", _OWN_CODE.format(workloads=str(WORKLOADS), data=str(data)))
    assert "torch DataLoader x18" in p.stderr  # seen, not recorded
    run = Run.open(run_dir)
    app = run.frame[run.frame["layer"] == "app"]
    consumer = app[app["pid"] == app[app["name"].astype(str) == "Next Batch"]["pid"].iloc[0]]
    assert set(consumer["name"].astype(str)) == {"Next Batch", "Train Step"}  # no Fetch Batch, no Step SGD.step
    assert sorted(consumer["epoch"].dropna().unique().tolist()) == [0, 1]
    # the workers' reader intervals stay: the program times no io in them
    assert "FileDataset.__getitem__" in set(app["name"].astype(str))


_INSTRUMENT = """
import sys, torch
sys.path.insert(0, {workloads!r})
from plain_torch import FileDataset
from timelogger import TimeLogger
import timelogger.torch as tlt
tl = TimeLogger({run!r})
train = torch.utils.data.DataLoader(FileDataset({data!r}, 0.0), batch_size=4, num_workers=2)
other = torch.utils.data.DataLoader(FileDataset({data!r}, 0.0), batch_size=8)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in other:  # before the block: not timed
    pass
with tlt.instrument(train, opt, logger=tl, profile="2:4") as block:
    for epoch in range(2):
        for x, y in train:
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        for x, y in other:  # named no loader in the block: not timed
            pass
print("SEEN", block.steps, block.fetches, block.epochs)
tl.close()
"""


def test_instrument_without_the_launcher_times_the_objects_it_names(tmp_path, data):
    run_dir = tmp_path / "run"
    p = run_py(_INSTRUMENT.format(workloads=str(WORKLOADS), data=str(data), run=str(run_dir)), tmp_path,
               timeout=120, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    assert "SEEN 16 18 2" in p.stdout, p.stdout
    events = [e for f in app_files(run_dir) for e in read_pfw(f)]
    fetches = intervals(events, "Fetch Batch")
    assert len(fetches) == 18 and len(intervals(events, "Step SGD.step")) == 16
    assert [e["args"].get("epoch") for e in fetches].count(1) == 9
    assert len(intervals(events, "FileDataset.__getitem__")) == SAMPLES * EPOCHS  # the train loader's workers only
    (prof,) = meta(events, "torch_profile")
    assert (prof["args"]["first_step"], prof["args"]["last_step"]) == (2, 3)
    assert meta(events, "timelogger_hooks")[0]["args"]["steps"] == 16


def test_a_torch_profile_of_two_ddp_ranks_is_the_framework_and_comm_layers_on_the_app_clock(tmp_path, data):
    """``--torch-profile`` on an unmodified DDP script (2 ranks, Gloo, ``mpiexec``): the launcher's Kineto traces are
    read as the framework and comm layers of their ranks, aligned with the app layer (the residual checks the
    profiler's steps against the hooks' and finds none outside), and the layered breakdown splits the step into
    operators, DataLoader wait and communication. (The verdict is not compared with the script's clock here: in a
    run of 8 steps of 30 ms a rank, the profiler's own start, stop and export, ~45 ms inside the script's ``next()``,
    are a fifth of the loop, and the toolkit counts them as other time, not input wait.)"""
    run_dir = tmp_path / "run"
    p = launch(run_dir, sys.executable, SCRIPT, "--data", str(data), "--ddp", *VARIANTS["input"],
               options=("--torch-profile=1:6",), before=[mpiexec(), "-n", "2"],
               env=launch_env(MASTER_PORT=str(free_port())))
    assert len(sorted((run_dir / "torch").glob("rank-*/*.pt.trace.json*"))) == 2 and len(truths(p.stdout)) == 2
    s = _summary(run_dir)
    assert s["ranks"] == [0, 1] and {"app", "framework", "comm"} <= set(s["rows_per_layer"]), s["rows_per_layer"]
    residual = s["alignment_residual"]
    assert residual["checked"] > 0 and residual["outside"] == 0, residual
    run = Run.open(run_dir)
    f = run.frame
    comm = f[(f["layer"] == "comm").to_numpy()]
    assert set(comm["rank"]) == {0, 1} and comm["name"].astype(str).str.contains("gloo|allreduce", case=False).any()
    waits = f[((f["layer"] == "framework") & (f["cat"] == "wait")).to_numpy()]
    assert waits["name"].astype(str).str.contains("DataLoader").all() and len(waits)
    layered = run.layered_breakdown()
    steps = layered[layered["phase"].astype(str).str.startswith("Step ")]
    assert len(steps) and (steps["comm_s"] > 0).any() and (steps["compute_s"] > 0).any(), \
        steps.filter(regex="_s$").sum().to_dict()
    fetches = layered[layered["phase"].astype(str) == "Fetch Batch"]
    assert (fetches["input_wait_s"] > 0).any(), fetches.filter(regex="_s$").sum().to_dict()
