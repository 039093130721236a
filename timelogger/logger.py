"""The TimeLogger: per-phase intervals of a training process, written as DFTracer-style ``.pfw`` lines.

This module is the API (phases, decorators, iterators, tags, metadata); :mod:`timelogger.writer` buffers, serialises
and writes the intervals (the hot path's layout and the loss bound are described there), and
:mod:`timelogger.process` closes the loggers at exit and on SIGTERM and reopens them in forked children. File
layout and time base: ``docs/wire-format.md``.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar, Union, cast

from . import process, torch_profile
from ._env import detect_rank_world, hostname
from .tf import StepProfiler, launcher_window
from .writer import ACCEL, Writer, anchor, interval_head

__all__ = ["TimeLogger", "Phase", "CATS", "default_logger", "ENV_DIR"]


#: Phase classes of the frame schema (``trace_merge.schema.CATS``; repeated here so capture imports nothing).
CATS = ("io", "preprocess", "compute", "comm", "checkpoint", "wait", "other")
#: Environment variable naming the run directory of :func:`default_logger`.
ENV_DIR = "TIMELOGGER_DIR"
VERSION = "0.1.0"

_pc = time.perf_counter_ns
_new = object.__new__
#: the C record path (``timelogger/_capture.c``: the decorator's wrapper, the iterator, Phase's enter/exit and
#: ``tl.phase``), or None: the pure Python code below, which records the same tuples
_REC = ACCEL if hasattr(ACCEL, "Recorder") else None
_MIRRORED = {"_on": "on", "_tags": "tags"}  # TimeLogger attributes the Recorder holds a copy of
_F = TypeVar("_F", bound=Callable[..., Any])


class _ProgramMarks:
    """What the program marks itself through any TimeLogger of the process (the categories of its phases, its own
    steps and epochs): the zero-code hooks (:mod:`timelogger.hooks`) leave those to it, so nothing counts twice."""

    def __init__(self) -> None:
        self.cats: set = set()
        self.steps = False
        self.epochs = False


PROGRAM = _ProgramMarks()


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


class _PhaseCore:
    """Phase's timing in pure Python (``_capture.PhaseCore`` is its C twin): ``__enter__`` reads the clock,
    ``__exit__`` reads it again and hands the interval to ``Phase._close``."""

    __slots__ = ("_tl", "_spec", "_t0", "_args")

    def __init__(self, tl: "TimeLogger", spec: str) -> None:
        self._tl = tl
        self._spec = spec
        self._t0: Optional[int] = None
        self._args: Optional[Dict[str, Any]] = None

    def __enter__(self) -> Any:
        self._t0 = _pc()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        t1 = _pc()
        try:
            t0 = self._t0  # unset until the first __enter__ (saves a store per phase on the hot path)
        except AttributeError:
            t0 = None
        self._t0 = None
        return self._close(t0, t1, et)  # type: ignore[attr-defined]  # Phase's

    def __call__(self, fn: _F) -> _F:
        """Decorate ``fn`` (here, not in Phase: its C twin serves ``with`` through the call slot too)."""
        return self._tl._wrap(fn, self._spec)


if TYPE_CHECKING:
    _PhaseBase = _PhaseCore
else:
    _PhaseBase = _PhaseCore if _REC is None else _REC.PhaseCore


class Phase(_PhaseBase):
    """One timed phase: a context manager, a decorator, and the place for late values (``update``).

    Obtained from :meth:`TimeLogger.phase` or :meth:`TimeLogger.timed`. As a context manager the interval runs
    from ``__enter__`` to ``__exit__`` (an exception still closes it and is named in ``args.exception``). As a
    decorator it times every call of the function; the wrapper keeps no per-call state on this object, so the
    decorated function may recurse or run in several threads.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return self._tl._spec_names[self._spec][0]

    @property
    def cat(self) -> str:
        return self._tl._spec_names[self._spec][1]

    def _close(self, t0: Optional[int], t1: int, et: Any) -> None:
        """The end of the interval begun at ``t0`` (None: never entered), after the exception ``et`` or None."""
        if t0 is None:
            self._tl.writer.warn_once("misuse", "timelogger: phase %r exited without being entered; ignored", self.name)
            return None
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

    def __repr__(self) -> str:
        return f"Phase({self.name!r}, cat={self.cat!r})"


if hasattr(_REC, "use_vectorcall") and not TYPE_CHECKING:
    _REC.use_vectorcall(Phase)


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
_NullPhase.__exit__ = (0).__init__  # type: ignore[attr-defined, misc]  # deliberately a C callable, see above


