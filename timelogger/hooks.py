"""Zero-code capture: the training loop's fetches, steps and epochs from a program that calls no TimeLogger code.

``timelogger run`` (unless ``--no-hooks``) puts ``timelogger/_boot`` first on ``PYTHONPATH`` and sets
``TIMELOGGER_HOOKS=1``; Python imports that directory's ``sitecustomize`` at start-up, which calls :func:`boot`.
:func:`boot` imports no framework: it registers patches to apply *when the program itself imports* a module
(:func:`when_imported`, a post-import hook on ``sys.meta_path``), and a line at exit saying what the hooks saw.

What a framework's patches report goes through one :class:`Loop` per process, whatever the framework:

- ``fetch`` -- the consumer waited for a batch (a ``wait`` interval; the fetch that finds the data exhausted ends
  the epoch and is recorded too, ``args.exhausted``);
- ``step`` -- a step's compute ran (a ``compute`` interval); the first step call after a fetch starts a new step;
  ``step_closed`` -- a call that *ends* a step's work returned (PyTorch's ``Optimizer.step``: the forward and
  backward passes ran before it in the program's own code), and the step's compute is the work since its fetch;
- ``begin`` -- an iteration of a data set starts again (``iter(loader)``): the data set that feeds the steps
  restarting before it ran out ends an epoch too (a loop that breaks off each epoch after N steps);
- ``suppressed`` -- a framework loop that records itself (Keras ``fit`` with its callback) is running.

Steps and epochs are numbered from these events unless the program numbers them (``set_step``/``set_epoch``),
and the launcher's ``--tf-profile`` window follows the hooks' steps. A program's own TimeLogger code wins: once it
times ``wait`` phases the fetch hook records nothing, once it times ``compute`` phases the step hook records
nothing (:data:`timelogger.logger.PROGRAM`), so nothing is counted twice. The TensorFlow/Keras patches live in
:mod:`timelogger.hooks_tf`, the PyTorch ones in :mod:`timelogger.hooks_torch`; another framework adds its own module
of patches to :data:`FRAMEWORK_PATCHES`.
Costs and what is hooked: ``docs/hooks.md``.
"""
from __future__ import annotations

import atexit
import importlib
import importlib.abc
import os
import re
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import process
from .logger import PROGRAM

ENV_HOOKS = "TIMELOGGER_HOOKS"
#: the pid of the launched program (the launcher execs it, so the launcher's own pid): only it reports at exit
ENV_HOOKS_PID = "TIMELOGGER_HOOKS_PID"
#: modules that register the patches of one framework (each has ``register()``)
FRAMEWORK_PATCHES = ("timelogger.hooks_tf", "timelogger.hooks_torch")
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
        self.pid: Optional[int] = None  # the process that installed the hooks (a forked child inherits this object)
        self.suppressed = 0  # > 0 while a framework loop that records itself runs (Keras fit)
        self.step = -1
        self.epoch = 0
        self.fetched = False  # a fetch since the last step began
        self.fetches = 0
        self.steps = 0
        self.epoch_ends = 0
        self.seen: Dict[str, int] = {}  # framework entry points seen: "tf.data", "tf.function", "keras fit", ...
        self.problems: List[str] = []
        self._source: Any = None  # what the first exhausted iteration iterated: its exhaustions end epochs
        #: what the fetches of the last step's work iterated (a hook that names its data set: PyTorch's loader); its
        #: iterations' ends are the epochs' ends, and ``_fed_running`` says one is under way
        self._fed: Any = None
        self._fed_running = False
        #: perf ns at which the coming step's work began (:meth:`step_closed`): the end of its first fetch, or the
        #: previous step's end; and what that fetch iterated
        self.work_began: Optional[int] = None
        self._work_source: Any = None
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
            # the first fetch since the last step (or one of another data set: validation in between) begins the
            # coming step's work; more of the same data set (gradient accumulation) are inside it
            if not self.fetched or source is not self._work_source:
                self.work_began, self._work_source = t1, source
            if source is not None and source is self._fed:
                self._fed_running = True
            self.fetched = True
            return
        if source is not None and source is self._fed:
            self._fed_running = False
        if self._ends_epoch(source):  # another data set's end (validation) is no epoch of training
            self._epoch_end()

    def _ends_epoch(self, source: Any) -> bool:
        """Whether an iteration of ``source`` that ran out ends an epoch: ``source`` fed the steps (when the fetch hook
        names what it iterates), else it is the first data set whose iteration ran out."""
        if self._fed is not None:
            return source is self._fed
        if self._source is None:
            self._source = source
        return source is self._source

    def _epoch_end(self) -> None:
        self.epoch += 1
        self.epoch_ends += 1
        self.fetched = False
        if not PROGRAM.epochs:
            self.logger().tag_epoch(self.epoch)

    def begin(self, source: Any) -> None:
        """An iteration of ``source`` begins (``iter(loader)``): the data set that feeds the steps starting again
        before its last iteration ran out ends an epoch (a loop that breaks off each epoch after N steps)."""
        if source is self._fed and self._fed_running:
            self._fed_running = False
            self._epoch_end()

    def number_epoch(self, epoch: int) -> None:
        """The program numbers its epochs through its framework (PyTorch's ``DistributedSampler.set_epoch``): the
        hooks' epochs go on from that number."""
        if epoch != self.epoch:
            self.epoch = epoch
            if not PROGRAM.epochs:
                self.logger().tag_epoch(epoch)

    def next_cycle(self) -> None:
        """The cycle of the next step begins now (the fetch of its batch): moves ``--torch-profile`` windows. A
        program that marks its own loop (its steps, its fetches or its steps' compute) moves its own logger's windows:
        no logger of the hooks is made for this."""
        tl = self.tl
        if tl is None:
            if PROGRAM.steps or PROGRAM.cats & {"wait", "compute"}:
                return
            tl = self.logger()
        tl.cycle_begins(self.step + 1)

    def step_begin(self) -> None:
        """A step call is about to run: the first after a fetch (or every one, in a loop that fetches nothing
        through a hooked iterator) starts a new step."""
        if self.fetched or not self.fetches:
            self.fetched = False
            self.step += 1
            self.steps += 1
            if self._work_source is not None:
                self._fed, self._fed_running = self._work_source, True
            if not PROGRAM.steps:
                self.logger().tag_step(self.step)

    def step_end(self, name: str, t0: int, t1: int) -> None:
        if "compute" not in PROGRAM.cats:
            self.logger().append(self.spec(name, "compute"), t0, t1)

    def step_closed(self, what: str, name: str, t_call: int, t1: int) -> None:
        """A call that ends a step's work (``what``: PyTorch's ``Optimizer.step``, called at ``t_call``) returned at
        ``t1``. The step is numbered as by :meth:`step_begin`, and its compute runs from the end of its work's first
        fetch (the previous step's end in a loop that fetches through no hooked iterator; before any of them, the
        call's own start) to ``t1``: the forward and backward passes ran in the program's own code before the call.
        A second such call before the next fetch (a second optimizer) adds the time since the first to the step."""
        self.saw(what)
        self.step_begin()
        self.step_end(name, t_call if self.work_began is None else self.work_began, t1)
        self.work_began, self._work_source = t1, None

    def facts(self) -> Dict[str, Any]:
        """What the hooks saw, as the app file's ``timelogger_hooks`` metadata holds it."""
        return {"seen": self.seen, "steps": self.steps, "fetches": self.fetches, "epoch_ends": self.epoch_ends,
                "problems": self.problems}

    def report(self) -> Optional[str]:
        """One line on what the hooks saw, or why they saw nothing (None when hooks are off)."""
        if not self.on:
            return None
        if not self.seen:
            line = ("hooks saw no framework loop: no tf.data iteration, tf.function call, Keras fit, PyTorch "
                    "DataLoader iteration or Optimizer.step in this process; time the loop with "
                    "timelogger.iterate/phase (README) to get step cycles")
        else:
            seen = ", ".join(f"{k} x{v}" for k, v in sorted(self.seen.items()))
            line = f"hooks saw {seen}; {self.steps} step(s), {self.fetches} fetch(es), {self.epoch_ends} epoch end(s)"
        if self.problems:
            line += "; problems: " + "; ".join(self.problems)
        return line


