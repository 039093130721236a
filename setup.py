"""The build's compiled parts: the DFTracer line scanner (trace_merge/readers/_pfwscan.c), the nesting sweeps
(trace_merge/_sweep.c) and the TimeLogger's accelerator (timelogger/_capture.c). All are optional: without a C
compiler the install goes on, the reader parses with DuckDB and pyarrow alone, the sweeps run vectorised in numpy
(docs/partitioned.md) and the TimeLogger records and writes in pure Python (docs/wire-format.md)."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trace_merge.readers._pfwscan",
            ["trace_merge/readers/_pfwscan.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "trace_merge._sweep",
            ["trace_merge/_sweep.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "timelogger._capture",
            ["timelogger/_capture.c"],
            extra_compile_args=["-O2", "-std=gnu99", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ]
)
