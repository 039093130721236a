"""Processes the launcher starts beside a rank's program (the noise generators, the CPU sampler): how they are started
so that they die with the rank, how they stop, and how they write their layer's file in the TimeLogger wire format
(``docs/wire-format.md``). Only the standard library is used.

A sidecar is a child of the launcher, which then execs the rank's program (exec keeps the pid): the sidecar gets
SIGTERM when the program ends (``PR_SET_PDEATHSIG``), and a watchdog checks that its parent is still the same process
(for systems without that ``prctl``).
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

_PR_SET_PDEATHSIG = 1
#: a file of the run made relative to its layer directory's descriptor, never through a link
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def last_line(path: "str | os.PathLike[str]") -> bytes:
    """The last line of a sidecar's file (its close record once it has closed), read from the file's last 4 KiB."""
    with open(path, "rb") as fh:
        fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
        return fh.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]


def prctl_pdeathsig(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits (Linux only)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def die_with_parent_term() -> None:
    """In the child before exec: SIGTERM when the parent (the launcher, then the rank's program) exits."""
    prctl_pdeathsig(signal.SIGTERM)


def child_env(env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` without the other layers' switches (a sidecar is not traced), this package importable."""
    here = str(Path(__file__).resolve().parent.parent)
    out = {k: v for k, v in env.items() if not k.startswith(("DFTRACER_", "DARSHAN_", "TIMELOGGER_"))
           and k not in ("LD_PRELOAD", "HOROVOD_TIMELINE")}
    out["PYTHONPATH"] = os.pathsep.join(x for x in (here, env.get("PYTHONPATH", "")) if x)
    return out


def start(cmd: List[str], out_fd: int, log_name: str, env: Dict[str, str]) -> int:
    """Start ``cmd`` as a sidecar of this process, its stdout and stderr appended to ``log_name`` in the layer
    directory ``out_fd`` (never through a link); returns its pid."""
    log = os.open(log_name, NEW_FILE | os.O_APPEND, 0o644, dir_fd=out_fd)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, close_fds=True,
                                preexec_fn=die_with_parent_term)
    finally:
        os.close(log)
    return proc.pid


class Stop:
    """Stop flag: SIGTERM/SIGINT, or the parent gone (the watchdog when PR_SET_PDEATHSIG is unavailable)."""

    def __init__(self, parent: int) -> None:
        self.parent = parent
        self.flag = False
        self.why = "ok"

    def __call__(self, signum: int, _frame: Any) -> None:
        self.flag = True
        self.why = signal.Signals(signum).name

    def install(self) -> "Stop":
        signal.signal(signal.SIGTERM, self)
        signal.signal(signal.SIGINT, self)
        return self

    def stopped(self) -> bool:
        if not self.flag and os.getppid() != self.parent:
            self.flag, self.why = True, "parent gone"
        return self.flag


class Writer:
    """A sidecar's ``.pfw`` file in the TimeLogger wire format: the header (``args``: ``header`` plus its pid,
    parent and clock anchor), then one line per event, flushed at once (crash-safe)."""

    def __init__(self, path: Path, header: Dict[str, Any], thread_name: str) -> None:
        from .layout import open_layer_dir

        self.wall0, self.perf0 = time.time_ns(), time.perf_counter_ns()
        self.pid, self.tid = os.getpid(), threading.get_ident() & 0x7FFFFFFF
        # made relative to the layer directory's descriptor: never through a link
        dir_fd = open_layer_dir(path.parent.parent, path.parent.name)
        try:
            fd = os.open(path.name, NEW_FILE | os.O_TRUNC, 0o644, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        self.fh = os.fdopen(fd, "w", encoding="utf-8")
        self.events = 0
        self.fh.write("[\n")
        args = dict(header, pid=self.pid, ppid=os.getppid(), anchor={"wall_ns": self.wall0, "perf_ns": self.perf0})
        self.line({"name": "timelogger", "ph": "M", "args": args}, self.perf0)
        self.line({"name": "thread_name", "ph": "M", "args": {"name": thread_name, "tid": self.tid}}, self.perf0)
        self.fh.flush()

    def ts_us(self, perf_ns: int) -> float:
        return (perf_ns + self.wall0 - self.perf0) / 1000

    def line(self, event: Dict[str, Any], perf_ns: int, pid: Optional[int] = None, tid: Optional[int] = None) -> None:
        """One event at ``perf_ns`` (this process's and thread's unless ``pid``/``tid`` say whose it is)."""
        event = {**event, "pid": self.pid if pid is None else pid, "tid": self.tid if tid is None else tid,
                 "ts": round(self.ts_us(perf_ns), 3)}
        self.fh.write(json.dumps(event, separators=(",", ":")) + "\n")

    def interval(self, name: str, t0: int, t1: int, args: Dict[str, Any]) -> None:
        self.line({"name": name, "cat": "other", "ph": "X", "dur": round((t1 - t0) / 1000, 3), "args": args}, t0)
        self.events += 1
        self.fh.flush()

    def close(self, why: str, extra: Optional[Dict[str, Any]] = None) -> None:
        now = time.perf_counter_ns()
        # stopped with the ranks (SIGTERM from PR_SET_PDEATHSIG, the watchdog) is how a sidecar is meant to end
        self.line({"name": "timelogger_close", "ph": "M",
                   "args": {"anchor": {"wall_ns": time.time_ns(), "perf_ns": now}, "events": self.events,
                            "dropped": 0, "exit": {"reason": "ok", "stopped_by": why}, **(extra or {})}}, now)
        self.fh.close()
