"""The CPU sampler: ``timelogger run`` (unless ``--no-cpu``) follows the CPU time of every thread of every process of
the rank (the program, its forked or spawned workers and their children) from ``/proc``, every ``--cpu-period``
seconds (default 1), into ``RUN_DIR/cpu/rank-<r>-pid-<p>.pfw`` (``p``: the program's pid; the ``cpu`` layer:
``docs/cpu.md``).

What one sample reads, per followed process: its thread list (``/proc/<pid>/task``), each thread's
``/proc/<pid>/task/<tid>/stat`` (kept open and re-read: utime + stime, the thread's name), the process's own
``stat`` (its whole CPU time, which keeps the time of threads that have ended, and its children's once it has reaped
them) and its main thread's ``children``; the ``children`` of its threads that ran and the node's ``/proc/stat``
(per core) about every :data:`SLOW_S` seconds. A thread with CPU time in a sample window is written as one interval
whose duration is that CPU time, centred in the window (``cat`` ``other``, ``name`` the thread's name, the thread's
own ``pid`` and ``tid``): the layer's durations add up to CPU seconds, placed to within one period. CPU time of a
thread that ended or a child process that was reaped between two samples is recovered from its process's (or
parent's) totals, so that nothing is lost between samples; only the last period of the program itself is (it has
gone when the sampler looks), unless the program asks for a last sample at its exit (:func:`final_sample`, which the
zero-code hooks call).

The cores of the node the program may run on are written as ``core <n>`` intervals (``pid`` 0, ``tid`` the core)
whose duration is the core's busy time in a window of about :data:`SLOW_S` seconds, or the last one to the program's
end (all processes of the node, not only the job's), ending at the window's end: a core's rows are its windows end
to end (an idle window's row has duration 0, and a row of duration 0 at the first reading is their origin).

The header (``args.cpu``) carries the period, the clock tick, the cores the program may run on (its affinity), the
node's cores and a cgroup CPU quota when there is one. The sampler's own CPU time is in its close record.
Only the standard library is used.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from . import sidecar

CPU_DIR = "cpu"  # timelogger.layout.CPU_DIR
LAYER = "cpu"
#: default sample period (s): ``--cpu-period``; the layer's figures are sums over many windows. Its cost, and how a
#: job whose ranks meet in an allreduce every few ms on fully busy cores fared at shorter periods:
#: docs/measurements.md#cpu-sampler
PERIOD_S = 1.0
#: the node's per-core counters and the children of the threads that ran are read about this often (s)
SLOW_S = 2.0
#: thread stat files kept open at most (one descriptor each); beyond it a thread's file is opened per sample
MAX_OPEN = 512
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: the program's last sample, asked for at its exit (:func:`final_sample`): taken, then the file is closed
SAMPLE_NOW = signal.SIGUSR1
#: the close record's ``stopped_by`` after :data:`SAMPLE_NOW`
AT_EXIT = "program at exit"
#: the program's environment: its sampler's pid (set by the launcher)
ENV_SAMPLER = "TIMELOGGER_CPU_SAMPLER"
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_TICK_NS = 10**9 // TICK


def supported() -> bool:
    """Whether this system has what the sampler reads and waits with (Linux: ``/proc`` per thread)."""
    return os.path.isdir("/proc/self/task") and hasattr(os, "sched_getaffinity") and hasattr(signal, "sigtimedwait")


def parse_period(text: str) -> float:
    """``--cpu-period`` as seconds (0.01 to 60)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--cpu-period {text!r}: not a number of seconds") from None
    if not 0.01 <= value <= 60:
        raise ValueError(f"--cpu-period {text!r}: must be between 0.01 and 60 seconds")
    return value


def _stat_fields(raw: bytes) -> Tuple[str, List[bytes]]:
    """A ``stat`` line's name and its fields after the name (``[0]`` is the state, ``[11:15]`` utime, stime,
    cutime, cstime in clock ticks)."""
    head, _, rest = raw.rpartition(b")")
    return head.partition(b"(")[2].decode("utf-8", "replace"), rest.split()


def _ticks(raw: bytes) -> int:
    """utime + stime of a ``stat`` line (the 14th and 15th fields; the name before them may hold spaces)."""
    f = raw[raw.rindex(b")") + 2:].split(b" ", 13)
    return int(f[11]) + int(f[12])