class TimeLogger:
    """Records named intervals of one process into ``<out_dir>/app/rank-<r>-pid-<p>.pfw``.

    Parameters
    ----------
    out_dir
        Run directory; the ``app/`` subdirectory is created. ``None`` gives a disabled logger whose phases,
        decorators and iterators cost (almost) nothing.
    rank, world_size
        Position in the job; read from the launcher's environment when None (Open MPI, MPICH/Hydra ``PMI_*``,
        ``PMIX_RANK``, Slurm, Horovod, torchrun), else 0 and 1.
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
    path
        The file, once made.
    writer
        The :class:`timelogger.writer.Writer` of the file.

    Notes
    -----
    A logger that cannot create its file warns once and stays disabled; it never raises into the training job.
    Decorating with a logger that is disabled from the start returns the function unchanged.
    """

    if not TYPE_CHECKING and _REC is not None:
        def __setattr__(self, name: str, value: Any) -> None:
            # _on and _tags are copied to the Recorder, where the C record path reads them without a lookup (Python
            # reads them here, as plain attributes: a property would slow the disabled path's checks)
            object.__setattr__(self, name, value)
            if name in _MIRRORED:
                setattr(self._recorder, _MIRRORED[name], value)

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
        self.flush_interval = _in_range("flush_interval", flush_interval, *FLUSH_INTERVAL_RANGE)
        lag = self.flush_interval + 0.25 if max_lag is None else _in_range("max_lag", max_lag, *MAX_LAG_RANGE)
        self.max_lag = lag
        self._specs: Dict[str, Dict[str, str]] = {c: {} for c in CATS}  # cat -> name -> head
        self._spec_names: Dict[str, Tuple[str, str]] = {}  # head -> (name, cat)
        self.writer = Writer(self.flush_interval, lag, on_failure=self._write_failed, close=self.close)
        self._local = self.writer.local
        if _REC is not None:  # holds copies of _on and _tags (__setattr__)
            self._recorder = _REC.Recorder(self, self._local, self._specs, Phase, type(self).phase)
            if out_dir is not None:  # a logger that may record: tl.phase(...) is the C call (it falls back to ours)
                self.phase = self._recorder  # type: ignore[method-assign]
        # Read by the hot paths (phases, wrappers, iterators): plain attributes of this object, one lookup each.
        self._on = False
        self._closed = False
        self._failed = False  # a write failed: logging is off since, and every interval ending now is lost
        self._epoch: Optional[int] = None
        self._step: Optional[int] = None
        self._tags = ""
        self._retag()
        self.pid = os.getpid()
        self.anchor = anchor()
        self._off = self.anchor[0] - self.anchor[1]
        #: the launcher's profile windows (``--tf-profile``, ``--torch-profile``), moved by the steps
        self._step_profilers: List[StepProfiler] = []
        if self.out_dir is not None:
            self._open()
            self._step_profilers = _launcher_profiles(self)

    def _open(self) -> None:
        """Open this process's file (:meth:`Writer.open`); on failure the logger stays off."""
        assert self.out_dir is not None
        self.pid = os.getpid()
        self.anchor = anchor()
        self._off = self.anchor[0] - self.anchor[1]
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
        if self.writer.open(self.out_dir, self.rank, self.pid, self._off, header):
            self._on = True
            process.register(self)

    def _write_failed(self) -> None:
        self._failed = True  # first: an interval that ends from now on is counted by _ignored
        self._on = False

    def _ignored(self) -> None:
        """Called when an interval ends on a logger that is off; only a closed logger complains. After a failed
        write (disk full, file-size limit) every later interval is lost too (:meth:`Writer.count_lost`). An
        interval that ends after close() is not counted: it lies outside the file's session (another thread still
        running while SIGTERM closes the logger), and the close record written meanwhile must not report it as
        lost."""
        if self._closed:
            self.writer.warn_once("closed", "timelogger: interval recorded after close() of %s; ignored", self.path)
        elif self._failed:
            self.writer.count_lost()

    @property
    def path(self) -> Optional[Path]:
        """The file, once made."""
        return self.writer.path

    @property
    def events_written(self) -> int:
        return self.writer.events_written

    @property
    def dropped(self) -> int:
        return self.writer.dropped

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
            self.writer.warn_once("cat:" + str(cat), "timelogger: unknown cat %r for %r, using 'other' (one of %s)",
                            cat, name, ", ".join(CATS))
            by_name = self._specs["other"]
            cat = "other"
        spec = by_name.get(name)
        if spec is None:
            spec = interval_head(str(name), cat)
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
            if self._closed or self._failed:
                self._ignored()
            return _NULL  # type: ignore[return-value]
        try:
            spec = self._specs[cat][name]
        except (KeyError, TypeError):
            spec = self._spec(name, cat)
        if _REC is not None:
            return Phase(self, spec)  # (the Recorder that is tl.phase makes known ones itself)
        # Built without __init__: this runs once per interval and a Python-level __init__ frame is measurable.
        p = _new(Phase)
        p._tl = self
        p._spec = spec
        p._args = None
        return p

    def record(self, name: str, start_ns: int, end_ns: int, cat: str = "other", **args: Any) -> None:
        """Log an interval timed elsewhere, by wall-clock epoch nanoseconds (``time.time_ns()`` scale): a callback
        that reports its own timestamps, another tool's event. It carries the current epoch/step tags and goes
        through the same buffer as a phase; ``args`` are its values (``bytes``, ``file``, ...)."""
        if not self._on:
            if self._closed or self._failed:
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
            return self._wrap(fn, self._spec(name or str(getattr(fn, "__qualname__", repr(fn))), cat))
        label = fn_or_name if fn_or_name is not None else name
        if label is None:
            return _Deferred(self, cat)
        if not self._on and not self._closed:
            return _NULL
        return Phase(self, self._spec(cast(str, label), cat))  # a name, or anything str() makes one of

    def _wrap(self, fn: _F, spec: str) -> _F:
        if not self._on and not self._closed:
            return fn
        timed_call: Any = self._timed_call(fn, spec) if _REC is None else _REC.Timed(self._recorder, fn, spec)
        try:
            timed_call.__wrapped__ = fn
            for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
                setattr(timed_call, attr, getattr(fn, attr))
            timed_call.__dict__.update(getattr(fn, "__dict__", {}))
        except (AttributeError, TypeError):
            pass
        return timed_call

    def _timed_call(self, fn: Callable[..., Any], spec: str) -> Callable[..., Any]:
        """``fn``, each call recorded (pure Python; ``_capture.Timed`` is the C twin)."""
        tl = self
        local = self._local
        pc = _pc

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if not tl._on:
                tl._ignored()  # which does nothing unless the logger is closed or failed
                return fn(*args, **kwargs)
            t0 = pc()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                local.append((spec, t0, pc(), tl._tags, {"exception": type(exc).__name__}))
                raise
            local.append((spec, t0, pc(), tl._tags))
            return result

        return timed_call

    def iterate(self, iterable: Iterable[Any], name: str, cat: str = "wait") -> Iterator[Any]:
        """Yield from ``iterable``, timing each ``next()`` (not the loop body) as one interval.

        The final call that raises ``StopIteration`` is recorded with ``args.exhausted`` (it ends the epoch's
        iteration); a ``next()`` that raises anything else is
        recorded with ``args.exception``. A disabled logger returns ``iter(iterable)`` (no per-item cost).
        """
        if not self._on:
            return iter(iterable)
        t_iter = _pc()  # the first fetch includes the iterator's start-up (a tf.data iterator's, a loader's workers)
        if _REC is not None:
            return _REC.TimedIter(self._recorder, iter(iterable), self._spec(name, cat), t_iter)
        return self._iterate(iter(iterable), self._spec(name, cat), t_iter)

    def _iterate(self, it: Iterator[Any], spec: str, t_iter: int) -> Iterator[Any]:
        """The pure Python twin of ``_capture.TimedIter``."""
        tl = self
        local = self._local
        pc = _pc
        nxt = it.__next__
        t0: Optional[int] = t_iter
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
        for sp in self._step_profilers:
            if not sp.by_cycle or PROGRAM.steps:
                sp.on_step(self._step)

    def cycle_begins(self, step: int) -> None:
        """The zero-code hooks: the cycle of ``step`` begins now (a PyTorch loop's fetch of its batch). Moves the
        profile windows that follow cycles rather than the hooks' step tags (``--torch-profile``: the hooks learn a
        step's number only when its ``Optimizer.step`` returns); a program that numbers its steps itself
        (``set_step``) moves them instead."""
        if PROGRAM.steps:
            return
        for sp in self._step_profilers:
            if sp.by_cycle:
                sp.on_step(step)

    def append(self, spec: str, t0: int, t1: int, args: Optional[Dict[str, Any]] = None) -> None:
        """Buffer one interval of head ``spec`` (:meth:`hook_spec`) timed by ``time.perf_counter_ns``, with the
        current tags: the hooks' recording path, the same as a phase's end."""
        if not self._on:
            return
        self._local.append((spec, t0, t1, self._tags, args) if args else (spec, t0, t1, self._tags))

    def add_step_profiler(self, sp: StepProfiler) -> None:
        """Let ``sp`` (a profile window) follow the steps (:func:`timelogger.torch.instrument`'s ``profile``)."""
        self._step_profilers.append(sp)

    def remove_step_profiler(self, sp: StepProfiler) -> None:
        """Close ``sp``'s window and let it go; when it never opened, say why (stderr and metadata)."""
        if sp in self._step_profilers:
            self._step_profilers.remove(sp)
            self._finish_profile(sp)

    def _finish_profile(self, sp: StepProfiler) -> None:
        sp.stop()
        why = sp.why_not()
        if why is not None:
            print(f"timelogger: {sp.option}: nothing profiled in rank {self.rank} pid {self.pid}: {why}",
                  file=sys.stderr)
            self.write_metadata(sp.missed_key, {"reason": why})

    def take_tf_profile(self) -> None:
        """Switch off the step-driven ``--tf-profile`` window: the caller (``TimeLoggerCallback``) opens its own."""
        self._step_profilers = [sp for sp in self._step_profilers if sp.option != StepProfiler.option]

    def _retag(self) -> None:
        # the tags are ints: their JSON is written directly (set_step runs once per step; json.dumps costs more)
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

    def torch_profile(self, logdir: Union[str, os.PathLike, None] = None, **profiler_args: Any) -> Any:
        """Context manager running the PyTorch profiler into ``logdir`` (default ``<run_dir>/torch/rank-<r>``) with
        the wall-clock anchor marker; its ``step()`` marks the next step. See :mod:`timelogger.torch_profile`."""
        return torch_profile.TorchProfile(self, logdir, **profiler_args)

    def write_metadata(self, name: str, args: Dict[str, Any]) -> None:
        """Flush pending intervals, then write one ``"ph":"M"`` event ``name`` with ``args`` (JSON-able)."""
        if not self._on:
            if self._closed or self._failed:
                self._ignored()
            return
        self.writer.write_metadata(name, args)

    def flush(self) -> None:
        """Write every interval recorded so far (the background thread does this every ``flush_interval``)."""
        if self._on:
            self.writer.flush()

    def close(self) -> None:
        """Flush, write the ``timelogger_close`` metadata (second anchor pair) and close the file. Idempotent."""
        if self._closed or not self.writer.is_open:
            self._closed = True
            self._on = False
            return
        if self.writer.defer_close():
            return  # a signal handler of this thread interrupted our own flush, which closes when it is done
        entered = process.busy_enter()
        try:
            self._close()
        finally:
            process.busy_exit(entered)

    def _close(self) -> None:
        profilers, self._step_profilers = self._step_profilers, []
        for sp in profilers if self._on else ():
            self._finish_profile(sp)
        self._closed = True
        was_on = self._on
        self._on = False
        if self.writer.close(drain=was_on):
            process.unregister(self)

    def __enter__(self) -> "TimeLogger":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "on" if self._on else ("closed" if self._closed else "off")
        return f"TimeLogger(path={str(self.path)!r}, rank={self.rank}, {state})"

    # ------------------------------------------------------------------ fork (timelogger.process)
    def after_fork_in_child(self, exit_with: Optional[threading.Thread] = None) -> None:
        """In a forked child: forget the parent's buffers and file, open our own file (same rank, new pid).
        ``exit_with``: the thread that forked, when it was not the main one (the child ends with it)."""
        self.writer.reset_in_child(exit_with)
        self._on = False
        self._step_profilers = []  # the parent's profile windows: its profiler session is not the child's
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


def _new_default_lock() -> None:
    global _default_lock
    _default_lock = threading.Lock()  # another thread of the parent may have held it at fork time


process.call_in_forked_child(_new_default_lock)


def _make_default() -> TimeLogger:
    global _default
    with _default_lock:
        if _default is None:
            _default = TimeLogger(os.environ.get(ENV_DIR) or None)
        return _default


def _launcher_profiles(tl: TimeLogger) -> List[StepProfiler]:
    """The launcher's ``--tf-profile`` and ``--torch-profile`` windows for a loop that sets steps, those asked for,
    if the logger is on and this is no ``multiprocessing`` child (a DataLoader or pool worker runs no training steps;
    a forked one drops its parent's windows, :meth:`TimeLogger.after_fork_in_child`)."""
    if not tl._on or process.in_multiprocessing_child():
        return []
    out: List[StepProfiler] = []
    for window, cls in ((launcher_window(), StepProfiler),
                        (torch_profile.launcher_window(), torch_profile.StepProfiler)):
        if window is not None:
            out.append(cls(tl, window))
    return out
