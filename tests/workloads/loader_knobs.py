"""A custom training loop (the README's pattern) whose input pipeline has knobs, for the findings' rules.

``python loader_knobs.py DATA_DIR [--epochs 2] [--chunk BYTES] [--read-bytes N] [--open-per-chunk] [--decode-ms 0]
[--step-ms 5] [--skew-ms 0] [--first-epoch-ms 0] [--untimed-input] [--allreduce-mb 0] [--tf-step] [--readers 0]
[--prefetch 0] [--batch 1] [--io-ms 0] [--sample-ms 0]``

Each step fetches one sample with ``tl.iterate(..., "Call to Next Batch", cat="wait")``: the sample is one file of
DATA_DIR (its first ``read-bytes``) read with unbuffered ``read(chunk)`` calls (a "Read Sample" io phase), then decoded
(a busy wait of ``decode-ms``, inside the io phase, as h5py/PIL decoding is). ``--open-per-chunk`` opens the file again
for every chunk (``os.stat``, ``open``, ``seek``, ``read``, ``close``: a loader that opens a file per sample of a
multi-sample file). By default the step asks for a sample and waits while it is read (no prefetch). The step itself is a
busy wait of ``step-ms``, plus ``skew-ms`` on rank 1 (a straggler) and ``first-epoch-ms`` in epoch 0 (a first-epoch
effect). Run it under ``timelogger run --posix`` (and ``mpiexec -n 2`` for the rank rules). ``--untimed-input`` fetches
the samples with no phase around them (no input wait can be seen); ``--allreduce-mb N`` all-reduces N MB with Horovod
inside every step (run with ``--horovod-timeline`` for the communication layer). ``--tf-step`` adds a small TensorFlow
matmul to each step, so that the launcher's ``--tf-profile`` window has a framework to profile.

The advisor's knobs (docs/advise.md): ``--readers N`` reads samples in a pool of N threads, at most N +
``--prefetch P`` samples ahead of the step (0: in the step's fetch, as above); ``--io-ms`` is a sleep per sample
inside the read (a storage latency that threads overlap, unlike the GIL-holding decode); ``--batch B`` makes each
step fetch B samples and compute ``step-ms`` + B x ``sample-ms``.
"""
from __future__ import annotations

import argparse
import itertools
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from timelogger import default_logger


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data", type=Path)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=1 << 20)
    parser.add_argument("--read-bytes", type=int, default=1 << 62)
    parser.add_argument("--open-per-chunk", action="store_true")
    parser.add_argument("--decode-ms", type=float, default=0.0)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--skew-ms", type=float, default=0.0)
    parser.add_argument("--first-epoch-ms", type=float, default=0.0)
    parser.add_argument("--untimed-input", action="store_true")
    parser.add_argument("--allreduce-mb", type=float, default=0.0)
    parser.add_argument("--tf-step", action="store_true")
    parser.add_argument("--readers", type=int, default=0)
    parser.add_argument("--prefetch", type=int, default=0)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--io-ms", type=float, default=0.0)
    parser.add_argument("--sample-ms", type=float, default=0.0)
    args = parser.parse_args()
    tl = default_logger()
    rank = tl.rank
    allreduce = None
    if args.allreduce_mb:
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init()
        tensor = tf.ones([int(args.allreduce_mb * (1 << 20) / 4)], tf.float32)
        allreduce = lambda: hvd.allreduce(tensor).numpy()  # noqa: E731
        allreduce()  # the first one negotiates; steps time the steady ones
    matmul = None
    if args.tf_step:
        import tensorflow as tf

        weights = tf.ones([256, 256])
        matmul = lambda: tf.linalg.matmul(weights, weights).numpy()  # noqa: E731
    files = sorted(args.data.glob("*.bin"))

    def read(path: Path) -> int:
        n = 0
        if args.open_per_chunk:
            while n < args.read_bytes and n < os.stat(path).st_size:
                with open(path, "rb", buffering=0) as fh:
                    fh.seek(n)
                    n += len(fh.read(min(args.chunk, args.read_bytes - n)))
        else:
            with open(path, "rb", buffering=0) as fh:
                while n < args.read_bytes:
                    block = fh.read(min(args.chunk, args.read_bytes - n))
                    if not block:
                        break
                    n += len(block)
        if args.io_ms:
            time.sleep(args.io_ms / 1000)
        return n

    def load(path: Path) -> int:
        if args.untimed_input:
            n = read(path)
            busy(args.decode_ms)
        else:
            with tl.phase("Read Sample", cat="io") as p:
                n = read(path)
                busy(args.decode_ms)
                p.update(bytes=n, file=str(path))
        return n

    def loaded():
        if not args.readers:
            yield from map(load, files)
            return
        with ThreadPoolExecutor(args.readers) as pool:  # at most readers + prefetch samples in flight or ready
            todo = iter(files)
            ahead = deque(pool.submit(load, p) for p in itertools.islice(todo, args.readers + args.prefetch))
            while ahead:
                n = ahead.popleft().result()
                ahead.extend(pool.submit(load, p) for p in itertools.islice(todo, 1))
                yield n

    def samples():
        it = loaded()
        while True:
            batch = list(itertools.islice(it, args.batch))
            if len(batch) < args.batch:
                return
            yield sum(batch)

    for epoch in range(args.epochs):
        tl.set_epoch(epoch)
        fetch = samples() if args.untimed_input else tl.iterate(samples(), "Call to Next Batch", cat="wait")
        for step, _ in enumerate(fetch):
            tl.set_step(step)
            with tl.phase("Training Iteration", cat="compute"):
                busy(args.step_ms + args.batch * args.sample_ms + (args.skew_ms if rank == 1 else 0)
                     + (args.first_epoch_ms if epoch == 0 else 0))
                if allreduce is not None:
                    allreduce()
                if matmul is not None:
                    matmul()
    tl.close()


if __name__ == "__main__":
    main()
