"""The TimeLogger: per-phase intervals of a training process, written as DFTracer-style ``.pfw`` lines.

Layout of the hot path (see STYLE.md item 4): ending an interval appends one tuple
``(spec, t0_ns, t1_ns, tags[, args])`` to a list owned by the calling thread; a daemon thread turns the tuples
into JSON lines every ``flush_interval`` seconds, or sooner when a thread has buffered :data:`CHUNK_EVENTS`.
Nothing on the hot path allocates more than that tuple, calls ``json`` or takes a lock.

Loss bound: the writer serialises and writes in chunks of :data:`CHUNK_EVENTS`, so lines reach the OS as they
are made. Before each chunk it drops (and counts) every buffered interval that ended more than ``max_lag`` ago,
except a thread's newest chunk (a writer starved of the GIL for a while is not behind): when the producers outrun
the writer, memory stays bounded and an interval is either on disk within about
``max_lag`` of its end or counted in a ``timelogger_dropped`` record that is written at once. File layout and
time base: ``docs/wire-format.md``.
"""
from __future__ import annotations

import atexit
import bisect
import contextlib
import errno
import itertools
import json
import logging
import operator
import os
import signal
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar, Union

from . import layout
from ._env import detect_rank_world, hostname
from .tf import StepProfiler, launcher_window

__all__ = ["TimeLogger", "Phase", "CATS", "default_logger", "ENV_DIR"]

_log = logging.getLogger(__name__)

#: Phase classes of the frame schema (``trace_merge.schema.CATS``; repeated here so capture imports nothing).
CATS = ("io", "preprocess", "compute", "comm", "checkpoint", "wait", "other")
#: Environment variable naming the run directory of :func:`default_logger`.
ENV_DIR = "TIMELOGGER_DIR"
VERSION = "0.1.0"

_pc = time.perf_counter_ns
_TAG_KEYS = frozenset(("rank", "epoch", "step"))
_new = object.__new__
_end_of = operator.itemgetter(2)
#: intervals serialised per write call: lines reach the OS every chunk, never only after the whole backlog, and
#: the writer re-checks the deadline between chunks (a chunk takes ~5 ms of CPU, up to ~5x that in wall time
#: when four busy threads compete for the GIL)
CHUNK_EVENTS = 4096
#: hard bound on the intervals one thread may hold unwritten (the oldest beyond it are dropped and counted)
MAX_BUFFERED = 1_000_000
_F = TypeVar("_F", bound=Callable[..., Any])


class _ProgramMarks:
    """What the program marks itself through any TimeLogger of the process (the categories of its phases, its own
    steps and epochs): the zero-code hooks (:mod:`timelogger.hooks`) leave those to it, so nothing counts twice."""

    def __init__(self) -> None:
        self.cats: set = set()
        self.steps = False
        self.epochs = False


PROGRAM = _ProgramMarks()


def _json(value: Any) -> str:
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


#: accepted ``flush_interval`` and ``max_lag`` (s): 0 would busy-loop the writer on a core, a negative interval drop
#: most intervals, and more than an hour hold them unwritten for that long
FLUSH_INTERVAL_RANGE = (0.01, 3600.0)
MAX_LAG_RANGE = (0.0, 3600.0)  # 0: drop whatever the writer has not written at once (tests)


def _in_range(what: str, value: Any, lo: float, hi: float) -> float:
    """``value`` as a float, or a one-line ValueError naming ``what`` and the accepted range."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if not lo <= x <= hi:  # NaN fails too
        raise ValueError(f"TimeLogger: {what}={value!r} is outside {lo:g}..{hi:g} seconds")
    return x


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


def _us(ns: int) -> str:
    """Nanoseconds as microseconds with exactly 3 decimals, without float rounding (epoch ns exceed 2**53)."""
    if ns < 0:
        return "-" + _us(-ns)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _anchor() -> Tuple[int, int]:
    """A ``(wall_ns, perf_ns)`` pair read as close together as Python allows (perf taken either side)."""
    p0 = _pc()
    wall = time.time_ns()
    p1 = _pc()
    return wall, (p0 + p1) // 2


def _head(name: str, cat: str) -> str:
    """JSON line prefix of an interval (its "spec"), built once per (name, cat)."""
    return '{"name":' + _json(name) + ',"cat":' + _json(cat) + ',"ph":"X","ts":'


class _Local(threading.local):
    """Per-thread buffer; ``append`` is the bound ``list.append`` of this thread's list."""

    def __init__(self, register: Callable[[List[tuple]], None]) -> None:
        buf: List[tuple] = []
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


