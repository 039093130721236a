"""Run DLIO 2.0.0 (``pip install dlio_benchmark==2.0.0``) on dftracer 2.x, for the tests only.

DLIO 2.0.0 imports ``dftracer.logger``, which dftracer 2.2 moved to ``dftracer.python.logger`` (same API:
``dftracer``, ``dft_fn``, ``DFTRACER_ENABLE``); without it DLIO falls back to no-op classes that fail. The alias
below makes the published DLIO run against the dftracer the project pins, with neither package changed. Arguments are
DLIO's own (Hydra: ``--config-dir DIR workload=NAME ++workload.KEY=VALUE``).
"""
import importlib
import sys

import dftracer  # noqa: F401  (the package DLIO traces with)

# importlib, not `import dftracer.python.logger as m`: the package's `logger` attribute is not that module
sys.modules.setdefault("dftracer.logger", importlib.import_module("dftracer.python.logger"))

from dlio_benchmark.main import main  # noqa: E402

if __name__ == "__main__":
    main()
