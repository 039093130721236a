"""Noise generators beside the ranks: ``timelogger run --noise KIND:LEVEL[,KIND:LEVEL] ...`` (``docs/noise.md``).

KIND and the unit of LEVEL:

=========  ======  ===================================================================================
``cpu``    cores   busy loops in ``ceil(LEVEL)`` processes, each busy ``LEVEL/ceil(LEVEL)`` of every 100 ms
``memory`` GB/s    streaming copies between two 64 MiB buffers (bytes read + bytes written)
``io``     MB/s    8 MiB of 1 MiB writes, then reads of them, over a 64 MiB file in ``--noise-dir``
                   (``--noise-io-mode``: ``evict`` = buffered with fdatasync + posix_fadvise(DONTNEED) so reads
                   reach the device, ``direct`` = O_DIRECT, ``cached`` = page cache only)
``net``    MB/s    TCP traffic over 127.0.0.1 from this process to a forked receiver
=========  ======  ===================================================================================

Each generator first measures what it can reach flat out for a short moment (the calibration: cores it may use,
GB/s, MB/s), then throttles itself to LEVEL in 100 ms slices and records, once a second, the load it achieved (cpu:
also its ``demand``, time on a core or waiting in a run queue for one, which tells a shared machine's contention
from a generator that did not try) as an interval of the ``noise`` layer in the TimeLogger wire format
(``RUN_DIR/noise/<kind>-rank-<r>-pid-<p>.pfw``, ``docs/wire-format.md``; its header carries ``"layer": "noise"`` and
the calibration). It dies with the process that started it: ``PR_SET_PDEATHSIG`` (SIGTERM; its own helper processes
get SIGKILL when it goes), and a watchdog that checks its parent once per slice. Only the standard library is used.
"""
from __future__ import annotations

import abc
import argparse
import json
import math
import mmap
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set

from . import sidecar
from .records import LaunchRecord, NoiseLevel

#: kind -> unit of its level
KINDS: Dict[str, str] = {"cpu": "cores", "memory": "GB/s", "io": "MB/s", "net": "MB/s"}
IO_MODES = ("evict", "direct", "cached")
NOISE_DIR = "noise"  # timelogger.layout.NOISE_DIR
LAYER = "noise"
#: throttling slice and recording period (s)
SLICE_S = 0.1
PERIOD_S = 1.0
CALIBRATE_S = 0.3
_BLOCK = 1 << 20
_IO_FILE_BYTES = 64 << 20
#: io writes this much, reads it back, then moves on: reads and writes alternate every ~0.3 s at 50 MB/s, so a
#: device with separate read and write limits (blk-throttle) sees both all the time, not in long halves
_IO_SEGMENT = 8 << 20
_MEM_BUFFER = 64 << 20
#: environment variables that say which rank of its node a process is (torchrun, MPICH Hydra, Open MPI, Slurm, MVAPICH)
_LOCAL_RANK_KEYS = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                    "MV2_COMM_WORLD_LOCAL_RANK")
_LOCAL_SIZE_KEYS = ("LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")


class NoiseError(ValueError):
    """A bad ``--noise*`` setting; the launcher reports it as one line and starts nothing."""


@dataclass(frozen=True)
class NoiseSpec:
    kind: str
    level: float

    @property
    def unit(self) -> str:
        return KINDS[self.kind]

    def record(self, pid: Optional[int] = None) -> NoiseLevel:
        """As the manifest (and, with the generator's ``pid``, the launch record) holds it."""
        return NoiseLevel(self.kind, self.level, self.unit, pid)


def parse_cpus(text: str) -> List[int]:
    """``"1"``, ``"0,1"``, ``"0-1"`` -> sorted CPU ids."""
    cpus: Set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                cpus.update(range(lo, hi + 1))
            else:
                cpus.add(int(part))
        except ValueError:
            raise NoiseError(f"--noise-cpus: {text!r} is not a CPU list (e.g. 1, 0,1 or 0-1)") from None
    if not cpus or min(cpus) < 0:
        raise NoiseError(f"--noise-cpus: {text!r} is not a CPU list (e.g. 1, 0,1 or 0-1)")
    return sorted(cpus)


