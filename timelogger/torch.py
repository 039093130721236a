"""PyTorch capture for people who prefer code: the launcher's zero-code hooks as a context manager, and the profiler.

::

    import timelogger.torch as tlt

    with tlt.instrument(loader, optimizer):          # or instrument() for every loader and optimizer
        for epoch in range(epochs):
            for x, y in loader:                      # each next(): "Fetch Batch" (wait)
                loss = model(x).loss(y)
                loss.backward()
                optimizer.step()                     # closes the step: "Step SGD.step" (compute) since the fetch

    with tlt.profile() as prof:                      # torch.profiler into RUN/torch/rank-<r>/, anchored to wall time
        for x, y in loader:
            ...
            prof.step()

:class:`instrument` records exactly what ``timelogger run`` records without a line of code
(:mod:`timelogger.hooks_torch`, ``docs/hooks.md``): fetches, steps and epochs of the consumer, the reader intervals
of the DataLoader's workers, into the process's logger (``timelogger.default_logger()``: the launcher's run
directory; ``logger=`` another), and with ``profile="START:STOP"`` a PyTorch profiler window on those steps. Under
the launcher the hooks are on anyway; ``instrument(loader, ...)`` then narrows them to the objects named. Without the
launcher, workers started by fork (Linux's default) are timed; spawn and forkserver workers start a fresh interpreter
that only the launcher's start-up hook instruments. PyTorch is imported by the program, never by
``import timelogger``.
"""
from __future__ import annotations

import sys
from typing import Any, Optional, Union

from . import hooks_torch
from .hooks import LOOP
from .logger import PROGRAM, TimeLogger, default_logger
from .tf import ProfileWindow, parse_profile_spec
from .torch_profile import DEFAULT_WINDOW, ENV_TORCH_PROFILE, StepProfiler, TorchProfile

__all__ = ["instrument", "profile", "TorchProfile", "StepProfiler", "DEFAULT_WINDOW", "ENV_TORCH_PROFILE"]


class instrument:  # noqa: N801 -- used like a function: ``with instrument(loader, optimizer):``
    """Time a block's DataLoader iterations, optimizer steps and DataLoader workers as the zero-code hooks do.

    Parameters
    ----------
    objects
        DataLoaders and optimizers to time; of a kind none is named of, every one is timed.
    logger
        Where the intervals go; default :func:`timelogger.default_logger` (disabled without a run directory).
    profile
        A PyTorch profiler window over the block's steps (``"START:STOP"``, ``"all"``, ``True`` for
        :data:`DEFAULT_WINDOW`), one trace into ``<run_dir>/torch/rank-<r>/``; None: no profile.

    Attributes
    ----------
    steps, fetches, epochs
        What the block saw: steps closed, fetches, epoch ends (set when it ends).
    """

    def __init__(self, *objects: Any, logger: Optional[TimeLogger] = None,
                 profile: Union[str, bool, ProfileWindow, None] = None) -> None:
        self.objects = objects
        self.logger = logger
        self.window = parse_profile_spec(DEFAULT_WINDOW if profile is True else profile)
        self.steps = self.fetches = self.epochs = 0
        self._saved: Any = None
        self._start = (0, 0, 0)
        self._profiler: Optional[StepProfiler] = None

    def __enter__(self) -> "instrument":
        if "torch" not in sys.modules:
            raise RuntimeError("timelogger.torch.instrument: import torch first (timelogger never imports it)")
        hooks_torch.install(LOOP)
        self._saved = (hooks_torch.SCOPE.enter(self.objects), LOOP.tl)
        if self.logger is not None:
            LOOP.tl = self.logger
            if not PROGRAM.epochs:
                self.logger.tag_epoch(LOOP.epoch)
        tl = LOOP.logger()
        self._start = (LOOP.steps, LOOP.fetches, LOOP.epoch_ends)
        if self.window is not None and tl.enabled:
            self._profiler = StepProfiler(tl, self.window)
            tl.add_step_profiler(self._profiler)
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        scope, tl_before = self._saved
        tl = LOOP.logger()
        sp, self._profiler = self._profiler, None
        if sp is not None:
            tl.remove_step_profiler(sp)
        hooks_torch.SCOPE.leave(scope)
        steps, fetches, ends = self._start
        self.steps, self.fetches, self.epochs = LOOP.steps - steps, LOOP.fetches - fetches, LOOP.epoch_ends - ends
        if not LOOP.on and tl.enabled:  # the launcher's hooks write this at exit
            tl.write_metadata("timelogger_hooks", LOOP.facts())
        LOOP.tl = tl_before
        return None


def profile(logger: Optional[TimeLogger] = None, logdir: Any = None, **profiler_args: Any) -> TorchProfile:
    """``with profile() as p: ... p.step()``: the PyTorch profiler over a block, one Chrome/Kineto trace into
    ``logdir`` (default ``<run_dir>/torch/rank-<r>``), anchored to the logger's clock (:class:`TorchProfile`)."""
    return TorchProfile(logger if logger is not None else default_logger(), logdir, **profiler_args)
