"""Writing output files: never over an existing file without ``force``, never a half-written file in place.

- :func:`atomic_outputs` writes a *set* of files so that all of them land or none: every file goes to a
  temporary name ``.<name>.tmp-<pid>-<random>`` beside its target (created exclusively, never through a link), and
  only when all are written are they renamed into place. A failure (disk full, a signal turned into an
  exception) removes the temporaries. Temporaries left by a process that died (``kill -9``) are removed by the
  next writer of the same targets. SIGTERM and SIGINT are held back while the files are renamed, so that they
  land together.
- :func:`input_umask` keeps outputs no more readable than the inputs they were made from (``trace-merge`` sets it
  as its umask for the command): a run of 0700/0600 files gives 0600 outputs, not world-readable ones.
- :func:`exclusive` keeps two processes from writing the same outputs at once (``trace-merge merge`` of one run
  twice): the second one is refused with a one-line error instead of both writing.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import signal
import socket
import stat
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from trace_merge.errors import OutputBusyError, OutputExistsError, OutputWriteError, TraceInputError

log = logging.getLogger(__name__)


def _unreadable(st: os.stat_result) -> int:
    """The umask bits of the classes (group 0o070, others 0o007) that cannot read a file or list a directory."""
    bits = 0
    for cls, read, search in ((0o070, stat.S_IRGRP, stat.S_IXGRP), (0o007, stat.S_IROTH, stat.S_IXOTH)):
        need = read | (search if stat.S_ISDIR(st.st_mode) else 0)
        if st.st_mode & need != need:
            bits |= cls
    return bits


def input_umask(paths: Sequence["str | os.PathLike[str]"]) -> int:
    """The umask bits that keep outputs no more readable than ``paths`` (run directories or input files): group
    bits when any input, or anything below an input directory, is not readable by its group, others' bits when
    not readable by others. What lies below is walked without descending into links (a link the reader follows
    counts by its target; another user's is not read, :func:`timelogger.layout.link_not_followed`); the walk stops
    once both classes are out (at once for a 0700 run directory)."""
    from timelogger.layout import link_not_followed

    bits = 0
    for top in paths:
        try:
            bits |= _unreadable(os.stat(top))  # the input as given: a link the user named is followed
        except OSError:
            continue  # the command reports it
        todo = [os.fspath(top)] if os.path.isdir(top) else []
        while todo and bits != 0o077:
            try:
                with os.scandir(todo.pop()) as entries:
                    for entry in entries:
                        if entry.is_symlink():
                            if not link_not_followed(entry.path):
                                with contextlib.suppress(OSError):
                                    bits |= _unreadable(os.stat(entry.path))
                            continue
                        st = entry.stat(follow_symlinks=False)
                        bits |= _unreadable(st)
                        if stat.S_ISDIR(st.st_mode):
                            todo.append(entry.path)
            except OSError:
                continue
    return bits


def refuse_existing(*paths: "str | os.PathLike[str]", force: bool = False) -> None:
    """Raise :class:`OutputExistsError` for the first of ``paths`` that exists, unless ``force``.

    Call it before any (slow) work, so that nothing is half-done or overwritten.
    """
    if force:
        return
    for path in paths:
        if Path(path).exists():
            raise OutputExistsError(path)


def temp_name(path: Path, pid: int | None = None) -> Path:
    """A temporary file beside ``path`` for process ``pid`` (default: this one) to write before renaming:
    ``.<name>.tmp-<pid>-<random>``. Unpredictable, so nobody can plant a link at it ahead of the writer (run
    directories live in shared scratch); the pid lets the next writer remove it when its process died."""
    return path.with_name(f".{path.name}.tmp-{os.getpid() if pid is None else pid}-{secrets.token_hex(8)}")


def create_new(path: Path) -> None:
    """Create ``path`` as a new empty regular file, never through a link: whatever is already there (a planted
    symbolic link included) is an error naming it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                     0o644)
    except FileExistsError:
        raise OutputWriteError(path, "already exists (a planted file or link?); not written through") from None
    except OSError as exc:
        raise OutputWriteError(path, exc.strerror or str(exc)) from None
    os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temps(paths: Sequence[Path]) -> list[Path]:
    """Remove the temporaries of ``paths`` left by processes that no longer run (killed while writing).

    A temporary of a live process (another writer on this host) is left alone. Returns what was removed.
    """
    removed = []
    for path in paths:
        pattern = re.compile(rf"^\.{re.escape(path.name)}\.tmp-(\d+)(-[0-9a-f]+)?$")
        try:
            names = os.listdir(path.parent)
        except OSError:
            continue
        for name in names:
            m = pattern.match(name)
            if not m or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
                continue
            stale = path.parent / name
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
                removed.append(stale)
                log.warning("%s: left by an interrupted write (process %s no longer runs); removed", stale, m.group(1))
    return removed


