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
