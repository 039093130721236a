"""The parts of a benchmark's training run both benchmarks share: starting the backend and TensorFlow, the TF
profiler window over global steps, progress lines, and finishing (``summary.json``, the merge on rank 0)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from benchmarks.common.runs import SUMMARY, json_ready


def add_run_flags(p: argparse.ArgumentParser, data_help: str) -> None:
    """The flags of a ``train`` subcommand that are about the run, not the training."""
    p.add_argument("--data", required=True, help=data_help)
    p.add_argument("--run-dir", help="run directory (default: $TIMELOGGER_DIR, set by `timelogger run -o`)")
    p.add_argument("--no-merge", action="store_true", help="do not merge the run on rank 0 at the end")
    p.add_argument("--no-timelogger", action="store_true",
                   help="disable the app layer (overhead baseline); summary.json is still written")
    p.add_argument("--debug", action="store_true")


def open_run(args: argparse.Namespace) -> tuple[Path, Any]:
    """The run directory (``--run-dir`` or the launcher's) and this process's TimeLogger in it."""
    from benchmarks.common.errors import TraceInputError

    run_dir = args.run_dir or os.environ.get("TIMELOGGER_DIR")
    if not run_dir:
        raise TraceInputError("--run-dir", "no run directory: pass --run-dir or launch under `timelogger run -o RUN`")
    from timelogger import TimeLogger

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    return Path(run_dir), TimeLogger(None if args.no_timelogger else run_dir)


def say(rank: int, text: str) -> None:
    """A progress line on stdout, flushed, so ``mpiexec`` streams it while the run goes on."""
    print(f"[rank {rank}] {text}", flush=True)


def start_backend(tl: Any, dist_kind: str, seed: int, phase: str = "Server Initialization") -> tuple[Any, Any]:
    """Inside the app phase ``phase``: the distributed backend, TensorFlow, clock sync; returns ``(dist, tf)``."""
    with tl.phase(phase, cat="other"):
        from benchmarks.common.dist import Dist

        dist = Dist(dist_kind)
        if dist.comm is not None:
            tl.sync_clocks(dist.comm)
        import tensorflow as tf

        # Share the node's cores among the ranks on it: keep TF's pools from oversubscribing them.
        cores = max(1, (os.cpu_count() or 1) // dist.local_size)
        tf.config.threading.set_intra_op_parallelism_threads(cores)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, cores))
        tf.random.set_seed(seed)
    return dist, tf


def start_node_cache(tl: Any, mode: str, dist: Any) -> Any:
    """The rank's :class:`~benchmarks.common.node_cache.NodeCache`; under ``drop`` rank 0 drops the caches while
    the other ranks wait."""
    from benchmarks.common.node_cache import NodeCache

    cache = NodeCache(mode, tl)
    cache.before_run(dist.rank)
    if mode == "drop":
        dist.barrier()
        if cache.drop_problem:
            say(dist.rank, f"--node-cache drop: {cache.drop_problem}")
    return cache


def rank_epoch_files(tl: Any, files: Sequence[str], rank: int, size: int, epoch: int, cfg: Any, cache: Any
                     ) -> list[str]:
    """The files ``rank`` reads in ``epoch`` (:func:`~benchmarks.common.shuffle.epoch_files`; global shuffle's
    permutation inside a ``Global Shuffle`` phase, as the original timed it), after the node cache evicted the ones
    new to the rank -- unless ``cfg.mode`` touches no data file, not even to evict it."""
    from benchmarks.common.modes import opens_files
    from benchmarks.common.shuffle import epoch_files

    if cfg.shuffle == "global":
        with tl.phase("Global Shuffle", cat="other"):
            mine = epoch_files(files, rank, size, epoch, "global", cfg.seed)
    else:
        mine = epoch_files(files, rank, size, epoch, cfg.shuffle, cfg.seed)
    if opens_files(cfg.mode):
        cache.before_epoch(mine)
    return mine


class ProfileWindow:
    """The TF profiler over global steps ``[A, B)`` into ``RUN/tf/rank-<r>``, with the step markers Keras' ``fit``
    emits, so that the framework layer's events can be checked against each step's app interval.

    Use ``with window.step(tf, global_step):`` around each training iteration and ``with window:`` around the loop
    (closes the profiler if the loop ends inside the window).
    """

    def __init__(self, tl: Any, steps: "tuple[int, int] | None", run_dir: Path, rank: int) -> None:
        from timelogger import layout

        self.tl, self.window = tl, steps
        self.logdir = str(layout.tf_logdir(run_dir, rank))
        self._profile = contextlib.ExitStack()

    def __enter__(self) -> "ProfileWindow":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._profile.close()

    @contextlib.contextmanager
    def step(self, tf: Any, global_step: int) -> Any:
        w = self.window
        if w and global_step == w[0]:
            self._profile.enter_context(self.tl.tf_profile(self.logdir))
        profiling = bool(w) and w[0] <= global_step < w[1]
        marker = (tf.profiler.experimental.Trace("train", step_num=global_step, _r=1) if profiling
                  else contextlib.nullcontext())
        with marker:
            yield
        if w and global_step + 1 == w[1]:
            self._profile.close()


def finish(tl: Any, dist: Any, run_dir: Path, summary: dict, merge: bool, title: str) -> None:
    """Close this rank's capture, wait for every rank, then on rank 0 write ``summary.json`` and (unless
    ``merge`` is False) merge the run and print its breakdown and bandwidth."""
    tl.close()  # everything this rank captured is on disk before rank 0 merges
    dist.barrier()
    dist.shutdown()
    if dist.rank != 0:
        return
    (run_dir / SUMMARY).write_text(json.dumps(json_ready(summary), indent=1) + "\n")
    if "node_cache" in summary:
        _record_in_manifest(run_dir, "node_cache", summary["node_cache"])
    if merge:
        from benchmarks.common.runs import finalize_run, format_bandwidth, format_breakdown, format_layered

        parts = finalize_run(run_dir)
        print(format_breakdown(parts, title=f"breakdown, % of wall time ({title})"))
        print(format_layered(parts, title="layered: app phases split by lower layer (s)"))
        print(format_bandwidth(parts, title="read bandwidth"), flush=True)
        if os.environ.get("DFTRACER_ENABLE") == "1":
            print(f"note: the POSIX layer is complete only after every rank exits; "
                  f"`trace-merge merge {run_dir} --force` then includes all of it", flush=True)


def step_functions(tf: Any, model: Any, opt: Any, dist: Any, signature: Any, loss_fn: Any, metrics_fn: Any) -> Any:
    """The training step for the backend, as ``step(tl, x, y, w) -> (loss, metrics as numpy)``.

    ``loss_fn(y, logits, w)`` is minimised; ``metrics_fn(y, logits, w)`` returns a vector the caller sums over
    steps (and ranks). Horovod and single-process fuse gradient and update in one ``tf.function`` inside a
    ``Train Step`` phase (Horovod's allreduce runs inside it and shows in its timeline); the ``mpi`` backend splits
    it into ``Compute Gradients``, ``Allreduce Gradients`` (mpi4py, cat ``comm``) and ``Apply Gradients``.
    """
    import numpy as np

    variables = model.trainable_variables

    def forward(x: Any, y: Any, w: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits, w)
        return tape, loss, metrics_fn(y, logits, w)

    if dist.kind == "mpi" and dist.size > 1:
        @tf.function(input_signature=signature)
        def gradients(x: Any, y: Any, w: Any) -> Any:
            tape, loss, metrics = forward(x, y, w)
            return loss, metrics, tape.gradient(loss, variables)

        @tf.function
        def apply(grads: Any) -> None:
            opt.apply_gradients(zip(grads, variables))

        def split_step(tl: Any, x: Any, y: Any, w: Any) -> tuple[float, np.ndarray]:
            with tl.phase("Compute Gradients", cat="compute"):
                loss, metrics, grads = gradients(x, y, w)
                grads = [g.numpy() for g in grads]
            with tl.phase("Allreduce Gradients", cat="comm") as c:
                grads = dist.average(grads)
                c.update(bytes=int(sum(g.nbytes for g in grads)))
            with tl.phase("Apply Gradients", cat="compute"):
                apply(grads)
            return float(loss), metrics.numpy()

        return split_step

    @tf.function(input_signature=signature)
    def fused(x: Any, y: Any, w: Any) -> Any:
        tape, loss, metrics = forward(x, y, w)
        if dist.kind == "horovod":
            tape = dist.hvd.DistributedGradientTape(tape)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss, metrics

    def step(tl: Any, x: Any, y: Any, w: Any) -> tuple[float, np.ndarray]:
        with tl.phase("Train Step", cat="compute"):
            loss, metrics = fused(x, y, w)
            out = float(loss), metrics.numpy()  # waits for the step to finish inside the interval
        return out

    return step


def _record_in_manifest(run_dir: Path, key: str, value: Any) -> None:
    """Add ``key`` to the launcher's ``manifest.json`` (rewritten atomically); nothing without a manifest."""
    from timelogger import layout

    path = run_dir / layout.MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(manifest, dict):
        manifest[key] = json_ready(value)
        layout.write_json_atomic(path, manifest)


def steady_throughput(epoch_stats: list[dict]) -> "float | None":
    """Samples/s without the first epoch, which also traces the tf.functions."""
    rest = epoch_stats[1:]
    return sum(s["samples"] for s in rest) / sum(s["time_s"] for s in rest) if rest else None