class _Thread:
    __slots__ = ("tid", "fd", "ticks", "name", "rate", "raw", "ran")

    def __init__(self, tid: int, fd: Optional[int], ticks: int, name: str) -> None:
        self.tid, self.fd, self.ticks, self.name = tid, fd, ticks, name
        self.raw = b""
        self.ran = True  # since the last reading of its children
        self.rate = 0  # ticks in the last window (how the CPU of ended threads is shared out)


class _Process:
    __slots__ = ("pid", "parent", "threads", "total", "children_total", "children_now", "reaped_known",
                 "ended_children")

    def __init__(self, pid: int, parent: Optional[int]) -> None:
        self.pid, self.parent = pid, parent
        self.threads: Dict[int, _Thread] = {}
        self.total = -1  # the process's utime + stime (all its threads, ended ones too)
        self.children_total = -1  # cutime + cstime: its reaped children's
        self.children_now = 0
        self.reaped_known = 0  # the last totals of its followed children that have gone
        self.ended_children: List[Tuple[int, int, str, int]] = []  # (pid, main tid, name, rate) not yet reaped


def _read(path: str) -> Optional[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def core_times() -> Dict[int, Tuple[int, int]]:
    """core -> (busy, total) clock ticks since boot from ``/proc/stat``."""
    out: Dict[int, Tuple[int, int]] = {}
    raw = _read("/proc/stat")
    for line in (raw or b"").decode("ascii", "replace").splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *vals = line.split()
            v = [int(x) for x in vals[:8]]  # user nice system idle iowait irq softirq steal
            out[int(name[3:])] = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7], sum(v))
    return out


def cgroup_quota_cores() -> Optional[float]:
    """The CPU quota of this process's cgroup in cores (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), or None."""
    raw = _read("/proc/self/cgroup")
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            text = _read(f"/sys/fs/cgroup{path}/cpu.max")
            parts = (text or b"").split()
            if len(parts) == 2 and parts[0] != b"max":
                return int(parts[0]) / int(parts[1])
        elif "cpu" in controllers.split(","):
            base = f"/sys/fs/cgroup/{controllers}{path}"
            quota, period = _read(f"{base}/cpu.cfs_quota_us"), _read(f"{base}/cpu.cfs_period_us")
            if quota and period and int(quota) > 0:
                return int(quota) / int(period)
    return None