class Phase:
    """One timed phase: a context manager, a decorator, and the place for late values (``update``).

    Obtained from :meth:`TimeLogger.phase` or :meth:`TimeLogger.timed`. As a context manager the interval runs
    from ``__enter__`` to ``__exit__`` (an exception still closes it and is named in ``args.exception``). As a
    decorator it times every call of the function; the wrapper keeps no per-call state on this object, so the
    decorated function may recurse or run in several threads.
    """

    __slots__ = ("_tl", "_spec", "_t0", "_args")

    def __init__(self, tl: "TimeLogger", spec: str) -> None:
        self._tl = tl
        self._spec = spec
        self._t0: Optional[int] = None
        self._args: Optional[Dict[str, Any]] = None

    @property
    def name(self) -> str:
        return self._tl._spec_names[self._spec][0]

    @property
    def cat(self) -> str:
        return self._tl._spec_names[self._spec][1]

    def __enter__(self) -> "Phase":
        self._t0 = _pc()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        t1 = _pc()
        try:
            t0 = self._t0  # unset until the first __enter__ (saves a store per phase on the hot path)
        except AttributeError:
            t0 = None
        if t0 is None:
            self._tl._warn_once("misuse", "timelogger: phase %r exited without being entered; ignored", self.name)
            return None
        self._t0 = None
        tl = self._tl
        if not tl._on:
            tl._ignored()
            return None
        args = self._args
        if args is None and et is None:
            tl._local.append((self._spec, t0, t1, tl._tags))
            return None
        if et is not None:
            args = dict(args or ())
            args["exception"] = et.__name__
        if args is None:
            tl._local.append((self._spec, t0, t1, tl._tags))
        else:
            self._args = None
            tl._local.append((self._spec, t0, t1, tl._tags, args))
        return None

    def update(self, **values: Any) -> "Phase":
        """Add values known only inside the phase (``bytes``, ``file``, ``offset``, anything JSON-able) to args."""
        if self._args is None:
            self._args = values
        else:
            self._args.update(values)
        return self

    def __call__(self, fn: _F) -> _F:
        return self._tl._wrap(fn, self._spec)

    def __repr__(self) -> str:
        return f"Phase({self.name!r}, cat={self.cat!r})"


class _NullPhase:
    """What a disabled logger hands out: enter/exit/update do nothing, decorating returns the function."""

    __slots__ = ()

    def update(self, **values: Any) -> "_NullPhase":
        return self

    def __call__(self, fn: _F) -> _F:
        return fn


_NULL = _NullPhase()
# ``with`` on the disabled path is the cost library code pays when logging is off, so enter/exit are C callables
# (half the cost of Python methods). Neither is a descriptor, so ``with`` calls them without ``self``:
# __enter__() returns _NULL; __exit__(et, ev, tb) is int's inherited object.__init__, which accepts and ignores
# the three arguments and returns None (falsy: exceptions propagate).
_NullPhase.__enter__ = itertools.repeat(_NULL).__next__  # type: ignore[attr-defined]
_NullPhase.__exit__ = (0).__init__  # type: ignore[attr-defined]


