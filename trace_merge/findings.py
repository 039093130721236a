"""Findings: what the layered numbers say to change, each with its evidence, the layer that proves it, a severity
and one concrete recommendation in the user's terms (tf.data, Keras, Horovod, a PyTorch DataLoader and DDP, HDF5,
Lustre: the run's framework's knobs, :mod:`trace_merge.frameworks`). Rules and thresholds are documented in
docs/findings.md; keep the two in step.

A finding is computed from a :class:`trace_merge.analysis.Summary` alone (a partitioned merge has no whole frame),
so the CLI, the report and ``--json`` show the same ones in the same order: severity, then the time at stake.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.attribution import COMPONENTS
from trace_merge.explain import COMPONENT_LABELS, unexplained_text
from trace_merge.formatting import size_text as _size
from trace_merge.frameworks import Words, words_for
from trace_merge.schema import FS_LAYERS, SIDE_LAYERS
from trace_merge.verdict import IDLE_LABEL

if TYPE_CHECKING:  # pragma: no cover - typing only
    from trace_merge.analysis import Summary

#: severity order: the first is shown first
SEVERITIES = ("high", "medium", "info")
#: the file system's share of the input phases' time below which an input-bound job is not storage-bound
FS_SMALL_SHARE = 0.30
#: ... and above which it is
FS_DOMINANT_SHARE = 0.50
#: communication's share of the step phases' time above which it is called exposed
COMM_EXPOSED_SHARE = 0.10
#: epoch 0 this many times slower than the median later epoch is a first-epoch effect
FIRST_EPOCH_RATIO = 1.5
#: the slowest rank's step time this many times the fastest rank's is an imbalance
RANK_IMBALANCE_RATIO = 1.15
#: a rank waiting for the other ranks (Horovod negotiations) this share of its step-cycle time waits for a straggler
SYNC_WAIT_SHARE = 0.10
#: share of the step phases' time no framework profile saw above which the python/compute split is a sample
LOW_COVERAGE_SHARE = 0.50
#: later epochs reading at least this share of epoch 0's bytes from the file system re-read the data set ...
REREAD_SHARE = 0.5
#: ... when that is at least this many bytes in all (less is not worth a cache)
REREAD_MIN_BYTES = 32 << 20
#: median read size below which reads are small, and the least number of reads to say so
SMALL_READ_BYTES = 64 << 10
SMALL_READ_MIN_COUNT = 1000
#: ... and the share of the job's wall time the slowest rank spent reading data below which reads do not matter
SMALL_READ_MIN_TIME_SHARE = 0.02
#: metadata calls' share of the traced file-system call time above which metadata is called heavy ...
METADATA_SHARE = 0.30
#: ... when there are at least this many and they take at least this share of the ranks' wall time
METADATA_MIN_CALLS = 1000
METADATA_MIN_TIME_SHARE = 0.02
#: producers' activity while the steps compute, relative to while they wait, below which the producers idle
PRODUCERS_ACTIVE_RATIO = 0.10
#: the input side's CPU while the steps compute, as a share of the rank's cores, from which it competes with the
#: compute (with :data:`CPU_SATURATED_SHARE`: the cores are that busy altogether, so the input work took cores the step
#: could have used)
CPU_INPUT_SHARE = 0.25
CPU_SATURATED_SHARE = 0.75
#: cores of a node the job left idle, as a share of its cores and at least one core, from which co-located work fits
IDLE_CORES_SHARE = 0.25
#: POSIX calls that move no data: names, handles, positions and directories (DFTracer's and Darshan's names)
METADATA_CALLS = frozenset({
    "open", "open64", "openat", "openat64", "creat", "creat64", "close", "stat", "stat64", "lstat", "lstat64",
    "fstat", "fstat64", "fstatat", "fstatat64", "newfstatat", "statx", "__xstat", "__xstat64", "__lxstat",
    "__lxstat64", "__fxstat", "__fxstat64", "__fxstatat", "__fxstatat64", "access", "faccessat", "lseek",
    "lseek64", "fcntl", "dup", "dup2", "dup3", "opendir", "readdir", "closedir", "mkdir", "rmdir", "unlink",
    "unlinkat", "rename", "link", "symlink", "readlink", "chmod", "fchmod", "chown", "fchown", "chdir", "fchdir",
    "statfs", "fstatfs", "truncate", "ftruncate", "utime", "umask", "remove", "getcwd"})


@dataclass(frozen=True)
class Finding:
    key: str  # rule name, stable for scripts
    severity: str  # one of SEVERITIES
    title: str  # one sentence: what is wrong (or right)
    evidence: str  # the numbers behind it
    layer: str  # the layer(s) whose data prove it
    action: str  # what to try, in the user's terms
    impact_s: float = 0.0  # seconds at stake, to order findings of one severity

    def as_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        return f"[{self.severity}] {self.title} ({self.evidence}). Try: {self.action}"


def _sum(df: pd.DataFrame, col: str) -> float:
    return float(df[col].sum()) if len(df) else 0.0


def _step_phases(layered: pd.DataFrame) -> pd.DataFrame:
    """Rows of the phases that do the training steps: compute-category phases inside epochs."""
    if not len(layered):
        return layered
    return layered[(layered["cat"] == "compute") & layered["epoch"].notna()]


def _input_phases(layered: pd.DataFrame) -> pd.DataFrame:
    return layered[layered["cat"].isin(["io", "wait", "preprocess"])] if len(layered) else layered


def words_of(a: "Summary") -> Words:
    """The words of the run's framework (``a.framework``, found once by :func:`trace_merge.frameworks.framework_of`:
    PyTorch's knobs for a PyTorch run, TensorFlow's otherwise)."""
    return words_for(a.framework)


def _has_layer(layered: pd.DataFrame, layer: str) -> bool:
    return bool(len(layered)) and layered["layers"].astype(object).map(lambda s: layer in str(s).split(",")).any()


def _verdict_finding(a: "Summary") -> Finding:
    """The answer to "is it input-bound?" as one finding, with the cause the layers point to."""
    v = a.verdict
    label = v.label
    wait, au = v.input_pct, v.au_pct
    words = words_of(a)
    cycles = f"{v.cycles} of {v.cycles_total} step cycles, basis {v.basis}"
    wait_s = _counted_wait_s(a)
    inputs = _input_phases(a.layered)
    # the file-system layer sees every call (no sampling window), so its share is of the input phases' whole time
    fs, seen = _sum(inputs, "fs_s"), _sum(inputs, "time_s")
    if not _is_training(a):
        # a plain file-system trace (a Darshan log of an HPC job, say): no training advice, only what it is
        layers = set(a.event_stats["layer"].astype(str)) - set(SIDE_LAYERS) if len(a.event_stats) else set()
        if not layers or layers <= set(FS_LAYERS):
            return Finding(
                "no_training_steps", "info", "No training steps: this trace has file-system layers only",
                "no app or framework phase marks a step", "app/framework",
                "the file-system findings (if any) come from its counters; `trace-merge summary` shows its I/O view")
        return Finding(
            "no_training_steps", "info", "No training steps: no app or framework phase marks a step",
            "no app or framework phase marks a step", "app/framework",
            "wrap the training loop as in the README (a `Training Iteration` phase per step, or `tl.set_step`)")
    if label == "unknown" and not v.cycles_total:
        return Finding(
            "no_training_steps", "info", "This run has no training steps: its app phases mark none",
            "no app or framework phase marks a step", "app/framework",
            "wrap the training loop as in the README (a `Training Iteration` phase per step, or `tl.set_step`)")
    if label == "unknown":
        return Finding(
            "no_input_wait_seen", "high", "No input wait can be seen, so whether the job is input-bound is unknown",
            (f"{v.cycles} step cycles with no wait phase or profiled input wait inside them"
             if v.input_pct is None else
             f"{cycles}; wait + compute explain {100 - (v.other_pct or 0):.0f} % of the cycle time")
            if v.cycles else f"none of the {v.cycles_total} step cycles could be counted",
            "app/framework",
            "time the batch fetch: `for x in tl.iterate(dataset, 'Call to Next Batch')`, or profile a few steps "
            f"with `timelogger run {words.profile_option} 20:25` (docs/metrics.md, step cycles)")
    if label == IDLE_LABEL:
        assert au is not None  # a labelled verdict has its AU
        return Finding(
            "accelerator_idle", "high", f"The accelerator idles {100 - au:.0f} % of the step cycles, and the input "
            f"wait explains only {wait:.0f} % of them", f"AU {au:.1f} %, input wait {wait:.1f} %, unexplained "
            f"{v.other_pct:.1f} % ({unexplained_text(v)}); {cycles}", v.basis or "",
            "find what the loop does between its steps: time it with `timelogger.phase(...)`, profile a few steps "
            f"(`timelogger run {words.profile_option}=20:25`) or trace the file system (`--posix`)",
            (v.other_pct or 0.0) / 100 * _sum(a.steps.loc[a.steps["counted"]], "step_s") if len(a.steps) else 0.0)
    if label == "not input-bound":
        return Finding(
            "compute_bound", "info", "The input pipeline keeps up: the steps wait little for data",
            f"{wait:.1f} % of step-cycle time waiting for input, AU {au:.0f} %; {cycles}", v.basis or "",
            f"loader knobs will not speed this job up; look at compute: {words.compute}")
    severity = "high" if label == "highly input-bound" else "medium"
    if not _has_layer(a.layered, "posix") and not _has_layer(a.layered, "mpiio"):
        return Finding(
            "input_bound_no_fs_layer", severity, f"The job is {label}, and no file-system layer was traced to tell "
            "storage from decode", f"{wait:.1f} % waiting; {cycles}", v.basis or "",
            "run again with `timelogger run --posix` (DFTracer) or Darshan to see the file system's share",
            wait_s)
    if seen > 0 and fs / seen < FS_SMALL_SHARE:
        return Finding(
            "input_bound_not_storage", severity, f"The job is {label}, but the wait is not the file system: decode, "
            "Python or inter-process hand-off", f"{wait:.1f} % waiting ({wait_s:.3g} s); the file system is "
            f"{100 * fs / seen:.0f} % of the input phases' time ({fs:.3g} of {seen:.3g} s)",
            "posix + app", words.prefetch, wait_s)
    if seen > 0 and fs / seen >= FS_DOMINANT_SHARE:
        return Finding(
            "input_bound_storage", severity, f"The job is {label} and the file system is most of the input time",
            f"{wait:.1f} % waiting ({wait_s:.3g} s); the file system is {100 * fs / seen:.0f} % of the input "
            f"phases' time ({fs:.3g} of {seen:.3g} s)", "posix",
            f"read less often or in larger pieces: {words.cache} when the data fit, larger reads "
            f"({words.storage_reads}), and on Lustre a stripe count matching the readers (`lfs setstripe -c`)",
            wait_s)
    return Finding(
        "input_bound", severity, f"The job is {label}", f"{wait:.1f} % of step-cycle time waiting "
        f"({wait_s:.3g} s); {cycles}", v.basis or "", words.parallel_input, wait_s)


def _comm_finding(a: "Summary") -> Optional[Finding]:
    steps = _step_phases(a.layered)
    total, comm = _sum(steps, "time_s"), _sum(steps, "comm_s")
    if total <= 0 or comm / total < COMM_EXPOSED_SHARE:
        return None
    return Finding(
        "comm_exposed", "medium", "Communication takes a large share of the training steps",
        f"{comm:.3g} s of {total:.3g} s of step phases ({100 * comm / total:.0f} %) inside collectives", "comm",
        f"{words_of(a).comm}; check the network when it grows with the rank count", comm)


def _first_epoch_finding(a: "Summary") -> Optional[Finding]:
    ex = a.exposed_io
    if not len(ex) or "epoch" not in ex:
        return None
    per_epoch = ex[ex["epoch"].notna()].groupby("epoch")["wall_s"].max()
    if len(per_epoch) < 2 or 0 not in per_epoch.index:
        return None
    first, later = float(per_epoch.loc[0]), float(per_epoch.drop(index=0).median())
    if later <= 0 or first / later < FIRST_EPOCH_RATIO:
        return None
    return Finding(
        "first_epoch_slow", "medium" if len(per_epoch) <= 3 else "info",
        "The first epoch is much slower than the later ones",
        f"epoch 0 {first:.3g} s vs {later:.3g} s per later epoch (median), {first / later:.1f}x", "app",
        "leave epoch 0 out of throughput numbers (graph tracing, first file opens, cold caches); if it is the "
        f"reads, {words_of(a).cache_short}; a short job is dominated by it: train longer per allocation", first - later)


def _imbalance_finding(a: "Summary") -> Optional[Finding]:
    ib = a.input_bound
    if len(ib) < 2 or "step_s" not in ib:
        return None
    ib = ib[ib["steps"] > 0]  # ranks with counted training steps (a whole-run row of a log without steps is none)
    per = ib.set_index("rank")["step_s"].astype(float)
    per = per[per > 0]
    if len(per) < 2 or per.max() / per.min() < RANK_IMBALANCE_RATIO:
        return None
    slow, fast = per.idxmax(), per.idxmin()
    wait = ib.set_index("rank")["input_pct"]
    return Finding(
        "rank_imbalance", "medium", f"Rank {slow} is slower than rank {fast}: where ranks synchronise, the job "
        "runs at the slowest one's pace",
        f"counted step time {per[slow]:.3g} s vs {per[fast]:.3g} s ({per[slow] / per[fast]:.2f}x); "
        f"input wait {wait.get(slow, np.nan):.1f} % vs {wait.get(fast, np.nan):.1f} %", "app/framework",
        "look at that rank's node (other jobs, its file system targets), and give each rank the same number "
        f"and size of samples ({words_of(a).shard} before shuffling)",
        float(per[slow] - per[fast]))


def _sync_wait_finding(a: "Summary") -> Optional[Finding]:
    """Ranks waiting for a straggler at the collectives (Horovod's ``NEGOTIATE_*``: from the first rank ready for a
    tensor to the last), a material share of the step cycles: a straggler, not the network. The timeline is one
    rank's (rank 0's); its negotiations say whether that rank waited for a later one (``sync_wait_s``: the
    straggler is another rank) or was the last ready itself (``others_wait_s``: it is the straggler)."""
    ib = a.input_bound
    if not len(ib) or "sync_wait_s" not in ib:
        return None
    ib = ib[(ib["steps"] > 0) & (ib["step_s"] > 0)]
    waiting = ib[ib["sync_wait_s"] >= SYNC_WAIT_SHARE * ib["step_s"]]
    waited_for = ib[ib["others_wait_s"] >= SYNC_WAIT_SHARE * ib["step_s"]] if "others_wait_s" in ib else ib[:0]
    if not len(waiting) and not len(waited_for):
        return None

    def shares(rows: pd.DataFrame, col: str) -> str:
        return ", ".join(f"rank {int(r)} {100 * w / t:.0f} % ({w:.3g} of {t:.3g} s)"
                         for r, w, t in zip(rows["rank"], rows[col], rows["step_s"]))

    late = [f"rank {int(r)}" for r in waited_for["rank"]]
    evidence = []
    if len(waited_for):
        evidence.append("the other ranks waited for (Horovod NEGOTIATE_* in which it was the last ready, share of "
                        f"its counted step cycles): {shares(waited_for, 'others_wait_s')}")
    if len(waiting):
        others = sorted(set(a.input_bound["rank"].astype(int)) - set(waiting["rank"].astype(int)))
        # the summary keeps each negotiation's waiting rank, not its last ready one: the timeline's args.last_ready
        late.append(f"rank {others[0]}" if len(others) == 1 else
                    f"one of ranks {', '.join(map(str, others))} (per negotiation: the timeline's args.last_ready)"
                    if others else "unknown")
        evidence.append("waiting for the other ranks (Horovod NEGOTIATE_*, not communication) in the counted step "
                        f"cycles: {shares(waiting, 'sync_wait_s')}")
    who = " and ".join(late)
    impact = pd.concat([waiting["sync_wait_s"], waited_for["others_wait_s"]]).max()
    return Finding(
        "ranks_wait_for_straggler", "medium", f"Ranks wait for a straggler at the collectives: the likely straggler "
        f"is {who}", "; ".join(evidence), "comm + app",
        f"balance the work per rank (the same number and size of samples per rank: {words_of(a).shard}, equal batch "
        f"sizes), then look at {who}'s input pipeline and node (other jobs, its file system targets); a larger "
        "fusion buffer will not help", float(impact))


def _coverage_finding(a: "Summary") -> Optional[Finding]:
    steps = _step_phases(a.layered)
    total, unseen = _sum(steps, "time_s"), _sum(steps, "not_observed_s")
    if total <= 0 or unseen / total < LOW_COVERAGE_SHARE or not _has_layer(a.layered, "framework"):
        return None
    return Finding(
        "low_profile_coverage", "info", "The framework profile covers a small sample of the steps",
        f"{unseen:.3g} of {total:.3g} s of step phases ({100 * unseen / total:.0f} %) outside every profile window",
        "framework", "the compute/Python split is from the profiled steps; profile a longer window "
        f"(`{words_of(a).profile_option} 20:40`) if later steps behave differently")


def _small_reads_finding(a: "Summary") -> Optional[Finding]:
    """Reads whose mean size is small: the bytes themselves come in small pieces (many small metadata reads beside
    a few large data reads do not count: their mean is large), and reading takes a share of the job worth it."""
    bw = a.bandwidth
    data = bw[bw["files"] == "data"] if len(bw) and "reads" in bw else bw.iloc[0:0]
    if not len(data):
        return None
    n, nbytes = int(data["reads"].sum()), float(data["read_bytes"].sum())
    read_s, wall_s = a.metrics.slowest_read_time_s or 0.0, a.metrics.job_wall_s or 0.0
    # without a traced wall time (counters only) the read time cannot be weighed against anything
    if (wall_s <= 0 or n < SMALL_READ_MIN_COUNT or nbytes / n > SMALL_READ_BYTES
            or read_s < SMALL_READ_MIN_TIME_SHARE * wall_s):
        return None
    return Finding(
        "small_reads", "medium", "The data are read in small pieces",
        f"{n:,} data reads of {_size(nbytes / n)} on average ({_size(nbytes)} in all); the slowest rank read for "
        f"{read_s:.3g} s of the job's {wall_s:.3g} s", "posix",
        f"read in larger pieces: {words_of(a).larger_reads}; on Lustre each small read pays a round trip", 0.0)


def _reread_finding(a: "Summary") -> Optional[Finding]:
    """The same data read from the file system again every epoch: a cache candidate (tf.data cache, node-local
    copy). With global shuffle each rank's files change every epoch, so this is also what that shuffle costs."""
    per = a.epoch_bandwidth_totals
    if len(per) < 2 or 0 not in set(per["epoch"].astype(int)):
        return None
    per = per.set_index(per["epoch"].astype(int))["read_bytes"].astype(float)
    first, later = float(per.loc[0]), per.drop(index=0)
    if first <= 0 or later.median() < REREAD_SHARE * first or later.sum() < REREAD_MIN_BYTES:
        return None
    # what a rank's cache must hold is what that rank reads again each epoch: its median over the later epochs
    # (epoch 0 may read more: warm-up, file checks), the largest rank's; not the job's epoch-0 bytes ÷ ranks
    eb = a.epoch_bandwidth
    eb = eb[eb["epoch"].notna() & (eb["epoch"].astype("Int64") > 0)]
    by_rank = eb.groupby("rank")["read_bytes"].median().astype(float)
    rank, cache = (by_rank.idxmax(), float(by_rank.max())) if len(by_rank) else (0, later.median())
    ranks = int(a.epoch_bandwidth["rank"].nunique()) if len(a.epoch_bandwidth) else 1
    return Finding(
        "rereads_every_epoch", "medium" if _is_input_bound(a) else "info",
        "Every epoch reads the data set from the file system again",
        f"epoch 0 read {_size(first)}, later epochs {_size(later.median())} each (median), {_size(later.sum())} "
        f"re-read in all over {ranks} rank(s); per rank and later epoch up to {_size(cache)} (rank {rank})", "posix",
        f"cache it when {_size(cache)} per rank fits: {words_of(a).cache_long}, or copy the files to node-local "
        "storage at job start; with global shuffle, shuffle file order within a node-local copy instead of moving "
        "files between ranks", 0.0)


