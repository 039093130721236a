"""The `tf.data` performance guide's naive pipeline, instrumented the ways users do, with its own wall-clock truth.

Written from the guide's description ("Better performance with the tf.data API"): an ``ArtificialDataset`` built
with ``tf.data.Dataset.from_generator`` whose generator sleeps to open its file and again per sample it reads, and
a training loop whose step is a short sleep. Nothing is prefetched (TensorFlow's injected prefetch is switched
off), so the loop waits for every sample.

``python tfdata_guide.py RUN_DIR --instrument readme|step-phase|keras [--profile] [--gen-ms 8] [--step-ms 10]``

- ``readme``: the README's custom loop -- ``tl.iterate(ds, "Call to Next Batch", cat="wait")`` around the fetch,
  ``tl.phase("Training Iteration", cat="compute")`` around the step;
- ``step-phase``: one ``Training Iteration`` phase around the fetch and the step (the benchmarks' layout);
- ``keras``: ``model.fit`` with a ``train_step`` that sleeps and ``TimeLoggerCallback`` only.

``--profile`` opens a TF profile window over the second epoch (``tl.tf_profile()``, or the callback's
``profile_batches`` for Keras). The script's truth does not use TimeLogger: the generator records when it produced
each sample, the custom loops time their own ``next()`` calls, and the loop records when each step began and ended
(``time.time_ns()``); the script prints ``TRUTH {json}`` with the step-cycle definition applied to those (a cycle
runs from one step start to the next in the same epoch, an epoch's last up to the fetch that finds the data
exhausted; the first step of each epoch is left out, the rest of its cycle counts): ``input_pct`` = the
loop's waits (Keras: the generator's time) inside the cycles ÷ cycle time, ``au_pct`` = step sleeps ÷ cycle
time; with ``--profile`` also ``profiled``, the same over the profiled epoch's cycles alone.
"""
from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

EPOCHS = 2
SAMPLES = 12
PRODUCED: list = []  # (start_ns, end_ns) of every sample the generator made
FETCHED: list = []  # (start_ns, end_ns) of every next() of the custom loops: the loop waiting for input
STEPS: list = []  # (epoch, start_ns, end_ns) of every training step
SLEPT: list = []  # (start_ns, end_ns) of every step's work


def artificial_dataset(gen_s: float):
    import tensorflow as tf

    def generator(num_samples):
        time.sleep(gen_s)  # opening the file
        for sample_idx in range(num_samples):
            t0 = time.time_ns()
            time.sleep(gen_s)  # reading a record
            PRODUCED.append((t0, time.time_ns()))
            yield (sample_idx,)

    ds = tf.data.Dataset.from_generator(generator, output_signature=tf.TensorSpec(shape=(1,), dtype=tf.int64),
                                        args=(SAMPLES,))
    # the guide's naive pipeline is synchronous; TF >= 2.11 would inject a prefetch that hides the generator
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def work(step_s: float) -> None:
    t0 = time.time_ns()
    time.sleep(step_s)  # a training step
    SLEPT.append((t0, time.time_ns()))


def timed(it, epoch: int):
    """The script's own clock on the loop's waits (not TimeLogger's), the one that finds the data exhausted too."""
    while True:
        t0 = time.time_ns()
        try:
            item = next(it)
        except StopIteration:
            break
        FETCHED.append((epoch, t0, time.time_ns()))
        yield item
    # the iterator's teardown (its pipeline's threads stop) ends the iteration, as tl.iterate sees it: out of the
    # except block, whose traceback still held the iterator
    it = None
    FETCHED.append((epoch, t0, time.time_ns()))


def custom_loop(tl, ds, step_s: float, instrument: str, profile: bool) -> None:
    import contextlib

    for epoch in range(EPOCHS):
        tl.set_epoch(epoch)
        window = tl.tf_profile() if profile and epoch == 1 else contextlib.nullcontext()
        with window:
            if instrument == "readme":
                for step, _batch in enumerate(tl.iterate(timed(iter(ds), epoch), "Call to Next Batch", cat="wait")):
                    tl.set_step(step)
                    t0 = time.time_ns()
                    with tl.phase("Training Iteration", cat="compute"):
                        work(step_s)
                    STEPS.append((epoch, t0, time.time_ns()))
            else:
                it = timed(iter(ds), epoch)
                for step in range(SAMPLES):
                    tl.set_step(step)
                    t0 = time.time_ns()
                    with tl.phase("Training Iteration", cat="other"):
                        with tl.phase("Call to Next Batch", cat="wait"):
                            next(it)
                        with tl.phase("Train Step", cat="compute"):
                            work(step_s)
                    STEPS.append((epoch, t0, time.time_ns()))
    tl.set_step(None)
    tl.set_epoch(None)


