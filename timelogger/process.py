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
- a SIGTERM whose handler cannot run because the main thread stays blocked (:func:`end_stalled_sigterm`) is acted on
  by the flush threads, as the default action would have ended the process.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

__all__ = ["ForkHold", "Hooked", "register", "unregister", "call_in_forked_child", "busy_enter", "busy_exit",
           "defer_interrupt", "exit_reason", "exit_on_sigterm", "before_close", "in_multiprocessing_child",
           "end_stalled_sigterm", "block_process_signals"]

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
    _forget_wakeup_in_child()
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
    _watch_wakeup()


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
        return
    _watch_wakeup()


# A Python signal handler runs when the main thread next runs bytecode. A SIGTERM that lands between the main
# thread's last check and a blocking wait (multiprocessing's semaphore tries sem_trywait, then blocks in sem_wait), or
# in another thread while the main one waits, waits with it; when nothing ever wakes the main thread (Pool.terminate()
# holds the task queue's lock while it signals the workers blocked on it), the process never ends, where the
# default action would have ended it at once. The interpreter writes every signal's number to its wakeup fd from
# the C handler, whatever the thread; the flush threads read it, and if our handler has not started within
# STALLED_SIGTERM_S they do what it would have done.
STALLED_SIGTERM_S = 0.5
#: (read, write) ends of the wakeup pipe, when this process's wakeup fd is ours
_wakeup: Optional[Tuple[int, int]] = None
#: when the flush threads saw a SIGTERM that our handler has not yet taken
_term_seen_at: Optional[float] = None
#: our handler took a SIGTERM that ends the process (or noted it inside our own flush)
_sigterm_started = False
#: held by whichever of the handler and a flush thread ends the process on SIGTERM
_ending = threading.Lock()


def _watch_wakeup() -> None:
    """Make the interpreter's wakeup fd ours (main thread), unless the program (asyncio) has set its own."""
    global _wakeup
    if _wakeup is not None:
        return
    r, w = os.pipe()  # not inherited by exec (PEP 446)
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError) as exc:
        _log.debug("timelogger: cannot watch for a stalled SIGTERM: %s", exc)
        old = None
    if old is not None and old != -1:
        signal.set_wakeup_fd(old)  # the program's own: it keeps it, and a stalled SIGTERM stays as without us
    if old != -1:
        os.close(r)
        os.close(w)
        return
    _wakeup = (r, w)


def _forget_wakeup_in_child() -> None:
    """A forked child shares the parent's pipe: it gets its own (after fork the forking thread is the main one)."""
    global _wakeup, _term_seen_at, _sigterm_started, _ending
    _term_seen_at, _sigterm_started, _ending = None, False, threading.Lock()
    if _wakeup is None:
        return
    inherited, _wakeup = _wakeup, None
    try:
        current = signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        current = None
    for fd in inherited:
        os.close(fd)
    if current == inherited[1]:
        _watch_wakeup()
    elif current is not None and current != -1:
        signal.set_wakeup_fd(current)  # the program's own since: it keeps it


def block_process_signals() -> None:
    """In a thread of ours: leave SIGTERM and SIGINT to the program's threads, so the kernel wakes the main thread
    with them (a signal handled in another thread does not interrupt the main thread's wait)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})


def _sigterm_ends_process() -> bool:
    """Whether our handler ends the process on SIGTERM (no program handler of its own to call, not ignored)."""
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        return False
    return _sigterm_exit is not None or not (callable(_prev_sigterm) or _prev_sigterm == signal.SIG_IGN)


def end_stalled_sigterm() -> None:
    """Called by each flush thread when it wakes: a SIGTERM that should have ended the process, and whose handler has
    not started within :data:`STALLED_SIGTERM_S`, is acted on here: the loggers close and the process ends as our
    handler would have ended it."""
    global _term_seen_at
    if _wakeup is None:
        return
    try:
        got = os.read(_wakeup[0], 512)
    except OSError:  # BlockingIOError: nothing came
        got = b""
    if int(signal.SIGTERM) in got and _term_seen_at is None and not _sigterm_started:
        _term_seen_at = time.monotonic()
    if _term_seen_at is None or _sigterm_started or time.monotonic() - _term_seen_at < STALLED_SIGTERM_S:
        return
    if not _sigterm_ends_process():
        _term_seen_at = None  # the program's handler or SIG_IGN: it waits for the main thread, as without us
        return
    _end_on_sigterm(in_main=False)


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
    global _pending_signal, _sigterm_started
    if _main_busy:
        _pending_signal = signum
        _sigterm_started = True
        return
    prev = _prev_sigterm
    if _sigterm_exit is None and callable(prev):
        _flush_all()
        prev(signum, frame)
        return
    if _sigterm_exit is None and prev == signal.SIG_IGN:
        _flush_all()
        return
    _sigterm_started = True
    _end_on_sigterm(in_main=True)


def _end_on_sigterm(in_main: bool) -> None:
    """Close every logger, then exit with :func:`exit_on_sigterm`'s status or die of SIGTERM; once per process."""
    global _exit_signal
    if not _ending.acquire(blocking=False):
        while in_main:  # a flush thread is ending the process: the main thread waits for it
            time.sleep(1.0)
        return
    _exit_signal = "SIGTERM"
    _close_all()
    if _sigterm_exit is not None:
        os._exit(_sigterm_exit)
    if in_main:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    try:  # signal.signal() is for the main thread only: reset the action through libc, then signal this thread
        import ctypes
        libc = ctypes.CDLL(None)
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal.restype = ctypes.c_void_p
        libc.signal(int(signal.SIGTERM), None)  # SIG_DFL
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    except Exception as exc:  # no ctypes: the exit status a shell gives a process that died of SIGTERM
        _log.debug("timelogger: cannot die of SIGTERM from a thread: %s", exc)
    os._exit(128 + int(signal.SIGTERM))


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
