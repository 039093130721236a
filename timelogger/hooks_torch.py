"""The zero-code hooks' PyTorch patches (:mod:`timelogger.hooks`), applied when the program imports PyTorch.

- ``DataLoader``: each ``next()`` on its iterator (``_BaseDataLoaderIter.__next__``) is a fetch (``Loop.fetch``,
  ``Fetch Batch``, cat ``wait``, on the consumer thread); the first fetch of an iteration includes ``iter(loader)``
  (worker start-up, or a persistent worker's resume). The loader is the data set the Loop numbers epochs by: the one
  that fed the steps ends an epoch when its iteration runs out, or when it is iterated again before it did (a loop
  that breaks off its epochs); ``DistributedSampler.set_epoch`` gives the epochs the program's own numbers.
- ``torch.optim.Optimizer.step`` (the global step post-hook) closes a step (``Loop.step_closed``): its compute,
  ``Step <Optimizer>.step``, runs from the end of the step's first fetch to the end of the call, since the forward
  and backward passes run in the program's own code before it.
- The fetchers of the DataLoader (``_MapDatasetFetcher``/``_IterableDatasetFetcher``), in its worker processes (fork,
  spawn, forkserver; persistent or not) and, without workers, in the loading process itself: ``Load Batch`` (cat
  ``io``) around each batch, ``<Dataset>.__getitem__`` (or ``__getitems__``, or ``<Dataset> next`` for an iterable
  one, the ``next()`` that finds its stream exhausted with ``args.exhausted``; cat ``io``) around each sample and
  ``Collate <fn>`` (cat ``preprocess``) around the collation: the reader intervals of the rank's loader, in one app
  file per worker (the rank's, as the worker inherits the launcher's environment), with no step or epoch tag of their
  own (a worker reads ahead of the steps; the merge lends the epoch of the rank's steps to its POSIX reads). The
  worker's file is closed when it exits, and when its parent ends it with SIGTERM
  (:func:`timelogger.process.exit_on_sigterm`: PyTorch's own handler would exit at once), so every interval is on disk
  or counted as dropped in the close record.

A program that times ``wait`` / ``compute`` phases itself gets no fetch / step intervals (:data:`~timelogger.logger.
PROGRAM`), one that times ``io`` or ``preprocess`` phases in a worker no reader intervals there.
:func:`timelogger.torch.instrument` turns the same patches on for a block of a program run without the launcher,
for every loader and optimizer or those it names (:data:`SCOPE`).
"""
from __future__ import annotations

import functools
import importlib
import os
import time
import weakref
from types import ModuleType
from typing import Any, Callable, Dict, Iterable, Optional

from . import process
from .hooks import STEP_NAME, Loop, when_imported
from .logger import PROGRAM

__all__ = ["register", "install", "SCOPE", "MODULES", "FETCHED", "STEPPED", "BATCH_NAME"]

#: what ``Loop.seen`` calls the two entry points
FETCHED = "torch DataLoader"
STEPPED = "torch Optimizer.step"
#: a worker's (or the loading process's) interval around one batch
BATCH_NAME = "Load Batch"
#: the modules patched, each when the program imports it
MODULES = ("torch.utils.data.dataloader", "torch.optim.optimizer", "torch.utils.data._utils.fetch",
           "torch.utils.data._utils.signal_handling", "torch.utils.data.distributed")

_PATCHED = "__timelogger_hook__"
#: an iterator's attributes: when ``iter(loader)`` began (until its first fetch), and a weak reference to the loader
_STARTED = "_timelogger_started_ns"
_LOADER = "_timelogger_loader"
#: a fetcher's reader (:class:`_Reader`), or False when it is not timed
_READER = "_timelogger_reader"

_pc = time.perf_counter_ns