def _metadata_finding(a: "Summary") -> Optional[Finding]:
    """Opens, stats, seeks and closes taking a large share of the traced file-system time: a loader that opens a
    file per sample, or checks files before reading them. On Lustre each is a round trip to a metadata server that
    the whole machine shares, so what costs microseconds here costs milliseconds there."""
    es = a.event_stats
    posix = es[es["layer"] == "posix"] if len(es) else es
    if not len(posix):
        return None
    is_meta = posix["name"].astype(str).isin(METADATA_CALLS).to_numpy()
    meta, total = posix[is_meta], float(posix["sum_us"].sum()) / 1e6
    n, meta_s = int(meta["count"].sum()), float(meta["sum_us"].sum()) / 1e6
    ranks = max(1, int(a.input_bound["rank"].nunique()) if len(a.input_bound) else 1)
    wall_s = (a.metrics.job_wall_s or 0.0) * ranks
    if (total <= 0 or n < METADATA_MIN_CALLS or meta_s / total < METADATA_SHARE
            or meta_s < METADATA_MIN_TIME_SHARE * wall_s):
        return None
    top = meta.sort_values("count", ascending=False).head(3)
    calls = ", ".join(f"{int(c):,} {name}" for name, c in zip(top["name"].astype(str), top["count"]))
    steps = a.steps[a.steps["counted"]] if len(a.steps) else a.steps
    per_step = f"; {n / len(steps):.3g} per step" if len(steps) else ""
    return Finding(
        "metadata_heavy", "medium" if _is_input_bound(a) else "info",
        "Opening, checking and seeking files takes a large share of the file-system time",
        f"{n:,} metadata calls ({calls}{per_step}) took {meta_s:.3g} s, {100 * meta_s / total:.0f} % of the "
        f"traced file-system call time ({total:.3g} s)", "posix",
        f"open each file once and keep it open (one `h5py.File` per reader, not per sample; {words_of(a).open_once}), "
        "drop per-sample `os.path.exists`/`os.stat`, and pack small files into larger shards (TFRecord, HDF5); on "
        "Lustre every open and stat is a metadata-server round trip", meta_s)