def allowed_cpus() -> List[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def parse_spec(text: str) -> List[NoiseSpec]:
    """``KIND:LEVEL[,KIND:LEVEL]`` -> specs (syntax and units only; :func:`validate` checks them against the
    machine)."""
    specs: List[NoiseSpec] = []
    for part in text.split(","):
        kind, sep, level = part.strip().partition(":")
        if not sep or not kind or not level:
            raise NoiseError(f"--noise: {part.strip()!r} is not KIND:LEVEL (e.g. cpu:1, memory:2, io:50, net:200)")
        if kind not in KINDS:
            raise NoiseError(f"--noise: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        try:
            value = float(level)
        except ValueError:
            raise NoiseError(f"--noise: {kind}: level {level!r} is not a number ({KINDS[kind]})") from None
        if not math.isfinite(value) or value <= 0:
            raise NoiseError(f"--noise: {kind}: level {level} must be a positive number of {KINDS[kind]}")
        if any(s.kind == kind for s in specs):
            raise NoiseError(f"--noise: {kind} given twice")
        specs.append(NoiseSpec(kind, value))
    return specs


def validate(specs: Sequence[NoiseSpec], cpus: Optional[Sequence[int]], noise_dir: Optional[str]) -> None:
    """Refuse what cannot run here: more cores than the generators may use, pinning to CPUs this process may not
    use, io without a writable ``--noise-dir``."""
    allowed = allowed_cpus()
    if cpus is not None:
        bad = [c for c in cpus if c not in allowed]
        if bad:
            raise NoiseError(f"--noise-cpus: CPU {bad[0]} is not available here (allowed: "
                             f"{','.join(map(str, allowed))})")
    usable = len(cpus) if cpus is not None else len(allowed)
    for s in specs:
        if s.kind == "cpu" and s.level > usable:
            raise NoiseError(f"--noise: cpu:{s.level:g} asks for more cores than the noise may use ({usable}"
                             f"{' with --noise-cpus' if cpus is not None else ' on this machine'})")
        if s.kind == "memory" and s.level > 1000:
            raise NoiseError(f"--noise: memory:{s.level:g} GB/s is beyond any node's memory bandwidth")
    if any(s.kind == "io" for s in specs):
        if not noise_dir:
            raise NoiseError("--noise io needs --noise-dir DIR (where its file is written and read)")
        d = Path(noise_dir)
        if not d.is_dir():
            raise NoiseError(f"--noise-dir: {noise_dir}: no such directory")
        if not os.access(d, os.W_OK | os.X_OK):
            raise NoiseError(f"--noise-dir: {noise_dir}: not writable")
    elif noise_dir:
        raise NoiseError("--noise-dir is only used by io noise (--noise io:MB/s)")


def local_rank(env: Mapping[str, str]) -> Optional[int]:
    for key in _LOCAL_RANK_KEYS:
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return None


def local_size(env: Mapping[str, str]) -> Optional[int]:
    for key in _LOCAL_SIZE_KEYS:
        value = env.get(key, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


# --------------------------------------------------------------------------------------------- the launcher side

def start(run_dir: Path, specs: Sequence[NoiseSpec], rank: int, world: int, cpus: Optional[Sequence[int]],
          noise_dir: Optional[str], io_mode: str, env: Mapping[str, str]) -> List[NoiseLevel]:
    """Start one generator process per spec, sidecars of this process (which then execs the rank's program, so
    they die with the rank); returns their settings and pids."""
    from .layout import open_layer_dir

    # never through a link, never another user's directory (run directories live in shared scratch)
    out_fd = open_layer_dir(run_dir, NOISE_DIR)
    env_of_child = sidecar.child_env(env)
    started = []
    try:
        for s in specs:
            cmd = [sys.executable, "-m", "timelogger.noise", "--kind", s.kind, "--level", repr(s.level),
                   "--run-dir", str(run_dir), "--rank", str(rank), "--world", str(world), "--parent",
                   str(os.getpid()), "--io-mode", io_mode]
            if cpus is not None:
                cmd += ["--cpus", ",".join(map(str, cpus))]
            if noise_dir:
                cmd += ["--dir", str(Path(noise_dir).resolve())]
            started.append(s.record(sidecar.start(cmd, out_fd, f"{s.kind}-rank-{rank}.log", env_of_child)))
    finally:
        os.close(out_fd)
    return started


def wait_stopped(run_dir: Path, timeout: float = 5.0) -> List[int]:
    """After the job: wait until the generators its launch records list have exited (they write their last
    interval and close record within a slice of the rank's end; a merge started before that would miss them).
    Returns the pids still running at ``timeout``."""
    pids = []
    for f in sorted((Path(run_dir) / "launch").glob("rank-*.json")):
        try:
            record = LaunchRecord.from_json(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        pids += [s.pid for s in (record.noise_started if record else None) or [] if s.pid is not None]
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if _running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (``/proc``; elsewhere: whether it can be signalled)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True


# ------------------------------------------------------------------------------------------- the generator side

class _Load(abc.ABC):
    """One kind's load: ``step(budget, deadline)`` does up to ``budget`` units of work before ``deadline``
    (perf_counter seconds) and returns the units done; units: bytes, or CPU seconds for cpu."""

    unit_scale = 1.0  # units per level unit

    @abc.abstractmethod
    def step(self, budget: float, deadline: float) -> float:
        """Each kind's own work (the subclasses)."""

    def close(self) -> None:  # noqa: B027 -- optional: only kinds holding a resource close one
        pass


class _Memory(_Load):
    unit_scale = 1e9

    def __init__(self) -> None:
        self.src = bytearray(os.urandom(1 << 16)) * (_MEM_BUFFER >> 16)
        self.dst = bytearray(_MEM_BUFFER)
        self.s, self.d = memoryview(self.src), memoryview(self.dst)
        self.at = 0
        self.chunk = 4 << 20

    def step(self, budget: float, deadline: float) -> float:
        done = 0.0
        while done < budget and time.perf_counter() < deadline:
            a = self.at
            self.d[a:a + self.chunk] = self.s[a:a + self.chunk]
            self.at = (a + self.chunk) % _MEM_BUFFER
            done += 2 * self.chunk  # read + written
        return done


class _Io(_Load):
    unit_scale = 1e6

    def __init__(self, directory: str, mode: str, log: Callable[[str], None]) -> None:
        self.mode = mode
        path = Path(directory) / f".timelogger-noise-{os.getpid()}.dat"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        if mode == "direct":
            try:
                self.fd = os.open(path, flags | os.O_DIRECT, 0o600)
            except OSError as exc:  # tmpfs and some others refuse O_DIRECT
                log(f"io: O_DIRECT refused in {directory} ({exc.strerror}); using evict mode")
                self.mode = "evict"
                self.fd = os.open(path, flags, 0o600)
        else:
            self.fd = os.open(path, flags, 0o600)
        os.unlink(path)  # nothing is left behind, whatever ends this process
        self.buf = mmap.mmap(-1, _BLOCK)  # page-aligned, as O_DIRECT needs
        self.buf.write(os.urandom(_BLOCK))
        self.at, self.writing, self.filled = 0, True, 0

    def step(self, budget: float, deadline: float) -> float:
        done = 0.0
        while done < budget and time.perf_counter() < deadline:
            if self.writing:
                n = os.pwritev(self.fd, [self.buf], self.at)
            else:
                n = os.preadv(self.fd, [self.buf], self.at)
            done += n
            self.at += _BLOCK
            if self.at % _IO_SEGMENT == 0:  # a segment written: read it back; read: on to the next one
                if self.writing:
                    self.at -= _IO_SEGMENT
                    if self.mode == "evict":  # so that reading it back reaches the device
                        os.fdatasync(self.fd)
                        os.posix_fadvise(self.fd, self.at, _IO_SEGMENT, os.POSIX_FADV_DONTNEED)
                else:
                    self.at %= _IO_FILE_BYTES
                self.writing = not self.writing
        return done

    def close(self) -> None:
        os.close(self.fd)


class _Net(_Load):
    unit_scale = 1e6

    def __init__(self) -> None:
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]
        self.child = os.fork()
        if self.child == 0:  # the receiver
            sidecar.prctl_pdeathsig(signal.SIGKILL)
            server.close()
            try:
                conn = socket.create_connection(("127.0.0.1", port))
                buf = bytearray(_BLOCK)
                while conn.recv_into(buf):
                    pass
            finally:
                os._exit(0)
        self.conn, _ = server.accept()
        server.close()
        self.data = memoryview(os.urandom(256 << 10))

    def step(self, budget: float, deadline: float) -> float:
        done = 0.0
        while done < budget and time.perf_counter() < deadline:
            self.conn.sendall(self.data)
            done += len(self.data)
        return done

    def close(self) -> None:
        self.conn.close()
        _reap([self.child])


class _Cpu(_Load):
    """``ceil(level)`` busy processes, each busy ``level / ceil(level)`` of each slice; ``step`` only waits, the
    work is theirs. Achieved = their CPU time from ``/proc/<pid>/stat``."""

    def __init__(self, level: float) -> None:
        n = max(1, math.ceil(level - 1e-9))
        duty = level / n
        self.children = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                sidecar.prctl_pdeathsig(signal.SIGKILL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                parent = os.getppid()
                # busy until this process's CPU time reaches duty x the time since start: when the scheduler
                # gave the core to someone else, the next slices catch up (up to a full slice each)
                w0, c0 = time.perf_counter(), time.process_time()
                while os.getppid() == parent:
                    slice_end = time.perf_counter() + SLICE_S
                    while (time.process_time() - c0 < duty * (time.perf_counter() - w0)
                           and time.perf_counter() < slice_end):
                        pass
                    time.sleep(max(0.0, min(SLICE_S * (1 - duty), slice_end - time.perf_counter())))
                os._exit(0)
            self.children.append(pid)
        self.tick = os.sysconf("SC_CLK_TCK")

    def step(self, budget: float, deadline: float) -> float:
        """Nothing to do here: the busy processes do the work; :meth:`cpu_s` reads what they achieved."""
        return 0.0

    def cpu_s(self) -> float:
        total = 0.0
        for pid in self.children:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / self.tick
            except (OSError, IndexError, ValueError):
                continue
        return total

    def demand_s(self) -> float:
        """Seconds the workers ran or waited on a run queue (``/proc/<pid>/schedstat``): the load they asked for,
        which exceeds :meth:`cpu_s` when other processes hold the cores."""
        total = 0.0
        for pid in self.children:
            try:
                with open(f"/proc/{pid}/schedstat") as fh:
                    run_ns, wait_ns = fh.read().split()[:2]
                total += (int(run_ns) + int(wait_ns)) / 1e9
            except (OSError, ValueError):
                continue
        return total

    def close(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap(self.children)


def _reap(pids: Sequence[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass


def _calibrate(load: _Load) -> float:
    """Units per second flat out, over :data:`CALIBRATE_S`."""
    t0 = time.perf_counter()
    done = load.step(float("inf"), t0 + CALIBRATE_S)
    return done / max(time.perf_counter() - t0, 1e-9)


def generate(kind: str, level: float, run_dir: Path, rank: int, world: int, parent: int,
             cpus: Optional[List[int]], directory: Optional[str], io_mode: str,
             duration: Optional[float] = None) -> int:
    """The generator process's main loop (``python -m timelogger.noise``)."""
    stop = sidecar.Stop(parent).install()
    if os.getppid() != parent:
        return 0  # the job is already gone
    if cpus:
        os.sched_setaffinity(0, cpus)

    def log(msg: str) -> None:
        print(f"timelogger noise: {msg}", file=sys.stderr, flush=True)

    unit = KINDS[kind]
    if kind == "cpu":
        load: _Load = _Cpu(level)
        maximum = float(len(os.sched_getaffinity(0)))  # the calibration of cpu: the cores it may run on
    elif kind == "memory":
        load = _Memory()
        maximum = _calibrate(load) / load.unit_scale
    elif kind == "io":
        load = _Io(directory or ".", io_mode, log)
        maximum = _calibrate(load) / load.unit_scale
    else:
        load = _Net()
        maximum = _calibrate(load) / load.unit_scale
    if level > maximum * 1.05:
        log(f"{kind}: level {level:g} {unit} is above the {maximum:.3g} {unit} measured at start; "
            "it runs flat out and records what it achieves")
    from ._env import hostname
    from .logger import VERSION

    noise = {"kind": kind, "level": level, "unit": unit, "calibrated_max": round(maximum, 4),
             "share_of_max": round(level / maximum, 4) if maximum else None, "cpus": cpus,
             "io_mode": getattr(load, "mode", None), "dir": directory}
    name = f"{kind}-rank-{rank}-pid-{os.getpid()}.pfw"
    writer = sidecar.Writer(run_dir / NOISE_DIR / name, {
        "rank": rank, "world_size": world, "hostname": hostname(), "layer": LAYER, "noise": noise,
        "versions": {"python": sys.version.split()[0], "timelogger": VERSION}, "argv": sys.argv}, f"noise {kind}")
    log(json.dumps(noise))
    end = None if duration is None else time.perf_counter() + duration
    try:
        while not stop.stopped() and (end is None or time.perf_counter() < end):
            p0 = time.perf_counter_ns()
            c0, d0 = (load.cpu_s(), load.demand_s()) if isinstance(load, _Cpu) else (0.0, 0.0)
            done = 0.0
            period_end = time.perf_counter() + PERIOD_S
            while time.perf_counter() < period_end and not stop.stopped():
                slice_end = min(time.perf_counter() + SLICE_S, period_end)
                done += load.step(level * load.unit_scale * SLICE_S, slice_end)
                rest = slice_end - time.perf_counter()
                if rest > 0:
                    time.sleep(rest)
            p1 = time.perf_counter_ns()
            secs = (p1 - p0) / 1e9
            args = {"rank": rank, "kind": kind, "unit": unit, "target": level}
            if isinstance(load, _Cpu):
                args["achieved"] = round((load.cpu_s() - c0) / secs, 4)
                args["demand"] = round((load.demand_s() - d0) / secs, 4)  # on a core or waiting for one
            else:
                args["achieved"] = round(done / load.unit_scale / secs, 4)
            writer.interval(f"noise {kind}", p0, p1, args)
    finally:
        load.close()
        writer.close(stop.why)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m timelogger.noise", description="one noise generator (started by "
                                "`timelogger run --noise`; docs/noise.md)")
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--level", type=float, required=True)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--parent", type=int, default=None, help="stop when this process is no longer the parent")
    p.add_argument("--cpus", default=None)
    p.add_argument("--dir", default=None)
    p.add_argument("--io-mode", choices=IO_MODES, default="evict")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (tests)")
    a = p.parse_args(argv)
    try:
        cpus = parse_cpus(a.cpus) if a.cpus else None
        validate([NoiseSpec(a.kind, a.level)], cpus, a.dir if a.kind == "io" else None)
    except NoiseError as exc:
        print(f"timelogger noise: {exc}", file=sys.stderr)
        return 2
    a.run_dir.mkdir(parents=True, exist_ok=True)  # noise/ is made by the writer (layout.open_layer_dir)
    return generate(a.kind, a.level, a.run_dir, a.rank, a.world, a.parent if a.parent else os.getppid(), cpus,
                    a.dir, a.io_mode, a.duration)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
