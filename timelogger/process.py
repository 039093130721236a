"""The process around the loggers: closing them at exit, on SIGTERM and in multiprocessing children, and fork.

- exit: ``atexit`` closes every open logger; a multiprocessing child leaves through ``os._exit()``, which skips
  atexit, so its exit finalizers close them there.
- SIGTERM: the loggers are flushed (or closed, when the signal ends the process), then the signal does what it did
  before; in a process whose SIGTERM means "stop now, quietly" (a PyTorch DataLoader worker, :func:`exit_on_sigterm`)
  they are closed and the process exits with the status given.
- fork: every write lock is held across ``fork()`` so the child never inherits a half-written buffer or a held lock;
  in the child each open logger forgets the parent's buffers and file and opens its own.
- a signal handler that runs inside the main thread's own flush or close only notes the signal; the interrupted
  call delivers it when done (:func:`busy_enter`, :func:`busy_exit`), so the file is never cut short by our own kill.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol

__all__ = ["ForkHold", "Hooked", "register", "unregister", "call_in_forked_child", "busy_enter", "busy_exit",
           "defer_interrupt", "exit_reason", "exit_on_sigterm", "before_close", "in_multiprocessing_child"]

_log = logging.getLogger("timelogger.logger")  # the name users filter the loggers' warnings by


class ForkHold(Protocol):
    """The write lock of a logger, as fork handling takes it."""

    def hold_for_fork(self) -> bool:
        """Take the write lock for a fork, unless this thread holds it; whether it was taken."""

    def release_after_fork(self) -> None:
        """Release what :meth:`hold_for_fork` took."""


class Hooked(Protocol):
    """What this module needs of a logger (:class:`timelogger.TimeLogger`)."""

    @property
    def writer(self) -> ForkHold: ...

    @property
    def path(self) -> Optional[Path]: ...

    @property
    def enabled(self) -> bool: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def after_fork_in_child(self, exit_with: Optional[threading.Thread]) -> None: ...


_live: "weakref.WeakSet[Hooked]" = weakref.WeakSet()
_hooks_installed = False
_hooks_lock = threading.Lock()
_prev_sigterm: Any = None
_sigterm_installed = False
#: called in a forked child before the loggers reopen (module locks another thread may have held at fork time)
_child_resets: List[Callable[[], None]] = []


def register(tl: Hooked) -> None:
    """Close ``tl`` at exit and on SIGTERM, and reopen it in forked children (called once its file is open)."""
    global _hooks_installed
    _live.add(tl)
    with _hooks_lock:
        first = not _hooks_installed
        _hooks_installed = True
    if first:
        atexit.register(_close_all)
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                            after_in_child=_after_fork_child)
    if not _sigterm_installed:
        _install_sigterm()  # only possible from the main thread; retried by later loggers
    _finalize_in_mp_child()


def unregister(tl: Hooked) -> None:
    """``tl`` is closed: nothing more to do for it."""
    _live.discard(tl)


def call_in_forked_child(reset: Callable[[], None]) -> None:
    """Call ``reset`` in every forked child of a process with an open logger (e.g. to replace a module's lock)."""
    _child_resets.append(reset)


#: the pid whose multiprocessing exit finalizer closes the loggers (a child process registers its own)
_mp_finalizer_pid: Optional[int] = None


def _finalize_in_mp_child() -> None:
    """A multiprocessing child (a pool worker, forked, forkserver or spawned) leaves through ``os._exit()``, which
    skips atexit; its bootstrap runs the exit finalizers first. A logger made in the child registers one there (a
    logger inherited through fork does it from the after-fork step, see :func:`_after_fork_child`)."""
    global _mp_finalizer_pid
    if _mp_finalizer_pid == os.getpid() or not in_multiprocessing_child():
        return
    _mp_finalizer_pid = os.getpid()
    _register_mp_finalizer(None)


#: called once before the loggers close at exit or on a signal that ends the process (:func:`before_close`)
_before_close: List[Callable[[], None]] = []


def before_close(fn: Callable[[], None]) -> None:
    """Call ``fn`` before the loggers are closed at exit or by a signal (the zero-code hooks' last metadata), once."""
    _before_close.append(fn)


def in_multiprocessing_child() -> bool:
    """Whether this process is a ``multiprocessing`` child (a pool or DataLoader worker, forked, forkserver or
    spawned)."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.parent_process() is not None


def _close_all() -> None:
    while _before_close:
        try:
            _before_close.pop(0)()
        except Exception as exc:  # never let capture break interpreter shutdown
            _log.warning("timelogger: an exit handler failed: %s", exc)
    for tl in list(_live):
        try:
            tl.close()
        except Exception as exc:  # never let capture break interpreter shutdown
            _log.warning("timelogger: closing %s failed: %s", tl.path, exc)


def _flush_all() -> None:
    for tl in list(_live):
        try:
            tl.flush()
        except Exception as exc:
            _log.warning("timelogger: flushing %s failed: %s", tl.path, exc)


_forking: List[Hooked] = []
#: whether the last fork was made by the main thread (a child forked by another thread ends when that thread does)
_fork_from_main = True


def _before_fork() -> None:
    global _fork_from_main
    _fork_from_main = threading.current_thread() is threading.main_thread()
    # Hold every write lock across fork so the child never inherits a half-written buffer or a held lock.
    for tl in list(_live):
        if tl.writer.hold_for_fork():
            _forking.append(tl)


def _after_fork_parent() -> None:
    while _forking:
        _forking.pop().writer.release_after_fork()


def _after_fork_child() -> None:
    global _live, _hooks_lock
    _forking.clear()
    # another thread of the parent may have held these at fork time; nobody can release them in the child
    _hooks_lock = threading.Lock()
    for reset in _child_resets:
        reset()
    loggers = [tl for tl in list(_live) if tl.enabled]
    _live = weakref.WeakSet()
    exit_with = None if _fork_from_main else threading.current_thread()
    for tl in loggers:
        tl.after_fork_in_child(exit_with)
    mp_util = sys.modules.get("multiprocessing.util")
    if loggers and mp_util is not None:
        # multiprocessing children leave through os._exit(), which skips atexit; its exit finalizers do run. The
        # child's bootstrap clears the finalizer registry after this hook, so register from its after-fork step.
        mp_util.register_after_fork(_MP_TOKEN, _register_mp_finalizer)


class _Token:
    """A weak-referenceable key for ``multiprocessing.util.register_after_fork``."""


_MP_TOKEN = _Token()


def _register_mp_finalizer(_token: object) -> None:
    global _mp_finalizer_pid
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        _mp_finalizer_pid = os.getpid()
        mp_util.Finalize(None, _close_all, exitpriority=-100)


#: the exit status of a process whose SIGTERM closes the loggers and exits (:func:`exit_on_sigterm`), or None
_sigterm_exit: Optional[int] = None


def exit_on_sigterm(status: int) -> None:
    """From now on SIGTERM closes every logger of this process and ends it with ``os._exit(status)``; main thread only.

    For a process that its parent stops with SIGTERM as a matter of course and that must not be reported as killed:
    a PyTorch DataLoader worker (its parent terminates persistent workers at exit, and any worker that outlives its
    shutdown). PyTorch's own SIGTERM handler there exits at once with status 0 when the parent sent the signal,
    which would lose what the worker's logger has buffered; this one closes the loggers first (their close record
    counts every interval written or dropped) and then exits the same way. A SIGTERM that reaches the main thread
    inside the loggers' own flush waits for it, as the default handler's does."""
    global _sigterm_exit, _sigterm_installed
    _sigterm_exit = status
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True


def _install_sigterm() -> None:
    global _prev_sigterm, _sigterm_installed
    if threading.current_thread() is not threading.main_thread():
        _log.debug("timelogger: not in the main thread, SIGTERM flush not installed yet")
        return
    try:
        _prev_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True
    except (ValueError, OSError) as exc:
        _log.debug("timelogger: cannot install SIGTERM handler: %s", exc)


# Signal handlers run in the main thread between bytecodes, possibly in the middle of our own close()/flush()
# (e.g. a multiprocessing worker closing at exit when Pool.terminate() signals it). Then the handler only notes
# the signal and the interrupted call re-delivers it when done, so the file is never cut short by our own kill.
_main_busy = 0
_pending_signal: Optional[int] = None
#: a KeyboardInterrupt that landed inside the main thread's flush, raised once the flush has written what it took
_pending_interrupt: Optional[BaseException] = None


def busy_enter() -> bool:
    """Mark the main thread as inside a logger's flush or close (a no-op elsewhere); pass the result to
    :func:`busy_exit`."""
    global _main_busy
    if threading.get_ident() != threading.main_thread().ident:
        return False
    _main_busy += 1
    return True


def busy_exit(entered: bool) -> None:
    """End :func:`busy_enter`; the outermost call delivers the SIGTERM or KeyboardInterrupt that came meanwhile."""
    global _main_busy, _pending_signal, _pending_interrupt
    if not entered:
        return
    _main_busy -= 1
    if _main_busy == 0 and _pending_signal is not None:
        signum, _pending_signal = _pending_signal, None
        _on_sigterm(signum, None)
    if _main_busy == 0 and _pending_interrupt is not None:
        exc, _pending_interrupt = _pending_interrupt, None
        raise exc


def defer_interrupt(exc: BaseException) -> None:
    """Raise ``exc`` (a Ctrl-C during the main thread's flush) once the flush is done (:func:`busy_exit`)."""
    global _pending_interrupt
    _pending_interrupt = exc


def _on_sigterm(signum: int, frame: Any) -> None:
    """Flush, then do what was there before: the previous Python handler, ignoring, or dying of SIGTERM."""
    global _pending_signal, _exit_signal
    if _main_busy:
        _pending_signal = signum
        return
    if _sigterm_exit is not None:
        _exit_signal = "SIGTERM"
        _close_all()
        os._exit(_sigterm_exit)
    prev = _prev_sigterm
    if callable(prev):
        _flush_all()
        prev(signum, frame)
        return
    if prev == signal.SIG_IGN:
        _flush_all()
        return
    _exit_signal = "SIGTERM"
    _close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


#: set when the process is about to die of a signal, for the close record
_exit_signal: Optional[str] = None


def exit_reason() -> Dict[str, Any]:
    """How the process is ending, for the close record: ``ok``, an uncaught exception (the interpreter sets
    ``sys.last_type`` before atexit runs; SIGINT is ``KeyboardInterrupt``) or a signal the logger handles."""
    if _exit_signal is not None:
        return {"reason": "signal", "signal": _exit_signal}
    last = getattr(sys, "last_type", None)
    if last is not None:
        return {"reason": "exception", "type": getattr(last, "__name__", str(last))}
    return {"reason": "ok"}