class TimeLogger:
    """Records named intervals of one process into ``<out_dir>/app/rank-<r>-pid-<p>.pfw``.

    Parameters
    ----------
    out_dir
        Run directory; the ``app/`` subdirectory is created. ``None`` gives a disabled logger whose phases,
        decorators and iterators cost (almost) nothing.
    rank, world_size
        Position in the job; read from the launcher's environment when None (Open MPI, MPICH/Hydra ``PMI_*``,
        ``PMIX_RANK``, Slurm, Horovod), else 0 and 1.
    flush_interval
        Seconds between background flushes. An interval is on disk within ``max_lag`` of its end (what a
        ``kill -9`` can lose), or counted as dropped.
    max_lag
        Seconds an ended interval may wait for the writer; older ones are dropped and counted (on disk at once,
        in ``timelogger_dropped`` records) so that memory stays bounded when the producers outrun the writer.
        Default ``flush_interval + 0.25`` (0.75 s at the default interval): long enough that a writer that keeps
        up never drops, short enough that with the time between two checks the loss window stays under 1 s.

    Attributes
    ----------
    events_written, dropped
        Intervals whose whole line reached the file, and intervals lost (writer behind, write error, recorded
        after close, unserialisable values). Both match what is on disk, also after a failed write.

    Notes
    -----
    A logger that cannot create its file warns once and stays disabled; it never raises into the training job.
    Decorating with a logger that is disabled from the start returns the function unchanged.
    """

    def __init__(
        self,
        out_dir: Union[str, os.PathLike, None],
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        *,
        flush_interval: float = 0.5,
        max_lag: Optional[float] = None,
    ) -> None:
        env_rank, env_world, _ = detect_rank_world()
        self.rank = env_rank if rank is None else int(rank)
        self.world_size = env_world if world_size is None else int(world_size)
        self.out_dir: Optional[Path] = None if out_dir is None else Path(out_dir)
        self.path: Optional[Path] = None
        self._lost_at: Optional[int] = None
        self._write_failed: Optional[str] = None  # errno name of the write that failed; logging is off since
        self.flush_interval = _in_range("flush_interval", flush_interval, *FLUSH_INTERVAL_RANGE)
        lag = self.flush_interval + 0.25 if max_lag is None else _in_range("max_lag", max_lag, *MAX_LAG_RANGE)
        self.max_lag = lag
        self._max_lag_ns = int(lag * 1e9)
        self._on = False
        self._closed = False
        self._warned: set = set()
        self._specs: Dict[str, Dict[str, str]] = {c: {} for c in CATS}  # cat -> name -> head
        self._spec_names: Dict[str, Tuple[str, str]] = {}  # head -> (name, cat)
        self._epoch: Optional[int] = None
        self._step: Optional[int] = None
        self._tags = ""
        self._retag()
        self._fd: Optional[int] = None  # the app file's descriptor (raw, unbuffered: see _open)
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._wlock = threading.Lock()
        self._wowner: Optional[int] = None
        self._reg_lock = threading.Lock()
        self._entries: List[_BufEntry] = []
        self._local = _Local(self._register)
        self.events_written = 0
        self.dropped = 0
        self.pid = os.getpid()
        self.anchor = _anchor()
        self._off = self.anchor[0] - self.anchor[1]
        self._step_profiler: Optional[StepProfiler] = None
        self._exit_with: Optional[threading.Thread] = None  # see _after_fork_child
        self._close_pending = False  # close() called by a signal handler inside our own flush
        if self.out_dir is not None:
            self._open()
            self._step_profiler = _launcher_profile(self)

    # ------------------------------------------------------------------ setup
    def _register(self, buf: List[tuple]) -> None:
        with self._reg_lock:
            self._entries.append(_BufEntry(buf))

    def _open(self) -> None:
        """Create the file, write ``[`` and the header, start the flusher; on failure warn once and stay off."""
        assert self.out_dir is not None
        self.pid = os.getpid()
        self.anchor = _anchor()
        self._off = self.anchor[0] - self.anchor[1]
        app = self.out_dir / layout.APP_DIR
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)  # the run directory: the user's choice, links and all
            app_fd = layout.open_layer_dir(self.out_dir, layout.APP_DIR)
        except OSError as exc:
            self._disable("open", "timelogger: cannot create %s (%s); logging disabled for this process", app, exc)
            return
        base = layout.app_file_stem(self.rank, self.pid)
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
                    self._disable("open", "timelogger: cannot create %s (%s); logging disabled for this process",
                                  path, exc)
                    return
                if k:
                    self._warn_once("collision", "timelogger: %s already exists; writing %s instead",
                                    app / f"{base}.pfw", path.name)
                break
        finally:
            os.close(app_fd)
        if fd is None:
            self._disable("open", "timelogger: no free file name for %s in %s; logging disabled", base, app)
            return
        self.path = path
        # A raw descriptor, not a buffered file: every write is a system call whose result says exactly how many
        # bytes landed, which keeps events_written/dropped true after ENOSPC and leaves nothing in a user buffer
        # for kill -9 to lose.
        self._fd = fd
        header = {
            "rank": self.rank,
            "world_size": self.world_size,
            "hostname": hostname(),
            "pid": self.pid,
            "ppid": os.getppid(),
            "anchor": {"wall_ns": self.anchor[0], "perf_ns": self.anchor[1]},
            "versions": _versions(),
            "argv": list(sys.argv),
        }
        first = ["[\n", self._meta_line("timelogger", header, _pc())]
        if not self._write([*first, self._lost_line(0, "")], [0, 0, 0]):
            self._close_fd()
            return
        # where the reserved record lies: rewritten in place (no new blocks) when a write fails on a full disk
        self._lost_at = sum(len(x.encode("utf-8", "backslashreplace")) for x in first)
        self._on = True
        self._stop = threading.Event()
        self._start_flusher()
        _register_live(self)

    def _start_flusher(self) -> None:
        t = threading.Thread(target=self._flusher, name="timelogger-flush", daemon=True)
        self._thread = t
        t.start()

    def _flusher(self) -> None:
        stop = self._stop
        # Wake often enough to flush by size (a thread with a chunk's worth buffered) as well as by time.
        poll = min(self.flush_interval, 0.05)
        due = time.monotonic() + self.flush_interval
        while not stop.wait(poll):
            owner = self._exit_with
            if owner is not None and not owner.is_alive():
                # a child forked from a thread other than the main one ends when that thread returns: nothing runs
                # atexit there, and this thread would keep the process alive, so it writes the rest and closes
                self.close()
                return
            try:
                now = time.monotonic()
                if now >= due or self._backlog() >= CHUNK_EVENTS:
                    due = now + self.flush_interval
                    self._flush()
            except Exception as exc:  # keep flushing: one bad batch must not end crash safety for the run
                self._warn_once("flusher", "timelogger: background flush of %s failed: %s", self.path, exc)

    def _backlog(self) -> int:
        """The most intervals any one thread has buffered."""
        return max((len(e.buf) for e in self._entries), default=0)

    # ------------------------------------------------------------------ warnings
    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _log.warning(msg, *args)

    def _disable(self, key: str, msg: str, *args: Any) -> None:
        self._on = False
        self._warn_once(key, msg, *args)

    def _ignored(self) -> None:
        """Called when an interval ends on a logger that is off; only a closed logger complains. After a failed
        write (disk full, file-size limit) every later interval is lost too: counted, and the reserved record
        updated every :data:`CHUNK_EVENTS` of them and at close. An interval that ends after close() is not
        counted: it lies outside the file's session (another thread still running while SIGTERM closes the
        logger), and the close record written meanwhile must not report it as lost."""
        if self._closed:
            self._warn_once("closed", "timelogger: interval recorded after close() of %s; ignored", self.path)
        elif self._write_failed is not None:
            self.dropped += 1
            if self.dropped % CHUNK_EVENTS == 0:
                # under the write lock: close() may be closing the descriptor, whose number could then be reused
                held = self._acquire()
                try:
                    self._record_lost(self._write_failed)
                finally:
                    if held:
                        self._release()

    # ------------------------------------------------------------------ public API
    @property
    def enabled(self) -> bool:
        """True while intervals are being recorded."""
        return self._on

    def _spec(self, name: str, cat: str) -> str:
        # the slow path of every public recording call, taken once per (name, cat): the program marks this cat
        PROGRAM.cats.add(cat)
        return self.hook_spec(name, cat)

    def hook_spec(self, name: str, cat: str) -> str:
        """The interval head of ``(name, cat)`` for a zero-code hook: unlike the public calls, it does not tell the
        hooks that the program marks ``cat`` itself."""
        by_name = self._specs.get(cat)
        if by_name is None:
            self._warn_once("cat:" + str(cat), "timelogger: unknown cat %r for %r, using 'other' (one of %s)",
                            cat, name, ", ".join(CATS))
            by_name = self._specs["other"]
            cat = "other"
        spec = by_name.get(name)
        if spec is None:
            spec = _head(str(name), cat)
            self._spec_names[spec] = (str(name), cat)
            by_name[name] = spec
        return spec

    def phase(self, name: str, cat: str = "other") -> Phase:
        """A phase usable as ``with tl.phase("Load File", cat="io") as p: ... p.update(bytes=n)``.

        Parameters
        ----------
        name
            Event name.
        cat
            One of :data:`CATS`.
        """
        if not self._on:
            if self._closed or self._write_failed is not None:
                self._ignored()
            return _NULL  # type: ignore[return-value]
        # Built without __init__: this runs once per interval and a Python-level __init__ frame is measurable.
        p = _new(Phase)
        p._tl = self
        try:
            p._spec = self._specs[cat][name]
        except (KeyError, TypeError):
            p._spec = self._spec(name, cat)
        p._args = None
        return p

    def record(self, name: str, start_ns: int, end_ns: int, cat: str = "other", **args: Any) -> None:
        """Log an interval timed elsewhere, by wall-clock epoch nanoseconds (``time.time_ns()`` scale): a callback
        that reports its own timestamps, another tool's event. It carries the current epoch/step tags and goes
        through the same buffer as a phase; ``args`` are its values (``bytes``, ``file``, ...)."""
        if not self._on:
            if self._closed or self._write_failed is not None:
                self._ignored()
            return
        if end_ns < start_ns:
            raise ValueError(f"record({name!r}): end_ns {end_ns} is before start_ns {start_ns}")
        try:
            spec = self._specs[cat][name]
        except (KeyError, TypeError):
            spec = self._spec(name, cat)
        # wall ns -> this logger's perf_counter_ns
        self.append(spec, int(start_ns) - self._off, int(end_ns) - self._off, args)

    def timed(self, fn_or_name: Union[Callable, str, None] = None, cat: str = "other", *,
              name: Optional[str] = None) -> Any:
        """Decorator (bare or with arguments) and context manager.

        ``@tl.timed`` names the interval after the function's ``__qualname__`` with cat ``other``;
        ``@tl.timed("HDF5 File Read", cat="io")`` and ``with tl.timed("x"):`` behave like :meth:`phase`.
        """
        if callable(fn_or_name):
            fn = fn_or_name
            if not self._on and not self._closed:
                return fn
            return self._wrap(fn, self._spec(name or getattr(fn, "__qualname__", repr(fn)), cat))
        label = fn_or_name if fn_or_name is not None else name
        if label is None:
            return _Deferred(self, cat)
        if not self._on and not self._closed:
            return _NULL
        return Phase(self, self._spec(label, cat))

    def _wrap(self, fn: _F, spec: str) -> _F:
        if not self._on and not self._closed:
            return fn
        tl = self
        local = self._local
        pc = _pc

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if not tl._on:
                if tl._closed or tl._write_failed is not None:
                    tl._ignored()
                return fn(*args, **kwargs)
            t0 = pc()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                local.append((spec, t0, pc(), tl._tags, {"exception": type(exc).__name__}))
                raise
            local.append((spec, t0, pc(), tl._tags))
            return result

        try:
            timed_call.__wrapped__ = fn  # type: ignore[attr-defined]
            for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
                setattr(timed_call, attr, getattr(fn, attr))
            timed_call.__dict__.update(getattr(fn, "__dict__", {}))
        except (AttributeError, TypeError):
            pass
        return timed_call  # type: ignore[return-value]

    def iterate(self, iterable: Iterable[Any], name: str, cat: str = "wait") -> Iterator[Any]:
        """Yield from ``iterable``, timing each ``next()`` (not the loop body) as one interval.

        The final call that raises ``StopIteration`` is recorded with ``args.exhausted`` (it ends the epoch's
        iteration); a ``next()`` that raises anything else is
        recorded with ``args.exception``. A disabled logger returns ``iter(iterable)`` (no per-item cost).
        """
        if not self._on:
            return iter(iterable)
        t_iter = _pc()  # the first fetch includes the iterator's start-up (a tf.data iterator's, a loader's workers)
        return self._iterate(iter(iterable), self._spec(name, cat), t_iter)

    def _iterate(self, it: Iterator[Any], spec: str, t_iter: int) -> Iterator[Any]:
        tl = self
        local = self._local
        pc = _pc
        nxt = it.__next__
        t0 = t_iter
        while True:
            if t0 is None:
                t0 = pc()
            try:
                item = nxt()
            except StopIteration:
                # the fetch that finds the data exhausted is part of the epoch's iteration (iterator teardown)
                if tl._on:
                    local.append((spec, t0, pc(), tl._tags, {"exhausted": True}))
                return
            except BaseException as exc:
                if tl._on:
                    local.append((spec, t0, pc(), tl._tags, {"exception": type(exc).__name__}))
                raise
            if tl._on:
                local.append((spec, t0, pc(), tl._tags))
            else:
                tl._ignored()
            t0 = None
            yield item

    def set_epoch(self, epoch: Optional[int]) -> None:
        """Tag every later interval with ``args.epoch`` (None removes the tag)."""
        PROGRAM.epochs = True
        self.tag_epoch(epoch)

    def set_step(self, step: Optional[int]) -> None:
        """Tag every later interval with ``args.step`` (None removes the tag)."""
        PROGRAM.steps = True
        self.tag_step(step)

    def tag_epoch(self, epoch: Optional[int]) -> None:
        """:meth:`set_epoch` for the zero-code hooks: the program has not numbered the epochs itself."""
        self._epoch = None if epoch is None else int(epoch)
        self._retag()

    def tag_step(self, step: Optional[int]) -> None:
        """:meth:`set_step` for the zero-code hooks (the launcher's ``--tf-profile`` window follows it too)."""
        self._step = None if step is None else int(step)
        self._retag()
        if self._step_profiler is not None:
            self._step_profiler.on_step(self._step)

    def append(self, spec: str, t0: int, t1: int, args: Optional[Dict[str, Any]] = None) -> None:
        """Buffer one interval of head ``spec`` (:meth:`hook_spec`) timed by ``time.perf_counter_ns``, with the
        current tags: the hooks' recording path, the same as a phase's end."""
        if not self._on:
            return
        self._local.append((spec, t0, t1, self._tags, args) if args else (spec, t0, t1, self._tags))

    def take_tf_profile(self) -> None:
        """Switch off the step-driven ``--tf-profile`` window: the caller (``TimeLoggerCallback``) opens its own."""
        self._step_profiler = None

    def _retag(self) -> None:
        # the tags are ints: their JSON is written directly (set_step runs once per step; json.dumps cost ~3 us)
        tags = f'"rank":{int(self.rank)}'
        if self._epoch is not None:
            tags += f',"epoch":{self._epoch}'
        if self._step is not None:
            tags += f',"step":{self._step}'
        self._tags = tags

    def sync_clocks(self, comm: Any, rounds: int = 10) -> int:
        """Measure this rank's ``time_ns`` offset to rank 0 by MPI ping-pong; write ``clock_sync`` metadata.

        Collective over ``comm`` (an mpi4py communicator): every rank must call it, also ranks whose logger is
        disabled. Returns the offset in ns (this rank's clock minus rank 0's; 0 on rank 0).
        """
        from .clocks import measure_offset

        offset_ns, rtt_ns = measure_offset(comm, rounds=rounds)
        self.write_metadata("clock_sync", {"clock_offset_ns": offset_ns, "rtt_ns": rtt_ns, "rounds": int(rounds),
                                           "method": "mpi-pingpong", "comm_rank": comm.Get_rank(),
                                           "comm_size": comm.Get_size()})
        return offset_ns

    def tf_profile(self, logdir: Union[str, os.PathLike, None] = None) -> Any:
        """Context manager running the TF profiler into ``logdir`` with the wall-clock anchor marker.

        ``logdir`` defaults to ``<run_dir>/tf/rank-<r>`` (each rank needs its own). See :mod:`timelogger.tf`.
        """
        from .tf import TFProfile

        return TFProfile(self, logdir)

    def write_metadata(self, name: str, args: Dict[str, Any]) -> None:
        """Flush pending intervals, then write one ``"ph":"M"`` event ``name`` with ``args`` (JSON-able)."""
        if not self._on:
            if self._closed or self._write_failed is not None:
                self._ignored()
            return
        self._flush(extra=self._meta_line(name, args, _pc()))

    def flush(self) -> None:
        """Write every interval recorded so far (the background thread does this every ``flush_interval``)."""
        if self._on:
            self._flush()

    def close(self) -> None:
        """Flush, write the ``timelogger_close`` metadata (second anchor pair) and close the file. Idempotent."""
        if self._closed or self._fd is None:
            self._closed = True
            self._on = False
            return
        if self._wowner == threading.get_ident():
            # a signal handler of this thread interrupted our own flush: closing now would find the write lock
            # held and leave no close record, so the flush closes when it is done
            self._close_pending = True
            return
        entered = _busy_enter()
        try:
            self._close()
        finally:
            _busy_exit(entered)

    def _close(self) -> None:
        sp, self._step_profiler = self._step_profiler, None
        if sp is not None and self._on:
            sp.stop()
            why = sp.why_not()
            if why is not None:
                print(f"timelogger: --tf-profile: nothing profiled in rank {self.rank} pid {self.pid}: {why}",
                      file=sys.stderr)
                self.write_metadata("tf_profile_missed", {"reason": why})
        self._closed = True
        was_on = self._on
        self._on = False
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread() and t.is_alive():
            t.join(timeout=5.0)
        wall, perf = _anchor()
        if not self._acquire():
            return  # re-entered from a signal handler inside our own write: the outer call finishes it
        try:
            if was_on:
                self._drain_all(trim=False)  # no deadline at close: write everything still buffered
            self._write([self._meta_line("timelogger_close", {
                "anchor": {"wall_ns": wall, "perf_ns": perf},
                "events": self.events_written,
                "dropped": self.dropped,
                "exit": _exit_reason()}, perf)], [0])
            if self._write_failed is not None:
                # intervals that reached a buffer while the failed write was being counted: lost as well
                self.dropped += self._drop_buffered()
                self._record_lost(self._write_failed)  # the final count of what never reached the file
            self._close_fd()
        finally:
            self._release()
        _unregister_live(self)

    def __enter__(self) -> "TimeLogger":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "on" if self._on else ("closed" if self._closed else "off")
        return f"TimeLogger(path={str(self.path)!r}, rank={self.rank}, {state})"

    # ------------------------------------------------------------------ writing
    def _acquire(self) -> bool:
        """Take the write lock, unless this thread already holds it (a signal handler interrupting a write)."""
        me = threading.get_ident()
        if self._wowner == me:
            return False
        self._wlock.acquire()
        self._wowner = me
        return True

    def _release(self) -> None:
        self._wowner = None
        self._wlock.release()

    def _meta_line(self, name: str, args: Dict[str, Any], perf_ns: int, tid: Optional[int] = None) -> str:
        """One ``"ph":"M"`` line; ``tid`` is the thread it describes (default: the calling thread)."""
        tid = threading.get_native_id() if tid is None else tid
        return ('{"name":' + _json(name) + ',"ph":"M","ts":' + _us(perf_ns + self._off) + ',"pid":'
                + str(self.pid) + ',"tid":' + str(tid) + ',"args":' + _json(args) + "}\n")

    def _lost_line(self, lost: int, why: str) -> str:
        """The ``timelogger_lost`` record, always the same length: written after the header at open and rewritten
        in place when a write fails, so the count of lost intervals reaches the file even on a full disk."""
        why = (why.encode("ascii", "replace")[:24].decode("ascii").replace('"', "'")).ljust(24)
        return ('{"name":"timelogger_lost","ph":"M","ts":0,"pid":' + str(self.pid) + ',"tid":0,"args":{"lost":'
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
            self._warn_once("behind", "timelogger: the writer of %s cannot keep up; dropping intervals older than "
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
        while self._fd is not None and self._write_failed is None:
            if trim:  # what was dropped came off the front, i.e. out of the quota
                quota = [max(0, q - k) for q, k in zip(quota, self._trim(entries))]
            lines, kinds = self._drain(entries, quota)
            if not lines:
                break
            self._write(lines, kinds)
        self._forget_dead(entries)

    def _drain(self, entries: List[_BufEntry], quota: List[int]) -> Tuple[List[str], List[int]]:
        """Take about :data:`CHUNK_EVENTS` intervals out of the buffers (at most ``quota[i]`` from entry i, which is
        decremented) and serialise them. Returns the lines and, per line, 1 for an interval, 0 for metadata."""
        out: List[str] = []
        kinds: List[int] = []
        off = self._off
        pid = self.pid
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
                out.append(self._meta_line("thread_name", {"name": ent.name, "tid": ent.tid}, items[0][1], ent.tid))
                kinds.append(0)
            mid = ',"pid":' + str(pid) + ',"tid":' + str(ent.tid) + ',"args":{'
            for item in items:
                try:
                    t0 = item[1]
                    ts = t0 + off
                    d = item[2] - t0
                    args = item[3] if len(item) == 4 else self._args_text(item[3], item[4])
                    out.append(f'{item[0]}{ts // 1000}.{ts % 1000:03d},"dur":{d // 1000}.{d % 1000:03d}'
                               f'{mid}{args}}}}}\n')
                    kinds.append(1)
                except BaseException as exc:  # noqa: B036 -- a value json cannot take, or whose __str__ raises
                    # anything at all (a BaseException too): that interval is dropped and counted, the writer goes on
                    self.dropped += 1
                    self._warn_once("serialise", "timelogger: could not serialise an interval (%r); dropped", exc)
                    if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
                        _defer_interrupt(exc)  # a real Ctrl-C during a flush of the main thread: raised after it
        return out, kinds

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
            return tags + "," + _json(args)[1:-1]
        return _json({**json.loads("{" + tags + "}"), **args})[1:-1]

    def _write(self, lines: List[str], kinds: List[int]) -> bool:
        """Write whole lines with system calls (so a ``kill -9`` after this loses nothing of them).

        ``kinds[i]`` is 1 when line i is an interval. On a failed or short write (ENOSPC, EFBIG) the intervals
        whose whole line landed count as written and the rest as dropped, then logging stops. Returns success.
        """
        if self._fd is None or self._write_failed is not None:
            return False  # after a failed write nothing more goes to the file but the lost record
        if not lines:
            return True
        data = "".join(lines).encode("utf-8", "backslashreplace")  # _json escaped what it could not encode
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:] if done else data)
        except OSError as exc:
            # off first: an interval that ends from now on is counted by _ignored, not left in a buffer
            self._write_failed = errno.errorcode.get(exc.errno or 0, "") or str(exc)
            self._on = False
            landed = 0
            pos = 0
            for line, kind in zip(lines, kinds):
                pos += len(line.encode("utf-8", "backslashreplace"))
                if pos > done:
                    break
                landed += kind
            # what is still buffered can never be written either: count it now, not never
            lost = sum(kinds) - landed + self._drop_buffered()
            self.events_written += landed
            self.dropped += lost
            self._record_lost(self._write_failed)
            self._disable("write", "timelogger: writing %s failed (%s); logging disabled, %d events lost",
                          self.path, exc, lost)
            # Nothing more goes to the file but the lost record: a half line there stays the last line, which
            # readers drop (a crashed writer leaves one too).
            return False
        self.events_written += sum(kinds)
        return True

    def _flush(self, extra: Optional[str] = None) -> None:
        entered = _busy_enter()
        try:
            self._flush_locked(extra)
        finally:
            _busy_exit(entered)

    def _flush_locked(self, extra: Optional[str]) -> None:
        if not self._acquire():
            return
        try:
            if self._fd is None or self._write_failed is not None:
                return  # after a failed write what is buffered is lost, and counted by close()
            self._drain_all()
            if extra is not None:
                self._write([extra], [0])
        finally:
            self._release()
            if self._close_pending:
                self.close()

    # ------------------------------------------------------------------ fork
    def _after_fork_child(self, exit_with: Optional[threading.Thread] = None) -> None:
        """In a forked child: forget the parent's buffers and file, open our own file (same rank, new pid).
        ``exit_with``: the thread that forked, when it was not the main one (the child ends with it)."""
        self._exit_with = exit_with
        self._wlock = threading.Lock()
        self._wowner = None
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
        self._on = False
        self._open()


