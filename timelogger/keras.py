"""Keras callback recording the training loop, epochs and batches of ``model.fit`` as TimeLogger intervals.

``from timelogger.keras import TimeLoggerCallback`` imports TensorFlow (the class derives from
``tensorflow.keras.callbacks.Callback``, Keras 2 in TF 2.15 and Keras 3 in TF >= 2.16); ``import timelogger`` and
``import timelogger.keras`` do not.
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["TimeLoggerCallback"]

_cls: Optional[type] = None


def _callback_base() -> type:
    try:
        from tensorflow import keras as tf_keras
    except ImportError as exc:
        raise ImportError(f"timelogger.keras needs TensorFlow: pip install .[tf] ({exc})") from exc
    return tf_keras.callbacks.Callback


def _build() -> type:
    from .logger import TimeLogger, default_logger

    base = _callback_base()

    class TimeLoggerCallback(base):  # type: ignore[misc, valid-type]
        """Intervals for ``model.fit``: the whole fit, each epoch, each training batch.

        Sets ``tl.set_epoch(epoch)`` at each epoch start and ``tl.set_step(step)`` (global step counter over all
        epochs, from 0) at each batch start, so every interval recorded meanwhile (also by the input pipeline)
        carries ``args.epoch`` / ``args.step``. Batch intervals also carry ``args.batch`` (index in the epoch);
        epoch intervals carry the epoch's final metrics as floats.

        Parameters
        ----------
        tl
            Logger to record into; :func:`timelogger.default_logger` when None.
        train_name, epoch_name, batch_name
            Interval names.
        batch_cat
            Category of batch intervals (``compute`` by default: a Keras train step runs the model; its input
            wait shows up separately in the framework layer).
        """

        def __init__(self, tl: Optional[TimeLogger] = None, *, train_name: str = "Train Loop",
                     epoch_name: str = "Epoch", batch_name: str = "Training Iteration",
                     batch_cat: str = "compute") -> None:
            super().__init__()
            self.tl = default_logger() if tl is None else tl
            self._names = (train_name, epoch_name, batch_name)
            self._batch_cat = batch_cat
            self.step = 0
            self._train: Any = None
            self._epoch: Any = None
            self._batch: Any = None

        def on_train_begin(self, logs: Any = None) -> None:
            self._train = self.tl.phase(self._names[0], "other").__enter__()

        def on_train_end(self, logs: Any = None) -> None:
            if self._train is not None:
                self._train.__exit__(None, None, None)
                self._train = None

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
            self._batch = self.tl.phase(self._names[2], self._batch_cat).__enter__()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self._batch is None:
                return
            self._batch.update(batch=int(batch))
            self._batch.__exit__(None, None, None)
            self._batch = None
            self.step += 1

    TimeLoggerCallback.__module__ = __name__
    return TimeLoggerCallback


def __getattr__(name: str) -> Any:
    global _cls
    if name == "TimeLoggerCallback":
        if _cls is None:
            _cls = _build()
        return _cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
