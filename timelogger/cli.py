"""``timelogger run -o RUN_DIR [--posix [--posix-filter DIR]] [--horovod-timeline [--horovod-ready-marks]]
[--tf-profile[=SPEC]] [--torch-profile[=SPEC]]
[--no-hooks] [--force] -- CMD ...``

Runs once per rank (``mpiexec -n N timelogger run ... -- python train.py``, under ``srun``, or
``torchrun --nproc_per_node N --no-python timelogger run ... -- python train.py``): prepares the run
directory and the capture environment, records this rank's launch, lets rank 0 write ``manifest.json``, then
replaces itself with CMD through ``os.execvpe`` so MPI's inherited descriptors and the launcher's signals reach the
real program (DESIGN.md, "Launcher notes"). Nothing here changes what CMD computes: only environment variables
that switch on capture are added.

A run directory holding a previous run is refused unless ``--force``; then rank 0 removes the previous run (every
layer's files, the manifest, launch records and merge outputs) while the other ranks wait for the manifest to list
their launch before they exec, so nothing of this run is written until the old one is gone and nothing of the old
one is left for the next merge to mix in. The run directory is one directory shared by all ranks.

Run directories live in shared scratch, where another user may have made ``RUN/app`` (or any layer directory)
a link into a directory only the launching user may write: every directory and file the launcher makes or clears
inside the run directory goes through a descriptor of its layer directory (``layout.open_layer_dir``: never a
link, never another user's directory), and such a layer directory is refused before anything is written. Each
rank holds ``launch/.rank-<r>.lock`` for the life of the job, so a second launch of the same rank into the same run
directory is refused instead of writing a second run into it.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import importlib.util
import json
import os
import platform
import re
import secrets
import shutil
import stat
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import cpu, layout, noise
from ._env import SLURM_TASK_KEYS, detect_rank_world, hostname, slurm_context
from .hooks import ENV_HOOKS, ENV_HOOKS_PID
from .logger import ENV_DIR, VERSION
from .records import Clock, CpuLayer, LaunchRecord, Layers, Manifest, NoiseLayer, PosixLayer, RankEntry
from .tf import ENV_TF_PROFILE, parse_profile_spec
from .torch_profile import DEFAULT_WINDOW as TORCH_DEFAULT_WINDOW
from .torch_profile import ENV_TORCH_PROFILE

_DARSHAN_HINT = ("timelogger: Darshan is not enabled (on a cluster with Darshan: LD_PRELOAD=libdarshan.so "
                 "DXT_ENABLE_IO_TRACE=1 DARSHAN_LOGPATH={darshan_dir}; docs/wire-format.md)")
_VERSION_DISTS = ("tensorflow-cpu", "tensorflow", "keras", "torch", "horovod", "mpi4py", "mpich", "dftracer",
                  "pydftracer", "darshan", "h5py", "numpy")


@dataclass(frozen=True)
class Waits:
    """How long the ranks' launchers wait for each other (s)."""

    #: rank 0 for the other ranks' launch records before it writes the manifest; a node's launchers for each other
    #: before the lowest local rank starts the noise
    ranks_s: float = 2.0
    #: with --force, rank 0 for every rank to check in: the other ranks exec only once the manifest lists them, and
    #: they give up (an error) ``clear_margin_s`` later than that
    force_s: float = 60.0
    clear_margin_s: float = 60.0
    poll_s: float = 0.05


WAITS = Waits()
#: where rank 0 moves the previous run before deleting it (inside RUN_DIR: same file system, so rename works)
_TRASH_PREFIX = ".timelogger-previous-run-"


class LaunchError(Exception):
    """A problem with the command line or the run directory; reported as one line, exit status 2."""


