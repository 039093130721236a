"""Writing output files: never over an existing file without ``force``, never a half-written file in place."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from trace_merge.errors import OutputExistsError


def refuse_existing(*paths: "str | os.PathLike[str]", force: bool = False) -> None:
    """Raise :class:`OutputExistsError` for the first of ``paths`` that exists, unless ``force``.

    Call it before any (slow) work, so that nothing is half-done or overwritten.
    """
    if force:
        return
    for path in paths:
        if Path(path).exists():
            raise OutputExistsError(path)


@contextlib.contextmanager
def atomic_output(path: "str | os.PathLike[str]", force: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``, on error removed.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is False (checked before anything is written).
    """
    path = Path(path)
    refuse_existing(path, force=force)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