LOOP = Loop()


def _at_exit() -> None:
    """Say what the hooks saw: once, at exit, before the loggers close (:func:`timelogger.process.before_close`;
    and from ``atexit`` when no logger was ever opened). Only the launched program prints the line, and only it or a
    process whose hooks saw something writes the ``timelogger_hooks`` metadata (a DataLoader worker's file must not
    say that its hooks saw no loop)."""
    global _reported
    line = LOOP.report()
    if line is None or _reported or LOOP.pid != os.getpid():  # a forked child has its parent's counts: not its own
        return
    _reported = True
    tl = LOOP.tl
    launched = str(os.getpid()) == os.environ.get(ENV_HOOKS_PID)
    if tl is None and launched and not LOOP.seen:
        tl = LOOP.logger()  # the program: say so in the run directory too (the summary's first lines read it)
    if tl is not None and tl.enabled and (launched or LOOP.seen):
        tl.write_metadata("timelogger_hooks", LOOP.facts())
        tl.close()  # a logger made here has no exit handler of its own (one registered while they run is not called)
    if launched:
        print(f"timelogger: {line}", file=sys.stderr)
        from . import cpu
        from .logger import ENV_DIR

        cpu.final_sample(os.environ.get(ENV_DIR, ""))  # the program's last moments in the cpu layer


_reported = False


def boot() -> None:
    """Install the hooks (``sitecustomize``, when ``$TIMELOGGER_HOOKS`` is 1 and a run directory is set)."""
    from .logger import ENV_DIR

    if os.environ.get(ENV_HOOKS) != "1" or not os.environ.get(ENV_DIR) or LOOP.on:
        return
    LOOP.on = True
    LOOP.pid = os.getpid()
    sys.meta_path.insert(0, _PostImport())
    for name in FRAMEWORK_PATCHES:
        importlib.import_module(name).register(LOOP)
    # the loggers' exit handler (registered with the first logger) runs it before it closes them; this one, for a
    # process whose hooks never opened a logger, finds it done otherwise
    process.before_close(_at_exit)
    atexit.register(_at_exit)
    helper = multiprocessing_helper(getattr(sys, "orig_argv", ()))
    if helper is not None:
        # A process multiprocessing started by a command line (PyTorch's spawn or forkserver workers, the forkserver,
        # the resource tracker) is one of the rank's: its app file, made now, places its POSIX reads on the rank and
        # names the parent of the workers the forkserver forks, whether or not a hook fires in it
        LOOP.logger().write_metadata("multiprocessing_process", {"kind": helper})


def multiprocessing_helper(argv: Sequence[str]) -> Optional[str]:
    """``spawn``, ``forkserver``, ``resource_tracker``, ...: which ``multiprocessing`` module's code a process started
    with ``python -c 'from multiprocessing.<kind> import ...'`` (its command line, ``sys.orig_argv``) runs, or None."""
    argv = list(argv)
    if "-c" not in argv[:-1]:
        return None
    found = re.match(r"\s*from multiprocessing\.(\w+) import", argv[argv.index("-c") + 1])
    return found.group(1) if found else None
