"""``python -m benchmarks.hepcnn train``: the HEP-CNN benchmark with TimeLogger phases in the original taxonomy.

Phases (cat): Parse Arguments, Server Initialization, Build Network and Functions, Setup Iterators (other);
Train Loop ⊃ Epoch ⊃ Training Iteration ⊃ {Call to Next Batch (wait) ⊃ Load File (io) ⊃ HDF5 File Read (io),
Train Step (compute) | Compute Gradients (compute), Allreduce Gradients (comm), Apply Gradients (compute)};
Global Shuffle (other), Checkpoint (checkpoint), Validation (other).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.common.env import env_world_size
from benchmarks.common.errors import TraceInputError
from benchmarks.common.runs import SUMMARY
from benchmarks.hepcnn.config import TrainConfig, add_train_flags, config_from_args
from benchmarks.hepcnn.data import DatasetInfo, check_dataset
from benchmarks.hepcnn.loaders import FileReader, make_loader
from benchmarks.hepcnn.shuffle import epoch_files, shard, steps_per_epoch
from timelogger import layout

log = logging.getLogger(__name__)


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="directory of hep_train_chunk<k>.h5 files")
    p.add_argument("--run-dir", help="run directory (default: $TIMELOGGER_DIR, set by `timelogger run -o`)")
    p.add_argument("--no-merge", action="store_true", help="do not merge the run on rank 0 at the end")
    p.add_argument("--no-timelogger", action="store_true",
                   help="disable the app layer (overhead baseline); summary.json is still written")
    p.add_argument("--debug", action="store_true")
    add_train_flags(p)


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.time()
    p = argparse.ArgumentParser(prog="python -m benchmarks.hepcnn train")
    setup_parser(p)
    args = p.parse_args(argv)
    run_dir = args.run_dir or os.environ.get("TIMELOGGER_DIR")
    if not run_dir:
        raise TraceInputError("--run-dir", "no run directory: pass --run-dir or launch under `timelogger run -o RUN`")
    from timelogger import TimeLogger

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    tl = TimeLogger(None if args.no_timelogger else run_dir)
    try:
        with tl.phase("Parse Arguments", cat="other"):
            cfg = config_from_args(args)
            info = check_dataset(args.data, env_world_size(), cfg.image_size)
            if info.image_size < 16:  # four 2x2 poolings
                raise TraceInputError(info.train[0].path, f"image size {info.image_size} is below the network's "
                                                          f"minimum of 16")
        return train(cfg, info, Path(run_dir), tl, t0, merge=not (args.no_merge or args.no_timelogger))
    finally:
        tl.close()


def _say(rank: int, text: str) -> None:
    # Progress lines go to stdout, flushed, so `mpiexec` streams them while the run goes on.
    print(f"[rank {rank}] {text}", flush=True)


def train(cfg: TrainConfig, info: DatasetInfo, run_dir: Path, tl: Any, t0: float, merge: bool = True) -> int:
    """Run the benchmark; rank 0 writes ``summary.json`` and, unless ``merge`` is False, merges the run."""
    with tl.phase("Server Initialization", cat="other"):
        from benchmarks.hepcnn.dist import Dist

        dist = Dist(cfg.dist)
        rank, size = dist.rank, dist.size
        if dist.comm is not None:
            tl.sync_clocks(dist.comm)
        import tensorflow as tf

        # Share the node's cores among the ranks on it: keep TF's pools from oversubscribing them.
        cores = max(1, (os.cpu_count() or 1) // dist.local_size)
        tf.config.threading.set_intra_op_parallelism_threads(cores)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, cores))
        tf.random.set_seed(cfg.seed)
    if rank == 0:
        _say(rank, f"{size} rank(s), dist={dist.kind}, shuffle={cfg.shuffle}, loader={cfg.loader}, "
                   f"{len(info.train)} train files, image {info.image_size}, TF {tf.__version__}")

    with tl.phase("Build Network and Functions", cat="other"):
        from benchmarks.hepcnn.model import build_model, weighted_correct, weighted_loss

        model = build_model(info.image_size, cfg.width, cfg.dropout)
        opt = tf.keras.optimizers.Adam(learning_rate=cfg.lr)
        opt.build(model.trainable_variables)
        dist.broadcast_variables(model.variables)
        step_fns = _step_functions(tf, model, opt, dist, cfg.batch, info.image_size,
                                   weighted_loss, weighted_correct)
        ckpt = ckpt_manager = None
        if rank == 0 and cfg.checkpoint_every > 0:
            ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
            ckpt_manager = tf.train.CheckpointManager(ckpt, str(run_dir / "checkpoints"), max_to_keep=2)

    with tl.phase("Setup Iterators", cat="other"):
        reader = FileReader(tl, cfg.seed, rank, cfg.read_method, info.by_path)
        loader = make_loader(cfg.loader, reader, cfg.batch, info.image_size)
        files = info.train_files
        counts = info.samples_per_file
        steps = [steps_per_epoch(counts, files, size, cfg.batch, cfg.shuffle, e, cfg.seed) for e in range(cfg.epochs)]
    if min(steps, default=0) < 1:
        raise TraceInputError(run_dir, f"not one full batch of {cfg.batch} per rank in an epoch; lower --batch")

    profile = contextlib.ExitStack()
    window = cfg.tf_profile_steps
    global_step = 0
    epoch_stats: list[dict] = []
    t_train = time.perf_counter()
    with tl.phase("Train Loop", cat="other"), profile:
        for epoch in range(cfg.epochs):
            tl.set_epoch(epoch)
            t_epoch = time.perf_counter()
            sums = np.zeros(3)  # loss*batch, weighted correct, weight
            with tl.phase("Epoch", cat="other"):
                if cfg.shuffle == "global":
                    with tl.phase("Global Shuffle", cat="other"):
                        mine = epoch_files(files, rank, size, epoch, "global", cfg.seed)
                else:
                    mine = epoch_files(files, rank, size, epoch, "local", cfg.seed)
                with tl.phase("Setup Iterators", cat="other"):  # a new pipeline per epoch: the files changed
                    batches = iter(loader.epoch(mine, epoch, steps[epoch]))
                every = cfg.log_every or max(1, steps[epoch] // 4)
                for step in range(steps[epoch]):
                    tl.set_step(global_step)
                    if window and global_step == window[0]:
                        profile.enter_context(tl.tf_profile(str(layout.tf_logdir(run_dir, rank))))
                    profiling = bool(window) and window[0] <= global_step < window[1]
                    # The TF profiler's step marker (what Keras' fit emits): lets the framework layer's events be
                    # checked against this step's app interval after alignment.
                    marker = (tf.profiler.experimental.Trace("train", step_num=global_step, _r=1) if profiling
                              else contextlib.nullcontext())
                    with tl.phase("Training Iteration", cat="other"), marker:
                        with tl.phase("Call to Next Batch", cat="wait"):
                            x, y, w = next(batches)
                        loss, correct, weight = step_fns(tl, x, y, w)
                    sums += (loss * cfg.batch, correct, weight)
                    global_step += 1
                    if window and global_step == window[1]:
                        profile.close()
                    if (step + 1) % every == 0 or step + 1 == steps[epoch]:
                        _say(rank, f"epoch {epoch + 1}/{cfg.epochs} step {step + 1}/{steps[epoch]} "
                                   f"loss {loss:.4f}")
                total = dist.sum([*sums, steps[epoch] * cfg.batch])
                stats = {"epoch": epoch, "loss": float(total[0] / total[3]), "accuracy": float(total[1] / total[2]),
                         "samples": int(total[3]), "time_s": time.perf_counter() - t_epoch}
                epoch_stats.append(stats)
                if rank == 0:
                    _say(rank, f"epoch {epoch + 1}/{cfg.epochs} done: train loss {stats['loss']:.4f} "
                               f"accuracy {stats['accuracy']:.3f} {stats['samples'] / stats['time_s']:.1f} samples/s")
                if ckpt_manager is not None and ((epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == cfg.epochs):
                    with tl.phase("Checkpoint", cat="checkpoint") as c:
                        c.update(file=ckpt_manager.save(checkpoint_number=epoch))
        # Intervals take the tags in force when they end: untag before Train Loop (and validation) end, so that
        # neither stretches the last epoch's window.
        tl.set_epoch(None)
        tl.set_step(None)
    train_time = time.perf_counter() - t_train

    final = {"loss": epoch_stats[-1]["loss"], "accuracy": epoch_stats[-1]["accuracy"], "on": "train"}
    if info.validation:
        with tl.phase("Validation", cat="other"):
            final = _validate(tf, model, info, dist, tl, cfg)
    if rank == 0:
        _say(rank, f"final {final['on']} loss {final['loss']:.4f} accuracy {final['accuracy']:.3f}")
    samples = sum(s["samples"] for s in epoch_stats)
    summary = {
        "benchmark": "hepcnn", "epochs": cfg.epochs, "ranks": size, "dist": dist.kind, "shuffle": cfg.shuffle,
        "loader": cfg.loader, "batch_per_rank": cfg.batch, "image_size": info.image_size, "width": cfg.width,
        "train_files": len(files), "samples_trained": samples, "train_time_s": train_time,
        "throughput_samples_per_s": samples / train_time,
        # without the first epoch, which also traces the tf.functions
        "steady_throughput_samples_per_s": (sum(s["samples"] for s in epoch_stats[1:]) /
                                            sum(s["time_s"] for s in epoch_stats[1:])) if cfg.epochs > 1 else None,
        "final_loss": final["loss"],
        "final_accuracy": final["accuracy"], "final_metrics_on": final["on"],
        "epochs_detail": epoch_stats, "wall_time_s": time.time() - t0, "config": cfg.as_dict(),
    }
    tl.close()  # everything this rank captured is on disk before rank 0 merges
    dist.barrier()
    dist.shutdown()
    if rank == 0:
        (run_dir / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
        if merge:
            from benchmarks.common.runs import finalize_run, format_bandwidth, format_breakdown

            parts = finalize_run(run_dir)
            print(format_breakdown(parts, title=f"breakdown, % of wall time ({cfg.shuffle} shuffle, {size} rank(s))"))
            print(format_bandwidth(parts, title="read bandwidth"), flush=True)
            if os.environ.get("DFTRACER_ENABLE") == "1":
                print(f"note: the POSIX layer is complete only after every rank exits; "
                      f"`trace-merge merge {run_dir} --force` then includes all of it", flush=True)
    return 0


def _step_functions(tf: Any, model: Any, opt: Any, dist: Any, batch: int, size: int, loss_fn: Any,
                    correct_fn: Any) -> Any:
    """The training step for the backend, as ``step(tl, x, y, w) -> (loss, weighted correct, weight sum)``.

    Horovod and single-process fuse gradient and update in one ``tf.function`` (Horovod's allreduce runs inside it
    and shows in its timeline); the ``mpi`` backend splits it to average gradients with mpi4py in between.
    """
    signature = [tf.TensorSpec([batch, size, size, 3], tf.float32), tf.TensorSpec([batch], tf.int32),
                 tf.TensorSpec([batch], tf.float32)]
    variables = model.trainable_variables

    def forward(x: Any, y: Any, w: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits, w)
        return tape, loss, correct_fn(y, logits, w)

    if dist.kind == "mpi" and dist.size > 1:
        @tf.function(input_signature=signature)
        def gradients(x: Any, y: Any, w: Any) -> Any:
            tape, loss, correct = forward(x, y, w)
            return loss, correct, tape.gradient(loss, variables)

        @tf.function
        def apply(grads: Any) -> None:
            opt.apply_gradients(zip(grads, variables))

        def step(tl: Any, x: Any, y: Any, w: Any) -> tuple[float, float, float]:
            with tl.phase("Compute Gradients", cat="compute"):
                loss, correct, grads = gradients(x, y, w)
                grads = [g.numpy() for g in grads]
            with tl.phase("Allreduce Gradients", cat="comm") as c:
                grads = dist.average(grads)
                c.update(bytes=int(sum(g.nbytes for g in grads)))
            with tl.phase("Apply Gradients", cat="compute"):
                apply(grads)
            return float(loss), float(correct), float(np.sum(w))

        return step

    @tf.function(input_signature=signature)
    def fused(x: Any, y: Any, w: Any) -> Any:
        tape, loss, correct = forward(x, y, w)
        if dist.kind == "horovod":
            tape = dist.hvd.DistributedGradientTape(tape)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss, correct

    def step(tl: Any, x: Any, y: Any, w: Any) -> tuple[float, float, float]:
        with tl.phase("Train Step", cat="compute"):
            loss, correct = fused(x, y, w)
            out = float(loss), float(correct)  # waits for the step to finish inside the interval
        return out[0], out[1], float(np.sum(w))

    return step


def _validate(tf: Any, model: Any, info: DatasetInfo, dist: Any, tl: Any, cfg: TrainConfig) -> dict:
    """Weighted loss and accuracy over the validation files, sharded over ranks."""
    from benchmarks.hepcnn.model import weighted_correct, weighted_loss

    reader = FileReader(tl, cfg.seed, dist.rank, cfg.read_method, info.by_path)
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
