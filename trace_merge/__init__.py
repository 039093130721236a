"""trace_merge: read every layer of a profiled training run, align clocks, analyse.

Public entry point: :class:`trace_merge.run.Run` (``Run.open(path)``).
"""
__version__ = "0.1.0"