class _Deferred:
    """``@tl.timed(cat="io")`` without a name: the interval takes the function's ``__qualname__``."""

    __slots__ = ("_tl", "_cat")

    def __init__(self, tl: TimeLogger, cat: str) -> None:
        self._tl = tl
        self._cat = cat

    def __call__(self, fn: _F) -> _F:
        return self._tl.timed(fn, self._cat)


def _versions() -> Dict[str, str]:
    versions = {"python": sys.version.split()[0], "timelogger": VERSION}
    # Report frameworks only if the program already imported them: capture must not import them itself.
    for mod in ("tensorflow", "keras", "horovod", "mpi4py", "numpy", "h5py"):
        m = sys.modules.get(mod)
        v = getattr(m, "__version__", None) if m is not None else None
        if isinstance(v, str):
            versions[mod] = v
    return versions


# ---------------------------------------------------------------------- process-wide plumbing
_live: "weakref.WeakSet[TimeLogger]" = weakref.WeakSet()
_hooks_installed = False
_hooks_lock = threading.Lock()
_prev_sigterm: Any = None
_sigterm_installed = False


def _register_live(tl: TimeLogger) -> None:
    global _hooks_installed
    _live.add(tl)
    with _hooks_lock:
        first = not _hooks_installed
        _hooks_installed = True
    if first:
        atexit.register(_close_all)
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                            after_in_child=_after_fork_child)
    if not _sigterm_installed:
        _install_sigterm()  # only possible from the main thread; retried by later loggers
    _finalize_in_mp_child()