def _producers_idle_finding(a: "Summary") -> Optional[Finding]:
    """An input-bound job whose input pipeline works only while the step waits for it: nothing is read or decoded
    ahead while the step computes (no prefetch, or a synchronous loader). The premise is measured, not assumed:
    inside the counted step cycles, the pipeline's work (file-system calls, app io/preprocess phases on any
    thread: ``producer_*`` of :func:`trace_merge.attribution.input_bound_df`) is compared while the step computes
    and while it waits. A pipeline that prefetches (a Keras ``.prefetch(AUTOTUNE)``: its reads run while the
    batch computes) works in both; a synchronous one only in the waits. Rates, not the share of the work hidden:
    with a 1 ms step and an 80 ms loader a busy prefetcher puts only ~1 % of its work inside compute."""
    ib = a.input_bound
    if not _is_input_bound(a) or not len(ib) or "producer_s" not in ib:
        return None
    ib = ib[ib["steps"] > 0]
    comp, wait = _sum(ib, "compute_s"), _sum(ib, "input_wait_s")
    work, in_wait, in_comp = (_sum(ib, f"producer{k}_s") for k in ("", "_in_wait", "_in_compute"))
    if comp <= 0 or wait <= 0 or in_wait <= 0:
        return None  # the producers are not seen working in the cycles (a pipeline timed only at the batch fetch)
    during_comp, during_wait = in_comp / comp, in_wait / wait
    if during_comp >= PRODUCERS_ACTIVE_RATIO * during_wait:
        return None
    wait_s = _counted_wait_s(a)
    has_fs = _has_layer(a.layered, "posix") or _has_layer(a.layered, "mpiio")
    return Finding(
        "producers_idle", "high" if a.verdict.label == "highly input-bound" else "medium",
        "The input pipeline works only while the step waits for it: nothing is read ahead during the step",
        f"{100 * in_comp / work:.1f} % of the input work inside the step cycles ({work:.3g} s of file-system calls "
        f"and input phases) ran while the step computed; it was busy {100 * during_comp:.1f} % of the compute time "
        f"against {100 * during_wait:.0f} % of the input wait; {wait_s:.3g} s of waiting",
        "app" + (" + posix" if has_fs else ""),
        words_of(a).read_ahead, wait_s)


