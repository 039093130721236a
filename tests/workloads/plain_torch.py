"""A PyTorch training script with no TimeLogger code at all, as users write them, with its own wall-clock truth.

``python plain_torch.py --data DIR [--item-ms 0] [--step-ms 10] [--epochs 2] [--batch 4] [--workers 2]
[--start fork|spawn|forkserver] [--persistent] [--ddp] [--host-ms 0] [--break-after N] [--val] [--iterable]``

A map-style ``Dataset`` of the files in ``DIR`` (each ``__getitem__`` reads one whole file, then sleeps ``--item-ms``:
a slow decode), a ``DataLoader(num_workers=2)``, a tiny linear model, ``loss.backward()``, ``--step-ms`` of
"compute" (a sleep) and ``optimizer.step()``. With ``--ddp`` the model is wrapped in DistributedDataParallel over Gloo
(rank and world size from torchrun's ``RANK``/``WORLD_SIZE`` or MPICH's ``PMI_RANK``/``PMI_SIZE``, rendezvous at
``tcp://127.0.0.1:$MASTER_PORT``) and each rank reads its ``DistributedSampler`` share. ``--val``: after each epoch a
validation pass over the same files through a second DataLoader like the first (its workers start after the
training's first batches). ``--iterable``: the same samples from an ``IterableDataset`` (each worker streams its
share of the files).

The truth times the script's own waits with ``time.perf_counter_ns()`` (not TimeLogger): its ``next()`` calls on the
loader (the first of an epoch from its ``iter()``: the workers' start) and its steps (from ``next()`` returning the
batch to ``optimizer.step()`` returning: forward, backward, compute, update). It prints ``TRUTH {json}`` per rank over
each epoch's iteration after its first step (warm-up, excluded as DLIO does) up to the fetch that found the data
exhausted: ``input_pct`` = time blocked in ``next()``, ``au_pct`` = time in the steps; ``read_bytes`` = the bytes of
the files this rank's sampler gave it, over all epochs (what its workers read).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, get_worker_info

FETCHED: list = []
STEPPED: list = []


def load(path: str, item_s: float):
    """One sample: the file read whole, its first 16 bytes as features; then ``item_s`` of decoding."""
    with open(path, "rb") as fh:
        data = fh.read()
    time.sleep(item_s)
    x = torch.tensor(list(data[:16]), dtype=torch.float32) / 255.0
    return x, x.sum(dim=0, keepdim=True)


class FileDataset(Dataset):
    """One sample per file."""

    def __init__(self, root: str, item_s: float) -> None:
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root))
        self.item_s = item_s

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        return load(self.files[i], self.item_s)


class FileStream(IterableDataset):
    """The same samples as a stream: each worker reads every ``num_workers``-th file."""

    def __init__(self, files: list, item_s: float) -> None:
        self.files, self.item_s = files, item_s

    def __iter__(self):
        info = get_worker_info()
        for path in self.files if info is None else self.files[info.id::info.num_workers]:
            yield load(path, self.item_s)


def covered(intervals: list, lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def truth(rank: int, read_bytes: int) -> dict:
    windows = []
    for epoch in sorted({ep for ep, _, _ in STEPPED}):
        steps = [(s, e) for ep, s, e in STEPPED if ep == epoch]
        ends = [e for ep, _, e in FETCHED if ep == epoch] + [e for _, e in steps]
        windows.append((steps[0][1], max(ends)))
    total = sum(e - s for s, e in windows)
    waits = [(s, e) for _, s, e in FETCHED]
    steps = [(s, e) for _, s, e in STEPPED]
    return {"rank": rank, "steps": len(STEPPED), "loop_s": total / 1e9,
            "input_pct": 100.0 * sum(covered(waits, s, e) for s, e in windows) / total,
            "au_pct": 100.0 * sum(covered(steps, s, e) for s, e in windows) / total, "read_bytes": read_bytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--item-ms", type=float, default=0.0)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--host-ms", type=float, default=0.0, help="Python time after each step (logging)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--start", choices=("fork", "spawn", "forkserver"), default=None)
    ap.add_argument("--persistent", action="store_true")
    ap.add_argument("--ddp", action="store_true")
    ap.add_argument("--break-after", type=int, default=0, help="leave each epoch after N steps (no exhaustion)")
    ap.add_argument("--val", action="store_true", help="a validation pass after each epoch")
    ap.add_argument("--iterable", action="store_true", help="an IterableDataset of the same files")
    a = ap.parse_args()
    rank, world = 0, 1
    if a.ddp:
        rank = int(os.environ.get("RANK", os.environ.get("PMI_RANK", "0")))
        world = int(os.environ.get("WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                                world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ds = FileDataset(a.data, a.item_ms / 1000)
    sampler = DistributedSampler(ds, shuffle=False) if a.ddp else None
    def make_loader(sampler):
        return DataLoader(FileStream(ds.files, ds.item_s) if a.iterable else ds, batch_size=a.batch,
                          sampler=sampler, num_workers=a.workers,
                          persistent_workers=a.persistent and a.workers > 0,
                          multiprocessing_context=a.start if a.workers > 0 else None)

    loader = make_loader(sampler)
    val = make_loader(None) if a.val else None
    model: nn.Module = nn.Linear(16, 1)
    if a.ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    read_bytes = 0
    for epoch in range(a.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        indices = list(sampler) if sampler is not None else range(len(ds))
        t0 = time.perf_counter_ns()
        it = iter(loader)
        step = 0
        while True:
            t0 = t0 or time.perf_counter_ns()
            try:
                x, y = next(it)
            except StopIteration:
                FETCHED.append((epoch, t0, time.perf_counter_ns()))
                break
            FETCHED.append((epoch, t0, time.perf_counter_ns()))
            t0 = time.perf_counter_ns()
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            time.sleep(a.step_ms / 1000)  # the step's compute
            opt.step()
            STEPPED.append((epoch, t0, time.perf_counter_ns()))
            time.sleep(a.host_ms / 1000)
            t0 = 0
            step += 1
            if a.break_after and step == a.break_after:
                break
        read_bytes += sum(os.path.getsize(ds.files[i]) for i in indices)
        del it
        if val is not None:
            with torch.no_grad():
                for x, _ in val:
                    model(x)
    # leaving an epoch early, the workers have read ahead of the steps: bytes unknown
    print("TRUTH " + json.dumps(truth(rank, -1 if a.break_after else read_bytes)), flush=True)
    if a.ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
