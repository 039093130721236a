"""PyTorch profiler window with a wall-clock anchor, one Chrome/Kineto trace per window in ``RUN/torch/rank-<r>/``.

PyTorch is imported only when a profile starts (the program has imported it by then). The trace carries its own
absolute time base (``baseTimeNanoseconds``); the ``torch_profile`` metadata event written into the app file when
the window closes names the trace and adds a marker whose wall time is known (``timelogger_anchor``, a
``record_function`` between two ``time.time_ns()`` readings, as for the TF profile), so a reader can check its
alignment. ``ProfilerStep#N`` markers carry the steps' own numbers (the hooks' or the program's ``set_step``).

``timelogger run --torch-profile[=SPEC]`` sets :data:`ENV_TORCH_PROFILE`; every logger of the program then holds a
:class:`StepProfiler` that the zero-code hooks move at each cycle (the fetch of a step's batch) or the program's own
``set_step`` calls move. The window specification is the TF one (:func:`timelogger.tf.parse_profile_spec`).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from . import layout
from ._env import hostname
from .tf import MARKER, ProfileWindow
from .tf import StepProfiler as _TFStepProfiler
from .tf import launcher_window as tf_launcher_window

if TYPE_CHECKING:  # pragma: no cover
    from .logger import TimeLogger

__all__ = ["TorchProfile", "StepProfiler", "launcher_window", "ENV_TORCH_PROFILE", "DEFAULT_WINDOW", "TRACE_SUFFIX"]

_log = logging.getLogger(__name__)

#: Environment variable set by ``timelogger run --torch-profile[=SPEC]``.
ENV_TORCH_PROFILE = "TIMELOGGER_TORCH_PROFILE"
#: the window of ``--torch-profile`` without a value: steps 1-20 (the first step, 0, is warm-up), as the hooks'
#: window of a Keras ``fit``; ``all`` profiles the whole run
DEFAULT_WINDOW = "1:21"
#: how a trace file's name ends (TensorBoard's PyTorch profiler plugin reads ``*.pt.trace.json[.gz]``)
TRACE_SUFFIX = ".pt.trace.json.gz"


def _record_every_step(step: int) -> Any:
    """A ``torch.profiler`` schedule that records every step: with a schedule the profiler marks ``ProfilerStep#N``."""
    from torch.profiler import ProfilerAction

    return ProfilerAction.RECORD