def _cpu_contention_finding(a: "Summary") -> Optional[Finding]:
    """The input side (tf.data's threads, reader threads, loader workers: :data:`trace_merge.cpu_use.INPUT_ROLES`)
    used a large share of a rank's cores while its steps computed, and the cores were nearly all busy: the input work
    slows the step even where the input wait is small (a pipeline that prefetches decodes during the step)."""
    dc = a.cpu.during_compute if a.cpu is not None else None
    if dc is None or not len(dc):
        return None
    share = np.maximum(dc["input_pct"].astype(float).fillna(0), dc["profiled_input_pct"].astype(float).fillna(0))
    hit = dc[(share >= 100 * CPU_INPUT_SHARE) & (dc["busy_pct"].fillna(0) >= 100 * CPU_SATURATED_SHARE)]
    if not len(hit):
        return None
    worst = hit.loc[share[hit.index].idxmax()]
    ranks = ", ".join(str(int(r)) for r in hit["rank"])
    cores = worst["cores_available"]
    parts = [f"rank {int(worst['rank'])}: while its steps computed ({worst['compute_s']:.3g} s)"]
    if worst["input_cores"] and worst["input_pct"] >= 100 * CPU_INPUT_SHARE:
        parts.append(f"its input threads and workers used {worst['input_cores']:.2f} of its {cores:g} cores "
                     f"({worst['input_pct']:.0f} %)")
    if pd.notna(worst["profiled_input_pct"]) and worst["profiled_input_pct"] >= 100 * CPU_INPUT_SHARE:
        parts.append(f"tf.data's threads were busy {worst['profiled_input_cores']:.2f} cores' worth in the TF profile "
                     f"({worst['profiled_input_pct']:.0f} % of its {cores:g} cores: threads running or waiting for a "
                     "core)")
    parts.append(f"all its threads used {worst['busy_cores']:.2f} cores"
                 + (f", the node's processes {worst['node_busy_cores']:.2f}" if pd.notna(worst["node_busy_cores"])
                    else ""))
    return Finding(
        "cpu_contention", "medium",
        "Input work competes with the step for the CPU: while the steps computed, the input side took or wanted a "
        "large share of the cores",
        "; ".join(parts) + f"; ranks over {100 * CPU_INPUT_SHARE:.0f} % with the cores "
        f"{100 * CPU_SATURATED_SHARE:.0f} % busy: {ranks}",
        "cpu + app" + (" + framework" if pd.notna(worst["profiled_input_pct"]) and worst["profiled_input_pct"] else ""),
        words_of(a).input_cpu, float((hit["compute_s"] * share[hit.index] / 100).sum()))


