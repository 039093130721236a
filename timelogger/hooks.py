"""Zero-code capture: the training loop's fetches, steps and epochs from a program that calls no TimeLogger code.

``timelogger run`` (unless ``--no-hooks``) puts ``timelogger/_boot`` first on ``PYTHONPATH`` and sets
``TIMELOGGER_HOOKS=1``; Python imports that directory's ``sitecustomize`` at start-up, which calls :func:`boot`.
:func:`boot` imports no framework: it registers patches to apply *when the program itself imports* a module
(:func:`when_imported`, a post-import hook on ``sys.meta_path``), and a line at exit saying what the hooks saw.

What a framework's patches report goes through one :class:`Loop` per process, whatever the framework:

- ``fetch`` -- the consumer waited for a batch (a ``wait`` interval; the fetch that finds the data exhausted ends
  the epoch and is recorded too, ``args.exhausted``);
- ``step`` -- a step's compute ran (a ``compute`` interval); the first step call after a fetch starts a new step;
- ``suppressed`` -- a framework loop that records itself (Keras ``fit`` with its callback) is running.

Steps and epochs are numbered from these events unless the program numbers them (``set_step``/``set_epoch``),
and the launcher's ``--tf-profile`` window follows the hooks' steps. A program's own TimeLogger code wins: once it
times ``wait`` phases the fetch hook records nothing, once it times ``compute`` phases the step hook records
nothing (:data:`timelogger.logger.PROGRAM`), so nothing is counted twice. The TensorFlow/Keras patches live in
:mod:`timelogger.hooks_tf`; another framework adds its own module of patches to :data:`FRAMEWORK_PATCHES`.
Costs and what is hooked: ``docs/hooks.md``.
"""
from __future__ import annotations

import atexit
import importlib
import importlib.abc
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional

from .logger import PROGRAM

ENV_HOOKS = "TIMELOGGER_HOOKS"
#: the pid of the launched program (the launcher execs it, so the launcher's own pid): only it reports at exit
ENV_HOOKS_PID = "TIMELOGGER_HOOKS_PID"
#: modules that register the patches of one framework (each has ``register()``)
FRAMEWORK_PATCHES = ("timelogger.hooks_tf",)
#: names of the hooks' intervals
FETCH_NAME = "Fetch Batch"
STEP_NAME = "Step"

_patches: Dict[str, List[Callable[[ModuleType], None]]] = {}
_lock = threading.RLock()


# ---------------------------------------------------------------------- post-import hooks
def when_imported(module: str, patch: Callable[[ModuleType], None]) -> None:
    """Call ``patch(mod)`` once ``module`` has been imported by the program (at once if it already is)."""
    with _lock:
        _patches.setdefault(module, []).append(patch)
        mod = sys.modules.get(module)
    if mod is not None and getattr(mod, "__spec__", None) is not None and not _initialising(mod):
        _apply(module, mod)


def _initialising(mod: ModuleType) -> bool:
    return bool(getattr(mod.__spec__, "_initializing", False))


def _apply(name: str, mod: ModuleType) -> None:
    with _lock:
        todo = _patches.pop(name, [])
    for patch in todo:
        try:
            patch(mod)
        except Exception as exc:  # a hook must never stop the program: it loses the evidence, says so once
            LOOP.problem(f"{name}: {type(exc).__name__}: {exc}")


class _PostImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module with patches waiting, it asks the other finders for its spec and makes its
    loader apply them right after the module's code ran."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _apply(fullname, module)

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]  # a file loader is one object per module
        except AttributeError:
            return spec
        return spec


