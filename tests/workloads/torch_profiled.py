"""A PyTorch training loop under the PyTorch profiler, timed by TimeLogger and by its own clock.

``python torch_profiled.py RUN OUT.json [--item-ms 6] [--step-ms 2] [--epochs 2] [--samples 32] [--batch 4]
[--workers 2] [--world 1] [--gz]``

A map-style ``Dataset`` whose ``__getitem__`` sleeps ``--item-ms`` (the loader's work: ``DataLoader(num_workers=2)``
processes), a small model, SGD; each step runs forward/backward/optimizer and then real matrix products until
``--step-ms`` have passed (operators the profiler sees). The loop is the README's: ``tl.iterate(loader, "Call to
Next Batch", cat="wait")``, ``tl.set_step(step)`` numbered per epoch, a ``Training Iteration`` phase, and
``prof.step()`` at the end of each iteration as the PyTorch documentation places it (the step's matrix products
alternate with 0.5 ms sleeps, Python time in the step, so that the loader's workers get a core on a 2-core
machine). The profiler (``schedule(wait=0, warmup=1, active=...)``,
``on_trace_ready=tensorboard_trace_handler(RUN/torch/rank-<r>)``, the run layout) records every step but the
first. After the loop a ``record_function("sleep_marker")`` around a 50 ms sleep is timed with ``time.time_ns()``:
where the merged frame puts it checks the profiler's clock against the host's.

``--world 2``: two processes (``torch.multiprocessing.spawn``), DDP over Gloo, one TimeLogger file and one trace per
rank. Each rank writes ``OUT.json`` (``OUT.rank-<r>.json`` for rank r > 0) with its own clock's truth over each
epoch's iteration after its first step (DLIO's rule, as the toolkit counts): ``input_pct`` = time blocked in
``next()``, ``au_pct`` = time in the step's body (``Training Iteration``), and the raw intervals.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def covered(intervals: list, lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def truth(fetched: list, stepped: list) -> dict:
    """Per epoch, from its first step's end (the warm-up step and its fetch left out) to the fetch that found the
    data exhausted: the share of time blocked in ``next()`` and in the step's body."""
    windows = []
    for epoch in sorted({ep for ep, _, _ in stepped}):
        steps = [(s, e) for ep, s, e in stepped if ep == epoch]
        ends = [e for ep, _, e in fetched if ep == epoch] + [e for _, e in steps]
        windows.append((steps[0][1], max(ends)))
    total = sum(e - s for s, e in windows)
    waits = [(s, e) for _, s, e in fetched]
    bodies = [(s, e) for _, s, e in stepped]
    return {"input_pct": 100.0 * sum(covered(waits, s, e) for s, e in windows) / total,
            "au_pct": 100.0 * sum(covered(bodies, s, e) for s, e in windows) / total,
            "loop_s": total / 1e9}


class Samples:
    """A map-style dataset (``__len__``/``__getitem__``, what ``DataLoader`` takes) whose items take ``item_s``."""

    def __init__(self, n: int, item_s: float) -> None:
        self.n, self.item_s = n, item_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        time.sleep(self.item_s)
        return torch.full((64,), float(i)), torch.tensor(i % 4)


def main_rank(rank: int, a: argparse.Namespace) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
    from torch.utils.data import DataLoader

    from timelogger import TimeLogger

    torch.set_num_threads(1)
    if a.world > 1:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(a.port))
        dist.init_process_group("gloo", rank=rank, world_size=a.world)

    run = Path(a.run)
    tl = TimeLogger(run, rank=rank, world_size=a.world)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    if a.world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Samples(a.samples, a.item_ms / 1000), batch_size=a.batch, num_workers=a.workers)
    heavy = torch.randn(96, 96)
    steps_total = a.epochs * (a.samples // a.batch)
    fetched: list = []
    stepped: list = []
    torch_dir = run / "torch" / f"rank-{rank}"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps_total + 1),
                 on_trace_ready=tensorboard_trace_handler(str(torch_dir), use_gzip=a.gz)) as prof:
        for epoch in range(a.epochs):
            tl.set_epoch(epoch)
            last = time.time_ns()
            for step, (x, y) in enumerate(tl.iterate(loader, "Call to Next Batch", cat="wait")):
                s0 = time.time_ns()
                fetched.append((epoch, last, s0))
                tl.set_step(step)
                with tl.phase("Training Iteration", cat="compute"):
                    t0 = time.time_ns()
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    while time.time_ns() - t0 < a.step_ms * 1e6:
                        heavy = torch.tanh(heavy @ heavy)
                        time.sleep(0.0005)  # Python in the step: leaves the loader workers a core on a small machine
                    t1 = time.time_ns()
                stepped.append((epoch, t0, t1))
                prof.step()
                last = time.time_ns()
            fetched.append((epoch, last, time.time_ns()))  # the fetch that found the data exhausted
        p0 = time.time_ns()
        with record_function("sleep_marker"):
            time.sleep(0.05)
        p1 = time.time_ns()
    tl.close()
    if a.world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    out = Path(a.out) if rank == 0 else Path(a.out).with_suffix(f".rank-{rank}.json")
    out.write_text(json.dumps({"rank": rank, "sleep_marker": [p0, p1], "fetched": fetched, "stepped": stepped,
                               "torch": torch.__version__, "pid": os.getpid(), **truth(fetched, stepped)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run")
    ap.add_argument("out")
    ap.add_argument("--item-ms", type=float, default=6.0)
    ap.add_argument("--step-ms", type=float, default=2.0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--gz", action="store_true")
    a = ap.parse_args()
    if a.world == 1:
        main_rank(0, a)
        return
    import torch.multiprocessing as mp

    mp.spawn(main_rank, args=(a,), nprocs=a.world)


if __name__ == "__main__":
    sys.exit(main())
