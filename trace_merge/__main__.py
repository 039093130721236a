"""``python -m trace_merge`` is the ``trace-merge`` command."""
import sys

from trace_merge.cli import run

if __name__ == "__main__":  # not when a worker process of the local engine imports this as its main module
    sys.exit(run())
