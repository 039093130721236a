"""An input-bound ``model.fit`` under ``timelogger run``: what capture hands the analysis.

The workload (``tests/workloads/keras_slow_input.py``) trains a tiny conv net for 2 epochs x 8 steps on a
``from_generator`` pipeline whose HDF5 read sleeps 100 ms per batch, with nothing but
``callbacks=[TimeLoggerCallback()]``. The callback's ``Training Iteration`` contains the batch fetch, so only the
TF profiler's framework layer (``IteratorGetNext`` family, cat ``wait``) shows the stall; the checks below compute
that truth with the interval algebra the analysis uses. The fixtures return run directories for other modules'
analysis tests: ``keras_slow_run`` (``--posix --tf-profile``), ``keras_slow_run_noprofile`` (``--posix``).
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("h5py")

from tests.helpers.keras_fit import EPOCHS, SLEEP_MS, STEPS, WORKLOAD, check, fit_env, launch  # noqa: E402
from trace_merge.intervals import covered_ns, merge_intervals  # noqa: E402
from trace_merge.run import Run  # noqa: E402

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def keras_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("keras_slow") / "data"
    check(subprocess.run([sys.executable, str(WORKLOAD), "make-data", str(data), "--files", "4",
                          "--batches-per-file", str(STEPS // 4), "--batch", "16"],
                         env=fit_env(), capture_output=True, text=True, timeout=60))
    return data


@pytest.fixture(scope="module")
def keras_slow_run(keras_data: Path) -> Path:
    """``timelogger run --posix --tf-profile`` around the input-bound fit (whole fit profiled)."""
    return launch(keras_data, "run-profile", "--posix", "--tf-profile")


@pytest.fixture(scope="module")
def keras_slow_run_noprofile(keras_data: Path) -> Path:
    """The same job under ``timelogger run --posix`` only: no framework layer."""
    return launch(keras_data, "run-noprofile", "--posix")


@functools.lru_cache(maxsize=None)
def _frame(run_dir: Path):
    return Run.open(run_dir).frame


def _iterations(f):
    it = f[(f["layer"] == "app") & (f["name"] == "Training Iteration")].sort_values("start_ns")
    assert len(it) == EPOCHS * STEPS
    return it


def _wait_covered(f) -> tuple:
    """Per app ``Training Iteration``: ns covered by the union of framework ``wait`` rows, and its length."""
    it = _iterations(f)
    fw = f[(f["layer"] == "framework") & (f["cat"] == "wait")]
    ms, me = merge_intervals(fw["start_ns"].to_numpy(), fw["end_ns"].to_numpy())
    cov = covered_ns(ms, me, it["start_ns"].to_numpy(), it["end_ns"].to_numpy())
    return cov, (it["end_ns"] - it["start_ns"]).to_numpy(), it["step"].to_numpy()


def test_profile_window_shows_the_input_wait_inside_keras_batches(keras_slow_run: Path) -> None:
    f = _frame(keras_slow_run)
    fw = f[f["layer"] == "framework"]
    waits = set(fw.loc[fw["cat"] == "wait", "name"].astype(str))
    assert "IteratorGetNextOp::DoCompute" in waits and "Iterator::Root" in waits
    cov, dur, steps = _wait_covered(f)
    # The truth the analysis must reproduce: most of the Keras batch time is waiting for input ...
    assert cov.sum() >= 0.5 * dur.sum(), (cov.sum() / dur.sum(), cov / dur)
    # ... and after the first step (which also traces the train function) nearly all of it.
    steady = steps > 0
    assert cov[steady].sum() >= 0.8 * dur[steady].sum(), cov / dur
    # A typical batch waited about the sleep (tf.data's injected prefetch reads batch 1 while step 0 traces).
    assert np.median(cov) >= 0.8 * SLEEP_MS * 1e6, cov
    # The POSIX layer saw the HDF5 reads, on the same clock.
    px = f[(f["layer"] == "posix") & f["file"].astype(str).str.endswith(".h5")]
    assert len(px) and px["start_ns"].min() < _iterations(f)["end_ns"].max()


def test_launcher_records_the_profile_window(keras_slow_run: Path) -> None:
    manifest = json.loads((keras_slow_run / "manifest.json").read_text())
    assert manifest["layers"]["tf_profile"] == "all"
    assert manifest["env"]["TIMELOGGER_TF_PROFILE"] == "all"
    assert len(list((keras_slow_run / "tf" / "rank-0").glob("plugins/profile/*/*.xplane.pb"))) == 1


def test_keras_batches_say_they_include_the_input_wait(keras_slow_run: Path) -> None:
    it = _iterations(_frame(keras_slow_run))
    assert (it["cat"].astype(str) == "compute").all()
    args = [json.loads(a) for a in it["args"]]
    assert all(a["includes_input_wait"] is True for a in args)
    assert [a["batch"] for a in args] == list(range(STEPS)) * EPOCHS


def test_without_tf_profile_there_is_no_framework_layer(keras_slow_run_noprofile: Path) -> None:
    f = _frame(keras_slow_run_noprofile)
    assert not (f["layer"] == "framework").any()
    assert not (keras_slow_run_noprofile / "tf").exists()
    assert json.loads((keras_slow_run_noprofile / "manifest.json").read_text())["layers"]["tf_profile"] is False
    it = _iterations(f)  # the blind spot: the batches still hold the wait, and say so
    assert all(json.loads(a)["includes_input_wait"] for a in it["args"])
    assert (it["end_ns"] - it["start_ns"]).median() >= SLEEP_MS * 1e6


def test_profile_batches_window_covers_only_its_steps(keras_data: Path) -> None:
    """``TimeLoggerCallback(profile_batches="2:4")`` without the launcher option: steps 2 and 3 only."""
    run_dir = launch(keras_data, "run-window", train_opts=("--profile-batches", "2:4"))
    f = _frame(run_dir)
    cov, dur, steps = _wait_covered(f)
    assert set(steps[cov > 0]) == {2, 3}
    assert (cov[np.isin(steps, [2, 3])] >= 0.8 * dur[np.isin(steps, [2, 3])]).all()
    assert json.loads((run_dir / "manifest.json").read_text())["layers"]["tf_profile"] is False


def test_verdict_of_a_slow_keras_fit_is_input_bound_with_the_profile(keras_slow_run: Path) -> None:
    """The headline of the analysis: framework basis, ≥ 50 % input wait, the layered split agrees."""
    run = Run.open(keras_slow_run)
    v = run.verdict()
    assert v.basis == "framework" and v.input_pct >= 50.0 and v.label == "highly input-bound", v
    assert any(n.startswith("excluded: the first step") for n in v.notes)
    lay = run.layered_breakdown()
    it = lay[lay["phase"] == "Training Iteration"][["time_s", "input_wait_s"]].sum()
    assert it["input_wait_s"] >= 0.5 * it["time_s"]
    parts = run.analyse()
    assert parts.explanations and "most of them profiled" in parts.explanations[0]


def test_verdict_without_the_profile_names_the_blind_spot(keras_slow_run_noprofile: Path) -> None:
    v = Run.open(keras_slow_run_noprofile).verdict()
    assert v.label == "unknown" and v.au_pct is None  # the fetch is inside the batch: not seen
    blind = [n for n in v.notes if n.startswith("blind spot")]
    assert len(blind) == 1 and "--tf-profile" in blind[0], v.notes
