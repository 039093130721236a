"""The benchmarks' CLI contract for bad input: one line naming the file, exit status != 0, no traceback.

Benchmarks raise :class:`trace_merge.errors.TraceInputError` (``"<path>: <cause>"``) for unusable inputs, the same
error type every trace reader raises, so a user sees one message format across the toolkit.
"""
from __future__ import annotations

import logging
import sys
from typing import Callable, Sequence

from trace_merge.errors import OutputExistsError, TraceInputError

__all__ = ["TraceInputError", "OutputExistsError", "BenchmarkError", "cli_main"]

#: exit status for bad input (argparse also uses 2 for bad arguments)
EXIT_BAD_INPUT = 2


class BenchmarkError(Exception):
    """A failure that is not about one input file (e.g. a sub-run that exited non-zero)."""


def cli_main(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)`` and turn known errors into one line on stderr and a non-zero status.

    ``--debug`` anywhere in ``argv`` lets the traceback through (and turns on debug logging).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(main(args) or 0)
    except (TraceInputError, BenchmarkError) as err:
        if debug:
            raise
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def dispatch(argv: Sequence[str] | None, prog: str,
             commands: "dict[str, str | Callable[[Sequence[str] | None], int]]") -> int:
    """``prog COMMAND ...``: run ``commands[COMMAND]`` under :func:`cli_main`: a function, or ``"module:function"``
    imported only when chosen (so that bad input is reported before TensorFlow loads)."""
    import importlib
    import os

    # TF's C++ INFO lines (oneDNN, CPU features) would drown the progress lines; a user's setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):  # asked for: stdout, exit 0 (argparse's convention)
        print(f"usage: {prog} {{{','.join(commands)}}} ...\n\ncommands: {', '.join(commands)}; "
              f"{prog} COMMAND -h for each command's options")
        return 0
    if not args or args[0] not in commands:
        print(f"usage: {prog} {{{','.join(commands)}}} ... (-h for help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    command = commands[args[0]]
    if isinstance(command, str):
        module, function = command.split(":")
        command = getattr(importlib.import_module(module), function)
    return cli_main(command, args[1:])
