"""Writing output files: never over an existing file without ``force``, never a half-written file in place."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from trace_merge.errors import OutputExistsError


@contextlib.contextmanager
def atomic_output(path: "str | os.PathLike[str]", force: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``, on error removed.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is False (checked before anything is written).
    """
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
