"""The run's deep-learning framework, told from its evidence, and the words the outputs use for it: the verdict's
notes, the legends and the findings name the user's framework's own knobs and options (``num_parallel_calls`` and
``prefetch`` for tf.data, ``num_workers`` and ``prefetch_factor`` for a PyTorch ``DataLoader``).

Evidence, from the run's event names (:func:`trace_merge.analysis.event_stats_df`) and the per-rank verdict table's
``profiler`` column (:func:`trace_merge.attribution.input_bound_df`):

- **PyTorch**: the PyTorch profiler's rows (``ProfilerStep#N``, the DataLoader's ``enumerate(DataLoader)#...``
  waits, ``aten::`` operators; :mod:`trace_merge.readers.torch_trace`), DLIO's PyTorch classes
  (``TorchFramework.*``, ``TorchDataLoader.*``), the launcher's PyTorch hooks (``Step <Optimizer>.step``, the
  DataLoader workers' ``Collate <fn>``; :mod:`timelogger.hooks_torch`);
- **TensorFlow**: the TF profiler's rows (``IteratorGetNext``, ``Iterator::*``, ``__inference_*``, ``EagerExecute``;
  :mod:`trace_merge.readers.xplane`) and DLIO's TF classes (``TFFramework.*``, ``TFDataLoader*``).

Where both or neither show, the words are TensorFlow's (the toolkit's texts before PyTorch was read): a run's
outputs change only where PyTorch is the evidence.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from trace_merge.schema import as_text

PYTORCH = "PyTorch"
TENSORFLOW = "TensorFlow"
_TORCH_NAMES = re.compile(r"^(?:ProfilerStep#\d+$|enumerate\(DataLoader\)#|aten::|c10d::|Torch[A-Z]\w*[.#]|"
                          r"Optimizer\.(?:step|zero_grad)#|Step [A-Za-z_]\w*\.step$|Collate \S)")
_TF_NAMES = re.compile(r"IteratorGetNext|^Iterator::|^__inference_|^EagerExecute|^EagerLocalExecute|^TF[A-Z]\w*\.")


@dataclass(frozen=True)
class Words:
    """How the outputs name a framework's parts."""

    framework: str
    #: a profile window of its profiler
    profile: str
    #: the profiler's input-pipeline wait, as the basis note names it
    profiler_wait: str
    #: the layered breakdown's input-wait component where the profiler saw it
    input_wait: str
    #: the launcher's option that profiles a few steps
    profile_option: str
    #: more parallel input work, in the framework's knobs
    parallel_input: str
    #: a pipeline that reads ahead
    prefetch: str
    #: caching the data set
    cache: str
    #: compute-side knobs for a job that is not input-bound
    compute: str
    #: the wait's short name in the idle line
    wait_name: str
    #: giving each rank its share of the samples
    shard: str
    #: reading in larger pieces
    larger_reads: str
    #: keeping files open across samples
    open_once: str
    #: larger reads, in short (an input-bound run whose wait is the file system)
    storage_reads: str
    #: a cache for a slow first epoch
    cache_short: str
    #: caching what every epoch re-reads
    cache_long: str
    #: fewer or larger collectives
    comm: str
    #: a pipeline that works while the step computes (one that only works while the step waits for it)
    read_ahead: str = ("prefetch: end the pipeline with `.prefetch(tf.data.AUTOTUNE)`; a Keras `Sequence` with "
                       "`fit(..., workers=N, use_multiprocessing=True)`; a PyTorch `DataLoader(num_workers>0, "
                       "prefetch_factor=2)`; a hand-written loader reads on a producer thread or process into a "
                       "bounded queue")


