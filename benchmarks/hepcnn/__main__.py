"""``python -m benchmarks.hepcnn {generate,train,sweep,ablate,noise,advise,demo} ...``"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from benchmarks.common.errors import dispatch


def _generate(argv: Sequence[str]) -> int:
    from benchmarks.hepcnn.data import GenSpec, generate

    p = argparse.ArgumentParser(prog="python -m benchmarks.hepcnn generate",
                                description="Write synthetic HEP-CNN files hep_{train,validation}_chunk<k>.h5.")
    p.add_argument("out", help="output directory")
    p.add_argument("--files", type=int, required=True, help="training files")
    p.add_argument("--samples-per-file", type=int, required=True)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--validation-files", type=int, default=0)
    p.add_argument("--force", action="store_true", help="replace hep_*.h5 files already in OUT")
    p.add_argument("--debug", action="store_true")
    a = p.parse_args(argv)
    spec = GenSpec(a.files, a.samples_per_file, a.image_size, a.seed, a.validation_files)
    out = generate(a.out, spec, force=a.force)
    print(f"{out}: {a.files} train + {a.validation_files} validation files, {a.samples_per_file} samples of "
          f"3x{a.image_size}x{a.image_size} each")
    return 0


COMMANDS = {
    "generate": _generate,
    "train": "benchmarks.hepcnn.train:main",
    "sweep": "benchmarks.hepcnn.sweep:main",
    "ablate": "benchmarks.hepcnn.sweep:ablate",
    "noise": "benchmarks.hepcnn.sweep:noise",
    "advise": "benchmarks.hepcnn.sweep:advise",
    "demo": "benchmarks.hepcnn.demo:main",
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(argv, "python -m benchmarks.hepcnn", COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