class _Scope:
    """What the hooks time: nothing unless the launcher's hooks are on (``Loop.on``) or an ``instrument()`` block is
    open (:attr:`depth`); then every DataLoader and optimizer, or only those the open blocks named (``None``: all of
    that kind; datasets by ``id``, which a forked worker shares with its parent)."""

    def __init__(self) -> None:
        self.depth = 0
        self.loaders: "Optional[weakref.WeakSet[Any]]" = None
        self.optimizers: "Optional[weakref.WeakSet[Any]]" = None
        self.datasets: Optional[set] = None

    def timing(self, loop: Loop) -> bool:
        return (loop.on or self.depth > 0) and not loop.suppressed

    def enter(self, objects: Iterable[Any]) -> tuple:
        """Open a block timing ``objects`` (DataLoaders, optimizers; none: all); returns what :meth:`leave` restores."""
        from torch.optim import Optimizer
        from torch.utils.data import DataLoader

        saved = (self.loaders, self.optimizers, self.datasets)
        objects = list(objects)
        loaders = [o for o in objects if isinstance(o, DataLoader)]
        optimizers = [o for o in objects if isinstance(o, Optimizer)]
        other = [type(o).__name__ for o in objects if not isinstance(o, (DataLoader, Optimizer))]
        if other:
            raise TypeError(f"timelogger.torch.instrument: expected DataLoaders and optimizers, got {', '.join(other)}")
        if loaders:
            self.loaders = weakref.WeakSet([*(self.loaders or ()), *loaders])
            self.datasets = {*(self.datasets or ()), *(id(x.dataset) for x in loaders)}
        if optimizers:
            self.optimizers = weakref.WeakSet([*(self.optimizers or ()), *optimizers])
        self.depth += 1
        return saved

    def leave(self, saved: tuple) -> None:
        self.loaders, self.optimizers, self.datasets = saved
        self.depth -= 1


SCOPE = _Scope()
_registered = False


def register(loop: Loop) -> None:
    """Patch each of :data:`MODULES` when the program imports it (at once if it has)."""
    global _registered
    if _registered:
        return
    _registered = True
    patches: Dict[str, Callable[..., None]] = {
        "torch.utils.data.dataloader": _patch_loader, "torch.optim.optimizer": _patch_optimizer,
        "torch.utils.data._utils.fetch": _patch_fetchers,
        "torch.utils.data._utils.signal_handling": _patch_worker_signals,
        "torch.utils.data.distributed": _patch_sampler}
    for name in MODULES:
        when_imported(name, functools.partial(patches[name], loop=loop))


def install(loop: Loop) -> None:
    """The patches, now, in a program that has imported PyTorch (:func:`timelogger.torch.instrument`)."""
    for name in MODULES:
        importlib.import_module(name)
    register(loop)


def _mark(fn: Any) -> Any:
    setattr(fn, _PATCHED, True)
    return fn


# ---------------------------------------------------------------------- the consumer: fetches, steps, epochs
def _patch_loader(mod: ModuleType, loop: Loop) -> None:
    loader_cls, base = mod.DataLoader, mod._BaseDataLoaderIter
    if getattr(base.__next__, _PATCHED, False):
        return
    orig_iter, orig_next = loader_cls.__iter__, base.__next__

    @functools.wraps(orig_iter)
    def iterate(self: Any) -> Any:
        if not SCOPE.timing(loop) or (SCOPE.loaders is not None and self not in SCOPE.loaders):
            return orig_iter(self)
        loop.begin(self)
        t0 = _pc()
        it = orig_iter(self)
        state = getattr(it, "__dict__", None)
        if state is not None:
            state[_STARTED] = t0  # the first fetch includes the iterator's start-up (workers started or resumed)
            state[_LOADER] = weakref.ref(self)
        return it

    @functools.wraps(orig_next)
    def fetch(self: Any) -> Any:
        if not SCOPE.timing(loop):
            return orig_next(self)
        state = self.__dict__
        ref = state.get(_LOADER)
        loader = ref() if ref is not None else None
        if SCOPE.loaders is not None and loader not in SCOPE.loaders:
            return orig_next(self)
        source = loader if loader is not None else getattr(self, "_dataset", None)
        if not loop.fetched:
            loop.next_cycle()  # the fetch of the next step's batch: its cycle begins
        t0 = state.pop(_STARTED, None) or _pc()
        try:
            item = orig_next(self)
        except StopIteration:
            loop.fetch(FETCHED, t0, _pc(), source, exhausted=True)
            raise
        loop.fetch(FETCHED, t0, _pc(), source)
        return item

    loader_cls.__iter__ = _mark(iterate)
    base.__next__ = _mark(fetch)