def keras_sleeper(step, steps: list):
    """A compiled Keras model whose ``train_step`` calls ``step()`` once its batch is there, and a callback that
    appends each training batch's ``(epoch, start_ns, end_ns)`` to ``steps`` (the script's own clock on the batches).
    ``plain_tf.py`` uses them too."""
    import tensorflow as tf

    class Sleeper(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(1.0)

        def train_step(self, data):
            # the step needs its batch (as a real one does), so TensorFlow cannot run it while it still fetches
            tf.py_function(lambda batch: step(), [data], [])
            return {"w": self.w}

    class Clock(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            self.t0 = time.time_ns()

        def on_train_batch_end(self, batch, logs=None):
            steps.append((self.epoch, self.t0, time.time_ns()))

    model = Sleeper()
    model.compile()
    return model, Clock()


def keras_fit(tl, ds, step_s: float, profile: bool) -> None:
    from timelogger.keras import TimeLoggerCallback

    model, clock = keras_sleeper(lambda: work(step_s), STEPS)
    spec = f"{SAMPLES}:{2 * SAMPLES}" if profile else "none"
    model.fit(ds, epochs=EPOCHS, verbose=0, callbacks=[clock, TimeLoggerCallback(tl, profile_batches=spec)])


def covered(intervals: list, lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def step_work(batches: list, waits: list, lo: int, hi: int) -> int:
    """Time in ``[lo, hi)`` that Keras batches spent not waiting for the generator: the step as the framework runs
    it (the model's ops and Keras' own work in the batch), as a custom loop's whole ``tf.function`` call counts.
    A batch holds its fetch, so its generator waits come off."""
    work = 0
    for s, e in batches:
        s, e = max(s, lo), min(e, hi)
        if e > s:
            work += (e - s) - covered(waits, s, e)
    return work


def truth(epochs: "set | None" = None) -> dict:
    """The step-cycle definition applied to the script's own clock, over the cycles of ``epochs`` (None: all)."""
    cycles = []
    for i, (epoch, start, end) in enumerate(STEPS):
        nxt = STEPS[i + 1] if i + 1 < len(STEPS) else None
        cycles.append((start, nxt[1] if nxt is not None and nxt[0] == epoch else end))
    for i, (epoch, _start, end) in enumerate(STEPS):
        if i == 0 or STEPS[i - 1][0] != epoch:  # an epoch's first step (warm-up) is left out, the rest of its cycle not
            cycles[i] = (end, cycles[i][1])
        mine = [e for ep, _, e in FETCHED if ep == epoch]
        if mine and (i + 1 == len(STEPS) or STEPS[i + 1][0] != epoch):  # up to the fetch that found the data exhausted
            cycles[i] = (cycles[i][0], max(cycles[i][1], max(mine)))
    if epochs is not None:
        cycles = [c for c, (epoch, _, _) in zip(cycles, STEPS) if epoch in epochs]
    total = sum(e - s for s, e in cycles)
    # Keras fetches inside its step: there the synchronous generator is the wait
    waits = [(s, e) for _, s, e in FETCHED] or PRODUCED
    wait = sum(covered(waits, s, e) for s, e in cycles)
    busy = sum(covered(SLEPT, lo, hi) if FETCHED else step_work([(s, e) for _, s, e in STEPS], PRODUCED, lo, hi)
               for lo, hi in cycles)
    return {"cycles": len(cycles), "cycle_s": total / 1e9, "input_pct": 100.0 * wait / total,
            "au_pct": 100.0 * busy / total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--instrument", choices=("readme", "step-phase", "keras"), required=True)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--gen-ms", type=float, default=8.0)
    ap.add_argument("--step-ms", type=float, default=10.0)
    a = ap.parse_args()
    from timelogger import TimeLogger

    tl = TimeLogger(a.run_dir, rank=0, world_size=1)
    ds = artificial_dataset(a.gen_ms / 1000)
    # TensorFlow's objects make a full collection take 50-170 ms here: one landing inside a fetch or a step would
    # be timed by both clocks but is no part of what the workload is built to show, so they are frozen out of it
    gc.freeze()
    if a.instrument == "keras":
        keras_fit(tl, ds, a.step_ms / 1000, a.profile)
    else:
        custom_loop(tl, ds, a.step_ms / 1000, a.instrument, a.profile)
    tl.close()
    # the profiled epoch's cycles alone: where a verdict can count only those (Keras batches hold their fetch)
    print("TRUTH " + json.dumps({**truth(), **({"profiled": truth({1})} if a.profile else {})}))


if __name__ == "__main__":
    main()