class TorchProfile:
    """``with tl.torch_profile() as p:`` -- profile the block with ``torch.profiler.profile``; ``p.step()`` marks the
    next step (``ProfilerStep#N``).

    On entry: start the profiler (every activity this build supports, unless ``activities`` is given) and emit the
    ``record_function`` :data:`timelogger.tf.MARKER` between two ``time.time_ns()`` readings. On exit (also after
    an exception): stop it, write the trace to ``<logdir>/<host>_<pid>.<ms>.pt.trace.json.gz`` and the
    ``torch_profile`` metadata event (``trace``, ``logdir``, ``marker``, ``marker_wall_ns``,
    ``marker_uncertainty_ns``, ``start_wall_ns``, ``stop_wall_ns``, ``first_step``, ``last_step``,
    ``torch_version``).

    Parameters
    ----------
    tl
        Logger receiving the metadata; its run directory gives the default logdir.
    logdir
        Where the trace goes; default ``<run_dir>/torch/rank-<r>`` (one per rank).
    first_step
        The number of the first profiled step (``ProfilerStep#first_step``); 0 when not given.
    profiler_args
        More arguments of ``torch.profiler.profile`` (``record_shapes``, ``with_stack``, ``activities``, ...).

    Notes
    -----
    If the profiler cannot start (another profile running), a warning is logged and the block runs unprofiled:
    profiling must never stop training.
    """

    def __init__(self, tl: "TimeLogger", logdir: Union[str, os.PathLike, None] = None,
                 first_step: Optional[int] = None, **profiler_args: Any) -> None:
        self._tl = tl
        if logdir is None and tl.out_dir is not None:
            logdir = layout.torch_logdir(tl.out_dir, tl.rank)
        self.logdir: Optional[Path] = None if logdir is None else Path(logdir)
        self.first_step = 0 if first_step is None else int(first_step)
        self.last_step = self.first_step
        self.profiler_args = profiler_args
        self.active = False
        self.trace: Optional[Path] = None
        self._prof: Any = None
        self._anchor: dict = {}

    def __enter__(self) -> "TorchProfile":
        if self.logdir is None:
            _log.warning("timelogger: torch_profile() without logdir on a logger without run directory; not profiling")
            return self
        try:
            import torch
            import torch.profiler as tp
        except ImportError as exc:
            _log.warning("timelogger: torch_profile needs PyTorch: %s; not profiling", exc)
            return self
        args = dict(self.profiler_args)
        args.setdefault("activities", sorted(tp.supported_activities(), key=str))
        start_wall_ns = time.time_ns()
        try:
            self.logdir.mkdir(parents=True, exist_ok=True)
            prof = tp.profile(schedule=_record_every_step, **args)
            prof.step_num = self.first_step
            prof.start()
        except Exception as exc:  # another profiler running, a bad argument: keep training, without this profile
            _log.warning("timelogger: could not start the PyTorch profiler into %s: %s", self.logdir, exc)
            return self
        self._prof, self.active = prof, True
        t0 = time.time_ns()
        with tp.record_function(MARKER):
            pass
        t1 = time.time_ns()
        self._anchor = {"marker": MARKER, "marker_wall_ns": (t0 + t1) // 2, "marker_uncertainty_ns": t1 - t0,
                        "start_wall_ns": start_wall_ns, "torch_version": str(getattr(torch, "__version__", "unknown")),
                        "activities": [str(a) for a in args["activities"]]}
        return self

    def step(self, step: Optional[int] = None) -> None:
        """The next step begins (``ProfilerStep#step``; the one after the last when ``step`` is None)."""
        if not self.active:
            return
        if step is not None:
            self._prof.step_num = int(step) - 1  # step() counts on from here
        self._prof.step()
        self.last_step = self._prof.step_num

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if not self.active:
            return None
        self.active = False
        assert self.logdir is not None
        path = self.logdir / f"{hostname()}_{os.getpid()}.{time.time_ns() // 1_000_000}{TRACE_SUFFIX}"
        try:
            self._prof.stop()
            stop_wall_ns = time.time_ns()
            self._prof.export_chrome_trace(str(path))
        except Exception as exc:
            _log.warning("timelogger: stopping the PyTorch profiler or writing %s failed: %s", path, exc)
            return None
        finally:
            self._prof = None
        self.trace = path
        self._tl.write_metadata("torch_profile", {
            "trace": str(path.resolve()), "logdir": str(self.logdir.resolve()), **self._anchor,
            "stop_wall_ns": stop_wall_ns, "first_step": self.first_step, "last_step": self.last_step})
        return None


class StepProfiler(_TFStepProfiler):
    """The launcher's ``--torch-profile`` window: ``ProfilerStep#N`` for the steps of the window, one trace per window.

    The zero-code hooks move it at each cycle's start (:meth:`timelogger.TimeLogger.cycle_begins`: the fetch of a
    step's batch; in a loop that fetches through no hooked DataLoader, the end of the previous ``Optimizer.step``),
    so the trace's steps are whole cycles; a program that numbers its steps (``tl.set_step`` at the top of its loop)
    moves it instead. The window opens at the cycle of its first step and closes at the first cycle past it, or when
    the logger closes. When no window opened by the end, the logger says why (metadata ``torch_profile_missed``).
    """

    framework = "torch"
    label = "PyTorch"
    profiler = "the PyTorch profiler"
    option = "--torch-profile"
    missed_key = "torch_profile_missed"
    by_cycle = True
    steps_from = "hooked DataLoader fetch or Optimizer.step, or tl.set_step(),"

    def _open(self, step: int) -> TorchProfile:
        return TorchProfile(self._tl, first_step=step).__enter__()

    def _next(self, step: int) -> None:
        if step > self._profile.last_step:  # a cycle may be announced twice (an epoch's end, the next one's start)
            self._profile.step(step)


def launcher_window() -> Optional[ProfileWindow]:
    """The profile window ``timelogger run --torch-profile[=SPEC]`` asked for (``$TIMELOGGER_TORCH_PROFILE``), None
    when none was."""
    return tf_launcher_window(ENV_TORCH_PROFILE)
