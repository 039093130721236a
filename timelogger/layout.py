"""The run directory, named once: what ``timelogger run`` creates and ``trace-merge`` reads and writes.

::

    RUN_DIR/
      manifest.json             rank 0's record of the job (command, ranks, hosts, versions, layers)
      launch/rank-<r>.json      each rank's launch record
      launch/.rank-<r>.lock     held (flock) by rank r's launcher and then its program while the job runs
      app/rank-<r>-pid-<p>.pfw  TimeLogger intervals, one file per process
      tf/rank-<r>/              TF profiler logdir of rank r (``plugins/profile/<run>/<host>.xplane.pb``)
      torch/rank-<r>/           PyTorch profiler traces of rank r (``<host>_<pid>.<ms>.pt.trace.json.gz``, Kineto)
      horovod/timeline.json     Horovod timeline (Horovod's rank 0 writes it)
      posix/trace-*.pfw[.gz]    DFTracer POSIX preload
      darshan/*.darshan         Darshan logs
      noise/<kind>-rank-<r>-pid-<p>.pfw   noise generators' achieved load (``timelogger run --noise``)
      cpu/rank-<r>-pid-<p>.pfw  CPU time of every thread of rank r's processes, sampled (``--cpu-period``, ``--no-cpu``)
      merged.parquet, counters.parquet, merge_info.json   ``trace-merge merge`` outputs (derived data)
      .merge.lock               held while ``trace-merge merge`` runs
      report.html               ``trace-merge report`` (default output)

Only the standard library is used (the capture side imports this); ``trace_merge`` and the benchmarks import it
from here, never the other way round.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]

MANIFEST = "manifest.json"
LAUNCH_DIR = "launch"
APP_DIR = "app"
TF_DIR = "tf"
#: ``timelogger run --torch-profile``: the PyTorch profiler's Chrome/Kineto traces, one directory per rank
TORCH_DIR = "torch"
HOROVOD_DIR = "horovod"
POSIX_DIR = "posix"
DARSHAN_DIR = "darshan"
#: ``timelogger run --noise`` generators' records of their achieved load (the ``noise`` layer, docs/noise.md)
NOISE_DIR = "noise"
#: the CPU sampler's files, one per rank (the ``cpu`` layer, docs/cpu.md)
CPU_DIR = "cpu"
#: the per-layer subdirectories; a directory with any of them (or a manifest) is a run directory
LAYER_DIRS: Tuple[str, ...] = (APP_DIR, TF_DIR, TORCH_DIR, HOROVOD_DIR, POSIX_DIR, DARSHAN_DIR, NOISE_DIR, CPU_DIR)

#: ``trace-merge merge`` outputs
MERGED = "merged.parquet"
COUNTERS = "counters.parquet"
MERGE_INFO = "merge_info.json"
#: a large run's summary parts, kept by ``trace-merge merge`` beside ``merged.parquet`` (trace_merge.stored_summary)
SUMMARY_PARTS = "summary_parts.zip"
#: held by ``trace-merge merge`` while it merges and writes the outputs above (two merges of a run at once)
MERGE_LOCK = ".merge.lock"
#: ``trace-merge report``'s default output in a run directory
REPORT = "report.html"
#: files derived from a run (stale once the run is replaced: ``timelogger run --force`` removes them)
OUTPUTS: Tuple[str, ...] = (MERGED, COUNTERS, MERGE_INFO, SUMMARY_PARTS, REPORT)


def launch_lock(run_dir: PathLike, rank: int) -> Path:
    """``RUN_DIR/launch/.rank-<r>.lock``: held by ``timelogger run`` of ``rank`` (then by its program) while the job
    runs, so that a second launch of the same rank into the same run directory is refused."""
    return Path(run_dir) / LAUNCH_DIR / f".rank-{rank}.lock"


def tf_logdir(run_dir: PathLike, rank: int) -> Path:
    """TF profiler logdir of ``rank``: ``RUN_DIR/tf/rank-<r>`` (ranks must not share one)."""
    return Path(run_dir) / TF_DIR / f"rank-{rank}"


def torch_logdir(run_dir: PathLike, rank: int) -> Path:
    """PyTorch profiler trace directory of ``rank``: ``RUN_DIR/torch/rank-<r>`` (TensorBoard's layout: one directory
    of ``*.pt.trace.json.gz`` per worker group)."""
    return Path(run_dir) / TORCH_DIR / f"rank-{rank}"


def launch_record(run_dir: PathLike, rank: int) -> Path:
    """``RUN_DIR/launch/rank-<r>.json``: what ``timelogger run`` recorded for ``rank``."""
    return Path(run_dir) / LAUNCH_DIR / f"rank-{rank}.json"


def app_file_stem(rank: int, pid: int) -> str:
    """Stem of a process's app file in ``RUN_DIR/app/``: ``rank-<r>-pid-<p>`` (``-<k>`` added when taken)."""
    return f"rank-{rank}-pid-{pid}"


