"""The original study's view: the table of the 2018 NERSC I/O study of HEP-CNN, for its phase taxonomy (the phases
``benchmarks/hepcnn`` times). The summary computes it unless given another :class:`ComponentView`; the one place
the package names that benchmark's phases. Definitions: ``docs/metrics.md``.
"""
from __future__ import annotations

import pandas as pd

from trace_merge.component_view import ComponentView, view_df

#: Components in order, each minus the ones before it (Load = Load File − HDF5 File Read), as shares of
#: ``Train Loop``.
ORIGINAL_STUDY = ComponentView(
    components=(("read", ("HDF5 File Read",)), ("load", ("Load File",)),
                ("training", ("Train Step", "Compute Gradients", "Allreduce Gradients", "Apply Gradients")),
                ("checkpoint", ("Checkpoint",))),
    total="Train Loop",
    title="the original study's view",
    legend="Read = HDF5 File Read, Load = Load File − Read, Training, Checkpoint",
    labels="Read, Load − Read, Training, Checkpoint",
    headline="read",
)


def study_view_df(frame: pd.DataFrame, per_epoch: bool = False) -> pd.DataFrame:
    """The original study's view of a run (:data:`ORIGINAL_STUDY`): per rank (and epoch) seconds and % of Read,
    Load − Read, Training, Checkpoint and other; no rows for ranks without a ``Train Loop`` phase."""
    return view_df(frame, ORIGINAL_STUDY, per_epoch)