def setup_parser(sub: Optional[Any] = None) -> argparse.ArgumentParser:
    """Parser of ``timelogger run`` (as a subparser of ``sub`` when given)."""
    description = "Run CMD with TimeLogger capture into RUN_DIR (once per rank)."
    parser = sub.add_parser("run", help="run a command with capture enabled", description=description) \
        if sub is not None else argparse.ArgumentParser(prog="timelogger run", description=description)
    parser.add_argument("-o", "--output", required=True, metavar="RUN_DIR", help="run directory")
    parser.add_argument("--posix", action="store_true",
                        help="trace POSIX I/O with the DFTracer preload into RUN_DIR/posix/")
    parser.add_argument("--posix-filter", metavar="DIR", default=None,
                        help="only trace files under DIR (DFTRACER_DATA_DIR; default: all)")
    parser.add_argument("--posix-init", choices=("auto", "preload", "program"), default="auto",
                        help="who starts DFTracer: 'preload' (the preload, DFTRACER_INIT=PRELOAD), 'program' (a "
                             "program that starts DFTracer itself, as DLIO does: DFTRACER_INIT=FUNCTION, its own "
                             "traces carry the POSIX layer), 'auto' (default: 'program' when the command's Python "
                             "code imports dftracer, else 'preload')")
    parser.add_argument("--horovod-timeline", action="store_true",
                        help="HOROVOD_TIMELINE=RUN_DIR/horovod/timeline.json (Horovod's rank 0 writes it)")
    parser.add_argument("--horovod-ready-marks", action="store_true",
                        help="with --horovod-timeline: HOROVOD_CACHE_CAPACITY=0, so that every negotiation in the "
                             "timeline says which rank was ready last (the straggler); Horovod's response cache, "
                             "which this turns off, marks only a tensor's first. Changes how Horovod negotiates")
    parser.add_argument("--tf-profile", nargs="?", const="all", default=None, metavar="SPEC",
                        help="TF profiler window around model.fit for TimeLoggerCallback (TIMELOGGER_TF_PROFILE): "
                             "'all' (default: the whole fit), 'START:STOP' (global steps START..STOP-1, from 0), "
                             "'START:' or 'N'; xplane.pb goes to RUN_DIR/tf/rank-<r>/. Write it as "
                             "--tf-profile=SPEC or put it before another option or --")
    parser.add_argument("--torch-profile", nargs="?", const=TORCH_DEFAULT_WINDOW, default=None, metavar="SPEC",
                        help="PyTorch profiler window on the steps the hooks (or tl.set_step) number "
                             f"(TIMELOGGER_TORCH_PROFILE): 'START:STOP' (steps START..STOP-1, from 0; default "
                             f"{TORCH_DEFAULT_WINDOW}), 'START:', 'N' or 'all'; one Chrome/Kineto trace per rank in "
                             "RUN_DIR/torch/rank-<r>/. Write it as --torch-profile=SPEC or put it before another "
                             "option or --")
    parser.add_argument("--no-hooks", dest="hooks", action="store_false",
                        help="no zero-code capture: by default a start-up hook times the program's tf.data fetches, "
                             "tf.function steps, Keras fit (with TimeLoggerCallback), PyTorch DataLoader fetches, "
                             "optimizer steps and DataLoader workers without code changes (docs/hooks.md)")
    parser.add_argument("--force", action="store_true",
                        help="replace a previous run in RUN_DIR: rank 0 deletes its files in every layer "
                             "directory, its manifest, launch records and merge outputs before any rank starts CMD")
    parser.add_argument("--noise", metavar="KIND:LEVEL[,KIND:LEVEL]", default=None,
                        help="start noise generators beside the ranks, once per node by its lowest local rank "
                             "(docs/noise.md): cpu:CORES, memory:GB/s, io:MB/s (needs --noise-dir), net:MB/s; "
                             "each records its achieved load in RUN_DIR/noise/ and stops with the rank")
    parser.add_argument("--noise-dir", metavar="DIR", default=None,
                        help="directory the io noise writes and reads its file in (unlinked at once)")
    parser.add_argument("--noise-io-mode", choices=noise.IO_MODES, default="evict",
                        help="io noise: evict (buffered, fdatasync + posix_fadvise DONTNEED: reads reach the "
                             "device; default), direct (O_DIRECT), cached (page cache only)")
    parser.add_argument("--noise-cpus", metavar="LIST", default=None,
                        help="pin the noise generators to these CPUs (e.g. 1, 0,1, 0-1; sched_setaffinity)")
    parser.add_argument("--cpu-period", metavar="SECONDS", type=_cpu_period, default=cpu.PERIOD_S,
                        help="sample the CPU time of every thread of the rank's processes every SECONDS (default "
                             f"{cpu.PERIOD_S:g}) into RUN_DIR/cpu/ (docs/cpu.md)")
    parser.add_argument("--no-cpu", dest="cpu", action="store_false",
                        help="no CPU sampler (the cpu layer)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the program to run")
    return parser