def _idle_cores_finding(a: "Summary") -> Optional[Finding]:
    """Cores of a node that the job was given and nobody used (the node's own counters): room for co-located work."""
    nodes = a.cpu.nodes if a.cpu is not None else None
    if nodes is None or not len(nodes):
        return None
    idle = nodes[(nodes["idle_cores"].fillna(0) >= np.maximum(1.0, IDLE_CORES_SHARE * nodes["cores"]))]
    if not len(idle):
        return None
    parts = [f"{h}: {i:.1f} of {c:g} cores idle on average (the job's threads used {j:.1f}, the node's "
             f"processes {b:.1f})" for h, i, c, j, b in zip(idle["host"], idle["idle_cores"], idle["cores"],
                                                              idle["job_busy_cores"], idle["node_busy_cores"])]
    return Finding(
        "idle_cores", "info", "Cores the job was given stayed idle: co-located work could use them",
        "; ".join(parts[:4]) + (f"; {len(parts) - 4} more nodes" if len(parts) > 4 else ""), "cpu",
        "run work beside the ranks on those cores (evaluation, the next job's preprocessing, a data-loading "
        "service), or ask the scheduler for fewer cores per rank; `timelogger run --noise cpu:N` measures how much "
        "the job slows when they are used")


def _counted_wait_s(a: "Summary") -> float:
    """Seconds of input wait in the step cycles the verdict counts (the warm-up step left out): that column alone
    is filtered, not the whole step series."""
    if not len(a.steps):
        return 0.0
    counted = (a.steps["counted"] & ~a.steps["warmup"]).to_numpy()
    return _sum(a.steps.loc[counted, ["input_wait_s"]], "input_wait_s")


