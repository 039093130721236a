"""The zero-code hooks' TensorFlow and Keras patches (:mod:`timelogger.hooks`), applied when the program imports them.

- ``tf.data``: ``OwnedIterator.__next__``/``get_next`` executed eagerly -- a Python loop's ``next()`` on a dataset --
  is a fetch (``Loop.fetch``); inside a ``tf.function`` (Keras' own loop) it only builds the graph and is not timed.
- ``tf.function``: an eager call of a ``tf.function`` is a step's compute (``Loop.step_begin``/``step_end``), named
  ``Step <function name>``; calls traced inside another function are not timed.
- Keras ``Model.fit``: :class:`timelogger.keras.TimeLoggerCallback` is added when the program did not add one (it
  opens the ``--tf-profile`` window; without that option a window over steps :data:`KERAS_DEFAULT_WINDOW`, since
  only a profile sees the fetch inside a Keras batch); ``fit``, ``evaluate`` and ``predict`` run with the two hooks
  above off, since their steps hold their fetches and the callback times the batches.
"""
from __future__ import annotations

import functools
import os
import time
from types import ModuleType
from typing import Any, Type

from .hooks import STEP_NAME, Loop, when_imported

#: where each Keras generation defines ``Model.fit`` (Keras 2 inside TF <= 2.15, tf_keras, Keras 3's TF trainer)
_KERAS_MODELS = (("keras.src.engine.training", "Model"), ("tf_keras.src.engine.training", "Model"),
                 ("keras.src.backend.tensorflow.trainer", "TensorFlowTrainer"))
_PATCHED = "__timelogger_hook__"
#: an iterator's attribute holding when its creation began, until its first fetch
_STARTED = "_timelogger_started_ns"


def register(loop: Loop) -> None:
    when_imported("tensorflow.python.data.ops.iterator_ops", lambda m: _patch_iterator(m, loop))
    when_imported("tensorflow.python.eager.polymorphic_function.polymorphic_function",
                  lambda m: _patch_function(m, loop))
    for module, cls in _KERAS_MODELS:
        when_imported(module, functools.partial(_patch_keras, cls=cls, loop=loop))


def _eager() -> Any:
    from tensorflow.python.eager import context

    return context.executing_eagerly


def _mark(fn: Any) -> Any:
    setattr(fn, _PATCHED, True)
    return fn


def _patch_iterator(mod: ModuleType, loop: Loop) -> None:
    cls = mod.OwnedIterator
    if getattr(cls.__next__, _PATCHED, False):
        return
    eager = _eager()
    pc = time.perf_counter_ns

    def timed(orig: Any, ends_with: Type[BaseException]) -> Any:
        @functools.wraps(orig)
        def fetch(self: Any) -> Any:
            if loop.suppressed or not eager():
                return orig(self)
            t0 = self.__dict__.pop(_STARTED, None) or pc()  # the first fetch includes the iterator's start-up
            try:
                item = orig(self)
            except ends_with:
                loop.fetch("tf.data", t0, pc(), getattr(self, "_dataset", None), exhausted=True)
                raise
            loop.fetch("tf.data", t0, pc())
            return item

        return _mark(fetch)

    from tensorflow.python.framework import errors

    init = cls.__init__

    @functools.wraps(init)
    def started(self: Any, *args: Any, **kwargs: Any) -> None:
        t0 = pc()
        init(self, *args, **kwargs)
        if not loop.suppressed and eager():
            self.__dict__[_STARTED] = t0

    cls.__init__ = started
    cls.__next__ = timed(cls.__next__, StopIteration)
    cls.get_next = timed(cls.get_next, errors.OutOfRangeError)


def _patch_function(mod: ModuleType, loop: Loop) -> None:
    cls = mod.Function
    if getattr(cls.__call__, _PATCHED, False):
        return
    orig = cls.__call__
    eager = _eager()
    pc = time.perf_counter_ns

    @functools.wraps(orig)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if loop.suppressed or not eager():
            return orig(self, *args, **kwargs)
        name = f"{STEP_NAME} {getattr(self, '_name', None) or 'tf.function'}"
        loop.saw("tf.function")
        loop.step_begin()
        t0 = pc()
        try:
            return orig(self, *args, **kwargs)
        finally:
            loop.step_end(name, t0, pc())

    cls.__call__ = _mark(call)


def _patch_keras(mod: ModuleType, cls: str, loop: Loop) -> None:
    model = getattr(mod, cls)
    for method in ("fit", "evaluate", "predict"):
        orig = model.__dict__.get(method)
        if orig is None or getattr(orig, _PATCHED, False):
            continue
        setattr(model, method, _mark(_keras_loop(orig, method, loop)))


def _keras_loop(orig: Any, method: str, loop: Loop) -> Any:
    @functools.wraps(orig)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if loop.suppressed:
            return orig(self, *args, **kwargs)
        loop.saw(f"keras {method}")
        if method == "fit":
            args, kwargs = _with_callback(args, kwargs, loop)
        loop.suppressed += 1
        try:
            return orig(self, *args, **kwargs)
        finally:
            loop.suppressed -= 1

    return run


#: the steps the hooks profile in a Keras fit run without ``--tf-profile`` (global steps; the first is warm-up)
KERAS_DEFAULT_WINDOW = "1:21"
#: ``fit(x, y, batch_size, epochs, verbose, callbacks, ...)``: where ``callbacks`` sits when given by position
_CALLBACKS_AT = 5


def _with_callback(args: tuple, kwargs: dict, loop: Loop) -> tuple:
    """``fit``'s arguments with a :class:`TimeLoggerCallback` added unless the program added one."""
    positional = len(args) > _CALLBACKS_AT
    given = args[_CALLBACKS_AT] if positional else kwargs.get("callbacks")
    if given is not None and not isinstance(given, (list, tuple)):
        loop.problem("Keras fit: callbacks given as a CallbackList; no TimeLoggerCallback added")
        return args, kwargs
    given = list(given or [])
    if any(type(cb).__name__ == "TimeLoggerCallback" for cb in given):
        return args, kwargs
    from .keras import TimeLoggerCallback
    from .tf import ENV_TF_PROFILE

    # A Keras batch holds its fetch, so only a profile shows the wait inside it: without --tf-profile the hooks
    # profile a few steps (the verdict then counts those cycles and says so); --tf-profile=none switches it off
    window = None if os.environ.get(ENV_TF_PROFILE) is not None else KERAS_DEFAULT_WINDOW
    if window is not None:
        loop.saw(f"keras profile window {window}")
    given.append(TimeLoggerCallback(loop.logger(), profile_batches=window))
    if positional:
        return (*args[:_CALLBACKS_AT], given, *args[_CALLBACKS_AT + 1:]), kwargs
    return args, {**kwargs, "callbacks": given}
