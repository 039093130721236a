"""The PyTorch profiler's Chrome trace as the framework layer (``trace_merge.readers.torch_trace``).

Two kinds of input, both real PyTorch 2.13 output:

- ``tests/data/torch/ddp_gloo_2ranks`` (how it was made: ``tests/data/torch/README.md``): a 2-rank DDP-over-Gloo run,
  read and merged without torch installed -- parsing, metadata, the clock, damaged files, the merge's residual,
  the comm layer and the PyTorch words of the findings;
- fresh runs of ``tests/workloads/torch_profiled.py`` (marked ``torch``): a ``DataLoader(num_workers=2)`` loop under
  the profiler, input-bound and compute-bound, whose verdict must match the script's own clock within 10 points,
  and a 2-rank DDP run whose steps split into operators, DataLoader wait and communication.

One test (:func:`test_device_timeline_gives_kernel_au`) is written by hand, said so there: this machine has no GPU,
so no real trace has kernels; it holds the device lanes and the kernel-time AU to numbers known in advance.
"""
from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.tools import REPO, clean_env
from trace_merge.analysis import verdict_label
from trace_merge.errors import TraceInputError
from trace_merge.explain import verdict_text
from trace_merge.findings import words_of
from trace_merge.merge import merge_path
from trace_merge.readers import detect, read_any, torch_trace
from trace_merge.run import Run

FIXTURE = REPO / "tests" / "data" / "torch" / "ddp_gloo_2ranks"
WORKLOAD = REPO / "tests" / "workloads" / "torch_profiled.py"


def _trace(run: Path, rank: int) -> Path:
    (path,) = sorted((run / "torch" / f"rank-{rank}").glob("*.pt.trace.json*"))
    return path


def _truth(rank: int) -> dict:
    return json.loads((FIXTURE / "truth" / f"rank-{rank}.json").read_text())


# -- the stored real traces: no torch needed ------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1])
def test_reads_a_real_trace(rank: int) -> None:
    path = _trace(FIXTURE, rank)
    assert detect(path) == "torch"
    src = read_any(path)
    m, f = src.meta, src.frame
    assert src.kind == "torch" and src.warnings == []
    assert isinstance(m, torch_trace.TorchTraceMeta)
    assert (m.rank, m.rank_source, m.dist_rank, m.world_size, m.backend) == (rank, "path", rank, 2, "gloo")
    assert m.time_base == "base_time" and m.base_time_ns and m.pid == _truth(rank)["pid"]
    assert m.devices == [] and m.device_events == 0  # a CPU run: no device timeline
    assert m.skipped.get("fwdbwd", 0) > 0  # flow events are no rows
    assert set(f["layer"].astype(str)) == {"framework", "comm"}
    assert (f["rank"] == rank).all() and (f["pid"] == m.pid).all()
    cats = f.groupby("name", observed=True)["cat"].agg(lambda c: set(c.astype(str)))
    steps = f[f["name"].astype(str).str.startswith("ProfilerStep#")]
    # the profiler's step spans: markers (cat other), no step tag of their own; schedule(warmup=1) drops step 0
    assert set(steps["cat"].astype(str)) == {"other"} and steps["step"].isna().all()
    numbers = sorted(int(n.split("#")[1]) for n in steps["name"].astype(str))
    assert numbers == m.steps == list(range(1, len(m.steps) + 1))
    fetch = f[f["name"].astype(str).str.startswith("enumerate(DataLoader)#")]
    assert len(fetch) and set(fetch["cat"].astype(str)) == {"wait"} and fetch["step"].isna().all()
    assert cats["aten::addmm"] == {"compute"} and cats["Optimizer.step#SGD.step"] == {"compute"}
    assert cats["c10d::allreduce_"] == {"comm"}  # the launch on the calling thread: framework comm
    comm = f[f["layer"] == "comm"]
    assert "gloo:all_reduce" in set(comm["name"].astype(str)) and set(comm["cat"].astype(str)) == {"comm"}
    assert all(n.startswith("gloo:") for n in comm["name"].astype(str))
    assert "pt_gloo_runloop" in " ".join(m.threads[t] for t in set(comm["tid"].tolist()))
    # operators of a step carry its profiler step; nothing of the fetch does
    ops = f[(f["layer"] == "framework") & (f["cat"] == "compute")]
    assert ops["step"].notna().mean() > 0.9
    assert (f["end_ns"] == f["start_ns"] + f["dur_ns"]).all() and (f["dur_ns"] >= 0).all()


