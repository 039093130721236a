"""Keras callback and TF-profiler helper on a real tiny ``model.fit`` (one TF subprocess for the module)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.tools import run_py
from tests.helpers.traces import app_files, intervals, meta, read_pfw

pytestmark = pytest.mark.tf

_FIT = """
import json, sys
import numpy as np
import tensorflow as tf
from timelogger import TimeLogger
from timelogger.keras import TimeLoggerCallback

tl = TimeLogger(sys.argv[1] if len(sys.argv) > 1 else {run_dir!r}, rank=0, world_size=1)
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
with tl.tf_profile() as prof:
    hist = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[TimeLoggerCallback(tl)])
tl.close()
print("RESULT", json.dumps({{"tf": tf.__version__, "marker_wall_ns": prof.marker_wall_ns,
                            "logdir": str(prof.logdir), "loss": hist.history["loss"]}}))
"""


@pytest.fixture(scope="module")
def fit_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pytest.importorskip("tensorflow")
    run_dir = tmp_path_factory.mktemp("tfrun")
    out = run_py(_FIT.format(run_dir=str(run_dir)), run_dir, timeout=180)
    result = json.loads(out.stdout.split("RESULT", 1)[1])
    (path,) = app_files(run_dir)
    return {"run_dir": run_dir, "result": result, "events": read_pfw(path)}


def test_keras_callback_records_fit_epochs_batches(fit_run: dict) -> None:
    ev = fit_run["events"]
    assert len(intervals(ev, "Train Loop")) == 1
    epochs = intervals(ev, "Epoch")
    assert [e["args"]["epoch"] for e in epochs] == [0, 1]
    assert all("loss" in e["args"]["metrics"] for e in epochs)
    batches = intervals(ev, "Training Iteration")
    assert len(batches) == 8 and all(b["cat"] == "compute" for b in batches)  # 64 samples / 16, 2 epochs
    assert [b["args"]["step"] for b in batches] == list(range(8))
    assert [b["args"]["batch"] for b in batches] == [0, 1, 2, 3] * 2
    assert all(b["args"]["includes_input_wait"] is True for b in batches)  # Keras fetches inside the batch
    assert [b["args"]["epoch"] for b in batches] == [0] * 4 + [1] * 4
    train = intervals(ev, "Train Loop")[0]
    for e in epochs + batches:  # contained in the fit interval, batches in their epoch
        assert train["ts"] <= e["ts"] and e["ts"] + e["dur"] <= train["ts"] + train["dur"]
    for b in batches:
        ep = epochs[b["args"]["epoch"]]
        assert ep["ts"] <= b["ts"] and b["ts"] + b["dur"] <= ep["ts"] + ep["dur"]


def test_tf_profile_writes_xplane_and_anchor_metadata(fit_run: dict) -> None:
    run_dir, result, ev = fit_run["run_dir"], fit_run["result"], fit_run["events"]
    logdir = run_dir / "tf" / "rank-0"
    assert Path(result["logdir"]) == logdir
    xplanes = list(logdir.glob("plugins/profile/*/*.xplane.pb"))
    assert len(xplanes) == 1 and xplanes[0].stat().st_size > 1000
    (prof,) = meta(ev, "tf_profile")
    args = prof["args"]
    assert args["marker"] == "timelogger_anchor" and args["tf_version"] == result["tf"]
    assert args["marker_wall_ns"] == result["marker_wall_ns"]
    assert args["start_wall_ns"] <= args["marker_wall_ns"] and Path(args["logdir"]) == logdir
    assert 0 <= args["marker_uncertainty_ns"] < 50_000_000
    assert b"timelogger_anchor" in xplanes[0].read_bytes()  # the marker TraceMe is in the profile
    train = intervals(ev, "Train Loop")[0]
    assert args["marker_wall_ns"] / 1000 < train["ts"]  # the profile started before fit