def _is_training(a: "Summary") -> bool:
    """Whether the run shows training at all (step cycles or app phases): the premise of every training rule."""
    return bool(a.verdict.cycles_total) or bool(len(a.layered))


def _is_input_bound(a: "Summary") -> bool:
    return a.verdict.label in ("moderately input-bound", "highly input-bound")


def findings(a: "Summary", io: "Sequence[Finding]" = ()) -> list[Finding]:
    """Every finding of a run: the verdict's first, then the others by severity and seconds at stake. A run
    without training (a plain file-system trace) gets no training rule; ``io`` are its file-system findings
    (:func:`trace_merge.darshan_findings.darshan_findings`), ordered with its info line by severity."""
    by_severity = lambda f: (SEVERITIES.index(f.severity), -f.impact_s)  # noqa: E731
    if not _is_training(a):
        return sorted([_verdict_finding(a), *io], key=by_severity)
    rules = (_comm_finding, _first_epoch_finding, _imbalance_finding, _coverage_finding, _small_reads_finding,
             _reread_finding, _metadata_finding, _producers_idle_finding, _sync_wait_finding, _cpu_contention_finding,
             _idle_cores_finding)
    found = [f for f in (rule(a) for rule in rules) if f is not None]
    return [_verdict_finding(a)] + sorted([*found, *io], key=by_severity)


