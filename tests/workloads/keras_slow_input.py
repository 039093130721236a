"""An input-bound Keras job: ``model.fit`` on a ``from_generator`` pipeline reading HDF5 with a slow read.

``python keras_slow_input.py make-data DIR [--files 4] [--batches-per-file 2] [--batch 16]``
    writes ``DIR/part-<i>.h5`` (datasets ``x``: float32 ``(n, 8, 8, 1)``, ``y``: int32 ``(n,)``); run it outside
    the launcher so the traced run holds only the training job's I/O.

``python keras_slow_input.py train DIR [--epochs 2] [--batch 16] [--sleep-ms 40] [--profile-batches SPEC]``
    trains a tiny conv net with ``model.fit(..., callbacks=[TimeLoggerCallback()])`` (with
    ``profile_batches=SPEC`` when given, else the launcher's ``--tf-profile`` decides); each batch is one HDF5
    slice read followed by ``time.sleep(sleep_ms)``, inside the tf.data generator, so the step waits for input
    far longer than it computes. Nothing else is instrumented: this is what a user who only adds the callback
    gets. Prints ``RESULT {json}`` (TF version, batches per epoch, final loss).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def make_data(out: Path, files: int, batches_per_file: int, batch: int) -> None:
    import h5py
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n = batches_per_file * batch
    for i in range(files):
        x = rng.normal(size=(n, 8, 8, 1)).astype("float32")
        y = (x.reshape(n, -1).mean(axis=1) > 0).astype("int32")
        with h5py.File(out / f"part-{i}.h5", "w") as f:
            f.create_dataset("x", data=x)
            f.create_dataset("y", data=y)


def batches(paths: list, batch: int, sleep_s: float):
    """Every batch of every file in order: one HDF5 slice read each, made slow by ``sleep_s``."""
    import h5py

    for path in paths:
        with h5py.File(path, "r") as f:
            n = f["y"].shape[0]
            for lo in range(0, n - batch + 1, batch):
                x = f["x"][lo:lo + batch]
                y = f["y"][lo:lo + batch]
                time.sleep(sleep_s)  # a slow file system / decoder
                yield x, y


def train(data: Path, epochs: int, batch: int, sleep_ms: float, profile_batches: "str | None") -> dict:
    import tensorflow as tf

    from timelogger.keras import TimeLoggerCallback

    paths = sorted(str(p) for p in data.glob("part-*.h5"))
    if not paths:
        raise SystemExit(f"{data}: no part-*.h5 files; run `make-data` first")
    spec = (tf.TensorSpec((batch, 8, 8, 1), tf.float32), tf.TensorSpec((batch,), tf.int32))
    ds = tf.data.Dataset.from_generator(lambda: batches(paths, batch, sleep_ms / 1000), output_signature=spec)
    model = tf.keras.Sequential([
        tf.keras.Input((8, 8, 1)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(2),
    ])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    cb = TimeLoggerCallback() if profile_batches is None else TimeLoggerCallback(profile_batches=profile_batches)
    hist = model.fit(ds, epochs=epochs, verbose=0, callbacks=[cb])
    return {"tf": tf.__version__, "steps": cb.step, "loss": hist.history["loss"],
            "profile_window": None if cb.profile_window is None else list(cb.profile_window)}


def main(argv: list) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("make-data", "train"))
    ap.add_argument("data", type=Path)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--batches-per-file", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--sleep-ms", type=float, default=40.0)
    ap.add_argument("--profile-batches", default=None)
    a = ap.parse_args(argv)
    if a.mode == "make-data":
        make_data(a.data, a.files, a.batches_per_file, a.batch)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        print("RESULT", json.dumps(train(a.data, a.epochs, a.batch, a.sleep_ms, a.profile_batches)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
