"""Synthetic frames: jobs of every layer built row by row, for checks that need no run directory."""
from __future__ import annotations

import numpy as np
import pandas as pd

from trace_merge.schema import to_frame

BASE = 1_700_000_000 * 10**9


def random_job(seed: int) -> pd.DataFrame:
    """Two ranks of a training job: a Train Loop and Epochs spanning everything, Training Iterations on the main
    thread (each with a fetch and crossing children), a prefetch thread reading, framework rows in a profile window
    opened by an anchor, Horovod collectives on rank 0's timeline, POSIX reads."""
    rng = np.random.default_rng(seed)
    rows = []  # layer, cat, name, rank, tid, start, end, epoch, step

    def add(layer, cat, name, rank, tid, s, e, epoch=None, step=None):
        rows.append((layer, cat, name, rank, tid, int(s), int(e), epoch, step))

    for rank in (0, 1):
        t = int(rng.integers(0, 20))
        add("app", "other", "Train Loop", rank, 1, t, t + 4000, 1, 99)
        step = 0
        for epoch in (0, 1):
            e0 = t
            for _ in range(int(rng.integers(4, 9))):
                length = int(rng.integers(40, 200))
                add("app", "compute", "Training Iteration", rank, 1, t, t + length, epoch, step)
                f = t + int(rng.integers(0, 10))
                add("app", "wait", "Call to Next Batch", rank, 1, f, f + int(rng.integers(1, 30)), epoch, step)
                c = t + int(rng.integers(0, length))  # may cross the iteration's end
                add("app", "io", "Load File", rank, 1, c, c + int(rng.integers(1, 80)), epoch, step)
                p = t + int(rng.integers(0, length))
                add("app", "preprocess", "Decode", rank, 2, p, p + int(rng.integers(1, 120)), epoch, None)
                for _ in range(int(rng.integers(0, 4))):
                    s = t + int(rng.integers(0, length))
                    add("posix", "io", "read", rank, int(rng.choice([1, 2])), s, s + int(rng.integers(1, 25)))
                t += length + int(rng.integers(0, 30))
                step += 1
            add("app", "other", "Epoch", rank, 1, e0, t, epoch, step - 1)
        a = int(rng.integers(100, 600))
        add("framework", "other", "timelogger_anchor", rank, 5, a, a + 1)
        for _ in range(int(rng.integers(5, 40))):
            s = a + int(rng.integers(0, 900))
            add("framework", str(rng.choice(["wait", "compute", "other"])), "IteratorGetNext", rank, 5, s,
                s + int(rng.integers(1, 60)), None, int(rng.integers(0, 5)))
    for _ in range(int(rng.integers(3, 12))):
        s = int(rng.integers(0, 3000))
        add("comm", "comm", str(rng.choice(["ALLREDUCE", "NEGOTIATE_ALLREDUCE"])), 0, 7, s,
            s + int(rng.integers(1, 50)))
    cols = list(zip(*rows))
    frame = to_frame({"layer": list(cols[0]), "cat": list(cols[1]), "name": list(cols[2]), "rank": list(cols[3]),
                      "pid": 11, "tid": list(cols[4]), "start_ns": np.asarray(cols[5]) + BASE,
                      "end_ns": np.asarray(cols[6]) + BASE, "epoch": pd.array(list(cols[7]), dtype="Int64"),
                      "step": pd.array(list(cols[8]), dtype="Int64")})
    return frame.sort_values("start_ns", kind="stable").reset_index(drop=True)