def idle(a: "Summary") -> dict:
    """The share of step-cycle time the compute side waited (100 - AU) and its causes from the layers: the input
    wait and the cycles' other time, and what the input phases' time was made of (file system, framework input
    wait, Python / decode, not observed, ...: % of those phases' time). Empty when AU is unknown."""
    v = a.verdict
    au = v.au_pct
    if au is None or not np.isfinite(au):
        return {}
    inputs = _input_phases(a.layered)
    total = _sum(inputs, "time_s")
    causes = {c: 100 * _sum(inputs, f"{c}_s") / total for c in COMPONENTS} if total > 0 else {}
    return {"idle_pct": 100.0 - au, "input_wait_pct": v.input_pct, "other_pct": v.other_pct,
            "input_phases_pct": {c: p for c, p in causes.items() if p >= 0.05}}


def idle_text(a: "Summary") -> Optional[str]:
    """:func:`idle` as one line for the summary."""
    d = idle(a)
    if not d:
        return None
    parts = [f"input wait {d['input_wait_pct']:.1f} %" if d.get("input_wait_pct") is not None else "",
             f"other {d['other_pct']:.1f} %" if d.get("other_pct") is not None else ""]
    line = f"accelerator idle: {d['idle_pct']:.1f} % of step-cycle time ({', '.join(p for p in parts if p)})"
    made = sorted(d["input_phases_pct"].items(), key=lambda kv: -kv[1])
    if made:
        names = {c: COMPONENT_LABELS[c].split(" (")[0] for c in d["input_phases_pct"]} | {
            "input_wait": words_of(a).wait_name}
        line += "; the input phases' time: " + ", ".join(f"{names[c]} {p:.0f} %" for c, p in made)
    return line


def next_step(found: list[Finding]) -> str:
    """One line: what to try first, the first finding's action (:func:`findings` always has the verdict's)."""
    return found[0].action


__all__ = ["Finding", "findings", "next_step", "idle", "idle_text", "SEVERITIES", "words_of"]
