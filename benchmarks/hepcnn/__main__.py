"""``python -m benchmarks.hepcnn {generate,train,sweep,ablate,demo} ...``"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from benchmarks.common.errors import cli_main

COMMANDS = ("generate", "train", "sweep", "ablate", "demo")


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


def main(argv: Sequence[str] | None = None) -> int:
    # TF's C++ INFO lines (oneDNN, CPU features) would drown the progress lines; a user's setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print(f"usage: python -m benchmarks.hepcnn {{{','.join(COMMANDS)}}} ... (-h for help)", file=sys.stderr)
        return 2
    cmd, rest = args[0], args[1:]
    if cmd == "generate":
        return cli_main(_generate, rest)
    if cmd == "train":
        from benchmarks.hepcnn.train import main as train_main

        return cli_main(train_main, rest)
    if cmd == "sweep":
        from benchmarks.hepcnn.sweep import main as sweep_main

        return cli_main(sweep_main, rest)
    if cmd == "ablate":
        from benchmarks.hepcnn.sweep import ablate

        return cli_main(ablate, rest)
    from benchmarks.hepcnn.demo import main as demo_main

    return cli_main(demo_main, rest)


if __name__ == "__main__":
    sys.exit(main())