#: the pid whose multiprocessing exit finalizer closes the loggers (a child process registers its own)
_mp_finalizer_pid: Optional[int] = None


def _finalize_in_mp_child() -> None:
    """A multiprocessing child (a pool worker, forked, forkserver or spawned) leaves through ``os._exit()``, which
    skips atexit; its bootstrap runs the exit finalizers first. A logger made in the child registers one there (a
    logger inherited through fork does it from the after-fork step, see :func:`_after_fork_child`)."""
    global _mp_finalizer_pid
    mp = sys.modules.get("multiprocessing")
    if mp is None or _mp_finalizer_pid == os.getpid() or mp.parent_process() is None:
        return
    _mp_finalizer_pid = os.getpid()
    _register_mp_finalizer(None)


def _unregister_live(tl: TimeLogger) -> None:
    _live.discard(tl)


def _close_all() -> None:
    for tl in list(_live):
        try:
            tl.close()
        except Exception as exc:  # never let capture break interpreter shutdown
            _log.warning("timelogger: closing %s failed: %s", tl.path, exc)


def _flush_all() -> None:
    for tl in list(_live):
        try:
            tl.flush()
        except Exception as exc:
            _log.warning("timelogger: flushing %s failed: %s", tl.path, exc)


_forking: List[TimeLogger] = []
#: whether the last fork was made by the main thread (a child forked by another thread ends when that thread does)
_fork_from_main = True


