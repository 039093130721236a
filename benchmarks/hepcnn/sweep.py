"""``python -m benchmarks.hepcnn sweep`` and ``ablate``: HEP-CNN's points (:mod:`benchmarks.common.sweep`,
:mod:`benchmarks.common.ablate`)."""
from __future__ import annotations

from typing import Sequence

from benchmarks.common.ablate import PhaseRow, ablate_main
from benchmarks.common.sweep import sweep_main


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.hepcnn.data import check_dataset

    return sweep_main(argv, "hepcnn", check_dataset, beside_the_study)


def beside_the_study(rows: Sequence[dict]) -> str:
    """The original study's HEP-CNN table with this sweep's rows under it (``study.txt``)."""
    import pandas as pd

    from benchmarks.common.study import hepcnn_side_by_side

    table = hepcnn_side_by_side(pd.DataFrame(rows))
    return ("the original study's table (Cori, Lustre; nodes) beside this sweep (ranks; read % = the study's "
            "view, bandwidth = whole run):\n" + table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


#: what the HEP-CNN ablation table shows (phase names of :mod:`benchmarks.hepcnn.train`)
ABLATION_ROWS = (PhaseRow("Call to Next Batch", note="wait"), PhaseRow("Load File", split=True),
                 PhaseRow("HDF5 File Read", split=True), PhaseRow("Train Step"), PhaseRow("Compute Gradients"))


def noise(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common.noise import noise_main
    from benchmarks.hepcnn.data import check_dataset

    return noise_main(argv, "hepcnn", check_dataset, [row.phase for row in ABLATION_ROWS])


def ablate(argv: Sequence[str] | None = None) -> int:
    from benchmarks.hepcnn.data import check_dataset

    return ablate_main(argv, "hepcnn", check_dataset, ABLATION_ROWS)


def advise(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common.advise import Knobs, advise_main
    from benchmarks.hepcnn.data import check_dataset

    # the tf.data loader's threads (files read at once) and the batch per rank, on 64x64 images
    # (`generate --files 32 --samples-per-file 32 --image-size 64`) and the smoke model
    knobs = Knobs(flags={"readers": "--loader-threads", "batch": "--batch"},
                  grid={"readers": [1, 2, 4], "batch": [8, 16, 32]}, default={"readers": 2, "batch": 8},
                  preset=("--smoke", "--loader", "tfdata", "--epochs", "2", "--checkpoint-every", "0"))
    return advise_main(argv, "hepcnn", check_dataset, knobs)
