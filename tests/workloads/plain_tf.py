"""A TF2 training script with no TimeLogger code at all, as users write them, with its own wall-clock truth.

``python plain_tf.py --loop custom|keras [--gen-ms 8] [--step-ms 10] [--epochs 2] [--samples 12] [--prefetch]
[--host-ms 0]``

- ``custom``: a ``tf.data`` pipeline (a generator that sleeps per sample), ``for batch in dataset`` per epoch and a
  ``@tf.function`` step whose work is a sleep inside ``tf.py_function``;
- ``keras``: the same pipeline and step given to ``model.fit``.

The truth times the script's own waits with ``time.time_ns()`` (not TimeLogger): the custom loop its ``next()``
calls (the first of an epoch from its ``iter()``, the pipeline's start-up) and its steps, Keras its batches
(``on_train_batch_begin``/``end``) and the generator's sleeps. It prints ``TRUTH {json}`` over each epoch's
iteration (each epoch's first step excluded; time between epochs is its own term, ``between_s``, see
:func:`truth`):
``input_pct`` = time blocked in ``next()`` (Keras: the generator's sleeps, which the synchronous pipeline makes the
batch wait for), ``au_pct`` = time in the step (the custom loop's calls of its ``tf.function``; Keras: its batches less
the generator's sleeps in them, since a batch holds its fetch).
"""
from __future__ import annotations

import argparse
import gc
import json
import time

from tfdata_guide import covered, keras_sleeper, step_work  # the same Keras model and batch clock (this directory)

FETCHED: list = []
STEPPED: list = []
PRODUCED: list = []


def dataset(gen_s: float, samples: int, prefetch: bool):
    import tensorflow as tf

    def generator():
        for i in range(samples):
            t0 = time.time_ns()
            time.sleep(gen_s)
            PRODUCED.append((t0, time.time_ns()))
            yield (i,)

    ds = tf.data.Dataset.from_generator(generator, output_signature=tf.TensorSpec(shape=(1,), dtype=tf.int64))
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    ds = ds.with_options(options)
    return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds


def work(step_s: float) -> None:
    time.sleep(step_s)


def custom(ds, step_s: float, epochs: int, host_s: float) -> None:
    import tensorflow as tf

    w = tf.Variable(1.0)

    @tf.function
    def train_step(batch):
        tf.py_function(lambda b: work(step_s), [batch], [])
        w.assign_add(1.0)

    for epoch in range(epochs):
        t0 = time.time_ns()
        it = iter(ds)  # the pipeline's start-up: the loop waits for it as for a batch
        while True:
            t0 = t0 or time.time_ns()
            try:
                batch = next(it)
            except StopIteration:
                FETCHED.append((epoch, t0, time.time_ns()))
                break
            FETCHED.append((epoch, t0, time.time_ns()))
            t0 = time.time_ns()
            train_step(batch)
            STEPPED.append((epoch, t0, time.time_ns()))
            time.sleep(host_s)  # Python between the steps (logging, metrics): neither input nor compute
            t0 = 0


def keras(ds, step_s: float, epochs: int) -> None:
    model, clock = keras_sleeper(lambda: work(step_s), STEPPED)
    model.fit(ds, epochs=epochs, verbose=0, callbacks=[clock])


def truth() -> dict:
    """Per epoch, its iteration after its first step (warm-up, excluded as DLIO does: its fetch, the pipeline's
    start, and the step) up to the fetch that found the data exhausted (Keras: its last batch's end). Time between
    two epochs' iterations is in none (``between_s``)."""
    windows = []
    for epoch in sorted({ep for ep, _, _ in STEPPED}):
        steps = [(s, e) for ep, s, e in STEPPED if ep == epoch]
        ends = [e for ep, _, e in FETCHED if ep == epoch] + [e for _, e in steps]
        windows.append((steps[0][1], max(ends)))
    total = sum(e - s for s, e in windows)
    waits = [(s, e) for _, s, e in FETCHED] or PRODUCED
    batches = [(s, e) for _, s, e in STEPPED]
    return {"steps": len(STEPPED), "loop_s": total / 1e9,
            "between_s": sum(b[0] - a[1] for a, b in zip(windows, windows[1:])) / 1e9,
            "input_pct": 100.0 * sum(covered(waits, s, e) for s, e in windows) / total,
            "au_pct": 100.0 * sum(covered(batches, s, e) if FETCHED else step_work(batches, waits, s, e)
                                  for s, e in windows) / total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loop", choices=("custom", "keras"), required=True)
    ap.add_argument("--gen-ms", type=float, default=8.0)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--prefetch", action="store_true")
    ap.add_argument("--host-ms", type=float, default=0.0, help="custom loop: Python time after each step")
    a = ap.parse_args()
    ds = dataset(a.gen_ms / 1000, a.samples, a.prefetch)
    gc.freeze()  # as tfdata_guide.py does: no 50-170 ms collection of TensorFlow's objects inside a fetch or a step
    if a.loop == "custom":
        custom(ds, a.step_ms / 1000, a.epochs, a.host_ms / 1000)
    else:
        keras(ds, a.step_ms / 1000, a.epochs)
    print("TRUTH " + json.dumps(truth()))


if __name__ == "__main__":
    main()