def _before_fork() -> None:
    global _fork_from_main
    _fork_from_main = threading.current_thread() is threading.main_thread()
    # Hold every write lock across fork so the child never inherits a half-written buffer or a held lock.
    for tl in list(_live):
        if tl._wowner != threading.get_ident() and tl._wlock.acquire(timeout=5.0):
            _forking.append(tl)


def _after_fork_parent() -> None:
    while _forking:
        _forking.pop()._wlock.release()


def _after_fork_child() -> None:
    global _live, _hooks_lock, _default_lock
    _forking.clear()
    # another thread of the parent may have held these at fork time; nobody can release them in the child
    _hooks_lock = threading.Lock()
    _default_lock = threading.Lock()
    loggers = [tl for tl in list(_live) if tl._on]
    _live = weakref.WeakSet()
    exit_with = None if _fork_from_main else threading.current_thread()
    for tl in loggers:
        tl._after_fork_child(exit_with)
    mp_util = sys.modules.get("multiprocessing.util")
    if loggers and mp_util is not None:
        # multiprocessing children leave through os._exit(), which skips atexit; its exit finalizers do run. The
        # child's bootstrap clears the finalizer registry after this hook, so register from its after-fork step.
        mp_util.register_after_fork(_MP_TOKEN, _register_mp_finalizer)


