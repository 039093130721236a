"""The writer of a :class:`timelogger.TimeLogger`'s file: per-thread buffers, serialisation, the flush thread, the
write lock and the lost record.

Layout of the hot path (see STYLE.md item 4): ending an interval appends one tuple
``(spec, t0_ns, t1_ns, tags[, args])`` to a list owned by the calling thread (:class:`LocalBuffer`); a daemon thread
turns the tuples into JSON lines every ``flush_interval`` seconds, or sooner when a thread has buffered
:data:`CHUNK_EVENTS`. Nothing on the hot path allocates more than that tuple, calls ``json`` or takes a lock.
Both halves have a C twin in the optional :data:`ACCEL` (``timelogger/_capture.c``) that gives the same tuples and
the same bytes; ``$TIMELOGGER_PURE_PYTHON=1`` forces this pure standard-library code.

Loss bound: the writer serialises and writes in chunks of :data:`CHUNK_EVENTS`, so lines reach the OS as they
are made. Before each chunk it drops (and counts) every buffered interval that ended more than ``max_lag`` ago,
except a thread's newest chunk (a writer starved of the GIL for a while is not behind): when the producers outrun
the writer, memory stays bounded and an interval is either on disk within about
``max_lag`` of its end or counted in a ``timelogger_dropped`` record that is written at once. File layout and
time base: ``docs/wire-format.md``.
"""
from __future__ import annotations

import bisect
import contextlib
import errno
import json
import logging
import operator
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

from . import layout, process

__all__ = ["Writer", "LocalBuffer", "CHUNK_EVENTS", "MAX_BUFFERED", "json_text", "interval_head", "anchor", "ACCEL",
           "ENV_PURE"]

_log = logging.getLogger("timelogger.logger")  # the loggers' warnings keep the name users filter them by

_pc = time.perf_counter_ns
_TAG_KEYS = frozenset(("rank", "epoch", "step"))
_end_of = operator.itemgetter(2)
#: intervals serialised per write call: lines reach the OS every chunk, never only after the whole backlog, and
#: the writer re-checks the deadline between chunks (threads competing for the GIL stretch a chunk's wall time)
CHUNK_EVENTS = 4096
#: hard bound on the intervals one thread may hold unwritten (the oldest beyond it are dropped and counted)
MAX_BUFFERED = 1_000_000
#: set (to anything but "" or "0") to record and write with the pure Python code even where the accelerator is built
ENV_PURE = "TIMELOGGER_PURE_PYTHON"


def _accelerator() -> Any:
    """``timelogger._capture`` (built from ``timelogger/_capture.c`` by ``pip install``), or None where it was not
    built (no C compiler) or :data:`ENV_PURE` asks for the pure path."""
    if os.environ.get(ENV_PURE, "") not in ("", "0"):
        return None
    try:
        from timelogger import _capture
    except ImportError:
        return None
    return _capture


#: the C record path and serialiser, or None (pure Python); chosen once, at import
ACCEL = _accelerator()


