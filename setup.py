"""The build's one compiled part: the DFTracer line scanner (trace_merge/readers/_pfwscan.c). It is optional: without
a C compiler the install goes on, and the reader parses with DuckDB and pyarrow alone (docs/partitioned.md)."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trace_merge.readers._pfwscan",
            ["trace_merge/readers/_pfwscan.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