class _Token:
    """A weak-referenceable key for ``multiprocessing.util.register_after_fork``."""


_MP_TOKEN = _Token()


def _register_mp_finalizer(_token: object) -> None:
    global _mp_finalizer_pid
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        _mp_finalizer_pid = os.getpid()
        mp_util.Finalize(None, _close_all, exitpriority=-100)


def _install_sigterm() -> None:
    global _prev_sigterm, _sigterm_installed
    if threading.current_thread() is not threading.main_thread():
        _log.debug("timelogger: not in the main thread, SIGTERM flush not installed yet")
        return
    try:
        _prev_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True
    except (ValueError, OSError) as exc:
        _log.debug("timelogger: cannot install SIGTERM handler: %s", exc)


# Signal handlers run in the main thread between bytecodes, possibly in the middle of our own close()/flush()
# (e.g. a multiprocessing worker closing at exit when Pool.terminate() signals it). Then the handler only notes
# the signal and the interrupted call re-delivers it when done, so the file is never cut short by our own kill.
_main_busy = 0
_pending_signal: Optional[int] = None


def _busy_enter() -> bool:
    global _main_busy
    if threading.get_ident() != threading.main_thread().ident:
        return False
    _main_busy += 1
    return True


def _busy_exit(entered: bool) -> None:
    global _main_busy, _pending_signal, _pending_interrupt
    if not entered:
        return
    _main_busy -= 1
    if _main_busy == 0 and _pending_signal is not None:
        signum, _pending_signal = _pending_signal, None
        _on_sigterm(signum, None)
    if _main_busy == 0 and _pending_interrupt is not None:
        exc, _pending_interrupt = _pending_interrupt, None
        raise exc


