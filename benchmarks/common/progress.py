"""A progress bar: tqdm when installed, else a plain counter on stderr (tqdm is an optional extra)."""
from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], total: int | None = None, desc: str = "") -> Iterator[T]:
    """Iterate ``items`` while showing progress on stderr."""
    try:
        from tqdm import tqdm
    except ImportError:
        yield from _plain(items, total, desc)
        return
    yield from tqdm(items, total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)


def _plain(items: Iterable[T], total: int | None, desc: str) -> Iterator[T]:
    t0 = time.monotonic()
    n = 0
    for n, item in enumerate(items, 1):
        yield item
        print(f"\r{desc}: {n}/{total if total is not None else '?'} ({time.monotonic() - t0:.1f} s)",
              end="", file=sys.stderr, flush=True)
    print(file=sys.stderr, flush=True)
