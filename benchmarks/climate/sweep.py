"""``python -m benchmarks.climate sweep`` and ``ablate``: the climate benchmark's points
(:mod:`benchmarks.common.sweep`, :mod:`benchmarks.common.ablate`)."""
from __future__ import annotations

from typing import Sequence

from benchmarks.common.ablate import PhaseRow, ablate_main
from benchmarks.common.sweep import sweep_main

#: what the climate ablation table shows (phase names of :mod:`benchmarks.climate.pipeline` and ``train``). Times
#: are self times, so the reader's ``Time to Read Single Image`` shows through its three sub-phases.
ABLATION_ROWS = (PhaseRow("Call to Next Batch", note="wait"), PhaseRow("Parallel Read Images", split=True),
                 PhaseRow("Read Image", split=True, note="reader"), PhaseRow("Normalise", note="reader"),
                 PhaseRow("Per-pixel Weights", note="reader"), PhaseRow("Train Step"), PhaseRow("Compute Gradients"))


def _check(data: "str", ranks: int) -> None:
    from benchmarks.climate.data import check_dataset

    check_dataset(data, ranks)


def sweep(argv: Sequence[str] | None = None) -> int:
    return sweep_main(argv, "climate", _check)


def ablate(argv: Sequence[str] | None = None) -> int:
    return ablate_main(argv, "climate", _check, ABLATION_ROWS)


def noise(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common.noise import noise_main

    return noise_main(argv, "climate", _check, [row.phase for row in ABLATION_ROWS])


def advise(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common.advise import Knobs, advise_main

    # readers 1-4, prefetch 1-4, processes or threads; the preset's Tiramisu is small enough that reading 16-channel
    # 96x144 images (`generate --files 128 --height 96 --width 144`) is a visible share of a step of batch 4 on 2 cores
    knobs = Knobs(flags={"readers": "--readers", "prefetch": "--prefetch"},
                  grid={"readers": [1, 2, 3, 4], "prefetch": [1, 2, 4]}, default={"readers": 2, "prefetch": 2},
                  preset=("--smoke", "--blocks", "1,1", "--growth", "2", "--base-filters", "4", "--batch", "4",
                          "--channels", ",".join(map(str, range(16))), "--epochs", "2"),
                  variant_flag="--read-in", variants=("processes", "threads"), default_variant="processes", batch=4)
    return advise_main(argv, "climate", _check, knobs)