TF_WORDS = Words(
    framework=TENSORFLOW, profile="TF profile", profiler_wait="input-pipeline wait (IteratorGetNext family)",
    input_wait="input wait (tf.data)", profile_option="--tf-profile",
    parallel_input="more parallel input work (`num_parallel_calls=tf.data.AUTOTUNE`, interleave over files) and a "
                   "deeper `prefetch`",
    prefetch="parallelise the work after the read: `dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)`, "
             "`.prefetch(tf.data.AUTOTUNE)`; for a Python reader more worker processes (threads hold the GIL)",
    cache="`dataset.cache()` (or a node-local copy in /dev/shm or local SSD)",
    compute="a larger batch per rank, mixed precision (`tf.keras.mixed_precision.set_global_policy('mixed_float16')`), "
            "XLA (`jit_compile=True`)",
    wait_name="tf.data wait", shard="`dataset.shard(hvd.size(), hvd.rank())`",
    larger_reads="HDF5 reads of whole chunks or samples, TFRecord shards of 100+ MB, "
                 "`tf.data.TFRecordDataset(..., buffer_size=8 << 20)`",
    open_once="`tf.data.Dataset.interleave` over open files",
    storage_reads="TFRecord shards, HDF5 chunk-sized reads", cache_short="a `dataset.cache()` or warm node-local copy",
    cache_long="`dataset.cache()` (memory) or `dataset.cache('/local/ssd/cache')`",
    comm="with Horovod: a larger batch per rank (fewer all-reduces per sample), a larger fusion buffer "
         "(`HOROVOD_FUSION_THRESHOLD`), `hvd.DistributedOptimizer(..., backward_passes_per_step=k)`")

TORCH_WORDS = Words(
    framework=PYTORCH, profile="PyTorch profile", profiler_wait="DataLoader wait (enumerate(DataLoader) __next__)",
    input_wait="input wait (DataLoader)", profile_option="--torch-profile",
    parallel_input="more loader worker processes and batches in flight: `DataLoader(num_workers=N, "
                   "prefetch_factor=4, persistent_workers=True)` (N up to the cores per rank), `pin_memory=True` "
                   "when the batch goes to a GPU",
    prefetch="parallelise the work after the read: more `DataLoader` workers (`num_workers=N`, "
             "`persistent_workers=True` so that epochs do not restart them), decode and augment in the Dataset's "
             "`__getitem__` (the workers) rather than in the training loop, `pin_memory=True` for GPU copies",
    cache="a cache of the decoded samples in the Dataset (memory, or a node-local copy in /dev/shm or local SSD)",
    compute="a larger batch per rank, mixed precision (`torch.autocast(device_type='cuda', dtype=torch.bfloat16)`), "
            "`torch.compile(model)`",
    wait_name="DataLoader wait", shard="`DistributedSampler(dataset)` with `sampler.set_epoch(epoch)`",
    larger_reads="HDF5 reads of whole chunks or samples, samples packed into shards of 100+ MB (WebDataset tar "
                 "shards) read sequentially by each worker",
    open_once="open files once per worker (in `worker_init_fn` or lazily in `__getitem__`), not per sample",
    storage_reads="samples packed into shards (WebDataset tars), HDF5 chunk-sized reads",
    cache_short="a cache of the decoded samples in the Dataset or a warm node-local copy",
    cache_long="a cache of the decoded samples in the Dataset (memory, with `persistent_workers=True` so that the "
               "workers keep it across epochs)",
    comm="with DDP: a larger batch per rank (fewer all-reduces per sample), larger gradient buckets "
         "(`DistributedDataParallel(..., bucket_cap_mb=100)`), gradient accumulation under `model.no_sync()`",
    read_ahead="read ahead: `DataLoader(num_workers=N, prefetch_factor=2)` (workers load the next batches while the "
               "step runs; `persistent_workers=True` keeps them across epochs); a hand-written loader reads on a "
               "producer thread or process into a bounded queue")


def framework_of(event_stats: pd.DataFrame, per_rank: Optional[pd.DataFrame] = None) -> Optional[str]:
    """:data:`PYTORCH`, :data:`TENSORFLOW` or None (no evidence), from the run's event names (``event_stats``:
    ``layer``, ``name``, ``count``) and the verdict table's ``profiler`` column. PyTorch needs PyTorch evidence and
    no TensorFlow evidence."""
    torch = tf = False
    if per_rank is not None and len(per_rank) and "profiler" in per_rank:
        profilers = set(per_rank["profiler"].astype(object))
        torch, tf = PYTORCH in profilers, "TF" in profilers
    if len(event_stats) and "name" in event_stats:
        names = pd.unique(as_text(event_stats["name"]).dropna())
        torch = torch or any(_TORCH_NAMES.search(n) for n in names)
        tf = tf or any(_TF_NAMES.search(n) for n in names)
    if torch and not tf:
        return PYTORCH
    return TENSORFLOW if tf else None


def words_for(framework: Optional[str]) -> Words:
    """The words of ``framework`` (TensorFlow's for None)."""
    return TORCH_WORDS if framework == PYTORCH else TF_WORDS


__all__ = ["PYTORCH", "TENSORFLOW", "TF_WORDS", "TORCH_WORDS", "Words", "framework_of", "words_for"]
