"""``python -m benchmarks.hepcnn sweep`` and ``ablate``: HEP-CNN's points (:mod:`benchmarks.common.sweep`, :mod:`benchmarks.common.ablate`)."""
from __future__ import annotations

from typing import Sequence

from benchmarks.common.ablate import PhaseRow, ablate_main
from benchmarks.common.sweep import sweep_main


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.hepcnn.data import check_dataset

    return sweep_main(argv, "hepcnn", check_dataset)


#: what the HEP-CNN ablation table shows (phase names of :mod:`benchmarks.hepcnn.train`)
ABLATION_ROWS = (PhaseRow("Call to Next Batch", note="wait"), PhaseRow("Load File", split=True),
                 PhaseRow("HDF5 File Read", split=True), PhaseRow("Train Step"), PhaseRow("Compute Gradients"))


def ablate(argv: Sequence[str] | None = None) -> int:
    from benchmarks.hepcnn.data import check_dataset

    return ablate_main(argv, "hepcnn", check_dataset, ABLATION_ROWS)