def _cpu_period(text: str) -> float:
    try:
        return cpu.parse_period(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def _dftracer_preload() -> Optional[Path]:
    """``libdftracer_preload.so`` of the installed ``dftracer`` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("dftracer")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for sub in ("lib64", "lib"):
            so = Path(root) / sub / "libdftracer_preload.so"
            if so.is_file():
                return so
    return None


def _versions() -> Dict[str, str]:
    out = {"python": platform.python_version(), "timelogger": VERSION}
    for dist in _VERSION_DISTS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _darshan_enabled(env: Dict[str, str]) -> bool:
    return "darshan" in env.get("LD_PRELOAD", "").lower() or any(k.startswith("DARSHAN_") for k in env)


def _layer_fd(run_dir: Path, name: str, create: bool = False) -> Optional[int]:
    """``layout.open_layer_dir`` as the launcher uses it: None when ``RUN/name`` is absent (and not ``create``); a
    link or a directory another user owns is a LaunchError naming it, never written or cleared through."""
    try:
        return layout.open_layer_dir(run_dir, name, create=create)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        raise LaunchError(f"{run_dir / name}: {exc.strerror or exc}") from exc


def _layer_names(run_dir: Path, name: str) -> List[str]:
    """The sorted names in ``RUN/name``, listed through its descriptor (:func:`_layer_fd`); none when absent."""
    fd = _layer_fd(run_dir, name)
    if fd is None:
        return []
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def _previous_run(run_dir: Path, rank: int, world: int) -> List[Path]:
    """Files in ``run_dir`` that this rank can tell belong to a previous run, not to the one being launched.

    Only rank r writes ``launch/rank-<r>.json`` and rank r's app files, only rank 0 the manifest, and nothing of a
    launch writes merge outputs, so those found now are a previous run's even while faster ranks of this launch
    already write their own files; any file in a layer directory counts too when this is the only rank.
    """
    found = [layout.launch_record(run_dir, rank)]
    for name in _layer_names(run_dir, layout.APP_DIR):
        m = layout.APP_FILE.match(name)
        if m and (int(m.group(1)) == rank or (rank == 0 and int(m.group(1)) >= world)):
            found.append(run_dir / layout.APP_DIR / name)
    if rank == 0:
        found += [run_dir / name for name in (layout.MANIFEST, *layout.OUTPUTS)]
    if world == 1:
        found += [run_dir / d / n for d in layout.LAYER_DIRS for n in _layer_names(run_dir, d)]
    return [p for p in dict.fromkeys(found) if os.path.lexists(p)]


def _clear_previous(run_dir: Path, keep: Path) -> int:
    """Remove the previous run from ``run_dir`` (rank 0 with ``--force``, before any rank of this launch execs).

    Everything inside the layer directories goes, and the manifest, the merge outputs and every launch record but
    ``keep`` (this rank's new one); the layer directories themselves stay, since a job script may have made one
    (``darshan/`` for ``DARSHAN_LOGPATH``). All of it is first renamed into one hidden directory and then deleted:
    a rename is quick and all-or-nothing per file, so a failure cannot leave a half-cleared layer for the next
    merge to mix in. Returns how many entries were removed.

    Every rename is relative to descriptors of the layer directory and of the trash (a layer directory that is a
    link or another user's is refused, :func:`_layer_fd`), and rename(2) moves a link as the link: a link planted
    in the run never takes the files it points at into the trash. ``shutil.rmtree`` does not follow links either.
    """
    # made here, exclusively, under an unpredictable name: a link planted at a predictable one would take the run's
    # files into another directory of the user
    trash_name = f"{_TRASH_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    trash = run_dir / trash_name
    run_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            os.mkdir(trash_name, 0o700, dir_fd=run_fd)
            trash_fd = layout.dir_at(run_fd, trash_name)
        except OSError as exc:
            raise LaunchError(f"{trash}: cannot create ({exc.strerror or exc})") from exc
        try:
            # the manifest, the merge outputs and what an earlier clearing could not delete
            top = [layout.MANIFEST, *layout.OUTPUTS]
            top += [n for n in sorted(os.listdir(run_fd)) if n.startswith(_TRASH_PREFIX) and n != trash_name]
            moved = _move_to_trash(run_dir, run_fd, top, trash_fd, "")
            launch = [n for n in _layer_names(run_dir, layout.LAUNCH_DIR)
                      if Path(n).match(layout.LAUNCH_GLOB) and n != keep.name]
            for sub, names in [(layout.LAUNCH_DIR, launch)] + \
                    [(d, _layer_names(run_dir, d)) for d in layout.LAYER_DIRS]:
                if names:
                    src_fd = _layer_fd(run_dir, sub)
                    if src_fd is None:
                        continue
                    try:
                        moved += _move_to_trash(run_dir / sub, src_fd, names, trash_fd, sub)
                    finally:
                        os.close(src_fd)
        finally:
            os.close(trash_fd)
        try:
            shutil.rmtree(trash_name, dir_fd=run_fd)
        except OSError as exc:
            # The layers are already clear; only disk space is at stake, and the next --force retries.
            print(f"timelogger: {trash}: could not delete the previous run moved here ({exc}); delete it by hand",
                  file=sys.stderr)
    finally:
        os.close(run_fd)
    return moved


def _move_to_trash(src: Path, src_fd: int, names: List[str], trash_fd: int, sub: str) -> int:
    """Rename ``names`` of directory ``src_fd`` (``src``) into ``trash/sub``; returns how many were there."""
    dst_fd = trash_fd
    if sub:
        with contextlib.suppress(FileExistsError):
            os.mkdir(sub, 0o700, dir_fd=trash_fd)
        dst_fd = layout.dir_at(trash_fd, sub)
    moved = 0
    try:
        for name in names:
            try:
                os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)  # a link is moved, not followed
            except FileNotFoundError:
                continue  # not there (an output never made), or another rank's launch record being replaced
            except OSError as exc:
                raise LaunchError(f"{src / name}: cannot remove the previous run's file ({exc.strerror or exc})") \
                    from exc
            moved += 1
    finally:
        if dst_fd != trash_fd:
            os.close(dst_fd)
    return moved


def _read_json(path: Path) -> Any:
    """``path``'s JSON, never read through a link (a launch record or manifest planted as one)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, encoding="utf-8") as fh:
        return json.load(fh)


def _checked_in(run_dir: Path, world: int, timeout: float, poll_s: float) -> List[RankEntry]:
    """The ranks whose launch records ``run_dir`` holds, once all ``world`` ranks wrote theirs or after
    ``timeout`` seconds."""
    launch = run_dir / layout.LAUNCH_DIR
    deadline = time.monotonic() + timeout
    while len(list(launch.glob(layout.LAUNCH_GLOB))) < world and time.monotonic() < deadline:
        time.sleep(poll_s)
    known = []
    for f in sorted(launch.glob(layout.LAUNCH_GLOB)):
        try:
            r = LaunchRecord.from_json(_read_json(f))
        except (OSError, ValueError):
            continue  # another rank is mid-rename; its launch/ file remains the source
        if r is not None and r.rank is not None and r.hostname is not None and r.pid is not None:
            known.append(r.entry())
    return known


def _listed(manifest: Path, record: LaunchRecord) -> bool:
    """Whether ``manifest`` lists this launch of ``record``'s rank (same ``launch_id``)."""
    try:
        data = Manifest.from_json(_read_json(manifest))
    except (OSError, ValueError):
        return False  # not written yet, or the previous run's being removed
    return data is not None and any(r.rank == record.rank and r.launch_id == record.launch_id for r in data.ranks)


def _wait_for_rank0(run_dir: Path, record: LaunchRecord, own: Path, timeout: float, launch_fd: int,
                    poll_s: float) -> None:
    """Block a rank > 0 launched with ``--force`` until rank 0 has cleared the previous run and listed it.

    Rank 0 removes the previous run's launch records without being able to tell them from new ones, so this
    rank's (``own``) may go too: it is written again until rank 0 has seen it.
    """
    deadline = time.monotonic() + timeout
    while not _listed(run_dir / layout.MANIFEST, record):
        if time.monotonic() > deadline:
            raise LaunchError(f"{run_dir / layout.MANIFEST}: rank 0 did not list rank {record.rank}'s launch "
                              f"within {timeout:.0f} s; with --force every rank waits for rank 0 to clear the "
                              "previous run (is rank 0 running `timelogger run --force` on the same directory?)")
        if not os.path.lexists(own):
            layout.write_json_atomic(own, record.to_json(), dir_fd=launch_fd)
        time.sleep(poll_s)


_IMPORTS_DFTRACER = re.compile(rb"^[ \t]*(?:from[ \t]+dftracer[\w.]*[ \t]+import|import[ \t]+dftracer)", re.M)
_SCAN_FILES, _SCAN_BYTES = 5000, 64 << 20


def starts_dftracer(cmd: Sequence[str]) -> Optional[str]:
    """Why the command's Python code starts DFTracer itself (it imports ``dftracer``: pydftracer, DLIO), or None.

    Looks at the script of ``python SCRIPT``, the package of ``python -m MODULE`` and of a console script (its
    ``from PACKAGE import`` line); a bounded scan of source text, never an import of the program.
    """
    if not cmd:
        return None
    exe = shutil.which(cmd[0]) or cmd[0]
    args = list(cmd[1:])
    if re.fullmatch(r"python[\d.]*", Path(cmd[0]).name):
        while args and args[0].startswith("-") and args[0] != "-m":
            args = args[2:] if args[0] in ("-W", "-X", "-c") else args[1:]
        if len(args) >= 2 and args[0] == "-m":
            return _package_imports_dftracer(args[1])
        return _file_imports_dftracer(Path(args[0])) if args else None
    try:
        with open(exe, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if not head.startswith(b"#!") or b"python" not in head.split(b"\n", 1)[0]:
        return None
    found = _file_imports_dftracer(Path(exe))
    if found:
        return found
    entry = re.search(rb"^from[ \t]+([A-Za-z_][\w.]*)[ \t]+import", head, re.M)
    return _package_imports_dftracer(entry.group(1).decode()) if entry else None


def _file_imports_dftracer(path: Path) -> Optional[str]:
    try:
        with open(path, "rb") as fh:
            return f"{path} imports dftracer" if _IMPORTS_DFTRACER.search(fh.read(_SCAN_BYTES)) else None
    except OSError:
        return None


def _package_imports_dftracer(module: str) -> Optional[str]:
    """Whether the package holding ``module`` (the module's own directory when it is a package) imports dftracer:
    ``dlio_benchmark.main`` scans ``dlio_benchmark/``, ``benchmarks.hepcnn`` only ``benchmarks/hepcnn/``."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and not spec.submodule_search_locations and spec.parent:
            spec = importlib.util.find_spec(spec.parent)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    top = spec.name
    roots = list(spec.submodule_search_locations or [])
    files = [Path(spec.origin)] if not roots and spec.origin else []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            files += [Path(dirpath) / n for n in names if n.endswith(".py")]
            if len(files) > _SCAN_FILES:
                break
    for f in files[:_SCAN_FILES]:
        if _file_imports_dftracer(f):
            return f"package {top} imports dftracer ({f.name})"
    return None


def prepare(args: argparse.Namespace, env: Dict[str, str], waits: Waits = WAITS) -> LaunchRecord:
    """Create the run directory, extend ``env`` for capture, write the launch record (and, on rank 0, the manifest).

    Returns the launch record of this rank. A failure (a full disk, a quota, no inodes left) is one LaunchError
    naming the path, and what this launch had made -- directories, its launch record, the manifest -- is removed
    again: a launch that cannot start leaves nothing behind.
    """
    made: List[Path] = []
    try:
        return _prepare(args, env, made, waits)
    except (OSError, LaunchError) as exc:
        _release_locks()
        for path in reversed(made):  # files, then the directories made before them (only if empty)
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
        if isinstance(exc, LaunchError):
            raise
        where = exc.filename if exc.filename is not None else args.output
        raise LaunchError(f"{where}: cannot prepare the run ({exc.strerror or exc})") from exc


def _mkdir(path: Path, made: List[Path]) -> None:
    """``mkdir -p path``, noting every directory it makes in ``made``."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    made.extend(reversed(missing))


def _write(path: Path, data: Dict[str, Any], made: List[Path], dir_fd: Optional[int] = None) -> None:
    """``layout.write_json_atomic`` (relative to ``dir_fd`` when given), noting ``path`` in ``made`` if new."""
    new = not os.path.lexists(path)
    layout.write_json_atomic(path, data, dir_fd=dir_fd)
    if new:
        made.append(path)


def _layer_dir(run_dir: Path, name: str, made: List[Path]) -> int:
    """A descriptor of ``RUN/name``, made when absent (noted in ``made``); a link or another user's directory is a
    LaunchError naming it (:func:`_layer_fd`)."""
    new = not os.path.lexists(run_dir / name)
    try:
        fd = _layer_fd(run_dir, name, create=True)
    except FileNotFoundError as exc:  # the run directory itself went away
        raise LaunchError(f"{run_dir / name}: cannot create ({exc.strerror or exc})") from exc
    if new:
        made.append(run_dir / name)
    assert fd is not None
    return fd


#: the launch locks this process holds (path -> descriptor), until exec and then in the program (:func:`run`)
_LOCKS: Dict[Path, int] = {}


def _lock_rank(run_dir: Path, rank: int, launch_fd: int, made: List[Path]) -> None:
    """Hold ``launch/.rank-<r>.lock`` (``flock``) for the life of the job, or refuse with one line.

    Two launches into one run directory would write one run twice (``summary`` pools both rank-0 files). The
    lock is per rank so that the ranks of one job (each runs this launcher) do not refuse each other. It is held
    through exec (:func:`run` makes the descriptor inheritable), so the program holds it until it ends, and the
    kernel drops it with its last holder: a killed job leaves no stale lock. Created relative to the launch
    directory's descriptor, never through a link.
    """
    path = layout.launch_lock(run_dir, rank)
    old = _LOCKS.pop(path, None)
    if old is not None:  # a second prepare in one process (tests): it replaces this process's earlier launch
        os.close(old)
    while True:
        new = not os.path.lexists(path)
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644,
                         dir_fd=launch_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LaunchError(f"{path}: a link, not a lock file; refusing to write through it") from None
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise LaunchError(f"{path}: not a regular file; refusing to use it as the launch lock")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # another launch's file, even if this one created it: never removed here
            raise LaunchError(f"{run_dir}: another launch of rank {rank} is running in this run directory ({path} "
                              "is locked); wait for it to end or use another -o") from None
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            print(f"timelogger: {path}: the file system has no flock ({exc.strerror}); a second launch into "
                  f"{run_dir} would not be refused", file=sys.stderr)
            return
        except LaunchError:
            os.close(fd)
            raise
        try:
            same = os.stat(path.name, dir_fd=launch_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # a failed launch removed the file it had made between our open and our lock: lock anew
    if new:
        made.append(path)
    _LOCKS[path] = fd


def _release_locks() -> None:
    for fd in _LOCKS.values():
        os.close(fd)
    _LOCKS.clear()


def _prepare(args: argparse.Namespace, env: Dict[str, str], made: List[Path], waits: Waits) -> LaunchRecord:
    if not args.cmd:
        raise LaunchError("no command given: timelogger run -o RUN_DIR -- CMD ...")
    run_dir = Path(args.output).expanduser().resolve()
    rank, world, launcher = detect_rank_world(env)
    specs, noise_cpus = _noise_settings(args)
    try:
        _mkdir(run_dir, made)  # the run directory itself: the user's choice, links and all
    except OSError as exc:
        raise LaunchError(f"{run_dir}: cannot create run directory ({exc.strerror or exc})") from exc
    launch_fd = _layer_dir(run_dir, layout.LAUNCH_DIR, made)
    try:
        return _prepare_in(args, env, made, run_dir, rank, world, launcher, specs, noise_cpus, launch_fd, waits)
    finally:
        os.close(launch_fd)


def _prepare_in(args: argparse.Namespace, env: Dict[str, str], made: List[Path], run_dir: Path, rank: int,
                world: int, launcher: str, specs: "List[noise.NoiseSpec]", noise_cpus: Optional[List[int]],
                launch_fd: int, waits: Waits) -> LaunchRecord:
    _lock_rank(run_dir, rank, launch_fd, made)
    # a layer directory that is a link or another user's is refused before anything is written or cleared
    for name in layout.LAYER_DIRS:
        fd = _layer_fd(run_dir, name)
        if fd is not None:
            os.close(fd)
    previous = _previous_run(run_dir, rank, world)
    if previous and not args.force:
        raise LaunchError(f"{run_dir}: holds a previous run (e.g. {previous[0]}); use another -o or --force")

    env[ENV_DIR] = str(run_dir)
    layers = _configure_layers(args, env, run_dir, rank, specs, noise_cpus)
    p0 = time.perf_counter_ns()
    wall = time.time_ns()
    p1 = time.perf_counter_ns()
    slurm = slurm_context(env)
    # exec keeps the pid, so this is also the pid in the rank's app file name
    record = LaunchRecord(rank, world, launcher, hostname(), os.getpid(), secrets.token_hex(8),
                          Clock(wall, (p0 + p1) // 2), list(args.cmd), os.getcwd(), layers, slurm or None)
    own = layout.launch_record(run_dir, rank)
    _write(own, record.to_json(), made, dir_fd=launch_fd)
    if rank == 0:
        if args.force and _clear_previous(run_dir, keep=own):
            print(f"timelogger: {run_dir}: removed the previous run (--force)", file=sys.stderr)
        # Give the other ranks' launchers a moment to check in, so the manifest lists their hosts; launch/ stays
        # the complete record for ranks that come later. With --force they wait for the manifest, so wait for all.
        known = _checked_in(run_dir, world, waits.force_s if args.force else waits.ranks_s, waits.poll_s)
        if args.force and len(known) < world:
            print(f"timelogger: {run_dir / layout.LAUNCH_DIR}: only {len(known)} of {world} ranks checked in "
                  f"within {waits.force_s:.0f} s; the others will stop", file=sys.stderr)
        _write(run_dir / layout.MANIFEST, _manifest(record, known, env).to_json(), made)
    elif args.force:
        _wait_for_rank0(run_dir, record, own, waits.force_s + waits.clear_margin_s, launch_fd, waits.poll_s)
    # made only now that a previous run is cleared: rank 0 would have moved a directory made earlier away with it
    for d in [d for d, on in ((layout.POSIX_DIR, layers.posix), (layout.HOROVOD_DIR, layers.horovod_timeline),
                              (layout.NOISE_DIR, layers.noise), (layout.CPU_DIR, layers.cpu)) if on]:
        try:
            os.close(_layer_dir(run_dir, d, made))
        except OSError as exc:
            raise LaunchError(f"{run_dir / d}: cannot create ({exc.strerror or exc})") from exc
    if specs and _starts_noise(run_dir, rank, world, record.hostname, env, waits):
        try:
            record.noise_started = noise.start(run_dir, specs, rank, world, noise_cpus, args.noise_dir,
                                               args.noise_io_mode, os.environ)
        except OSError as exc:
            raise LaunchError(f"--noise: cannot start a generator ({exc.strerror or exc})") from exc
        layout.write_json_atomic(own, record.to_json(), dir_fd=launch_fd)
    if layers.cpu is not None:
        try:
            noise_pids = [x.pid for x in record.noise_started or [] if x.pid is not None]
            record.cpu_sampler = cpu.start(run_dir, rank, world, layers.cpu.period_s, os.environ, noise_pids)
            env[cpu.ENV_SAMPLER] = str(record.cpu_sampler)  # the program asks it for a last sample at its exit
        except OSError as exc:
            raise LaunchError(f"{run_dir / layout.CPU_DIR}: cannot start the CPU sampler ({exc.strerror or exc})"
                              ) from exc
        layout.write_json_atomic(own, record.to_json(), dir_fd=launch_fd)
    return record


def _manifest(record: LaunchRecord, known: List[RankEntry], env: Dict[str, str]) -> Manifest:
    """Rank 0's record of the job: its launch, the ranks that checked in, the capture environment."""
    slurm = record.slurm
    return Manifest(
        created_wall_ns=record.clock.wall_ns, command=list(record.command), cwd=record.cwd,
        world_size=record.world_size, launcher=record.launcher, ranks=known, ranks_dir=layout.LAUNCH_DIR,
        hosts=sorted({r.hostname for r in known if r.hostname is not None}), hostname=hostname(),
        versions=_versions(), clocks=record.clock, layers=record.layers,
        env={k: env[k] for k in (ENV_DIR, ENV_TF_PROFILE, ENV_TORCH_PROFILE, "HOROVOD_TIMELINE",
                                 "HOROVOD_CACHE_CAPACITY", "DFTRACER_LOG_FILE", "DFTRACER_DATA_DIR", "DARSHAN_LOGPATH",
                                 "SLURM_JOB_ID")
             if k in env},
        # the job's context (job id, name, node list, ...); each rank's task ids stay in its launch record
        slurm=None if slurm is None else {k: v for k, v in slurm.items() if k not in SLURM_TASK_KEYS})


# ---------------------------------------------------------------------- one configurator per layer
def _configure_layers(args: argparse.Namespace, env: Dict[str, str], run_dir: Path, rank: int,
                      specs: "List[noise.NoiseSpec]", noise_cpus: Optional[List[int]]) -> Layers:
    """Extend ``env`` to switch on each layer asked for; returns what each layer captures."""
    layers = Layers(darshan=_darshan_enabled(env))  # before the posix layer adds its preload
    # why the program starts DFTracer itself (it imports dftracer), or None: a bounded scan of its source
    traces_itself = starts_dftracer(args.cmd) if args.posix or args.hooks else None
    layers.posix = _configure_posix(args, env, run_dir, rank, traces_itself)
    layers.horovod_timeline = _configure_horovod(args, env, run_dir)
    layers.tf_profile = _configure_profile(args.tf_profile, "--tf-profile", ENV_TF_PROFILE, env)
    layers.torch_profile = _configure_profile(args.torch_profile, "--torch-profile", ENV_TORCH_PROFILE, env)
    layers.hooks, layers.hooks_off = _configure_hooks(args, env, rank, traces_itself)
    layers.noise = _noise_layer(args, specs, noise_cpus)
    # /proc per thread (Linux) is what the sampler reads; elsewhere the layer is off
    layers.cpu = CpuLayer(args.cpu_period, layout.CPU_DIR) if args.cpu and cpu.supported() else None
    if rank == 0 and not layers.darshan:
        print(_DARSHAN_HINT.format(darshan_dir=run_dir / layout.DARSHAN_DIR), file=sys.stderr)
    return layers


def _configure_posix(args: argparse.Namespace, env: Dict[str, str], run_dir: Path, rank: int,
                     traces_itself: Optional[str]) -> Optional[PosixLayer]:
    """``--posix``: the DFTracer preload, and who starts DFTracer (the preload, or a program that does itself)."""
    if not args.posix:
        if args.posix_filter:
            raise LaunchError("--posix-filter needs --posix")
        return None
    so = _dftracer_preload()
    if so is None:
        print("timelogger: --posix: the dftracer package is not installed (pip install .[posix]); "
              "continuing without POSIX tracing", file=sys.stderr)
        return None
    env["LD_PRELOAD"] = ":".join(x for x in (str(so), env.get("LD_PRELOAD", "")) if x)
    env["DFTRACER_ENABLE"] = "1"
    why = traces_itself if args.posix_init == "auto" else None
    program = args.posix_init == "program" or why is not None
    # Two DFTracer cores in one process (the preload's and the program's own) share one writer: the
    # program's finalize frees it while the preload's intercepts still write (a segfault in MPI_Finalize,
    # seen with DLIO). A program that starts DFTracer itself gets FUNCTION mode: the preload's intercepts
    # then feed the program's own traces.
    env["DFTRACER_INIT"] = "FUNCTION" if program else "PRELOAD"
    env["DFTRACER_LOG_FILE"] = str(layout.posix_log_prefix(run_dir))
    env["DFTRACER_DATA_DIR"] = str(Path(args.posix_filter).resolve()) if args.posix_filter else "all"
    # Without call metadata the preload records no `ret`/`offset`, i.e. no bytes for the bandwidth.
    env.setdefault("DFTRACER_INC_METADATA", "1")
    layer = PosixLayer(str(so), env["DFTRACER_DATA_DIR"], "program" if program else "preload")
    if program:
        layer.program_starts_dftracer = why or "--posix-init program"
        if rank == 0:
            print(f"timelogger: --posix: the program starts DFTracer itself ({why or '--posix-init program'});"
                  " its own traces carry the POSIX layer: write them into "
                  f"{run_dir / layout.POSIX_DIR} (DLIO: ++workload.output.folder=...) or give them to "
                  "trace-merge (docs/wire-format.md)", file=sys.stderr)
    return layer


def _configure_horovod(args: argparse.Namespace, env: Dict[str, str], run_dir: Path) -> Optional[str]:
    """``--horovod-timeline [--horovod-ready-marks]``: the timeline's path."""
    if not args.horovod_timeline:
        if args.horovod_ready_marks:
            raise LaunchError("--horovod-ready-marks needs --horovod-timeline")
        return None
    env["HOROVOD_TIMELINE"] = str(layout.horovod_timeline(run_dir))
    if args.horovod_ready_marks:
        # Horovod 0.28 draws the per-rank ready marks only in negotiations its response cache does not answer
        env["HOROVOD_CACHE_CAPACITY"] = "0"
    return env["HOROVOD_TIMELINE"]


def _configure_profile(spec: Optional[str], option: str, variable: str, env: Dict[str, str]) -> Optional[str]:
    """``--tf-profile[=SPEC]`` or ``--torch-profile[=SPEC]``: the profile window (also one the user exported)."""
    if spec is not None:
        try:
            parse_profile_spec(spec)
        except ValueError as exc:
            raise LaunchError(f"{option}: {exc}") from exc
        # TimeLoggerCallback and the loggers' step windows act on it (profile into RUN_DIR/tf|torch/rank-<r>)
        env[variable] = spec
    return env.get(variable) or None


def _configure_hooks(args: argparse.Namespace, env: Dict[str, str], rank: int,
                     traces_itself: Optional[str]) -> Tuple[bool, Optional[str]]:
    """The zero-code hooks (on unless ``--no-hooks``): whether they are on, and why not when the program traces
    itself."""
    # A program that starts DFTracer itself (DLIO, pydftracer annotations) times its own loop in its own traces:
    # the hooks would time the same fetches again under their own epoch numbers
    on = bool(args.hooks) and traces_itself is None
    off = None if traces_itself is None else f"the program traces its own loop ({traces_itself})"
    if off is not None and rank == 0:
        print(f"timelogger: zero-code hooks off: {off}", file=sys.stderr)
    if on:
        boot = str(Path(__file__).resolve().parent / "_boot")
        env["PYTHONPATH"] = os.pathsep.join(x for x in (boot, env.get("PYTHONPATH", "")) if x)
        env[ENV_HOOKS] = "1"
        env[ENV_HOOKS_PID] = str(os.getpid())  # exec keeps it: the program is the process that reports at exit
    else:
        env.pop(ENV_HOOKS, None)
    return on, off


def _noise_layer(args: argparse.Namespace, specs: "List[noise.NoiseSpec]",
                 noise_cpus: Optional[List[int]]) -> Optional[NoiseLayer]:
    """``--noise``: the generators' settings (started once the ranks are up, :func:`_starts_noise`)."""
    if not specs:
        return None
    return NoiseLayer([x.record() for x in specs], args.noise_dir,
                      args.noise_io_mode if any(x.kind == "io" for x in specs) else None, noise_cpus,
                      "the lowest local rank of each host", noise.NOISE_DIR)


def _noise_settings(args: argparse.Namespace) -> "tuple[List[noise.NoiseSpec], Optional[List[int]]]":
    """The parsed and checked ``--noise*`` options (a LaunchError names the first bad one; nothing is started)."""
    given = [o for o, v in (("--noise-dir", args.noise_dir), ("--noise-cpus", args.noise_cpus)) if v]
    if args.noise is None:
        if given:
            raise LaunchError(f"{given[0]} needs --noise KIND:LEVEL")
        return [], None
    try:
        specs = noise.parse_spec(args.noise)
        cpus = noise.parse_cpus(args.noise_cpus) if args.noise_cpus else None
        noise.validate(specs, cpus, args.noise_dir)
    except noise.NoiseError as exc:
        raise LaunchError(str(exc)) from None
    return specs, cpus


def _starts_noise(run_dir: Path, rank: int, world: int, host: Optional[str], env: Dict[str, str],
                  waits: Waits) -> bool:
    """Whether this launcher starts the node's noise (it is the lowest local rank), after waiting for the node's
    other launchers to check in (their launch records), so that the ranks are up first."""
    local = noise.local_rank(env)
    size = noise.local_size(env)
    deadline = time.monotonic() + waits.ranks_s
    while True:
        here = [r for r in _checked_in(run_dir, world, 0.0, waits.poll_s) if r.hostname == host]
        enough = len(here) >= (size or world)
        if enough or time.monotonic() > deadline:
            break
        time.sleep(waits.poll_s)
    if local is not None:
        return local == 0
    return rank == min([r.rank for r in here if r.rank is not None] + [rank])


def run(args: argparse.Namespace, waits: Waits = WAITS) -> int:
    """Prepare and exec; returns only on failure."""
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    args.cmd = cmd
    env = dict(os.environ)
    prepare(args, env, waits)
    for fd in _LOCKS.values():  # the program holds the launch lock from here on (exec keeps the descriptor)
        os.set_inheritable(fd, True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        return _error(f"{cmd[0]}: cannot execute ({exc.strerror or exc})", 127)
    return 127  # pragma: no cover - execvpe does not return


def _error(message: str, status: int = 2) -> int:
    """Report a failure as one line ``timelogger: <message>`` on stderr; returns the exit status."""
    print(f"timelogger: {message}", file=sys.stderr)
    return status


def main(argv: Optional[Sequence[str]] = None, waits: Waits = WAITS) -> int:
    """Console script ``timelogger`` (also ``python -m timelogger``)."""
    parser = argparse.ArgumentParser(prog="timelogger", description="TimeLogger capture launcher")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    setup_parser(sub)
    args = parser.parse_args(argv)
    try:
        return run(args, waits)
    except LaunchError as exc:
        if args.debug:
            raise
        return _error(str(exc))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
