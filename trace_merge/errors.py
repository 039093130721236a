"""The one error type every reader raises for bad input."""
from __future__ import annotations

import os


class TraceInputError(Exception):
    """An input file that cannot be used.

    ``str(err)`` is the one-line message a user sees: ``"<path>: <cause>"``.
    """

    def __init__(self, path: "str | os.PathLike[str]", cause: str) -> None:
        self.path = os.fspath(path)
        self.cause = cause
        super().__init__(f"{self.path}: {cause}")


class OutputExistsError(TraceInputError):
    """Refusing to overwrite an existing output without ``--force``."""

    def __init__(self, path: "str | os.PathLike[str]") -> None:
        super().__init__(path, "already exists (use --force to overwrite)")


class OutputBusyError(TraceInputError):
    """Another process is writing the same outputs (``trace-merge merge`` of one run twice at once)."""


class OutputWriteError(TraceInputError):
    """An output could not be written (disk full, file too large); nothing of the output set was left in place."""

    def __init__(self, path: "str | os.PathLike[str]", cause: str) -> None:
        super().__init__(path, f"cannot write ({cause}); nothing was written")
