"""Every finding rule fires on a real run built to trigger it and stays silent on one built not to.

The runs are ``tests/workloads/loader_knobs.py`` (the README's custom loop with input-pipeline knobs) under
``timelogger run --posix`` (the DFTracer preload), one rank or ``mpiexec -n 2``; the framework-coverage rule is
checked with the launcher's ``--tf-profile`` window. ``producers_idle`` is also checked on a Keras ``model.fit`` over a
``tf.data`` file pipeline with and without ``.prefetch`` (``tests/workloads/keras_tfdata_files.py``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import REPO, clean_env
from trace_merge.cli import main as trace_merge
from trace_merge.run import Run

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "loader_knobs.py"
BIN = Path(sys.executable).parent
INPUT_KEYS = {"input_bound", "input_bound_storage", "input_bound_not_storage", "input_bound_no_fs_layer"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("knobs") / "data"
    d.mkdir()
    for i in range(8):
        (d / f"s{i}.bin").write_bytes(os.urandom(16 << 20))
    return d


def _run(data: Path, out: Path, *knobs: str, ranks: int = 1, posix: bool = True, timeline: bool = False,
         tf_profile: str = "") -> Path:
    if posix:
        pytest.importorskip("dftracer")
    env = clean_env(PYTHONPATH=str(REPO), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", DFTRACER_INC_METADATA="1")
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks)] if ranks > 1 else []
    cmd += [str(BIN / "timelogger"), "run", "-o", str(out)]
    cmd += ["--posix", "--posix-filter", str(data)] if posix else []
    cmd += ["--horovod-timeline"] if timeline else []
    cmd += [f"--tf-profile={tf_profile}"] if tf_profile else []
    cmd += ["--", sys.executable, str(WORKLOAD), str(data), *knobs]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def keys(run_dir: Path) -> list[str]:
    return [f.key for f in Run.open(run_dir).findings()]


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory) -> dict[str, Path]:
    """One run per shape, made once for the module."""
    root = tmp_path_factory.mktemp("knob-runs")
    shapes = {
        "storage": ("--step-ms", "5"),  # 16 MB samples read in 1 MiB calls, no decode: the reads are the wait
        "decode": ("--step-ms", "5", "--decode-ms", "30"),  # the wait is the decode after a fast read
        "compute": ("--step-ms", "80", "--decode-ms", "1", "--read-bytes", "65536"),
        "small": ("--step-ms", "50", "--chunk", "4096"),
        "first": ("--step-ms", "5", "--decode-ms", "1", "--epochs", "3", "--first-epoch-ms", "60"),
        "prefetch": ("--step-ms", "5", "--readers", "1", "--prefetch", "1"),  # "storage" read two samples ahead
        # 256 KiB of each file in 4 KiB pieces, each opened, sought and closed: a loader opening a file per sample
        "meta": ("--step-ms", "1", "--chunk", "4096", "--read-bytes", "262144", "--open-per-chunk"),
    }
    return {name: _run(data, root / name, *knobs) for name, knobs in shapes.items()}


def test_storage_bound_input(runs):
    assert keys(runs["storage"])[0] == "input_bound_storage"
    assert "input_bound_storage" not in keys(runs["decode"])


def test_decode_bound_input(runs):
    assert keys(runs["decode"])[0] == "input_bound_not_storage"
    assert "input_bound_not_storage" not in keys(runs["storage"])


def test_compute_bound(runs):
    found = keys(runs["compute"])
    assert found[0] == "compute_bound" and not INPUT_KEYS & set(found)
    assert "compute_bound" not in keys(runs["storage"])


def test_small_reads(runs):
    assert "small_reads" in keys(runs["small"])
    assert "small_reads" not in keys(runs["storage"])  # the same files read in 1 MiB calls


def test_first_epoch_effect(runs):
    assert "first_epoch_slow" in keys(runs["first"])
    assert "first_epoch_slow" not in keys(runs["storage"])


def test_rereads_every_epoch(runs):
    """The same 128 MiB read from the file system in both epochs: a cache candidate; 512 KB read twice is not."""
    assert "rereads_every_epoch" in keys(runs["storage"])
    assert "rereads_every_epoch" not in keys(runs["compute"])


def test_producers_idle_without_prefetch(runs):
    """The storage run reads only when the step asks; with a reader thread two samples ahead (still
    input-bound: the reads are slower than the step) the reads run during the steps."""
    assert "producers_idle" in keys(runs["storage"])
    ahead = keys(runs["prefetch"])
    assert ahead[0] in INPUT_KEYS and "producers_idle" not in ahead


def test_metadata_heavy(runs):
    assert "metadata_heavy" in keys(runs["meta"])
    assert "metadata_heavy" not in keys(runs["small"])  # as many small reads, one open per file
    assert "metadata_heavy" not in keys(runs["storage"])


def test_no_file_system_layer_and_no_visible_wait(data, tmp_path, runs):
    assert keys(_run(data, tmp_path / "nofs", "--step-ms", "5", posix=False))[0] == "input_bound_no_fs_layer"
    assert "input_bound_no_fs_layer" not in keys(runs["storage"])
    untimed = _run(data, tmp_path / "untimed", "--untimed-input", "--decode-ms", "10", posix=False)
    assert keys(untimed)[0] == "no_input_wait_seen"
    assert "no_input_wait_seen" not in keys(runs["storage"])


def test_low_profile_coverage(data, tmp_path, runs):
    """A TF profile of steps 2-4 of 16 (the launcher's window on a custom loop): the split is a sample."""
    pytest.importorskip("tensorflow")
    sampled = _run(data, tmp_path / "sampled", "--step-ms", "5", "--decode-ms", "30", "--tf-step", posix=False,
                   tf_profile="2:4")
    assert "low_profile_coverage" in keys(sampled)
    assert "low_profile_coverage" not in keys(runs["decode"])  # no framework layer: nothing sampled


@pytest.mark.horovod
def test_rank_imbalance_and_exposed_communication(data, tmp_path):
    pytest.importorskip("horovod.tensorflow")
    skew = _run(data, tmp_path / "skew", "--step-ms", "10", "--decode-ms", "1", "--skew-ms", "20", ranks=2)
    even = _run(data, tmp_path / "even", "--step-ms", "10", "--decode-ms", "1", ranks=2)
    assert "rank_imbalance" in keys(skew) and "rank_imbalance" not in keys(even)
    comm = _run(data, tmp_path / "comm", "--step-ms", "5", "--allreduce-mb", "16", ranks=2, posix=False,
                timeline=True)
    assert "comm_exposed" in keys(comm) and "comm_exposed" not in keys(even)


def test_findings_cli_and_summary_json(runs, capsys):
    assert trace_merge(["findings", str(runs["decode"])]) == 0
    out = capsys.readouterr().out
    assert "1. [high] The job is highly input-bound, but the wait is not the file system" in out
    assert "next step: parallelise the work after the read" in out
    assert trace_merge(["summary", str(runs["decode"])]) == 0
    text = capsys.readouterr().out
    assert "next step: parallelise" in text and "findings (top" in text and "  AU: accelerator utilisation" in text


def test_accelerator_idle_and_its_causes(runs, capsys):
    """100 - AU, split into input wait and other time, and what the input phases were made of: the storage run's
    reads are the file system's, the decode run's are not."""
    import json

    for name, top in (("storage", "file system"), ("decode", "not observed")):
        assert trace_merge(["summary", str(runs[name]), "--json"]) == 0
        s = json.loads(capsys.readouterr().out)
        idle, au = s["idle"], s["verdict"]["au_pct"]
        assert abs(idle["idle_pct"] - (100 - au)) < 1e-9
        assert abs(idle["input_wait_pct"] + idle["other_pct"] - idle["idle_pct"]) < 0.5
        assert max(idle["input_phases_pct"], key=idle["input_phases_pct"].get) == \
            {"file system": "fs", "not observed": "not_observed"}[top]
        assert trace_merge(["summary", str(runs[name])]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("accelerator idle: "))
        assert line.split("the input phases' time: ")[1].startswith(top), line


def test_a_log_without_training_steps_says_so_and_nothing_about_ranks(darshan_logs):
    """A plain Darshan log (IOR over HDF5, 4 ranks): no training steps, so no input-wait advice and no straggler
    call from its per-rank I/O times."""
    found = keys(darshan_logs / "ior_hdf5_example.darshan")
    assert found == ["no_training_steps"]


def test_producers_idle_measures_the_overlap_in_a_real_run(data, tmp_path):
    """Without the POSIX preload: the app's own read phases are the producers. Read in the step's fetch, none of
    them runs while the step computes; read by a thread one sample ahead, they run during most of the compute
    (the loop is still input-bound: a read takes 20 ms, a step 5 ms)."""
    sync = Run.open(_run(data, tmp_path / "sync", "--step-ms", "5", "--io-ms", "20", posix=False))
    ahead = Run.open(_run(data, tmp_path / "ahead", "--step-ms", "5", "--io-ms", "20", "--readers", "1",
                          "--prefetch", "1", posix=False))
    for run, fires in ((sync, True), (ahead, False)):
        a = run.analyse()
        assert a.verdict.label == "highly input-bound"
        ib = a.input_bound
        in_comp = float(ib["producer_in_compute_s"].sum()) / float(ib["compute_s"].sum())
        assert (in_comp < 0.05) if fires else (in_comp > 0.5), in_comp
        assert ("producers_idle" in [f.key for f in run.findings(a)]) is fires


def _keras_style(prefetch: bool):
    """Eight Keras batches of 50 ms timed whole (the batch holds its fetch), a TF profile of each (IteratorGetNext
    20 ms, then the train function), and a tf.data thread's pread64 calls (POSIX layer): with `.prefetch` they run
    while the batch computes (and on into the wait), without it only inside IteratorGetNext."""
    import numpy as np

    from trace_merge.schema import concat_frames, to_frame

    ms, base = 1_000_000, 10**18
    starts = base + np.arange(8) * 50 * ms
    app = to_frame({"layer": "app", "cat": "compute", "name": "Training Iteration", "rank": 0, "pid": 1, "tid": 1,
                    "start_ns": starts, "end_ns": starts + 50 * ms, "epoch": 0, "step": list(range(8))})
    fw = to_frame({"layer": "framework", "cat": ["wait"] * 8 + ["other"] * 8,
                   "name": ["IteratorGetNext"] * 8 + ["__inference_train_function"] * 8, "rank": 0, "pid": 1,
                   "tid": 3, "start_ns": np.r_[starts, starts + 20 * ms], "end_ns": np.r_[starts + 20 * ms,
                                                                                             starts + 50 * ms]})
    rs = starts + (25 * ms if prefetch else 2 * ms)  # ahead: 25-45 ms (compute), else 2-18 ms (the wait)
    reads = to_frame({"layer": "posix", "cat": "io", "name": "pread64", "rank": 0, "pid": 1, "tid": 7,
                      "start_ns": rs, "end_ns": rs + (20 if prefetch else 16) * ms, "bytes": 1 << 20,
                      "file": "/data/part-0.h5"})
    return concat_frames([app, fw, reads])


@pytest.mark.parametrize("prefetch", [False, True])
def test_producers_idle_on_keras_style_batches(prefetch):
    from trace_merge import analysis, findings

    a = analysis.summarise(_keras_style(prefetch))
    assert a.verdict.label == "highly input-bound" and a.verdict.basis == "framework"
    ib = a.input_bound.iloc[0]
    share = ib["producer_in_compute_s"] / ib["producer_s"]  # the in-step reads that ran while the batch computed
    assert share == pytest.approx(1.0 if prefetch else 0.0)
    assert ("producers_idle" in [f.key for f in findings.findings(a)]) is not prefetch


KERAS_FILES = Path(__file__).resolve().parent / "workloads" / "keras_tfdata_files.py"


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("keras-files") / "data"
    p = subprocess.run([sys.executable, str(KERAS_FILES), "make-data", str(d), "--files", "256"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return d


@pytest.mark.tf
@pytest.mark.findings_real
@pytest.mark.parametrize("prefetch", [True, False])
def test_producers_idle_on_a_real_keras_fit(keras_files, tmp_path, prefetch):
    """``model.fit`` over ``from_tensor_slices(paths).map(read_file + 3 ms decode).batch(16)``, 256 files, 2
    epochs, under ``--posix --tf-profile``: input-bound either way (48 ms of decode per batch, a step of ~15 ms).
    With ``.prefetch(AUTOTUNE)`` tf.data's thread reads while the batch computes (measured: 30 % of the in-step
    reads on an idle 2-core machine, 45-58 % beside two CPU hogs, at 0.9-2x the rate of the wait); without it (no
    injected prefetch, no map-and-batch fusion) the reads run inside ``IteratorGetNext`` only (0 %)."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("dftracer")
    out = tmp_path / "run"
    cmd = [str(BIN / "timelogger"), "run", "-o", str(out), "--posix", "--posix-filter", str(keras_files),
           "--tf-profile", "--", sys.executable, str(KERAS_FILES), "train", str(keras_files)]
    env = clean_env(PYTHONPATH=str(REPO), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    p = subprocess.run(cmd + (["--prefetch"] if prefetch else []), env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and '"steps": 32' in p.stdout, p.stderr[-3000:]
    assert list((out / "posix").glob("*.pfw*"))
    run = Run.open(out)
    f = run.frame
    # the DFTracer preload sees TensorFlow's C++ file reads (tf.io.read_file: open, pread, close per file)
    reads = f[(f["layer"] == "posix") & (f["name"] == "pread") & f["file"].astype(str).str.contains("sample-")]
    assert reads["file"].nunique() == 256 and len(reads) >= 2 * 256
    # the pipeline is what it says: a Prefetch iterator, or the map pulled inline by the fetch (no MapAndBatch)
    iterators = set(f.loc[f["name"].astype(str).str.startswith("Iterator::Root"), "name"].astype(str))
    assert any("Prefetch" in x for x in iterators) is prefetch, iterators
    assert prefetch or not any("MapAndBatch" in x for x in iterators), iterators
    a = run.analyse()
    assert a.verdict.basis == "framework" and a.verdict.label in ("moderately input-bound", "highly input-bound")
    ib = a.input_bound
    work, in_comp = float(ib["producer_s"].sum()), float(ib["producer_in_compute_s"].sum())
    share = in_comp / work  # the in-step reads that ran while the step computed
    assert (share > 0.1) if prefetch else (share < 0.02), (share, work)
    assert ("producers_idle" in [x.key for x in run.findings(a)]) is not prefetch


def test_rereads_cache_size_is_what_one_rank_reads_each_epoch():
    """Two ranks, three epochs; each reads its 20 MB shard per epoch, and epoch 0 also reads 17 MB of file checks.
    By hand: epoch 0 = 2 x 37 MB; what a rank re-reads (and must cache) is 20 MB, not 74 / 2 = 37 MB."""
    import numpy as np

    from trace_merge import analysis, findings
    from trace_merge.schema import to_frame

    ms, base, rows = 1_000_000, 10**18, []
    for rank in (0, 1):
        t = base
        for epoch in range(3):
            sizes = [5_000_000] * 4 + ([17_000_000] if epoch == 0 else [])
            for step, size in enumerate(sizes):
                rows.append(("Training Iteration", "compute", rank, t, t + 10 * ms, epoch, step, None, None))
                rows.append(("Load File", "io", rank, t + ms, t + 6 * ms, epoch, step, size, f"/d/r{rank}-{step}.h5"))
                t += 11 * ms
    name, cat, rank, s, e, ep, st, nb, f = zip(*rows)
    frame = to_frame({"layer": "app", "name": list(name), "cat": list(cat), "rank": list(rank), "pid": 1, "tid": 1,
                      "start_ns": np.array(s), "end_ns": np.array(e), "epoch": list(ep), "step": list(st),
                      "bytes": list(nb), "file": list(f)})
    found = {x.key: x for x in findings.findings(analysis.summarise(frame))}
    assert "epoch 0 read 74.0 MB" in found["rereads_every_epoch"].evidence
    assert found["rereads_every_epoch"].action.startswith("cache it when 20.0 MB per rank fits")