def _patch_optimizer(mod: ModuleType, loop: Loop) -> None:
    if getattr(mod, _PATCHED, False):
        return
    setattr(mod, _PATCHED, True)
    called: Dict[int, int] = {}  # id(optimizer) -> when its step call began

    def timed(opt: Any) -> bool:
        return SCOPE.timing(loop) and (SCOPE.optimizers is None or opt in SCOPE.optimizers)

    def before(opt: Any, args: Any, kwargs: Any) -> None:
        if timed(opt):
            called[id(opt)] = _pc()

    def after(opt: Any, args: Any, kwargs: Any) -> None:
        if not timed(opt):
            return
        t1 = _pc()
        loop.step_closed(STEPPED, f"{STEP_NAME} {type(opt).__name__}.step", called.pop(id(opt), t1), t1)
        if not loop.fetches:
            loop.next_cycle()  # a loop that fetches through no hooked loader: its steps follow each other

    mod.register_optimizer_step_pre_hook(before)
    mod.register_optimizer_step_post_hook(after)


def _patch_sampler(mod: ModuleType, loop: Loop) -> None:
    cls = mod.DistributedSampler
    orig = cls.set_epoch
    if getattr(orig, _PATCHED, False):
        return

    @functools.wraps(orig)
    def set_epoch(self: Any, epoch: int) -> None:
        orig(self, epoch)
        if SCOPE.timing(loop):
            loop.number_epoch(int(epoch))

    cls.set_epoch = _mark(set_epoch)


# ---------------------------------------------------------------------- the readers: DataLoader workers
def _patch_fetchers(mod: ModuleType, loop: Loop) -> None:
    for cls in (mod._MapDatasetFetcher, mod._IterableDatasetFetcher):
        orig = cls.__dict__["fetch"]
        if not getattr(orig, _PATCHED, False):
            cls.fetch = _mark(_timed_fetch(orig, loop))


def _timed_fetch(orig: Any, loop: Loop) -> Any:
    @functools.wraps(orig)
    def fetch(self: Any, index: Any) -> Any:
        reader = self.__dict__.get(_READER)
        if reader is None:
            reader = self.__dict__[_READER] = _Reader.of(self, loop)
        if not reader or not reader.timing():
            return orig(self, index)
        t0 = _pc()
        try:
            return orig(self, index)
        finally:
            reader.tl.append(reader.batch_spec, t0, _pc())

    return fetch


class _Reader:
    """The timing of one fetcher (a worker's, or the loading process's): its logger, specs and whether it records
    (not while the program times ``io``/``preprocess`` phases in this process itself)."""

    __slots__ = ("tl", "batch_spec", "on")

    def __init__(self, tl: Any, batch_spec: str) -> None:
        self.tl, self.batch_spec, self.on = tl, batch_spec, True

    def timing(self) -> bool:
        self.on = "io" not in PROGRAM.cats and "preprocess" not in PROGRAM.cats
        return self.on

    @classmethod
    def of(cls, fetcher: Any, loop: Loop) -> "Any":
        """The reader of ``fetcher`` with its dataset, iterator and collate function timed, or False."""
        if not SCOPE.timing(loop) or (SCOPE.datasets is not None and id(fetcher.dataset) not in SCOPE.datasets):
            return False
        _worker_setup(loop)
        reader = cls(loop.logger(), loop.spec(BATCH_NAME, "io"))
        ds = fetcher.dataset
        named = type(ds).__name__
        if "dataset_iter" in fetcher.__dict__:  # an iterable-style dataset: its iterator, made with the fetcher
            fetcher.dataset_iter = _TimedNext(fetcher.dataset_iter, reader, loop.spec(f"{named} next", "io"))
        elif getattr(ds, "__getitems__", None):
            fetcher.dataset = _TimedItemsBatched(ds, reader, loop.spec(f"{named}.__getitems__", "io"))
        else:
            fetcher.dataset = _TimedItems(ds, reader, loop.spec(f"{named}.__getitem__", "io"))
        collate = fetcher.collate_fn
        name = getattr(collate, "__name__", None) or type(collate).__name__
        fetcher.collate_fn = _timed_call(collate, reader, loop.spec(f"Collate {name}", "preprocess"))
        return reader