@pytest.mark.parametrize("rank", [0, 1])
def test_the_profilers_clock_is_the_hosts(rank: int) -> None:
    """A ``record_function`` around a 50 ms sleep lies inside the window ``time.time_ns()`` measured around it:
    ``baseTimeNanoseconds`` + ``ts`` is the host's real-time clock, to well under a millisecond."""
    f = read_any(_trace(FIXTURE, rank)).frame
    (row,) = f[f["name"] == "sleep_marker"].itertuples()
    p0, p1 = _truth(rank)["sleep_marker"]
    assert p0 <= row.start_ns < row.end_ns <= p1
    assert row.start_ns - p0 < 1_000_000 and p1 - row.end_ns < 1_000_000 and row.dur_ns >= 50_000_000


def test_streamed_parse_is_the_whole_file_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny read chunks (every event, number and string split across refills) give the same rows as the file in
    one piece, plain or gzipped, and as ``json.load`` of it."""
    gz = _trace(FIXTURE, 0)
    text = gzip.decompress(gz.read_bytes())
    plain = tmp_path / gz.name[:-3]
    plain.write_bytes(text)
    whole = read_any(plain).frame
    monkeypatch.setattr(torch_trace, "_CHUNK", 7)
    for path in (plain, gz):
        small = read_any(path).frame
        assert small.equals(whole)
    events = json.loads(text)["traceEvents"]
    kept = [e for e in events if e.get("ph") == "X" and isinstance(e.get("pid"), int) and e.get("cat") not in
            torch_trace.KNOWN_SKIPPED]
    assert len(whole) == len(kept)


def _bad(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("case", ["empty", "cut-half", "cut-end", "gz-cut", "gz-corrupt", "not-json", "array",
                                  "no-base-time", "bad-base-time", "garbage-between"])
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    text = gzip.decompress(_trace(FIXTURE, 0).read_bytes())
    name = "host_1.2.pt.trace.json"
    data = {
        "empty": b"",
        "cut-half": text[: len(text) // 2],
        "cut-end": text[:-3],
        "not-json": b"\x00\x01 this is no trace",
        "array": b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]',
        "no-base-time": text.replace(b'"baseTimeNanoseconds"', b'"someOtherField"'),
        "bad-base-time": text.replace(b'"baseTimeNanoseconds": ', b'"baseTimeNanoseconds": -'),
        "garbage-between": text.replace(b'},\n  {', b'}, @@ {', 1),
    }.get(case)
    if case == "gz-cut":
        name, data = name + ".gz", gzip.compress(text)[:-200]
    elif case == "gz-corrupt":
        raw = bytearray(gzip.compress(text))
        raw[len(raw) // 2: len(raw) // 2 + 64] = bytes(64)
        name, data = name + ".gz", bytes(raw)
    path = _bad(tmp_path, name, data)
    with pytest.raises(TraceInputError) as err:
        torch_trace.read(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    expected = {"empty": "empty file", "cut-half": "truncated", "cut-end": "truncated", "gz-cut": "truncated",
                "gz-corrupt": "gzip", "not-json": "not", "array": "JSON array", "no-base-time": "no absolute time",
                "bad-base-time": "baseTimeNanoseconds", "garbage-between": "invalid JSON"}[case]
    assert expected in msg, msg


def test_detect_by_name_and_by_content(tmp_path: Path) -> None:
    text = gzip.decompress(_trace(FIXTURE, 0).read_bytes())
    renamed = _bad(tmp_path, "profile.json", text)  # not the handler's name: told by its fields
    assert detect(renamed) == "torch" and read_any(renamed).meta.rank == 0
    other = _bad(tmp_path, "config.json", b'{"lr": 0.1}')
    with pytest.raises(TraceInputError, match="neither a Horovod timeline nor a PyTorch profiler trace"):
        detect(other)


def test_merged_run_is_aligned_and_layered() -> None:
    """The stored DDP run merged: the framework layer on the app clock (residual 0 outside; the profiler counts its
    steps over both epochs, the loop per epoch: the ordinal numbering matches them), collectives as the comm layer,
    and the layered breakdown's step split into operators, DataLoader wait and communication."""
    m = merge_path(FIXTURE)
    res = m.residual
    assert res.numbering == "ordinal" and res.checked > 1000 and res.outside == 0 and res.max_outside_ns == 0
    assert {"app", "framework", "comm"} <= set(m.info.rows_per_layer)
    run = Run.open(FIXTURE)
    a = run.analyse()
    lay = a.layered
    iters = lay[lay["phase"] == "Training Iteration"]
    fetch = lay[lay["phase"] == "Call to Next Batch"]
    assert (iters["compute_s"] > 0).all() and (iters["comm_s"] > 0).any()
    assert (fetch["input_wait_s"] > 0).all()
    assert all("comm" in x and "framework" in x for x in lay["layers"].astype(str))
    v = a.verdict
    assert v.basis == "framework" and v.au_basis == "compute"
    assert any("inside a PyTorch profile window" in n and "DataLoader wait" in n for n in v.notes), v.notes
    for rank, row in a.input_bound.set_index("rank").iterrows():
        assert row["profiler"] == "PyTorch"
        assert abs(row["input_pct"] - _truth(int(rank))["input_pct"]) <= 10


