"""``python -m benchmarks.climate train``: the climate segmentation benchmark with TimeLogger phases in the original
taxonomy.

Phases (cat): Parse Arguments, Start Reader Pool, Initialize Horovod, Create Tiramisu (other); Training Loop ⊃ Epoch ⊃
{Global Shuffle, Create Dataset (other), Training Iteration (other) ⊃ {Call to Next Batch (wait), Train Step
(compute) | Compute Gradients, Allreduce Gradients (comm), Apply Gradients}}, Checkpoint (checkpoint). The input
pipeline's threads record Parallel Read Images (io), and the reader workers (own processes, same rank) Time to
Read Single Image (io) ⊃ Read Image (io), Normalise, Per-pixel Weights (preprocess): see
:mod:`benchmarks.climate.pipeline`.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.climate.config import ClimateConfig, add_train_flags, config_from_args
from benchmarks.climate.data import CHANNELS as FILE_CHANNELS
from benchmarks.climate.data import CLASS_FREQUENCIES, check_dataset, shape_without_reading
from benchmarks.climate.pipeline import Readers, SampleSpec, epoch_dataset
from benchmarks.common.env import env_world_size
from benchmarks.common.errors import TraceInputError
from benchmarks.common.modes import opens_files, trains
from benchmarks.common.shuffle import steps_per_epoch
from benchmarks.common.training import (
    ProfileWindow,
    add_run_flags,
    finish,
    open_run,
    rank_epoch_files,
    say,
    start_backend,
    start_node_cache,
    steady_throughput,
    step_functions,
)

CLASSES = 3


def setup_parser(p: argparse.ArgumentParser) -> None:
    add_run_flags(p, "directory of data-YYYY-MM-DD-HH-k.h5 files")
    add_train_flags(p)


class TrainingFiles:
    """The files this run trains on and the image shape, checked before TensorFlow is imported."""

    def __init__(self, paths: list[str], height: int, width: int, checked: bool) -> None:
        self.paths, self.height, self.width, self.checked = paths, height, width, checked


def check_inputs(args: argparse.Namespace, cfg: ClimateConfig, ranks: int) -> TrainingFiles:
    """Every flag and file problem as one :class:`TraceInputError`, before TensorFlow or MPI start.

    ``--mode no-io`` does not open the data files: the file list and image shape come from the generator's
    ``generator.json`` when there is one (else the files' headers are checked as in every other mode).
    """
    for flag, value in (("--readers", cfg.readers), ("--batch", cfg.batch), ("--prefetch", cfg.prefetch),
                        ("--epochs", cfg.epochs), ("--growth", cfg.growth), ("--base-filters", cfg.base_filters)):
        if value < 1:
            raise TraceInputError(flag, f"must be at least 1, got {value}")
    bad = [c for c in cfg.channels if not 0 <= c < FILE_CHANNELS]
    if bad or len(set(cfg.channels)) != len(cfg.channels):
        raise TraceInputError("--channels", f"need distinct channels in 0..{FILE_CHANNELS - 1}, got "
                                            f"{','.join(map(str, cfg.channels))}")
    known = shape_without_reading(args.data, ranks) if not opens_files(cfg.mode) else None
    if known is not None:
        files, height, width = known
        data = TrainingFiles([str(f) for f in files], height, width, checked=False)
    else:
        info = check_dataset(args.data, ranks, args.height, args.width)
        data = TrainingFiles(info.paths, info.height, info.width, checked=True)
    factor = 2 ** (len(cfg.blocks) - 1)
    if data.height % factor or data.width % factor:
        raise TraceInputError(args.data, f"images of {data.height}x{data.width} do not fit a Tiramisu of "
                                         f"{len(cfg.blocks) - 1} down blocks (need multiples of {factor}); "
                                         f"change --blocks")
    if len(data.paths) // ranks < cfg.batch:
        raise TraceInputError(args.data, f"{len(data.paths)} files for {ranks} ranks: not one full batch of "
                                         f"{cfg.batch} per rank; lower --batch")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.time()
    p = argparse.ArgumentParser(prog="python -m benchmarks.climate train")
    setup_parser(p)
    args = p.parse_args(argv)
    run_dir, tl = open_run(args)
    from benchmarks.climate.model import class_weights
    readers = None
    try:
        with tl.phase("Parse Arguments", cat="other"):
            cfg = config_from_args(args)
            data = check_inputs(args, cfg, env_world_size())
        spec = SampleSpec(data.height, data.width, cfg.channels, tuple(float(w) for w in
                                                                    class_weights(CLASS_FREQUENCIES)),
                          tuple(CLASS_FREQUENCIES), cfg.mode, cfg.seed)
        with tl.phase("Start Reader Pool", cat="other"):
            readers = Readers(tl, cfg.read_in, cfg.readers, spec)
        return train(cfg, data, readers, run_dir, tl, t0, merge=not (args.no_merge or args.no_timelogger))
    finally:
        if readers is not None:
            readers.close()
        tl.close()


def train(cfg: ClimateConfig, data: TrainingFiles, readers: Readers, run_dir: Path, tl: Any, t0: float,
          merge: bool = True) -> int:
    """Run the benchmark; rank 0 writes ``summary.json`` and, unless ``merge`` is False, merges the run."""
    dist, tf = start_backend(tl, cfg.dist, cfg.seed, phase="Initialize Horovod")
    rank, size = dist.rank, dist.size
    h, w, c = data.height, data.width, len(cfg.channels)
    cache = start_node_cache(tl, cfg.node_cache, dist)
    if rank == 0:
        say(rank, f"{size} rank(s), dist={dist.kind}, shuffle={cfg.shuffle}, mode={cfg.mode}, node cache "
                  f"{cfg.node_cache}, "
                  f"{cfg.readers} reader {cfg.read_in}, {len(data.paths)} files of {h}x{w}, channels "
                  f"{','.join(map(str, cfg.channels))}, TF {tf.__version__}")

    with tl.phase("Create Tiramisu", cat="other"):
        from benchmarks.climate.model import build_tiramisu, pixel_counts, weighted_loss

        model = build_tiramisu(h, w, c, CLASSES, cfg.blocks, cfg.growth, cfg.base_filters, cfg.dropout)
        opt = tf.keras.optimizers.Adam(learning_rate=cfg.lr)
        opt.build(model.trainable_variables)
        dist.broadcast_variables(model.variables)
        signature = [tf.TensorSpec([cfg.batch, h, w, c], tf.float32), tf.TensorSpec([cfg.batch, h, w], tf.int32),
                     tf.TensorSpec([cfg.batch, h, w], tf.float32)]

        def metrics(y: Any, logits: Any, wt: Any) -> Any:  # counts, summed over steps and ranks per epoch
            correct, intersection, union = pixel_counts(y, logits)
            return tf.cast(tf.concat([[correct], intersection, union], 0), tf.float64)

        step_fns = (step_functions(tf, model, opt, dist, signature, weighted_loss, metrics) if trains(cfg.mode)
                    else _no_training)
        ckpt_manager = None
        if rank == 0 and cfg.checkpoint_every > 0:
            ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
            ckpt_manager = tf.train.CheckpointManager(ckpt, str(run_dir / "checkpoints"), max_to_keep=2)

    files = data.paths
    ones = {f: 1 for f in files}
    steps = [steps_per_epoch(ones, files, size, cfg.batch, cfg.shuffle, e, cfg.seed) for e in range(cfg.epochs)]
    window = ProfileWindow(tl, cfg.tf_profile_steps, run_dir, rank)
    global_step = 0
    epoch_stats: list[dict] = []
    t_train = time.perf_counter()
    with tl.phase("Training Loop", cat="other"), window:
        for epoch in range(cfg.epochs):
            tl.set_epoch(epoch)
            t_epoch = time.perf_counter()
            sums = np.zeros(2 + 2 * CLASSES)  # loss x batch, correct pixels, intersection[3], union[3]
            with tl.phase("Epoch", cat="other"):
                mine = rank_epoch_files(tl, files, rank, size, epoch, cfg, cache)
                with tl.phase("Create Dataset", cat="other"):
                    batches = iter(epoch_dataset(tf, readers, mine, epoch, steps[epoch], cfg.batch, cfg.prefetch))
                every = cfg.log_every or max(1, steps[epoch] // 4)
                for step in range(steps[epoch]):
                    tl.set_step(global_step)
                    with tl.phase("Training Iteration", cat="other"), window.step(tf, global_step):
                        with tl.phase("Call to Next Batch", cat="wait"):
                            x, y, wt = next(batches)
                        loss, counts = step_fns(tl, x, y, wt)
                    sums += (loss * cfg.batch, *counts)
                    global_step += 1
                    if (step + 1) % every == 0 or step + 1 == steps[epoch]:
                        say(rank, f"epoch {epoch + 1}/{cfg.epochs} step {step + 1}/{steps[epoch]} loss {loss:.4f}")
                samples = steps[epoch] * cfg.batch
                total = dist.sum([*sums, samples])
                stats = _epoch_stats(epoch, total, h * w, time.perf_counter() - t_epoch)
                epoch_stats.append(stats)
                if rank == 0:
                    quality = (f"loss {stats['loss']:.4f} pixel accuracy {stats['accuracy']:.3f} mean IoU "
                               f"{stats['mean_iou']:.3f}" if trains(cfg.mode) else "no training (io-only)")
                    say(rank, f"epoch {epoch + 1}/{cfg.epochs} done: {quality} "
                              f"{stats['samples'] / stats['time_s']:.2f} samples/s")
                if ckpt_manager is not None and ((epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == cfg.epochs):
                    with tl.phase("Checkpoint", cat="checkpoint") as ck:
                        ck.update(file=ckpt_manager.save(checkpoint_number=epoch))
        tl.set_epoch(None)  # untag before Training Loop ends (it must not stretch the last epoch's window)
        tl.set_step(None)
    train_time = time.perf_counter() - t_train
    readers.close()  # the workers' TimeLogger files are complete before rank 0 merges

    samples = sum(s["samples"] for s in epoch_stats)
    last = epoch_stats[-1]
    summary = {
        "benchmark": "climate", "mode": cfg.mode, "epochs": cfg.epochs, "ranks": size, "dist": dist.kind,
        "shuffle": cfg.shuffle, "readers": cfg.readers, "read_in": cfg.read_in, "batch_per_rank": cfg.batch,
        "height": h, "width": w, "channels": list(cfg.channels), "files": len(files),
        "files_checked_before_training": data.checked, "samples_trained": samples, "train_time_s": train_time,
        "throughput_samples_per_s": samples / train_time, "steady_throughput_samples_per_s":
            steady_throughput(epoch_stats),
        "final_loss": last["loss"], "final_pixel_accuracy": last["accuracy"], "final_mean_iou": last["mean_iou"],
        "epochs_detail": epoch_stats, "node_cache": cache.job_summary(dist), "wall_time_s": time.time() - t0,
        "config": cfg.as_dict(),
    }
    finish(tl, dist, run_dir, summary, merge, f"climate, {cfg.shuffle} shuffle, {size} rank(s), mode {cfg.mode}")
    return 0


def _epoch_stats(epoch: int, total: np.ndarray, pixels_per_sample: int, seconds: float) -> dict:
    """An epoch's loss and pixel metrics from the rank-summed ``[loss x batch, correct, I[3], U[3], samples]``."""
    from benchmarks.climate.model import scores

    samples = int(total[-1])
    accuracy, miou = scores(total[1], total[2:2 + CLASSES], total[2 + CLASSES:2 + 2 * CLASSES],
                            samples * pixels_per_sample)
    return {"epoch": epoch, "loss": float(total[0] / samples), "accuracy": accuracy, "mean_iou": miou,
            "samples": samples, "time_s": seconds}


def _no_training(tl: Any, x: Any, y: Any, w: Any) -> tuple[float, np.ndarray]:
    """``--mode io-only``: the batch is fetched, no step runs."""
    return float("nan"), np.zeros(1 + 2 * CLASSES)
