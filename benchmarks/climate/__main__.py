"""``python -m benchmarks.climate {generate,train,sweep,ablate,noise,advise,demo} ...``"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from benchmarks.common.errors import dispatch


def _generate(argv: Sequence[str]) -> int:
    from benchmarks.climate.data import DEMO_DATA, SMOKE_DATA, GenSpec, generate

    p = argparse.ArgumentParser(prog="python -m benchmarks.climate generate",
                                description="Write synthetic climate files data-YYYY-MM-DD-HH-k.h5.")
    p.add_argument("out", help="output directory")
    p.add_argument("--files", type=int, help="number of files (required unless a preset is given)")
    p.add_argument("--height", type=int, default=768)
    p.add_argument("--width", type=int, default=1152)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help=f"the test preset ({SMOKE_DATA})")
    p.add_argument("--demo-preset", action="store_true", help=f"the demo's dataset ({DEMO_DATA})")
    p.add_argument("--force", action="store_true", help="replace data-*.h5 files already in OUT")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)
    if a.smoke or a.demo_preset:
        spec = SMOKE_DATA if a.smoke else DEMO_DATA
    elif a.files is None:
        p.error("--files is required (or --smoke / --demo-preset)")
    else:
        spec = GenSpec(a.files, a.height, a.width, a.seed)
    out = generate(a.out, spec, force=a.force)
    print(f"{out}: {spec.files} files of 16x{spec.height}x{spec.width}")
    return 0


COMMANDS = {
    "generate": _generate,
    "train": "benchmarks.climate.train:main",
    "sweep": "benchmarks.climate.sweep:sweep",
    "ablate": "benchmarks.climate.sweep:ablate",
    "noise": "benchmarks.climate.sweep:noise",
    "advise": "benchmarks.climate.sweep:advise",
    "demo": "benchmarks.climate.demo:main",
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(argv, "python -m benchmarks.climate", COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