#: an app file's name; group 1 is the rank
APP_FILE = re.compile(r"^rank-(\d+)-pid-\d+(?:-\d+)?\.pfw(?:\.gz)?$")
#: glob of the launch records in ``RUN_DIR/launch/``
LAUNCH_GLOB = "rank-*.json"


def horovod_timeline(run_dir: PathLike) -> Path:
    """``RUN_DIR/horovod/timeline.json`` (``HOROVOD_TIMELINE``)."""
    return Path(run_dir) / HOROVOD_DIR / "timeline.json"


def posix_log_prefix(run_dir: PathLike) -> Path:
    """``RUN_DIR/posix/trace``: ``DFTRACER_LOG_FILE``, the preload appends ``-<host>-<pid>.pfw[.gz]``."""
    return Path(run_dir) / POSIX_DIR / "trace"


def write_json_atomic(path: Path, data: Dict[str, Any], dir_fd: Optional[int] = None) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename: readers see the old or the new.

    With ``dir_fd`` (a descriptor of ``path``'s directory, :func:`open_layer_dir`) both are made relative to it,
    so a link planted at the directory's name, or a rename of it, cannot redirect the write."""
    # an unpredictable name created exclusively, never through a link: run directories live in shared scratch,
    # where a link planted at a predictable name would make the launcher write into another file of its user
    tmp_name = f".{path.name}.{os.getpid()}-{secrets.token_hex(8)}.tmp"
    tmp, dst = (tmp_name, path.name) if dir_fd is not None else (path.with_name(tmp_name), path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644,
                 dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2, default=str) + "\n")
        os.replace(tmp, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        if isinstance(exc, OSError) and (exc.filename is None or dir_fd is not None):
            exc.filename = str(path)  # a write that failed (ENOSPC, EDQUOT, EFBIG) names the file it was for
        raise


def dir_at(dir_fd: int, name: str) -> int:
    """A descriptor of directory ``name`` in ``dir_fd``, opened without following a link at ``name``."""
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)


def open_layer_dir(run_dir: PathLike, name: str, create: bool = True) -> int:
    """A descriptor of ``RUN_DIR/name``, made when absent (``create``): never through a link, never a directory
    another user owns. Run directories live in shared scratch, where another user could plant ``RUN/app`` as a
    link into a directory only the launching user (root, say) may write; files are then made relative to this
    descriptor (``dir_fd``), so a link or a rename of the run directory afterwards cannot redirect them.
    Raises OSError naming the path: ELOOP/ENOTDIR for a link or a file, EPERM for another owner."""
    path = os.path.join(os.fspath(run_dir), name)
    base = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=base)  # the umask decides, as for mkdir(1)
        try:
            fd = dir_at(base, name)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OSError(exc.errno, "is a link or not a directory; refusing to write through it", path) from exc
            raise OSError(exc.errno, exc.strerror, path) from exc
    finally:
        os.close(base)
    owner = os.fstat(fd).st_uid
    if owner != os.geteuid():
        os.close(fd)
        raise OSError(errno.EPERM, f"owned by another user (uid {owner}); refusing to write there", path)
    return fd


def link_not_followed(path: PathLike) -> Optional[str]:
    """Why the reader must not read through ``path``, or None: ``path`` is a symbolic link another user made.

    Run directories live in shared scratch. In another user's run, a link (``posix -> /root/traces``) would make
    ``trace-merge`` run by root read files only root may read and write what they hold into outputs beside that
    user's files. A link the reader made (``tf/`` -> scratch space) is followed, as the kernel's
    ``protected_symlinks`` does. Checked per entry before it is listed or read; a path that cannot be looked at is
    left to its reader to report."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode) and st.st_uid != os.geteuid():
        return f"{path}: a symbolic link made by another user (uid {st.st_uid}); not followed"
    return None