class Sampler:
    """Follows the program ``pid`` and its descendants; :meth:`sample` writes one window's rows."""

    def __init__(self, pid: int, writer: sidecar.Writer, cores: Sequence[int], exclude: Sequence[int] = (),
                 since: Optional["Since"] = None, period: float = PERIOD_S) -> None:
        self.writer = writer
        #: the slow readings (:data:`SLOW_S`) every this many samples
        self.slow_every = max(1, round(SLOW_S / period))
        #: the other sidecars (this sampler, noise generators) are children of the launcher, not of the job
        self.exclude = set(exclude) | {os.getpid()}
        self.cores = sorted(cores)
        self.procs: Dict[int, _Process] = {pid: _Process(pid, None)}
        self.open_fds = 0
        self.samples = 0
        self.last_ns = time.perf_counter_ns()
        self.core_last = core_times()
        self.core_last_ns = self.last_ns
        for core in self.cores:  # the origin of each core's windows
            if core in self.core_last:
                self.core_row(core, 0, self.core_last_ns)
        if since is None:
            self.scan(self.last_ns, emit=False)
            return
        # the launcher's reading just before it started this sampler and exec'd the program: the program's first
        # moments (while this sampler started) are in the first window
        proc = self.procs[pid]
        proc.threads[pid] = _Thread(pid, self.open_stat(pid, pid), since.ticks, "")
        proc.total, proc.children_total = since.ticks, since.children
        self.last_ns = since.perf_ns
        self.sample()

    # ------------------------------------------------------------------ one window
    def sample(self) -> None:
        now = time.perf_counter_ns()
        self.samples += 1
        self.scan(now, emit=True)
        if self.samples % self.slow_every == 0:
            self.node(now)
        self.writer.fh.flush()
        self.last_ns = now

    def scan(self, now: int, emit: bool) -> None:
        slow = self.samples % self.slow_every == 0
        # first every process (and its new children), then the reaped children's time: a child reaped during the
        # scan is known to have gone before its parent's total is compared
        for pid in list(self.procs):
            proc = self.procs[pid]
            if not self.read_process(proc, now, emit):
                self.gone(proc)
                continue
            for child in self.children(proc, every_thread=slow):
                if child not in self.procs and child not in self.exclude:
                    self.procs[child] = _Process(child, pid)
                    if not self.read_process(self.procs[child], now, emit):
                        self.gone(self.procs[child])
        for proc in self.procs.values():
            self.reaped(proc, now, emit)

    def read_process(self, proc: _Process, now: int, emit: bool) -> bool:
        """Read ``proc``'s threads and totals; write its threads' CPU of the window. False when it has gone."""
        raw = _read(f"/proc/{proc.pid}/stat")
        if raw is None:
            return False
        _, f = _stat_fields(raw)
        if f[0] == b"Z":
            return False
        total, proc.children_now = int(f[11]) + int(f[12]), int(f[13]) + int(f[14])
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        except OSError:
            return False
        seen = 0
        alive = set()
        for tid in tids:
            th = proc.threads.get(tid)
            raw = self.read_thread(proc.pid, tid, th)
            if raw is None:
                continue
            alive.add(tid)
            if th is None:  # started in this window (threads are listed every sample): all its time is new
                th = proc.threads[tid] = _Thread(tid, self.open_stat(proc.pid, tid), 0, _stat_fields(raw)[0])
            elif raw == th.raw:  # an idle thread's line does not change: most threads of a framework's pools
                th.rate = 0
                continue
            th.raw, th.ran = raw, True
            ticks = _ticks(raw)
            th.rate, th.ticks = ticks - th.ticks, ticks
            seen += th.rate
            if emit and th.rate > 0:
                th.name = _stat_fields(raw)[0]
                self.row(th.name, proc.pid, tid, th.rate * _TICK_NS, now)
        ended = [th for tid, th in proc.threads.items() if tid not in alive]
        if proc.total >= 0 and ended and emit:
            # the process's total keeps its ended threads' time: what the live ones do not explain is theirs
            self.share(total - proc.total - seen, [(proc.pid, th.tid, th.name, th.rate) for th in ended], now)
        for th in ended:
            self.close_thread(proc, th)
        proc.total = total
        return True

    def reaped(self, proc: _Process, now: int, emit: bool) -> None:
        """CPU time of ``proc``'s children that it has reaped, less what was written while they were followed:
        the followed children's last moments (shared among them), or children too short-lived to be seen."""
        if proc.children_total >= 0 and proc.children_now > proc.children_total:
            rest = proc.children_now - proc.children_total - proc.reaped_known
            proc.reaped_known = max(0, -rest)
            if rest > 0 and emit:
                if proc.ended_children:
                    self.share(rest, proc.ended_children, now)
                else:
                    self.row("exited children", proc.pid, 0, rest * _TICK_NS, now)
            proc.ended_children = []
        proc.children_total = proc.children_now

    def read_thread(self, pid: int, tid: int, th: Optional[_Thread]) -> Optional[bytes]:
        """The thread's ``stat`` line (re-read from its open file when it has one), None when it has gone."""
        raw: Optional[bytes] = None
        if th is not None and th.fd is not None:
            try:
                raw = os.pread(th.fd, 4096, 0)
            except OSError:
                raw = None
        if not raw:
            raw = _read(f"/proc/{pid}/task/{tid}/stat")
        return raw or None

    def open_stat(self, pid: int, tid: int) -> Optional[int]:
        if self.open_fds >= MAX_OPEN:
            return None
        try:
            fd = os.open(f"/proc/{pid}/task/{tid}/stat", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        self.open_fds += 1
        return fd

    def close_thread(self, proc: _Process, th: _Thread) -> None:
        if th.fd is not None:
            os.close(th.fd)
            self.open_fds -= 1
        del proc.threads[th.tid]

    def share(self, ticks: int, among: List[Tuple[int, int, str, int]], now: int) -> None:
        """Write ``ticks`` of threads or processes that have ended (``(pid, tid, name, rate)``), shared by their
        rates in the window before (evenly when all were idle)."""
        if ticks <= 0 or not among:
            return
        weights = [max(rate, 0) for *_, rate in among]
        if not sum(weights):
            weights = [1] * len(among)
        for (pid, tid, name, _), w in zip(among, weights):
            part = ticks * w // sum(weights)
            if part > 0:
                self.row(name, pid, tid, part * _TICK_NS, now)

    def gone(self, proc: _Process) -> None:
        """``proc`` has ended: once reaped, its parent's children total holds all of its CPU time, of which
        ``proc.total`` was written while it was followed."""
        parent = self.procs.get(proc.parent) if proc.parent is not None else None
        if parent is not None and proc.total > 0:
            parent.reaped_known += proc.total
            main = proc.threads.get(proc.pid) or next(iter(proc.threads.values()), None)
            if main is not None:
                rate = sum(t.rate for t in proc.threads.values())
                parent.ended_children.append((proc.pid, main.tid, main.name, rate))
        for th in list(proc.threads.values()):
            self.close_thread(proc, th)
        del self.procs[proc.pid]

    def children(self, proc: _Process, every_thread: bool) -> List[int]:
        """Child pids of ``proc``: of its main thread each sample, of its other threads that ran since the last
        such reading every :data:`SLOW_S` (a thread that starts a process runs; most of a framework's pool
        threads wait)."""
        tids = [proc.pid]
        if every_thread:
            tids += [t for t, th in proc.threads.items() if th.ran and t != proc.pid]
            for th in proc.threads.values():
                th.ran = False
        out: List[int] = []
        for tid in tids:
            raw = _read(f"/proc/{proc.pid}/task/{tid}/children")
            if raw:
                out += [int(x) for x in raw.split()]
        return out

    def row(self, name: str, pid: int, tid: int, cpu_ns: int, now: int) -> None:
        """One thread's CPU time in the window (last sample, ``now``], as an interval of that length centred in it."""
        mid = (self.last_ns + now) // 2
        self.writer.line({"name": name, "cat": "other", "ph": "X", "dur": round(cpu_ns / 1000, 3)},
                         mid - cpu_ns // 2, pid=pid, tid=tid)
        self.writer.events += 1

    def node(self, now: int) -> None:
        """The busy time of each of the program's cores since the last reading (all processes of the node): one row
        per core ending at ``now`` (idle windows too: a core's rows are its windows, end to end, from an origin row
        of duration 0 at the first reading)."""
        times = core_times()
        window = now - self.core_last_ns
        for core in self.cores:
            if core in times and core in self.core_last:
                busy, total = (a - b for a, b in zip(times[core], self.core_last[core]))
                if total > 0:
                    self.core_row(core, window * busy // total, now)
        self.core_last, self.core_last_ns = times, now

    def core_row(self, core: int, busy_ns: int, end: int) -> None:
        self.writer.line({"name": f"core {core}", "cat": "other", "ph": "X", "dur": round(busy_ns / 1000, 3)},
                         end - busy_ns, pid=0, tid=core)
        self.writer.events += 1


class Since(NamedTuple):
    """A process's CPU ticks (its own, its reaped children's) at ``perf_ns``: ``--since TICKS:CHILDREN:PERF_NS``."""

    ticks: int
    children: int
    perf_ns: int

    @classmethod
    def now(cls) -> "Since":
        """This process's reading (the launcher's: one thread)."""
        _, f = _stat_fields(_read("/proc/self/stat") or b"() R" + b" 0" * 20)
        return cls(int(f[11]) + int(f[12]), int(f[13]) + int(f[14]), time.perf_counter_ns())

    @classmethod
    def parse(cls, text: str) -> "Since":
        ticks, children, perf_ns = (int(x) for x in text.split(":"))
        return cls(ticks, children, perf_ns)


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def waited_signal(timeout: float) -> Optional[int]:
    """The stop or sample-now signal that came within ``timeout`` s, or None. A process stopped (SIGSTOP, Ctrl-Z, a
    suspended batch job) past its deadline and then continued gets an unfilled siginfo from CPython's
    ``sigtimedwait`` (interrupted, the deadline passed: it returns what the kernel never wrote): only a number of
    the waited set counts."""
    if timeout <= 0:
        return None
    got = signal.sigtimedwait(STOP_SIGNALS | {SAMPLE_NOW}, timeout)
    signo = None if got is None else got.si_signo
    return signo if signo in STOP_SIGNALS or signo == SAMPLE_NOW else None


def sample(program: int, run_dir: Path, rank: int, world: int, period: float, parent: int,
           exclude: Sequence[int] = (), since: Optional[Since] = None) -> int:
    """The sampler process's main loop (``python -m timelogger.cpu``)."""
    stop = sidecar.Stop(parent)
    # waited for, not handled: the sampler closes its file as soon as the program has gone, not a period later
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS | {SAMPLE_NOW})
    if os.getppid() != parent:
        return 0  # the job is already gone
    from ._env import hostname
    from .logger import VERSION

    try:
        cores = sorted(os.sched_getaffinity(program))
    except OSError:
        cores = list(range(os.cpu_count() or 1))
    settings = {"period_s": period, "clock_tick_hz": TICK, "program_pid": program, "cores": cores,
                "cores_online": os.cpu_count(), "quota_cores": cgroup_quota_cores()}
    writer = sidecar.Writer(run_dir / CPU_DIR / f"rank-{rank}-pid-{program}.pfw", {
        "rank": rank, "world_size": world, "hostname": hostname(), "layer": LAYER, "cpu": settings,
        "versions": {"python": sys.version.split()[0], "timelogger": VERSION}, "argv": sys.argv}, "cpu sampler")
    sampler = Sampler(program, writer, cores, exclude, since, period)
    start_cpu, start = own_cpu_s(), time.perf_counter()
    next_at = start + period
    try:
        while not stop.stopped():
            rest = next_at - time.perf_counter()
            got = waited_signal(rest)
            if got == SAMPLE_NOW:
                # the program at its exit: its last moments, and its children's it has reaped, before it goes; the
                # file is closed before the program ends, so whoever waits for the program reads a closed file
                sampler.sample()
                stop.why = AT_EXIT
                break
            if got is not None:
                stop(got, None)
                break
            next_at = max(next_at + period, time.perf_counter())  # never catch up with a burst of samples
            if program not in sampler.procs:
                break
            sampler.sample()
    finally:
        sampler.node(time.perf_counter_ns())  # the node's last window (a run shorter than one has only this)
        wall = time.perf_counter() - start
        used = own_cpu_s() - start_cpu
        writer.close(stop.why if program in sampler.procs else "program ended",
                     {"samples": sampler.samples, "sampler_cpu_s": round(used, 4),
                      "sampler_share_of_core": round(used / wall, 5) if wall > 0 else None})
    return 0


def final_sample(run_dir: str, timeout: float = 1.0) -> bool:
    """In the program, at its exit: ask its sampler (``$TIMELOGGER_CPU_SAMPLER``) for a last sample and wait until it
    has closed its file (at most ``timeout`` s), so that the program's last period is not lost and the launcher's
    caller, once the program has ended, finds the file complete. Whether it was."""
    try:
        pid = int(os.environ.get(ENV_SAMPLER, ""))
        (path,) = Path(run_dir, CPU_DIR).glob(f"rank-*-pid-{os.getpid()}.pfw")
        os.kill(pid, SAMPLE_NOW)
    except (ValueError, OSError):
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.002)
        try:
            if sidecar.last_line(path).startswith(b'{"name":"timelogger_close"'):
                return True
        except OSError:
            return False
    return False


def start(run_dir: Path, rank: int, world: int, period: float, env: Mapping[str, str],
          exclude: Sequence[int] = ()) -> int:
    """Start the sampler of this rank as a sidecar (this process then execs the program: same pid); its pid."""
    from .layout import open_layer_dir

    out_fd = open_layer_dir(run_dir, CPU_DIR)
    try:
        cmd = [sys.executable, "-m", "timelogger.cpu", "--program", str(os.getpid()), "--run-dir", str(run_dir),
               "--rank", str(rank), "--world", str(world), "--period", repr(period), "--parent", str(os.getpid())]
        cmd += ["--since", ":".join(map(str, Since.now()))]
        if exclude:
            cmd += ["--exclude", ",".join(map(str, exclude))]
        return sidecar.start(cmd, out_fd, f"rank-{rank}-pid-{os.getpid()}.log", sidecar.child_env(env))
    finally:
        os.close(out_fd)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m timelogger.cpu",
                                description="the CPU sampler of one rank (started by `timelogger run`; docs/cpu.md)")
    p.add_argument("--program", type=int, required=True, help="the rank's program (followed with its descendants)")
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--period", type=parse_period, default=PERIOD_S)
    p.add_argument("--parent", type=int, default=None, help="stop when this process is no longer the parent")
    p.add_argument("--exclude", default="", help="pids not to follow (the other sidecars), comma-separated")
    p.add_argument("--since", type=Since.parse, default=None,
                   help="the program's CPU ticks, its children's, and perf_counter_ns when the launcher started this")
    a = p.parse_args(argv)
    exclude = [int(x) for x in a.exclude.split(",") if x]
    return sample(a.program, a.run_dir, a.rank, a.world, a.period, a.parent if a.parent else os.getppid(), exclude,
                  a.since)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
