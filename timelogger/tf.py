"""TF profiler window with a wall-clock anchor (``docs/wire-format.md``, "TF 2.15 anchor marker").

TensorFlow is imported only when a profile starts, with an actionable message if it is missing. Also the profile
window specification shared by ``timelogger run --tf-profile[=SPEC]`` and
``TimeLoggerCallback(profile_batches=...)`` (:func:`parse_profile_spec`).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Tuple, Union

from . import layout

if TYPE_CHECKING:  # pragma: no cover
    from .logger import TimeLogger

__all__ = ["TFProfile", "StepProfiler", "launcher_window", "MARKER", "ENV_TF_PROFILE", "ProfileWindow",
           "parse_profile_spec"]

_log = logging.getLogger(__name__)

#: Name of the TraceMe whose wall time the ``tf_profile`` metadata event records.
MARKER = "timelogger_anchor"
#: Environment variable set by ``timelogger run --tf-profile[=SPEC]``; read by ``TimeLoggerCallback``.
ENV_TF_PROFILE = "TIMELOGGER_TF_PROFILE"


class ProfileWindow(NamedTuple):
    """Which part of ``model.fit`` to profile: global steps ``start <= step < stop``.

    Steps are the callback's global step counter (``args.step``: 0-based, counted over all epochs). ``start``
    None means the whole fit (``on_train_begin`` to ``on_train_end``); ``stop`` None means up to the end of fit.
    """

    start: Optional[int]
    stop: Optional[int]


ALL = ProfileWindow(None, None)


def parse_profile_spec(spec: Union[str, bool, int, Tuple[int, int], ProfileWindow, None]) -> Optional[ProfileWindow]:
    """Parse a profile window: None (no profile) or a :class:`ProfileWindow`.

    Accepted: ``"all"`` / ``True`` (the whole fit); ``"START:STOP"`` (global steps START to STOP-1,
    like a Python slice), ``"START:"`` (from START to the end of fit), ``"N"`` / ``N`` (step N only; a number
    is always a step, never a boolean), a pair ``(START, STOP)``; ``None``, ``False``, ``""``, ``"off"``,
    ``"none"``, ``"false"`` give None (no profile).

    Raises
    ------
    ValueError
        Anything else (negative steps, STOP <= START, not a number), with the accepted forms in the message.
    """
    if spec is None or spec is False:
        return None
    if spec is True:
        return ALL
    if isinstance(spec, ProfileWindow):
        return spec
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        spec = f"{spec[0]}:{spec[1]}"
    text = str(spec).strip().lower()
    if text in ("all", "true", "yes", "on"):
        return ALL
    if text in ("", "off", "none", "false", "no"):
        return None
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            start, stop = int(a or 0), (int(b) if b else None)
        else:
            start = int(text)
            stop = start + 1
    except ValueError:
        start, stop = -1, None
    if start < 0 or (stop is not None and stop <= start):
        raise ValueError(f"bad TF profile window {spec!r}: use 'all', 'START:STOP' (global steps, STOP excluded), "
                         "'START:' or 'N'")
    return ProfileWindow(start, stop)


class TFProfile:
    """``with tl.tf_profile(logdir):`` — profile the block with ``tf.profiler.experimental``.

    On entry: start the profiler into ``logdir``, emit the TraceMe :data:`MARKER` between two ``time.time_ns()``
    readings ``t0, t1`` and write the ``tf_profile`` metadata event (``logdir``, ``marker``,
    ``marker_wall_ns = (t0 + t1) // 2``, ``start_wall_ns`` = wall ns just before ``start()``, ``tf_version``).
    On exit (also after an exception): stop the profiler, which writes
    ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``.

    Parameters
    ----------
    tl
        Logger receiving the metadata; its run directory gives the default logdir.
    logdir
        Profiler log directory; default ``<run_dir>/tf/rank-<r>``. Ranks must not share one (same-second runs on
        one host overwrite each other's ``xplane.pb``).

    Notes
    -----
    If the profiler cannot start (another profile running, no TF), a warning is logged and the block runs
    unprofiled: profiling must never stop training.
    """

    def __init__(self, tl: "TimeLogger", logdir: Union[str, os.PathLike, None] = None) -> None:
        self._tl = tl
        if logdir is None and tl.out_dir is not None:
            logdir = layout.tf_logdir(tl.out_dir, tl.rank)
        self.logdir: Optional[Path] = None if logdir is None else Path(logdir)
        self.active = False
        self.marker_wall_ns: Optional[int] = None

    def __enter__(self) -> "TFProfile":
        if self.logdir is None:
            _log.warning("timelogger: tf_profile() without logdir on a logger without run directory; not profiling")
            return self
        try:
            import tensorflow as tf
        except ImportError as exc:
            _log.warning("timelogger: tf_profile needs TensorFlow (pip install .[tf]): %s; not profiling", exc)
            return self
        self.logdir.mkdir(parents=True, exist_ok=True)
        start_wall_ns = time.time_ns()
        try:
            tf.profiler.experimental.start(str(self.logdir))
        except Exception as exc:  # AlreadyExists / Unavailable: keep training, just without this profile
            _log.warning("timelogger: could not start the TF profiler into %s: %s", self.logdir, exc)
            return self
        self.active = True
        t0 = time.time_ns()
        with tf.profiler.experimental.Trace(MARKER):
            pass
        t1 = time.time_ns()
        self.marker_wall_ns = (t0 + t1) // 2
        self._tl.write_metadata("tf_profile", {
            "logdir": str(self.logdir.resolve()),
            "marker": MARKER,
            "marker_wall_ns": self.marker_wall_ns,
            "marker_uncertainty_ns": t1 - t0,
            "start_wall_ns": start_wall_ns,
            "tf_version": getattr(tf, "__version__", "unknown"),
        })
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if not self.active:
            return None
        self.active = False
        import tensorflow as tf

        try:
            tf.profiler.experimental.stop()
        except Exception as exc:
            _log.warning("timelogger: stopping the TF profiler failed: %s", exc)
        return None


def launcher_window(variable: str = ENV_TF_PROFILE) -> Optional[ProfileWindow]:
    """The profile window ``timelogger run --tf-profile[=SPEC]`` asked for (``$TIMELOGGER_TF_PROFILE``; another
    profiler's option sets ``variable``), None when none was; a bad value is logged, not raised (profiling must never
    stop training)."""
    try:
        return parse_profile_spec(os.environ.get(variable))
    except ValueError as exc:
        _log.warning("timelogger: $%s: %s; not profiling", variable, exc)
        return None


class StepProfiler:
    """The launcher's ``--tf-profile`` window for a training loop that is not Keras ``fit``.

    A custom loop calls ``tl.set_step(step)``; the window opens at the first step inside it (``"all"``: the first
    step) and closes at the first step past it, or when the logger closes. Keras' ``TimeLoggerCallback`` opens its
    own window and switches this one off. The program must have imported TensorFlow by its first profiled step
    (this never imports it); when no window opened by the end, the logger says why on stderr and in its file
    (metadata ``tf_profile_missed``).

    Another framework's window (:class:`timelogger.torch.StepProfiler`) is this class with its own profile
    (:meth:`_open`), module, option and step markers (:meth:`_next`).
    """

    #: the module the program must have imported (and its name, its profiler's); the launcher option; the metadata of
    #: a window never opened
    framework = "tensorflow"
    label = "TensorFlow"
    profiler = "the TF profiler"
    option = "--tf-profile"
    missed_key = "tf_profile_missed"
    #: the window follows the hooks' cycles (``TimeLogger.cycle_begins``) rather than their step tags
    by_cycle = False
    #: what moves the window, for the message when no step reached it
    steps_from = "TimeLoggerCallback batch, tl.set_step() or hooked tf.function step"

    def __init__(self, tl: "TimeLogger", window: ProfileWindow) -> None:
        self._tl = tl
        self.window = window
        self._profile: Any = None
        self.opened = 0
        self._done = False
        self.missed: Optional[str] = None

    def on_step(self, step: Optional[int]) -> None:
        if step is None or self._done:
            return
        start, stop = self.window
        inside = (start is None or step >= start) and (stop is None or step < stop)
        if inside and self._profile is None:
            if self.framework not in sys.modules:
                self.missed = f"the program had not imported {self.label} at its first profiled step"
                self._done = True
                return
            self._profile = self._open(step)
            if self._profile.active:
                self.opened += 1
            else:
                self.missed = f"{self.profiler} could not start (see the warning above)"
                self._profile, self._done = None, True
        elif inside:
            self._next(step)
        elif self._profile is not None:
            self.stop()
            self._done = True

    def _open(self, step: int) -> Any:
        """Start the profile (its ``active`` says whether it did) at ``step``, the window's first."""
        return TFProfile(self._tl).__enter__()

    def _next(self, step: int) -> None:
        """Another step inside the open window (TF's profile needs nothing)."""

    def stop(self) -> None:
        if self._profile is not None:
            self._profile.__exit__(None, None, None)
            self._profile = None

    def why_not(self) -> Optional[str]:
        """None when a window was opened, else why none was."""
        if self.opened:
            return None
        return self.missed or (f"no step reached the window: no {self.steps_from} in "
                               f"{self.window.start or 0}:{self.window.stop or ''}")
