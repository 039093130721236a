"""``python -m trace_merge`` is the ``trace-merge`` command."""
import sys

from trace_merge.cli import main

sys.exit(main())
