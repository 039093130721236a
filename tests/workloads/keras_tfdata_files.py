"""A Keras ``model.fit`` over a ``tf.data`` pipeline that reads real files, with or without ``.prefetch``.

``python keras_tfdata_files.py make-data DIR [--files 256] [--bytes 16384]``
    writes ``DIR/sample-<i>.bin`` (random bytes; each file is one sample: its first 1,024 bytes as features); run
    it outside the launcher so the traced run holds only the training job's I/O.

``python keras_tfdata_files.py train DIR [--prefetch] [--epochs 2] [--batch 16] [--decode-ms 3] [--hidden 1024]``
    ``from_tensor_slices(paths).map(read_file + decode).batch(batch)``: ``tf.io.read_file`` reads each file
    (TensorFlow's C++ file system), the decode is ``tf.io.decode_raw`` plus a ``tf.py_function`` that sleeps
    ``decode-ms`` per sample (a costly decoder). ``--prefetch`` ends the pipeline in ``.prefetch(tf.data.AUTOTUNE)``
    (the tf.data guide's advice: the next batch is read while the step computes); without it the map is synchronous
    (TensorFlow's injected prefetch and its map-and-batch fusion, which reads ahead too, are switched off), so every
    batch is read inside the step's fetch. The model is a two-layer MLP (``--hidden 1024``: a step of ~15 ms on a
    CPU): the job is input-bound either way. Only
    ``TimeLoggerCallback()`` is added. Prints ``RESULT {json}`` (steps, final loss).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def make_data(out: Path, files: int, nbytes: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (out / f"sample-{i:04d}.bin").write_bytes(os.urandom(nbytes))


def pipeline(paths: list, batch: int, decode_ms: float, prefetch: bool):
    import tensorflow as tf

    def slow_decode(x):
        time.sleep(decode_ms / 1000)  # the decoder's cost; the GIL is released while sleeping
        return x

    def load(path):
        x = tf.cast(tf.io.decode_raw(tf.io.read_file(path), tf.uint8)[:1024], tf.float32) / 255.0 - 0.5
        x = tf.reshape(tf.py_function(slow_decode, [x], tf.float32), (1024,))  # the first 1 KiB is the sample
        return x, tf.cast(tf.reduce_sum(x) > 0, tf.int32)

    ds = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(batch, drop_remainder=True)
    if prefetch:
        return ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False  # TF >= 2.11 would add the prefetch itself
    # and would fuse map + batch into MapAndBatch, whose runner thread computes batches ahead: a prefetch too
    options.experimental_optimization.map_and_batch_fusion = False
    return ds.with_options(options)


def train(data: Path, prefetch: bool, epochs: int, batch: int, decode_ms: float, hidden: int) -> dict:
    import tensorflow as tf

    from timelogger.keras import TimeLoggerCallback

    paths = sorted(str(p) for p in data.glob("sample-*.bin"))
    if not paths:
        raise SystemExit(f"{data}: no sample-*.bin files; run `make-data` first")
    model = tf.keras.Sequential([
        tf.keras.Input((1024,)),
        tf.keras.layers.Dense(hidden, activation="relu"),
        tf.keras.layers.Dense(hidden, activation="relu"),
        tf.keras.layers.Dense(2),
    ])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    cb = TimeLoggerCallback()
    hist = model.fit(pipeline(paths, batch, decode_ms, prefetch), epochs=epochs, verbose=0, callbacks=[cb])
    return {"tf": tf.__version__, "steps": cb.step, "loss": hist.history["loss"]}


def main(argv: list) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("make-data", "train"))
    ap.add_argument("data", type=Path)
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--bytes", type=int, default=16384)
    ap.add_argument("--prefetch", action="store_true")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--decode-ms", type=float, default=3.0)
    ap.add_argument("--hidden", type=int, default=1024)
    a = ap.parse_args(argv)
    if a.mode == "make-data":
        make_data(a.data, a.files, a.bytes)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        print("RESULT", json.dumps(train(a.data, a.prefetch, a.epochs, a.batch, a.decode_ms, a.hidden)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