# ---------------------------------------------------------------------- what the loop did
class Loop:
    """The training loop as the hooks see it, one per process: fetches, steps, epochs, and what was seen."""

    def __init__(self) -> None:
        self.tl: Any = None
        self.on = False
        self.suppressed = 0  # > 0 while a framework loop that records itself runs (Keras fit)
        self.step = -1
        self.epoch = 0
        self.fetched = False  # a fetch since the last step began
        self.fetches = 0
        self.steps = 0
        self.seen: Dict[str, int] = {}  # framework entry points seen: "tf.data", "tf.function", "keras fit", ...
        self.problems: List[str] = []
        self._source: Any = None  # what the first exhausted iteration iterated: its exhaustions end epochs
        self._specs: Dict[tuple, str] = {}

    def logger(self) -> Any:
        """The process's logger (:func:`timelogger.default_logger`), made when a hook first records something."""
        tl = self.tl
        if tl is None:
            from .logger import default_logger

            tl = self.tl = default_logger()
            if tl.enabled and not PROGRAM.epochs:
                tl.tag_epoch(self.epoch)
        return tl

    def spec(self, name: str, cat: str) -> str:
        spec = self._specs.get((name, cat))
        if spec is None:
            spec = self._specs[(name, cat)] = self.logger().hook_spec(name, cat)
        return spec

    def saw(self, what: str) -> None:
        self.seen[what] = self.seen.get(what, 0) + 1

    def problem(self, text: str) -> None:
        if len(self.problems) < 5:
            self.problems.append(text)

    def fetch(self, what: str, t0: int, t1: int, source: Any = None, exhausted: bool = False) -> None:
        """The consumer waited ``[t0, t1)`` (perf_counter ns) for a batch of ``source`` (through ``what``: "tf.data");
        ``exhausted``: it found the data exhausted (the end of an epoch's iteration of it)."""
        self.fetches += 1
        self.seen[what] = self.seen.get(what, 0) + 1
        if "wait" not in PROGRAM.cats:
            self.logger().append(self.spec(FETCH_NAME, "wait"), t0, t1, {"exhausted": True} if exhausted else None)
        if not exhausted:
            self.fetched = True
            return
        if self._source is None:
            self._source = source
        if source is self._source:  # another data set's end (validation) is no epoch of training
            self.epoch += 1
            self.fetched = False
            if not PROGRAM.epochs:
                self.logger().tag_epoch(self.epoch)

    def step_begin(self) -> None:
        """A step call is about to run: the first after a fetch (or every one, in a loop that fetches nothing
        through a hooked iterator) starts a new step."""
        if self.fetched or not self.fetches:
            self.fetched = False
            self.step += 1
            self.steps += 1
            if not PROGRAM.steps:
                self.logger().tag_step(self.step)

    def step_end(self, name: str, t0: int, t1: int) -> None:
        if "compute" not in PROGRAM.cats:
            self.logger().append(self.spec(name, "compute"), t0, t1)

    def report(self) -> Optional[str]:
        """One line on what the hooks saw, or why they saw nothing (None when hooks are off)."""
        if not self.on:
            return None
        if not self.seen:
            line = ("hooks saw no framework loop: no tf.data iteration, tf.function call or Keras fit in this "
                    "process; time the loop with timelogger.iterate/phase (README) to get step cycles")
        else:
            seen = ", ".join(f"{k} x{v}" for k, v in sorted(self.seen.items()))
            line = f"hooks saw {seen}; {self.steps} step(s), {self.fetches} fetch(es), {self.epoch} epoch end(s)"
        if self.problems:
            line += "; problems: " + "; ".join(self.problems)
        return line


LOOP = Loop()


def _at_exit() -> None:
    line = LOOP.report()
    if line is None:
        return
    tl = LOOP.tl
    launched = str(os.getpid()) == os.environ.get(ENV_HOOKS_PID)
    if tl is None and launched and not LOOP.seen:
        tl = LOOP.logger()  # the program: say so in the run directory too (the summary's first lines read it)
    if tl is not None and tl.enabled:
        tl.write_metadata("timelogger_hooks", {"seen": LOOP.seen, "steps": LOOP.steps, "fetches": LOOP.fetches,
                                               "epoch_ends": LOOP.epoch, "problems": LOOP.problems})
        tl.close()  # the program's own exit handlers have run (they run before this one); a logger made here has
        # no exit handler of its own (one registered while they run is not called)
    if launched:
        print(f"timelogger: {line}", file=sys.stderr)


def boot() -> None:
    """Install the hooks (``sitecustomize``, when ``$TIMELOGGER_HOOKS`` is 1 and a run directory is set)."""
    from .logger import ENV_DIR

    if os.environ.get(ENV_HOOKS) != "1" or not os.environ.get(ENV_DIR) or LOOP.on:
        return
    LOOP.on = True
    sys.meta_path.insert(0, _PostImport())
    for name in FRAMEWORK_PATCHES:
        importlib.import_module(name).register(LOOP)
    # registered after the logger module's own atexit (imported above), so it runs first: the logger still open
    atexit.register(_at_exit)