@contextlib.contextmanager
def atomic_outputs(paths: Sequence["str | os.PathLike[str]"], force: bool = False) -> Iterator[list[Path]]:
    """Yield temporary paths beside ``paths``; when the block succeeds all are renamed onto ``paths``.

    The renames come only after every file is written, so an error while writing (``ENOSPC``, ``EFBIG``, an
    exception raised by a signal handler) leaves the old files, or none, in place and no temporary behind. Stale
    temporaries of dead processes (:func:`remove_stale_temps`) are removed first. A crash between the renames
    (kill -9) can still leave a mix of old and new files: readers of a set check that its members belong together
    (:func:`trace_merge.store.stored_outputs`).

    Raises
    ------
    OutputExistsError
        One of ``paths`` exists and ``force`` is False (checked before anything is written).
    OutputWriteError
        Writing a temporary failed with an ``OSError``; the message names the target.
    """
    targets = [Path(p) for p in paths]
    refuse_existing(*targets, force=force)
    remove_stale_temps(targets)
    temps: list[Path] = []
    try:
        try:
            for p in targets:  # created here, exclusively: the writers below open a file that is ours
                tmp = temp_name(p)
                create_new(tmp)
                temps.append(tmp)
            yield temps
        except OSError as exc:
            raise OutputWriteError(targets[_failed(temps, exc)], exc.strerror or str(exc)) from exc
        with _signals_held():  # a signal between two renames would leave a mix of old and new files
            for tmp, target in zip(temps, targets):
                os.replace(tmp, target)
    finally:
        for tmp in temps:
            try:
                tmp.unlink(missing_ok=True)
            except OSError as exc:  # must not hide the error that brought us here
                log.warning("%s: temporary output not removed (%s)", tmp, exc.strerror or exc)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Defer SIGTERM and SIGINT to the end of the block: their handlers (or default action) run right after.

    A signal mask would not do: the kernel hands a process-directed signal to any thread not blocking it
    (pyarrow's pool threads), and Python then runs the handler in the main thread all the same. So the Python
    handlers are swapped for one that only records the signal. Only the main thread may do that; elsewhere
    (where no handler can interrupt this thread) the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, Optional[FrameType]]] = []
    installed = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    # None: set outside Python, left alone
    previous: dict[int, Union[Callable[[int, Optional[FrameType]], Any], int]] = {
        sig: h for sig, h in installed.items() if h is not None}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: pending.append((signum, frame)))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum, frame in pending:
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


def _failed(temps: list[Path], exc: OSError) -> int:
    """Index of the temporary whose writing raised ``exc``.

    The error's file name where it has one; else (pyarrow names no file, and removes what it failed to write)
    the first temporary not written (gone or still empty: each is created empty first), as they are written in
    order; else the last.
    """
    if exc.filename is not None and Path(exc.filename) in temps:
        return temps.index(Path(exc.filename))
    return next((i for i, t in enumerate(temps) if not t.exists() or t.stat().st_size == 0), len(temps) - 1)


@contextlib.contextmanager
def atomic_output(path: "str | os.PathLike[str]", force: bool = False) -> Iterator[Path]:
    """:func:`atomic_outputs` of one file: yield its temporary path."""
    with atomic_outputs([path], force=force) as (tmp,):
        yield tmp


#: lock files this process holds (path -> depth), so that a holder may take its lock again
_held: dict[Path, int] = {}


def _holder(lock: Path) -> "tuple[int, str] | None":
    """``(pid, host)`` as the holder wrote them into ``lock``; None when it cannot be read."""
    try:
        pid, host = lock.read_text().split()[:2]
        return int(pid), host
    except (OSError, ValueError):
        return None


def _busy(lock: Path, what: str, hint: str = "") -> OutputBusyError:
    """The refusal, naming the holder (``pid <p> on <host>``) where the lock says who it is."""
    holder = _holder(lock)
    named = f" (pid {holder[0]} on {holder[1]})" if holder else ""
    return OutputBusyError(lock, f"{what} is already running{named}; try again when it has finished{hint}")


@contextlib.contextmanager
def exclusive(lock: "str | os.PathLike[str]", what: str) -> Iterator[None]:
    """Hold ``lock`` for the block, or refuse at once when another process holds it.

    ``flock`` is used where the file system has it: the kernel drops it when its holder dies, so a killed
    writer never blocks the next one. Where ``flock`` is not supported (some Lustre mounts), the lock file is
    created with ``O_EXCL`` and a lock of a process that no longer runs on this host is taken over.
    Re-entrant within one process.

    Parameters
    ----------
    lock
        The lock file (created; removed when released).
    what
        What the lock guards, for the refusal (``"a merge of this run"``).

    Raises
    ------
    OutputBusyError
        Another process holds the lock: ``"<lock>: <what> is already running (pid P on H); try again when it
        has finished"``.
    """
    lock = Path(lock).absolute()
    if lock in _held:
        _held[lock] += 1
        try:
            yield
        finally:
            _held[lock] -= 1
        return
    me = f"{os.getpid()} {socket.gethostname()}\n"
    fd = _take_flock(lock, what)
    if fd is None:
        _take_exclusive_create(lock, what, me)
    else:
        os.ftruncate(fd, 0)
        os.write(fd, me.encode())
    _held[lock] = 1
    try:
        yield
    finally:
        del _held[lock]
        # unlink while still holding it: a waiter that opened the old file sees it gone and opens a new one
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        if fd is not None:
            os.close(fd)


def _take_flock(lock: Path, what: str) -> "int | None":
    """``flock`` ``lock``; returns the descriptor, None when the file system has no ``flock``."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symbolic link planted at the lock's name: never written through
                raise TraceInputError(lock, "is a symbolic link, not a lock file; not written through "
                                            "(remove it if it is not yours)") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise TraceInputError(lock, "is not a regular file; not written through")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _busy(lock, what) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                return None
            raise
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the previous holder removed the file between our open and our lock: lock the new one


def _take_exclusive_create(lock: Path, what: str, me: str) -> None:
    """The lock without ``flock``: create ``lock`` exclusively; take over one left by a dead process here."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            if holder is None or holder[1] != socket.gethostname() or pid_alive(holder[0]):
                raise _busy(lock, what, f" (remove {lock} if it is not running)") from None
            log.warning("%s: left by process %s, which no longer runs; taken over", lock, holder[0])
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(me)
        return
    raise _busy(lock, what)