def test_findings_name_the_dataloaders_knobs() -> None:
    """An input-bound PyTorch run is told PyTorch's knobs, not tf.data's."""
    run = Run.open(FIXTURE)
    a = run.analyse()
    text = " ".join(f.action for f in run.findings(a))
    assert "num_parallel_calls" not in text and "tf.data" not in text and "--tf-profile" not in text
    (verdict,) = [f for f in run.findings(a) if f.key.startswith("input_bound")]
    assert "DataLoader" in verdict.action or "--posix" in verdict.action
    words = words_of(a)
    assert words.framework == "PyTorch" and "num_workers" in words.parallel_input
    assert "prefetch_factor" in words.parallel_input and "persistent_workers" in words.parallel_input
    assert "pin_memory" in words.parallel_input


def test_device_timeline_gives_kernel_au(tmp_path: Path) -> None:
    """HAND-WRITTEN input, not real output (no GPU here): kernel and memcpy events as Kineto writes them on a GPU
    (``cat`` ``kernel``/``gpu_memcpy``, ``pid`` the device, ``tid`` the stream, ``args.device``/``args.stream``),
    beside a real-looking host side, on an app clock written with ``TimeLogger.record``. Four 100 ms step cycles
    whose kernels are busy 40 ms each: AU 40 % from the device timeline, where the host's operators (short
    launches) would say far less."""
    from timelogger import TimeLogger

    run = tmp_path / "run"
    t0 = 1_800_000_000_000_000_000
    tl = TimeLogger(run, rank=0, world_size=1)
    tl.set_epoch(0)
    base = t0 - 10**9
    events = []

    def us(ns: int) -> float:
        return (ns - base) / 1000

    for k in range(5):
        s = t0 + k * 100_000_000
        tl.set_step(k)
        tl.record("Call to Next Batch", s, s + 20_000_000, cat="wait")
        tl.record("Training Iteration", s + 20_000_000, s + 100_000_000, cat="compute")
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 7, "tid": 7, "ts": us(s - 1000),
             "dur": 100_000.0},
            {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter"
             ".__next__", "pid": 7, "tid": 7, "ts": us(s + 1000), "dur": 18_000.0},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": us(s + 21_000_000),
             "dur": 2_000.0},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
             "ts": us(s + 23_000_000), "dur": 10.0},
            {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7,
             "ts": us(s + 30_000_000), "dur": 40_000.0, "args": {"device": 0, "stream": 7, "correlation": k}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
             "ts": us(s + 22_000_000), "dur": 500.0, "args": {"device": 0, "stream": 7, "bytes": 4096}},
        ]
    tl.close()
    trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Hand-written GPU"}],
             "baseTimeNanoseconds": base, "traceEvents": events, "traceName": "hand-written"}
    path = run / "torch" / "rank-0" / "host_7.1.pt.trace.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(trace))
    src = read_any(path)
    dev = src.frame[src.frame["layer"] == "device"]
    assert src.meta.devices == ["GPU 0 (Hand-written GPU)"] and src.meta.device_events == 10
    assert sorted(set(dev["cat"].astype(str))) == ["compute", "other"] and dev["step"].isna().all()
    assert set(dev["tid"]) == {7} and set(dev["pid"]) == {7}  # stream 7 of device 0, the profiled process's lane
    assert dev.loc[dev["cat"] == "other", "bytes"].tolist() == [4096] * 5
    v = Run.open(run).verdict()
    # cycles 1..4 (step 0 is the warm-up) of 100 ms; the last runs to the end of its own step
    assert v.au_basis == "kernels" and v.au_pct == pytest.approx(40.0, abs=0.5)
    assert v.input_pct == pytest.approx(20.0, abs=0.5)
    assert any("accelerator's own timeline" in n for n in v.notes), v.notes
    assert "GPU kernel time" in verdict_text(v)


# -- fresh runs: torch needed ---------------------------------------------------------------------------------


def _profiled_run(tmp: Path, *args: str) -> "tuple[Path, dict]":
    run, out = tmp / "run", tmp / "out.json"
    env = clean_env(PYTHONPATH=os.pathsep.join(x for x in (str(REPO), os.environ.get("PYTHONPATH", "")) if x))
    p = subprocess.run([sys.executable, str(WORKLOAD), str(run), str(out), *args], env=env, capture_output=True,
                       text=True, timeout=300, cwd=tmp)
    assert p.returncode == 0, f"rc={p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return run, json.loads(out.read_text())


