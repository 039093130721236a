"""HEP-CNN reference benchmark (the 2018 NERSC I/O characterisation study), re-created on TF2 + Horovod.

Subcommands of ``python -m benchmarks.hepcnn``: ``generate`` (synthetic data in the original layout), ``train``
(one run, under ``mpiexec``/``srun`` and ``timelogger run``), ``sweep`` (ranks x shuffle matrix) and ``demo``
(``make demo``). See ``benchmarks/hepcnn/README.md``.
"""
