"""Keras callback recording the training loop, epochs and batches of ``model.fit`` as TimeLogger intervals.

``from timelogger.keras import TimeLoggerCallback`` imports TensorFlow (the class derives from
``tensorflow.keras.callbacks.Callback``, Keras 2 in TF 2.15 and Keras 3 in TF >= 2.16); ``import timelogger`` and
``import timelogger.keras`` do not.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

from .tf import launcher_window, parse_profile_spec

__all__ = ["TimeLoggerCallback"]  # noqa: F822 -- made on first access (module __getattr__)

_cls: Optional[type] = None
_log = logging.getLogger(__name__)


def _callback_base() -> type:
    try:
        from tensorflow import keras as tf_keras
    except ImportError as exc:
        raise ImportError(f"timelogger.keras needs TensorFlow: pip install .[tf] ({exc})") from exc
    return tf_keras.callbacks.Callback


def _build() -> type:
    from .logger import TimeLogger, default_logger
    from .tf import TFProfile

    base = _callback_base()

    class TimeLoggerCallback(base):  # type: ignore[misc, valid-type]
        """Intervals for ``model.fit``: the whole fit, each epoch, each training batch; optionally a TF profile.

        Sets ``tl.set_epoch(epoch)`` at each epoch start and ``tl.set_step(step)`` (global step counter over all
        epochs, from 0) at each batch start, so every interval recorded meanwhile (also by the input pipeline)
        carries ``args.epoch`` / ``args.step``. Batch intervals also carry ``args.batch`` (index in the epoch)
        and ``args.includes_input_wait = true``; epoch intervals carry the epoch's final metrics as floats.

        **Input wait is inside the batch interval.** Keras fetches each batch inside its compiled train function
        (an ``IteratorGetNext`` op), between ``on_train_batch_begin`` and ``on_train_batch_end``, so a batch
        interval is fetch + compute and the app layer alone cannot tell an input-bound job from a compute-bound
        one (``includes_input_wait`` lets the analysis say so). The TF profiler's framework layer shows the
        fetch; ``profile_batches`` (or ``timelogger run --tf-profile``) opens such a window around the fit.

        Timing the fetch from Python instead was measured and rejected (``docs/wire-format.md``, "Keras
        batches"; ``benchmarks/perf/keras_timed_input.py``): the only hook is a
        ``tf.data.Dataset.from_generator`` around ``tl.iterate(ds, ...)``, which costs a large share of a small
        step and over-reports a fast pipeline's wait, adds a Python/GIL hop per batch and hides the pipeline from
        tf.data's optimiser and ``tf.distribute`` sharding. The profile window costs nothing outside its steps.

        Parameters
        ----------
        tl
            Logger to record into; :func:`timelogger.default_logger` when None.
        profile_batches
            TF profile window (:func:`timelogger.tf.parse_profile_spec`): ``"all"`` / ``True`` (the whole fit,
            ``on_train_begin`` to ``on_train_end``), ``"START:STOP"`` or ``(START, STOP)`` (global steps START
            to STOP-1, counted like ``args.step``), ``"START:"``, ``N`` (one step), ``False`` (none, whatever
            the environment says). None (default): ``$TIMELOGGER_TF_PROFILE``, set by
            ``timelogger run --tf-profile[=SPEC]``; unset means no profile. The profile goes to
            ``tl.tf_profile()``'s default logdir ``<run>/tf/rank-<r>``; a profiler that cannot start (no TF
            profiler, another profile running, a logger without run directory) is logged and training goes on.
            A ``fit`` that raises skips ``on_train_end``, so a window still open then is not written.
        train_name, epoch_name, batch_name
            Interval names.
        batch_cat
            Category of batch intervals (``compute`` by default; the batch's input wait is inside it, see
            above).

        Raises
        ------
        ValueError
            ``profile_batches`` is not a window (a bad ``$TIMELOGGER_TF_PROFILE`` is only logged).
        """

        def __init__(self, tl: Optional[TimeLogger] = None, *, profile_batches: Any = None,
                     train_name: str = "Train Loop", epoch_name: str = "Epoch",
                     batch_name: str = "Training Iteration", batch_cat: str = "compute") -> None:
            super().__init__()
            self.tl = default_logger() if tl is None else tl
            self._names = (train_name, epoch_name, batch_name)
            self._batch_cat = batch_cat
            self.step = 0
            self._train: Any = None
            self._epoch: Any = None
            self._batch: Any = None
            self._profile: Optional[TFProfile] = None
            self.tl.take_tf_profile()  # this callback opens the window, by its own step counter
            self.profile_window = launcher_window() if profile_batches is None else \
                parse_profile_spec(profile_batches)

        def _profile_start(self) -> None:
            if self._profile is None:
                self._profile = self.tl.tf_profile().__enter__()

        def _profile_stop(self) -> None:
            if self._profile is not None:
                self._profile.__exit__(None, None, None)
                self._profile = None

        def on_train_begin(self, logs: Any = None) -> None:
            if self.profile_window is not None and self.profile_window.start is None:
                self._profile_start()  # before the fit interval opens: the profiler's start is not the job's
            self._train = self.tl.phase(self._names[0], "other").__enter__()

        def on_train_end(self, logs: Any = None) -> None:
            if self._train is not None:
                self._train.__exit__(None, None, None)
                self._train = None
            self._profile_stop()  # a window reaching past the last step ends with the fit

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.tl.set_epoch(epoch)
            self._epoch = self.tl.phase(self._names[1], "other").__enter__()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self._epoch is None:
                return
            metrics = {}
            for key, value in (logs or {}).items():
                try:
                    metrics[str(key)] = float(value)
                except (TypeError, ValueError):
                    continue
            if metrics:
                self._epoch.update(metrics=metrics)
            self._epoch.__exit__(None, None, None)
            self._epoch = None

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.tl.set_step(self.step)
            win = self.profile_window
            if win is not None and win.start is not None and win.start == self.step:
                self._profile_start()  # before the batch opens, so its fetch is inside the window
            self._batch = self.tl.phase(self._names[2], self._batch_cat).__enter__()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self._batch is None:
                return
            self._batch.update(batch=int(batch), includes_input_wait=True)
            self._batch.__exit__(None, None, None)
            self._batch = None
            self.step += 1
            win = self.profile_window
            if win is not None and win.stop is not None and self.step >= win.stop:
                self._profile_stop()

    TimeLoggerCallback.__module__ = __name__
    return TimeLoggerCallback


def __getattr__(name: str) -> Any:
    global _cls
    if name == "TimeLoggerCallback":
        if _cls is None:
            _cls = _build()
        return _cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