VARIANTS = {"input": ("--item-ms", "6", "--step-ms", "2"),
            "compute": ("--item-ms", "0.2", "--step-ms", "60", "--samples", "64", "--gz")}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pytest.importorskip("torch")
    return {kind: _profiled_run(tmp_path_factory.mktemp(f"torch-{kind}"), *args) for kind, args in VARIANTS.items()}


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["input", "compute"])
def test_verdict_matches_the_scripts_own_clock(profiled: dict, kind: str) -> None:
    run_dir, truth = profiled[kind]
    run = Run.open(run_dir)
    v = run.verdict()
    assert v.basis == "framework", v.notes  # the PyTorch profile covers most step cycles
    assert abs(v.input_pct - truth["input_pct"]) <= 10 and abs(v.au_pct - truth["au_pct"]) <= 10, (v, truth)
    # the same verdict as the script's clock gives, unless that lies within a point of a threshold (5 %, 20 %)
    if min(abs(truth["input_pct"] - t) for t in (5.0, 20.0)) > 1.0:
        assert v.label == verdict_label(truth["input_pct"]), (v, truth)
    if kind == "input":
        assert v.label == "highly input-bound", (v, truth)
    else:  # ~3 % of input wait on an idle machine (each fetch's hand-off from the workers); more on a loaded one
        assert truth["input_pct"] < 15 and v.label in ("not input-bound", "moderately input-bound"), (v, truth)
    assert any("PyTorch profile window" in n for n in v.notes), v.notes
    trace = _trace(run_dir, 0)
    assert trace.name.endswith(".gz") == (kind == "compute")
    assert trace.name.startswith(f"{socket.gethostname()}_{truth['pid']}.")


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["input", "compute"])
def test_real_trace_on_the_app_clock(profiled: dict, kind: str) -> None:
    run_dir, truth = profiled[kind]
    m = merge_path(run_dir)
    res = m.residual
    assert res.checked > 100 and res.outside == 0 and res.numbering == "ordinal", res
    f = m.frame
    (row,) = f[f["name"] == "sleep_marker"].itertuples()
    p0, p1 = truth["sleep_marker"]
    assert p0 <= row.start_ns < row.end_ns <= p1
    # each operator the profiler saw inside a step lies inside the step's body as the script timed it
    ops = f[(f["layer"] == "framework") & (f["cat"] == "compute")]
    bodies = np.array([(s, e) for _, s, e in truth["stepped"]], dtype=np.int64)
    at = np.searchsorted(bodies[:, 0], ops["start_ns"].to_numpy(), side="right") - 1
    inside = (at >= 0) & (ops["end_ns"].to_numpy() <= bodies[np.maximum(at, 0), 1] + 1_000_000)
    assert inside.mean() > 0.9


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> "tuple[Path, dict]":
    pytest.importorskip("torch")
    run, truth = _profiled_run(tmp_path_factory.mktemp("torch-ddp"), "--world", "2", "--port", "29547",
                               "--item-ms", "4", "--step-ms", "6", "--samples", "24")
    return run, truth


@pytest.mark.torch
def test_ddp_over_gloo_splits_the_step(ddp_run: "tuple[Path, dict]") -> None:
    """Two ranks, DDP over Gloo: each rank's trace is read as its rank (directory and process group agree), the
    Gloo all-reduces are the comm layer, and the step splits into operators, DataLoader wait and communication."""
    run_dir, _ = ddp_run
    for rank in (0, 1):
        meta = read_any(_trace(run_dir, rank)).meta
        assert (meta.rank, meta.dist_rank, meta.world_size) == (rank, rank, 2)
    run = Run.open(run_dir)
    a = run.analyse()
    lay = a.layered
    it = lay[lay["phase"] == "Training Iteration"].groupby("rank")[["compute_s", "comm_s", "time_s"]].sum()
    fetch = lay[lay["phase"] == "Call to Next Batch"].groupby("rank")["input_wait_s"].sum()
    assert sorted(it.index) == [0, 1] and (it["compute_s"] > 0).all() and (it["comm_s"] > 0).all()
    assert (fetch > 0).all()
    comm = run.frame[run.frame["layer"] == "comm"]
    assert set(comm["rank"]) == {0, 1} and "gloo:all_reduce" in set(comm["name"].astype(str))
    assert run.residual.outside == 0 and run.residual.checked > 100
    assert a.verdict.basis == "framework"