def json_text(value: Any) -> str:
    """``value`` as compact JSON that always encodes as UTF-8 and always parses: NaN and Infinity (no JSON
    numbers) become ``null``; a lone surrogate -- what ``os.fsdecode`` gives for a non-UTF-8 file name -- is
    written as its ``\\udcXX`` escape, which JSON allows and ``json.loads`` turns back into the same string."""
    try:
        text = json.dumps(value, separators=(",", ":"), default=_plain, ensure_ascii=False, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(value), separators=(",", ":"), default=_plain, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # only ever inside a JSON string, where the escape is what JSON means
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _plain(value: Any) -> Any:
    """What ``json`` cannot write: a number-like value (numpy's ``int64``, ``float32``, ``bool_``: what
    ``p.update(bytes=np.int64(n))`` passes) as the JSON number or boolean it stands for, anything else as its
    ``str``. No numpy import: the capture side is standard library only."""
    if type(value).__name__ in ("bool_", "bool"):  # numpy's: np.bool_ is named "bool" from numpy 2 on
        return bool(value)
    if hasattr(value, "__index__"):
        try:
            return operator.index(value)
        except TypeError:
            pass
    if hasattr(value, "__float__") and not isinstance(value, (str, bytes)):
        try:
            return _finite(float(value))
        except (TypeError, ValueError):
            pass
    return str(value)


def _finite(value: Any) -> Any:
    """``value`` with every NaN/Infinity float (also inside lists and dicts) replaced by None."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _encoded(lines: Sequence[Union[str, bytes]]) -> bytes:
    """Lines as the file's bytes: str lines in UTF-8, a lone surrogate as its escape (json_text escaped what it
    could, see there); bytes (the accelerator's, encoded alike) as they are. A write's lines are all of one kind."""
    if isinstance(lines[0], bytes):
        return b"".join(cast(Sequence[bytes], lines))
    return "".join(cast(Sequence[str], lines)).encode("utf-8", "backslashreplace")


def _us(ns: int) -> str:
    """Nanoseconds as microseconds with exactly 3 decimals, without float rounding (epoch ns exceed 2**53)."""
    if ns < 0:
        return "-" + _us(-ns)
    return f"{ns // 1000}.{ns % 1000:03d}"


def anchor() -> Tuple[int, int]:
    """A ``(wall_ns, perf_ns)`` pair read as close together as Python allows (perf taken either side)."""
    p0 = _pc()
    wall = time.time_ns()
    p1 = _pc()
    return wall, (p0 + p1) // 2


def interval_head(name: str, cat: str) -> str:
    """JSON line prefix of an interval (its "spec"), built once per (name, cat)."""
    return '{"name":' + json_text(name) + ',"cat":' + json_text(cat) + ',"ph":"X","ts":'


class LocalBuffer(threading.local):
    """Per-thread buffer; ``append`` is the bound ``list.append`` of this thread's list (the hot path)."""

    def __init__(self, register: Callable[[List[tuple]], None]) -> None:
        buf: List[tuple] = []
        self.buf = buf  # what the accelerator appends to
        self.append = buf.append
        register(buf)


class _BufEntry:
    __slots__ = ("buf", "ident", "tid", "name", "thread", "announced", "dropped")

    def __init__(self, buf: List[tuple]) -> None:
        th = threading.current_thread()
        self.buf = buf
        self.dropped = 0  # intervals of this thread dropped because the writer fell behind
        self.ident = threading.get_ident()
        self.tid = threading.get_native_id()
        self.name = th.name
        self.thread = weakref.ref(th)
        self.announced = False


class Writer:
    """The file of one logger and everything that reaches it: the threads' buffers (:attr:`local`), the flush
    thread, the write lock, the reserved lost record and the counts.

    ``on_failure`` is called when a write fails, before anything else (the logger stops recording, so an interval
    that ends from then on is counted by :meth:`count_lost`); ``close`` is the logger's close, called by the flush
    thread when the thread that forked this process ends, and after a flush during which a signal handler asked to
    close (:meth:`defer_close`).

    Attributes
    ----------
    path
        The file, once :meth:`open` made it.
    events_written, dropped
        Intervals whose whole line reached the file, and intervals lost; both match what is on disk.
    failed
        The errno name of the write that failed (nothing more but the lost record goes to the file), or None.
    owner
        The thread ident holding the write lock, or None.
    """

    def __init__(self, flush_interval: float, max_lag: float, *, on_failure: Callable[[], None],
                 close: Callable[[], None]) -> None:
        self.flush_interval = flush_interval
        self.max_lag = max_lag
        self._max_lag_ns = int(max_lag * 1e9)
        self._on_failure = on_failure
        self._close_owner = close
        self.path: Optional[Path] = None
        self.failed: Optional[str] = None
        self.events_written = 0
        self.dropped = 0
        self.owner: Optional[int] = None
        self._pid = os.getpid()
        self._off = 0  # wall ns minus perf_counter ns of this process's anchor
        self._lost_at: Optional[int] = None
        self._fd: Optional[int] = None  # the file's descriptor (raw, unbuffered: see open)
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._wlock = threading.Lock()
        self._reg_lock = threading.Lock()
        self._entries: List[_BufEntry] = []
        self._warned: set = set()
        self._exit_with: Optional[threading.Thread] = None  # see reset_in_child
        self._close_pending = False  # close() called by a signal handler inside our own flush
        # the C serialiser, or None: then every line is a str made by _line (same bytes either way)
        self._format = None if ACCEL is None else ACCEL.format_intervals
        self.local = LocalBuffer(self._register)

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def _register(self, buf: List[tuple]) -> None:
        with self._reg_lock:
            self._entries.append(_BufEntry(buf))

    def warn_once(self, key: str, msg: str, *args: Any) -> None:
        """Log the warning ``msg`` the first time ``key`` comes up (a logger never floods the program's log)."""
        if key not in self._warned:
            self._warned.add(key)
            _log.warning(msg, *args)

    # ------------------------------------------------------------------ open
    def open(self, out_dir: Path, rank: int, pid: int, off: int, header: Dict[str, Any]) -> bool:
        """Create ``<out_dir>/app/rank-<r>-pid-<p>.pfw``, write ``[``, the ``timelogger`` header and the reserved lost
        record, start the flush thread. On failure warn once and return False (the logger stays off)."""
        self._pid = pid
        self._off = off
        app = out_dir / layout.APP_DIR
        try:
            out_dir.mkdir(parents=True, exist_ok=True)  # the run directory: the user's choice, links and all
            app_fd = layout.open_layer_dir(out_dir, layout.APP_DIR)
        except OSError as exc:
            self.warn_once("open", "timelogger: cannot create %s (%s); logging disabled for this process", app, exc)
            return False
        base = layout.app_file_stem(rank, pid)
        fd = None
        # no O_APPEND: this process is the file's only writer, and the lost record is rewritten in place with
        # pwrite() through this descriptor (which O_APPEND would turn into an append), never reopened by path
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            for k in range(1000):
                path = app / (f"{base}.pfw" if k == 0 else f"{base}-{k}.pfw")
                try:
                    fd = os.open(path.name, flags, 0o644, dir_fd=app_fd)
                except FileExistsError:
                    continue
                except OSError as exc:
                    self.warn_once("open", "timelogger: cannot create %s (%s); logging disabled for this process",
                                   path, exc)
                    return False
                if k:
                    self.warn_once("collision", "timelogger: %s already exists; writing %s instead",
                                   app / f"{base}.pfw", path.name)
                break
        finally:
            os.close(app_fd)
        if fd is None:
            self.warn_once("open", "timelogger: no free file name for %s in %s; logging disabled", base, app)
            return False
        self.path = path
        # A raw descriptor, not a buffered file: every write is a system call whose result says exactly how many
        # bytes landed, which keeps events_written/dropped true after ENOSPC and leaves nothing in a user buffer
        # for kill -9 to lose.
        self._fd = fd
        first = ["[\n", self._meta_line("timelogger", header, _pc())]
        if not self._write([*first, self._lost_line(0, "")], [0, 0, 0]):
            self._close_fd()
            return False
        # where the reserved record lies: rewritten in place (no new blocks) when a write fails on a full disk
        self._lost_at = sum(len(x.encode("utf-8", "backslashreplace")) for x in first)
        self._stop = threading.Event()
        t = threading.Thread(target=self._flusher, name="timelogger-flush", daemon=True)
        self._thread = t
        t.start()
        return True

    def _flusher(self) -> None:
        process.block_process_signals()
        stop = self._stop
        # Wake often enough to flush by size (a thread with a chunk's worth buffered) as well as by time.
        poll = min(self.flush_interval, 0.05)
        due = time.monotonic() + self.flush_interval
        while not stop.wait(poll):
            process.end_stalled_sigterm()
            owner = self._exit_with
            if owner is not None and not owner.is_alive():
                # a child forked from a thread other than the main one ends when that thread returns: nothing runs
                # atexit there, and this thread would keep the process alive, so it writes the rest and closes
                self._close_owner()
                return
            try:
                now = time.monotonic()
                if now >= due or self._backlog() >= CHUNK_EVENTS:
                    due = now + self.flush_interval
                    self.flush()
            except Exception as exc:  # keep flushing: one bad batch must not end crash safety for the run
                self.warn_once("flusher", "timelogger: background flush of %s failed: %s", self.path, exc)

    def _backlog(self) -> int:
        """The most intervals any one thread has buffered."""
        return max((len(e.buf) for e in self._entries), default=0)

    # ------------------------------------------------------------------ the logger's calls
    def count_lost(self) -> None:
        """An interval ended after a failed write (disk full, file-size limit): it is lost too. Counted, and the
        reserved record updated every :data:`CHUNK_EVENTS` of them and at close."""
        self.dropped += 1
        if self.dropped % CHUNK_EVENTS == 0 and self.failed is not None:
            # under the write lock: close() may be closing the descriptor, whose number could then be reused
            held = self._acquire()
            try:
                self._record_lost(self.failed)
            finally:
                if held:
                    self._release()

    def write_metadata(self, name: str, args: Dict[str, Any]) -> None:
        """Flush pending intervals, then write one ``"ph":"M"`` event ``name`` with ``args``."""
        self.flush(extra=self._meta_line(name, args, _pc()))

    def flush(self, extra: Optional[str] = None) -> None:
        """Write what the threads have buffered (and then the line ``extra``)."""
        entered = process.busy_enter()
        try:
            self._flush_locked(extra)
        finally:
            process.busy_exit(entered)

    def _flush_locked(self, extra: Optional[str]) -> None:
        if not self._acquire():
            return
        try:
            if self._fd is None or self.failed is not None:
                return  # after a failed write what is buffered is lost, and counted by close()
            self._drain_all()
            if extra is not None:
                self._write([extra], [0])
        finally:
            self._release()
            if self._close_pending:
                self._close_owner()

    def defer_close(self) -> bool:
        """Whether this thread holds the write lock: a signal handler interrupted our own flush, and closing now
        would find the lock held and leave no close record. The flush then closes when it is done."""
        if self.owner == threading.get_ident():
            self._close_pending = True
            return True
        return False

    def close(self, drain: bool) -> bool:
        """Stop the flush thread, write what is buffered (when ``drain``) and the ``timelogger_close`` record (second
        anchor pair, counts, how the process ends), close the file. False when re-entered from a signal handler
        inside our own write: the outer call finishes it."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread() and t.is_alive():
            t.join(timeout=5.0)
        wall, perf = anchor()
        if not self._acquire():
            return False
        try:
            if drain:
                self._drain_all(trim=False)  # no deadline at close: write everything still buffered
            self._write([self._meta_line("timelogger_close", {
                "anchor": {"wall_ns": wall, "perf_ns": perf},
                "events": self.events_written,
                "dropped": self.dropped,
                "exit": process.exit_reason()}, perf)], [0])
            if self.failed is not None:
                # intervals that reached a buffer while the failed write was being counted: lost as well
                self.dropped += self._drop_buffered()
                self._record_lost(self.failed)  # the final count of what never reached the file
            self._close_fd()
        finally:
            self._release()
        return True

    # ------------------------------------------------------------------ fork (timelogger.process)
    def hold_for_fork(self) -> bool:
        """Take the write lock for a fork (unless this thread holds it, or it stays held for 5 s)."""
        return self.owner != threading.get_ident() and self._wlock.acquire(timeout=5.0)

    def release_after_fork(self) -> None:
        self._wlock.release()

    def reset_in_child(self, exit_with: Optional[threading.Thread]) -> None:
        """In a forked child: forget the parent's buffers, file, counts and locks (then :meth:`open` our own).
        ``exit_with``: the thread that forked, when it was not the main one (the child ends with it)."""
        self._exit_with = exit_with
        self._wlock = threading.Lock()
        self.owner = None
        self._reg_lock = threading.Lock()
        me = threading.get_ident()
        keep = []
        for ent in self._entries:
            del ent.buf[:]
            if ent.ident == me:
                ent.tid = threading.get_native_id()
                ent.name = threading.current_thread().name
                ent.thread = weakref.ref(threading.current_thread())
                ent.announced = False
                keep.append(ent)
        self._entries = keep
        self._close_fd()  # the parent's descriptor: unbuffered, so closing our copy loses nothing of its file
        self._thread = None
        self.events_written = 0
        self.dropped = 0
        self._warned = set()

    # ------------------------------------------------------------------ writing
    def _acquire(self) -> bool:
        """Take the write lock, unless this thread already holds it (a signal handler interrupting a write)."""
        me = threading.get_ident()
        if self.owner == me:
            return False
        self._wlock.acquire()
        self.owner = me
        return True

    def _release(self) -> None:
        self.owner = None
        self._wlock.release()

    def _meta_line(self, name: str, args: Dict[str, Any], perf_ns: int, tid: Optional[int] = None) -> str:
        """One ``"ph":"M"`` line; ``tid`` is the thread it describes (default: the calling thread)."""
        tid = threading.get_native_id() if tid is None else tid
        return ('{"name":' + json_text(name) + ',"ph":"M","ts":' + _us(perf_ns + self._off) + ',"pid":'
                + str(self._pid) + ',"tid":' + str(tid) + ',"args":' + json_text(args) + "}\n")

    def _lost_line(self, lost: int, why: str) -> str:
        """The ``timelogger_lost`` record, always the same length: written after the header at open and rewritten
        in place when a write fails, so the count of lost intervals reaches the file even on a full disk."""
        why = (why.encode("ascii", "replace")[:24].decode("ascii").replace('"', "'")).ljust(24)
        return ('{"name":"timelogger_lost","ph":"M","ts":0,"pid":' + str(self._pid) + ',"tid":0,"args":{"lost":'
                + f"{min(lost, 10**18 - 1):18d}" + ',"why":"' + why + '"}}\n')

    def _record_lost(self, why: str) -> None:
        """Rewrite the reserved record with the total lost so far, in place through the file's own descriptor (best
        effort: its blocks already exist). Never by path: the run directory may have been renamed, or a link
        planted at that name, since the file was made."""
        if self._fd is None or self._lost_at is None:
            return
        with contextlib.suppress(OSError):
            os.pwrite(self._fd, self._lost_line(self.dropped, why).encode("ascii"), self._lost_at)

    def _drop_buffered(self) -> int:
        """Empty every thread's buffer; returns how many intervals that was."""
        with self._reg_lock:
            entries = list(self._entries)
        n = 0
        for ent in entries:
            k = len(ent.buf)
            del ent.buf[:k]  # appends go to the end only: what a thread adds meanwhile stays
            n += k
        return n

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _trim(self, entries: List[_BufEntry]) -> List[int]:
        """Drop what the writer can no longer write in time: intervals that ended more than ``max_lag`` ago, and
        the oldest beyond :data:`MAX_BUFFERED` per thread; the newest :data:`CHUNK_EVENTS` of a thread are always
        written. The new totals go to the file at once, so a ``kill -9``
        right after still leaves every lost interval counted on disk. Caller holds the write lock.

        Returns how many intervals were dropped from the front of each entry's buffer."""
        cutoff = _pc() - self._max_lag_ns
        lines = []
        dropped = [0] * len(entries)
        for i, ent in enumerate(entries):
            buf = ent.buf
            n = len(buf)
            # A backlog of one chunk is written at once: old intervals there mean the writer was starved of the
            # GIL or the CPU (a long C++ call, an overloaded node), not outrun, and dropping them would lose data
            # for nothing.
            if n <= CHUNK_EVENTS or (buf[0][2] >= cutoff and n <= MAX_BUFFERED):
                continue
            # intervals are appended as they end, so end times ascend within a thread's buffer
            stale = min(bisect.bisect_left(buf, cutoff, 0, n, key=_end_of), n - CHUNK_EVENTS)
            k = max(stale, n - MAX_BUFFERED)
            if k <= 0:
                continue
            dropped[i] = k
            del buf[:k]  # only the front: the owner keeps appending at the end (list ops are atomic)
            ent.dropped += k
            self.dropped += k
            lines.append(self._meta_line("timelogger_dropped", {"tid": ent.tid, "dropped": ent.dropped,
                                                                "total": self.dropped}, _pc(), ent.tid))
        if lines:
            self.warn_once("behind", "timelogger: the writer of %s cannot keep up; dropping intervals older than "
                           "%.2f s (counted in timelogger_dropped records)", self.path, self.max_lag)
            self._write(lines, [0] * len(lines))
        return dropped

    def _drain_all(self, trim: bool = True) -> None:
        """Serialise and write, chunk by chunk, what the threads had buffered when this call began (caller holds
        the write lock). Intervals that arrive meanwhile wait for the next flush, so a producer faster than the
        writer cannot keep one flush going for ever."""
        with self._reg_lock:
            entries = list(self._entries)
        quota = [len(e.buf) for e in entries]
        while self._fd is not None and self.failed is None:
            if trim:  # what was dropped came off the front, i.e. out of the quota
                quota = [max(0, q - k) for q, k in zip(quota, self._trim(entries))]
            lines, kinds = self._drain(entries, quota)
            if not lines:
                break
            self._write(lines, kinds)
        self._forget_dead(entries)

    def _drain(self, entries: List[_BufEntry], quota: List[int]) -> Tuple[List[Any], List[int]]:
        """Take about :data:`CHUNK_EVENTS` intervals out of the buffers (at most ``quota[i]`` from entry i, which is
        decremented) and serialise them. Returns the lines (str each, or with the accelerator bytes each holding
        several lines) and, per line, 1 for an interval, 0 for metadata."""
        fmt = self._format
        out: List[Any] = []
        kinds: List[int] = []
        off = self._off
        pid = self._pid
        # an equal share of the chunk per busy thread, so that no thread waits behind another's backlog
        busy = sum(1 for q, e in zip(quota, entries) if q > 0 and e.buf) or 1
        share = max(1, CHUNK_EVENTS // busy)
        for i, ent in enumerate(entries):
            n = min(quota[i], share, len(ent.buf))
            if n <= 0:
                continue
            buf = ent.buf
            # Appends only ever go to the end, so copying and deleting the first n items is safe under the
            # GIL while the owning thread keeps appending.
            items = buf[:n]
            del buf[:n]
            quota[i] -= n
            if not ent.announced:
                ent.announced = True
                meta = self._meta_line("thread_name", {"name": ent.name, "tid": ent.tid}, items[0][1], ent.tid)
                out.append(meta if fmt is None else _encoded([meta]))
                kinds.append(0)
            mid = ',"pid":' + str(pid) + ',"tid":' + str(ent.tid) + ',"args":{'
            if fmt is not None:  # plain intervals in C, the others through _line; what _line raises comes back
                data, n_lines, errors = fmt(items, off, mid, self._line)
                out.append(data)
                kinds += [1] * n_lines
                for exc in errors:
                    self._unserialisable(exc)
                continue
            for item in items:
                try:
                    out.append(self._line(item, off, mid))
                    kinds.append(1)
                except BaseException as exc:  # noqa: B036 -- a value json cannot take, or whose __str__ raises
                    self._unserialisable(exc)
        return out, kinds

    @classmethod
    def _line(cls, item: tuple, off: int, mid: str) -> str:
        """The line of one buffered interval; ``off``: wall minus perf ns, ``mid``: its pid, tid and ``"args":{``."""
        t0 = item[1]
        ts = t0 + off
        d = item[2] - t0
        args = item[3] if len(item) == 4 else cls._args_text(item[3], item[4])
        return f'{item[0]}{ts // 1000}.{ts % 1000:03d},"dur":{d // 1000}.{d % 1000:03d}{mid}{args}}}}}\n'

    def _unserialisable(self, exc: BaseException) -> None:
        """An interval whose line could not be made (a value json cannot take, or whose ``__str__`` raises anything
        at all, a BaseException too): it is dropped and counted, and the writer goes on."""
        self.dropped += 1
        self.warn_once("serialise", "timelogger: could not serialise an interval (%r); dropped", exc)
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            process.defer_interrupt(exc)  # a real Ctrl-C during a flush of the main thread: raised after

    def _forget_dead(self, entries: List[_BufEntry]) -> None:
        dead = []
        for ent in entries:
            if not ent.buf:
                th = ent.thread()
                if th is None or not th.is_alive():
                    dead.append(ent)
        if dead:
            with self._reg_lock:
                self._entries = [e for e in self._entries if e not in dead]

    @staticmethod
    def _args_text(tags: str, args: Dict[str, Any]) -> str:
        """Inside of the ``args`` object: the tags, then the phase's own values (which win on a clash)."""
        if not args:
            return tags
        if _TAG_KEYS.isdisjoint(args):
            return tags + "," + json_text(args)[1:-1]
        return json_text({**json.loads("{" + tags + "}"), **args})[1:-1]

    def _write(self, lines: Sequence[Union[str, bytes]], kinds: List[int]) -> bool:
        """Write whole lines with system calls (so a ``kill -9`` after this loses nothing of them).

        ``lines``: str lines, or bytes each holding whole lines (the accelerator's); ``kinds[i]`` is 1 when line i
        is an interval. On a failed or short write (ENOSPC, EFBIG) the intervals
        whose whole line landed count as written and the rest as dropped, then logging stops. Returns success.
        """
        if self._fd is None or self.failed is not None:
            return False  # after a failed write nothing more goes to the file but the lost record
        if not lines:
            return True
        data = _encoded(lines)
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:] if done else data)
        except OSError as exc:
            # off first: an interval that ends from now on is counted by count_lost, not left in a buffer
            self.failed = errno.errorcode.get(exc.errno or 0, "") or str(exc)
            self._on_failure()
            # every line ends in its only raw newline (JSON escapes the others): the lines that landed whole
            landed = sum(kinds[:data.count(b"\n", 0, done)])
            # what is still buffered can never be written either: count it now, not never
            lost = sum(kinds) - landed + self._drop_buffered()
            self.events_written += landed
            self.dropped += lost
            self._record_lost(self.failed)
            self.warn_once("write", "timelogger: writing %s failed (%s); logging disabled, %d events lost",
                           self.path, exc, lost)
            # Nothing more goes to the file but the lost record: a half line there stays the last line, which
            # readers drop (a crashed writer leaves one too).
            return False
        self.events_written += sum(kinds)
        return True
