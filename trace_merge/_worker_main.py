"""The ``__main__`` of the local pool's workers (:func:`trace_merge.engines._workers_skip_main`): empty on purpose.

A worker re-imports its parent's main module; this one stands in for the caller's script. Nothing imports it
otherwise, so it is not already in ``sys.modules`` when a worker runs it (runpy warns when it is).
"""
