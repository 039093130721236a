"""TimeLogger: application-phase intervals of a training job, one ``.pfw`` file per process.

>>> from timelogger import TimeLogger
>>> tl = TimeLogger("runs/r1")                     # doctest: +SKIP
>>> @tl.timed("HDF5 File Read", cat="io")          # doctest: +SKIP
... def read(path): ...

Library code can use the process-wide logger configured by ``TIMELOGGER_DIR`` (disabled, at almost no cost,
when unset): ``@timelogger.timed``, ``with timelogger.phase("Load File", cat="io"):``,
``for b in timelogger.iterate(ds, "Call to Next Batch"):``. Only the standard library is imported here;
TensorFlow, Keras and mpi4py are imported by the helpers that need them.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional, Union

from .logger import CATS, ENV_DIR, VERSION, Phase, TimeLogger, default_logger

__version__ = VERSION
__all__ = ["TimeLogger", "Phase", "default_logger", "timed", "phase", "iterate", "CATS", "ENV_DIR", "__version__"]


def timed(fn_or_name: Union[Callable, str, None] = None, cat: str = "other", *, name: Optional[str] = None) -> Any:
    """:meth:`TimeLogger.timed` of :func:`default_logger` (bare decorator, decorator with arguments, or ``with``)."""
    return default_logger().timed(fn_or_name, cat, name=name)


def phase(name: str, cat: str = "other") -> Phase:
    """:meth:`TimeLogger.phase` of :func:`default_logger`."""
    return default_logger().phase(name, cat)


def iterate(iterable: Iterable[Any], name: str, cat: str = "wait") -> Iterator[Any]:
    """:meth:`TimeLogger.iterate` of :func:`default_logger`."""
    return default_logger().iterate(iterable, name, cat)
