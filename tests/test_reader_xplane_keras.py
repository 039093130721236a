"""Keras ``model.fit`` with TimeLoggerCallback and ``tl.tf_profile``: classification and steps, both TF versions.

TF 2.15 (tf.keras 2) wraps each step in a ``train`` TraceMe carrying ``epoch_num``/``step_num`` (steps
counted per epoch); Keras 3 (TF 2.21) emits no step TraceMe. In both, the batch is fetched on the
``tf_data_iterator_get_next`` thread while ``train_function``/``multi_step_on_iterator`` waits.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

tf = pytest.importorskip("tensorflow")

from trace_merge.merge import merge_path  # noqa: E402

pytestmark = pytest.mark.tf

FIT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import numpy as np
    import tensorflow as tf
    from timelogger import TimeLogger
    from timelogger.keras import TimeLoggerCallback

    tl = TimeLogger(Path(sys.argv[1]), rank=0, world_size=1)
    x = np.random.rand(64, 8).astype("float32")
    y = np.random.rand(64, 1).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b)).batch(8)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4), tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    with tl.tf_profile():
        model.fit(ds, epochs=2, verbose=0, callbacks=[TimeLoggerCallback(tl)])
    tl.close()
    """
)
EPOCHS, STEPS = 2, 8


@pytest.fixture(scope="module")
def fit_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("keras")
    script = tmp / "fit.py"
    script.write_text(FIT)
    run = tmp / "run"
    subprocess.run([sys.executable, str(script), str(run)], check=True, timeout=300, capture_output=True,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return merge_path(run)


def test_fetch_is_wait_and_step_functions_are_wrappers(fit_run) -> None:
    fw = fit_run.frame[fit_run.frame["layer"] == "framework"]
    cats = fw.groupby("name", observed=True)["cat"].agg(lambda c: set(c.astype(str)))
    assert cats["IteratorGetNextOp::DoCompute"] == {"wait"}
    assert cats["Iterator::Root"] == {"wait"}
    step_fns = [n for n in cats.index if n.startswith("EagerLocalExecute: __inference_")
                and ("train_function" in n or "multi_step_on_iterator" in n)]
    assert step_fns and all(cats[n] == {"other"} for n in step_fns)
    # real work stays compute: the model's kernels
    assert any(c == {"compute"} for n, c in cats.items() if "MatMul" in n)


def test_steps_and_residual(fit_run) -> None:
    f = fit_run.frame
    app_iters = f[(f["layer"] == "app") & (f["name"] == "Training Iteration")]
    assert len(app_iters) == EPOCHS * STEPS
    train = f[(f["layer"] == "framework") & (f["name"] == "train")]
    res = fit_run.residual
    if len(train):  # tf.keras 2 (TF 2.15)
        # Keras counts per epoch, TimeLoggerCallback globally: the residual finds the per-epoch match
        assert res.numbering == "per_epoch"
        assert res.checked == EPOCHS * STEPS and res.outside == 0
        assert sorted(zip(train["epoch"], train["step"])) == [(e, s) for e in range(EPOCHS) for s in range(STEPS)]
    else:  # Keras 3: nothing carries a step, nothing to check
        assert res.checked == 0
    # framework rows inside an app Training Iteration get its (global) step
    fw = f[f["layer"] == "framework"]
    for it in app_iters.itertuples():
        inside = fw[(fw["start_ns"] >= it.start_ns) & (fw["end_ns"] <= it.end_ns)]
        assert len(inside) and inside["step"].fillna(-1).tolist() == [it.step] * len(inside)  # <NA> fails
        assert inside["epoch"].fillna(-1).tolist() == [it.epoch] * len(inside)
