"""``python -m benchmarks.hepcnn train``: the HEP-CNN benchmark with TimeLogger phases in the original taxonomy.

Phases (cat): Parse Arguments, Server Initialization, Build Network and Functions, Setup Iterators (other);
Train Loop ⊃ Epoch ⊃ Training Iteration ⊃ {Call to Next Batch (wait) ⊃ Load File (io) ⊃ HDF5 File Read (io),
Train Step (compute) | Compute Gradients (compute), Allreduce Gradients (comm), Apply Gradients (compute)};
Global Shuffle (other), Checkpoint (checkpoint), Validation (other).
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.common.env import env_world_size
from benchmarks.common.errors import TraceInputError
from benchmarks.common.modes import opens_files, trains
from benchmarks.common.shuffle import shard, steps_per_epoch
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
from benchmarks.hepcnn.config import TrainConfig, add_train_flags, config_from_args
from benchmarks.hepcnn.data import DatasetInfo, check_dataset, dataset_without_reading
from benchmarks.hepcnn.loaders import FileReader, make_loader

log = logging.getLogger(__name__)


def setup_parser(p: argparse.ArgumentParser) -> None:
    add_run_flags(p, "directory of hep_train_chunk<k>.h5 files")
    add_train_flags(p)


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.time()
    p = argparse.ArgumentParser(prog="python -m benchmarks.hepcnn train")
    setup_parser(p)
    args = p.parse_args(argv)
    run_dir, tl = open_run(args)
    try:
        with tl.phase("Parse Arguments", cat="other"):
            cfg = config_from_args(args)
            if cfg.loader_threads < 1:
                raise TraceInputError("--loader-threads", f"must be at least 1, got {cfg.loader_threads}")
            # no-io touches no data file: the shapes come from generator.json when there is one
            info = (dataset_without_reading(args.data, env_world_size()) if not opens_files(cfg.mode) else None) \
                or check_dataset(args.data, env_world_size(), cfg.image_size)
            if cfg.image_size is not None and info.image_size != cfg.image_size:
                raise TraceInputError(args.data, f"image size {info.image_size} (generator.json) does not match "
                                                 f"--image-size {cfg.image_size}")
            if info.image_size < 16:  # four 2x2 poolings
                raise TraceInputError(info.train[0].path, f"image size {info.image_size} is below the network's "
                                                          f"minimum of 16")
        return train(cfg, info, run_dir, tl, t0, merge=not (args.no_merge or args.no_timelogger))
    finally:
        tl.close()


def train(cfg: TrainConfig, info: DatasetInfo, run_dir: Path, tl: Any, t0: float, merge: bool = True) -> int:
    """Run the benchmark; rank 0 writes ``summary.json`` and, unless ``merge`` is False, merges the run."""
    dist, tf = start_backend(tl, cfg.dist, cfg.seed)
    rank, size = dist.rank, dist.size
    cache = start_node_cache(tl, cfg.node_cache, dist)
    if rank == 0:
        say(rank, f"{size} rank(s), dist={dist.kind}, shuffle={cfg.shuffle}, loader={cfg.loader}, mode={cfg.mode}, "
                  f"node cache {cfg.node_cache}, "
                  f"{len(info.train)} train files, image {info.image_size}, TF {tf.__version__}")

    with tl.phase("Build Network and Functions", cat="other"):
        from benchmarks.hepcnn.model import build_model, weighted_correct, weighted_loss

        model = build_model(info.image_size, cfg.width, cfg.dropout)
        opt = tf.keras.optimizers.Adam(learning_rate=cfg.lr)
        opt.build(model.trainable_variables)
        dist.broadcast_variables(model.variables)
        signature = [tf.TensorSpec([cfg.batch, info.image_size, info.image_size, 3], tf.float32),
                     tf.TensorSpec([cfg.batch], tf.int32), tf.TensorSpec([cfg.batch], tf.float32)]

        def metrics(y: Any, logits: Any, w: Any) -> Any:  # weighted correct, weight: summed over ranks per epoch
            return tf.stack([weighted_correct(y, logits, w), tf.reduce_sum(w)])

        step_fns = (step_functions(tf, model, opt, dist, signature, weighted_loss, metrics) if trains(cfg.mode)
                    else _no_training)
        ckpt = ckpt_manager = None
        if rank == 0 and cfg.checkpoint_every > 0:
            ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
            ckpt_manager = tf.train.CheckpointManager(ckpt, str(run_dir / "checkpoints"), max_to_keep=2)

    with tl.phase("Setup Iterators", cat="other"):
        reader = FileReader(tl, cfg.seed, rank, cfg.read_method, info.by_path, cfg.mode)
        loader = make_loader(cfg.loader, reader, cfg.batch, info.image_size, cfg.loader_threads)
        files = info.train_files
        counts = info.samples_per_file
        steps = [steps_per_epoch(counts, files, size, cfg.batch, cfg.shuffle, e, cfg.seed) for e in range(cfg.epochs)]
    if min(steps, default=0) < 1:
        raise TraceInputError(run_dir, f"not one full batch of {cfg.batch} per rank in an epoch; lower --batch")

    window = ProfileWindow(tl, cfg.tf_profile_steps, run_dir, rank)
    global_step = 0
    epoch_stats: list[dict] = []
    t_train = time.perf_counter()
    with tl.phase("Train Loop", cat="other"), window:
        for epoch in range(cfg.epochs):
            tl.set_epoch(epoch)
            t_epoch = time.perf_counter()
            sums = np.zeros(3)  # loss*batch, weighted correct, weight
            with tl.phase("Epoch", cat="other"):
                mine = rank_epoch_files(tl, files, rank, size, epoch, cfg, cache)
                with tl.phase("Setup Iterators", cat="other"):  # a new pipeline per epoch: the files changed
                    batches = iter(loader.epoch(mine, epoch, steps[epoch]))
                every = cfg.log_every or max(1, steps[epoch] // 4)
                for step in range(steps[epoch]):
                    tl.set_step(global_step)
                    with tl.phase("Training Iteration", cat="other"), window.step(tf, global_step):
                        with tl.phase("Call to Next Batch", cat="wait"):
                            x, y, w = next(batches)
                        loss, (correct, weight) = step_fns(tl, x, y, w)
                    sums += (loss * cfg.batch, correct, weight)
                    global_step += 1
                    if (step + 1) % every == 0 or step + 1 == steps[epoch]:
                        say(rank, f"epoch {epoch + 1}/{cfg.epochs} step {step + 1}/{steps[epoch]} "
                                  f"loss {loss:.4f}")
                total = dist.sum([*sums, steps[epoch] * cfg.batch])
                stats = {"epoch": epoch, "loss": float(total[0] / total[3]), "accuracy": float(total[1] / total[2]),
                         "samples": int(total[3]), "time_s": time.perf_counter() - t_epoch}
                epoch_stats.append(stats)
                if rank == 0:
                    quality = (f"train loss {stats['loss']:.4f} accuracy {stats['accuracy']:.3f}" if trains(cfg.mode)
                               else "no training (io-only)")
                    say(rank, f"epoch {epoch + 1}/{cfg.epochs} done: {quality} "
                              f"{stats['samples'] / stats['time_s']:.1f} samples/s")
                if ckpt_manager is not None and ((epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == cfg.epochs):
                    with tl.phase("Checkpoint", cat="checkpoint") as c:
                        c.update(file=ckpt_manager.save(checkpoint_number=epoch))
        # Intervals take the tags in force when they end: untag before Train Loop (and validation) end, so that
        # neither stretches the last epoch's window.
        tl.set_epoch(None)
        tl.set_step(None)
    train_time = time.perf_counter() - t_train

    final = {"loss": epoch_stats[-1]["loss"], "accuracy": epoch_stats[-1]["accuracy"], "on": "train"}
    if info.validation and trains(cfg.mode):
        with tl.phase("Validation", cat="other"):
            final = _validate(tf, model, info, dist, tl, cfg)
    if rank == 0:
        say(rank, f"final {final['on']} loss {final['loss']:.4f} accuracy {final['accuracy']:.3f}")
    samples = sum(s["samples"] for s in epoch_stats)
    summary = {
        "benchmark": "hepcnn", "mode": cfg.mode, "epochs": cfg.epochs, "ranks": size, "dist": dist.kind,
        "shuffle": cfg.shuffle, "loader": cfg.loader, "batch_per_rank": cfg.batch, "image_size": info.image_size,
        "width": cfg.width,
        "train_files": len(files), "samples_trained": samples, "train_time_s": train_time,
        "throughput_samples_per_s": samples / train_time,
        "steady_throughput_samples_per_s": steady_throughput(epoch_stats),
        "final_loss": final["loss"],
        "final_accuracy": final["accuracy"], "final_metrics_on": final["on"],
        "epochs_detail": epoch_stats, "node_cache": cache.job_summary(dist), "wall_time_s": time.time() - t0,
        "config": cfg.as_dict(),
    }
    finish(tl, dist, run_dir, summary, merge, f"{cfg.shuffle} shuffle, {size} rank(s), mode {cfg.mode}")
    return 0


def _no_training(tl: Any, x: Any, y: Any, w: Any) -> tuple[float, np.ndarray]:
    """``--mode io-only``: the batch is fetched, no step runs."""
    return float("nan"), np.array([0.0, float(np.sum(w))])


def _validate(tf: Any, model: Any, info: DatasetInfo, dist: Any, tl: Any, cfg: TrainConfig) -> dict:
    """Weighted loss and accuracy over the validation files, sharded over ranks."""
    from benchmarks.hepcnn.model import weighted_correct, weighted_loss

    reader = FileReader(tl, cfg.seed, dist.rank, cfg.read_method, info.by_path, cfg.mode)
    names = [f.path for f in info.validation]
    sums = np.zeros(3)
    if len(names) >= dist.size:
        mine = shard(names, dist.rank, dist.size)
    else:
        mine = names if dist.rank == 0 else []
    for position, path in enumerate(mine):
        x, y, w = reader.read(path, None, position)
        for lo in range(0, len(y), cfg.batch):
            logits = model(x[lo:lo + cfg.batch], training=False)
            yy, ww = tf.constant(y[lo:lo + cfg.batch]), tf.constant(w[lo:lo + cfg.batch])
            sums += (float(weighted_loss(yy, logits, ww)) * len(yy), float(weighted_correct(yy, logits, ww)),
                     float(np.sum(w[lo:lo + cfg.batch])))
    total = dist.sum([*sums, sum(info.samples_per_file[p] for p in mine)])
    return {"loss": float(total[0] / max(total[3], 1)), "accuracy": float(total[1] / max(total[2], 1e-12)),
            "on": "validation"}