class _TimedItems:
    """The fetcher's view of a map-style dataset: each ``dataset[i]`` timed; anything else is the dataset's."""

    __slots__ = ("_ds", "_reader", "_spec")

    def __init__(self, ds: Any, reader: _Reader, spec: str) -> None:
        self._ds, self._reader, self._spec = ds, reader, spec

    def __getitem__(self, index: Any) -> Any:
        reader = self._reader
        if not reader.on:
            return self._ds[index]
        t0 = _pc()
        try:
            return self._ds[index]
        finally:
            reader.tl.append(self._spec, t0, _pc())

    def __len__(self) -> int:
        return len(self._ds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ds, name)


class _TimedItemsBatched(_TimedItems):
    """A dataset that fetches a batch's samples at once (``__getitems__``): each such call timed."""

    __slots__ = ()

    def __getitems__(self, indices: Any) -> Any:
        reader = self._reader
        if not reader.on:
            return self._ds.__getitems__(indices)
        t0 = _pc()
        try:
            return self._ds.__getitems__(indices)
        finally:
            reader.tl.append(self._spec, t0, _pc())


class _TimedNext:
    """An iterable-style dataset's iterator in a fetcher: each ``next()`` timed."""

    __slots__ = ("_it", "_reader", "_spec")

    def __init__(self, it: Any, reader: _Reader, spec: str) -> None:
        self._it, self._reader, self._spec = it, reader, spec

    def __iter__(self) -> "_TimedNext":
        return self

    def __next__(self) -> Any:
        reader = self._reader
        if not reader.on:
            return next(self._it)
        t0 = _pc()
        ended = None
        try:
            return next(self._it)
        except StopIteration:
            ended = _EXHAUSTED  # the worker's share of the stream ran out: timed too, and said
            raise
        finally:
            reader.tl.append(self._spec, t0, _pc(), ended)


_EXHAUSTED = {"exhausted": True}


def _timed_call(fn: Any, reader: _Reader, spec: str) -> Any:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not reader.on:
            return fn(*args, **kwargs)
        t0 = _pc()
        try:
            return fn(*args, **kwargs)
        finally:
            reader.tl.append(spec, t0, _pc())

    return call


#: the process whose worker set-up ran (a forked worker inherits its parent's value, so it is compared by pid)
_worker_pid: Optional[int] = None


def _worker_setup(loop: Loop) -> None:
    """Once per DataLoader worker process, before its first batch: forget the parent's marks (a forked worker
    inherits them) and the step and epoch tags its logger had (a worker reads ahead of the steps), and say in its
    file which worker it is."""
    global _worker_pid
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is None or _worker_pid == os.getpid():
        return
    _worker_pid = os.getpid()
    PROGRAM.cats.clear()
    PROGRAM.steps = PROGRAM.epochs = False
    tl = loop.logger()
    tl.tag_step(None)
    tl.tag_epoch(None)
    tl.write_metadata("torch_dataloader_worker", {"id": info.id, "num_workers": info.num_workers,
                                                  "parent_pid": os.getppid()})


def _patch_worker_signals(mod: ModuleType, loop: Loop) -> None:
    """A worker installs PyTorch's C handlers first thing (``_set_worker_signal_handlers``): SIGTERM from its parent
    then ends it at once, losing what its logger buffered. Installed after them, the loggers' handler closes the
    logger first and then exits with status 0 all the same."""
    orig = getattr(mod, "_set_worker_signal_handlers")  # noqa: B009 -- a C function mypy's stubs do not name
    if getattr(orig, _PATCHED, False):
        return

    def set_handlers(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        if SCOPE.timing(loop):
            process.exit_on_sigterm(0)
        return out

    setattr(mod, "_set_worker_signal_handlers", _mark(set_handlers))  # noqa: B010