#: a KeyboardInterrupt that landed inside the main thread's flush, raised once the flush has written what it took
_pending_interrupt: Optional[BaseException] = None


def _defer_interrupt(exc: BaseException) -> None:
    global _pending_interrupt
    _pending_interrupt = exc


def _on_sigterm(signum: int, frame: Any) -> None:
    """Flush, then do what was there before: the previous Python handler, ignoring, or dying of SIGTERM."""
    global _pending_signal
    if _main_busy:
        _pending_signal = signum
        return
    prev = _prev_sigterm
    if callable(prev):
        _flush_all()
        prev(signum, frame)
        return
    if prev == signal.SIG_IGN:
        _flush_all()
        return
    global _exit_signal
    _exit_signal = "SIGTERM"
    _close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


#: set when the process is about to die of a signal, for the close record
_exit_signal: Optional[str] = None


def _exit_reason() -> Dict[str, Any]:
    """How the process is ending, for the close record: ``ok``, an uncaught exception (the interpreter sets
    ``sys.last_type`` before atexit runs; SIGINT is ``KeyboardInterrupt``) or a signal the logger handles."""
    if _exit_signal is not None:
        return {"reason": "signal", "signal": _exit_signal}
    last = getattr(sys, "last_type", None)
    if last is not None:
        return {"reason": "exception", "type": getattr(last, "__name__", str(last))}
    return {"reason": "ok"}


# ---------------------------------------------------------------------- the default logger
_default: Optional[TimeLogger] = None
_default_lock = threading.Lock()


def default_logger() -> TimeLogger:
    """The process-wide logger writing to ``$TIMELOGGER_DIR`` (the run directory); disabled when unset.

    Created on first call and cached; a forked child keeps using it (it opens its own file).
    """
    tl = _default
    if tl is not None:
        return tl
    return _make_default()


def _make_default() -> TimeLogger:
    global _default
    with _default_lock:
        if _default is None:
            _default = TimeLogger(os.environ.get(ENV_DIR) or None)
        return _default


def _launcher_profile(tl: TimeLogger) -> Optional[StepProfiler]:
    """The launcher's ``--tf-profile`` window for a loop that sets steps, if asked and the logger is on."""
    window = launcher_window() if tl._on else None
    return None if window is None else StepProfiler(tl, window)
