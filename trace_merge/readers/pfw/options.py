"""How a ``.pfw`` file is parsed: which parsers are tried first, and the limits that keep memory bounded on hostile
input (docs/frame.md, "Limits"). One :class:`ParseOptions` is built where a read starts and handed down."""
from __future__ import annotations

import os
from dataclasses import dataclass

#: an event line longer than this is skipped with a warning (DFTracer's and TimeLogger's lines are < 4 KiB)
MAX_LINE_BYTES = 1 << 20
#: an event whose name, cat or file name is longer than this is skipped with a warning (PATH_MAX is 4 KiB)
MAX_FIELD_CHARS = 64 << 10
#: a gzip file may hold at most this many text bytes per compressed byte (trace text compresses 10-20x)...
MAX_TEXT_RATIO = 100
#: ... or this much text, whichever is more
MIN_TEXT_LIMIT = 256 << 20
#: bodies smaller than this go to pyarrow rather than DuckDB: a DuckDB call has a fixed cost before its first line
#: (a connection, the query) that makes pyarrow the faster below a few MB, and a small run then does not import
#: DuckDB at all (docs/partitioned.md, "The parsing engine")
DUCKDB_MIN_BYTES = 8 << 20
#: the environment variable naming the first parser to try: ``scan`` (the native scanner, then DuckDB, then
#: pyarrow; the default), ``duckdb`` or ``pyarrow`` (pool workers inherit it; benchmarks/perf/parse_engines.py
#: compares them)
PARSER_ENV = "TRACE_MERGE_PARSER"


@dataclass(frozen=True)
class ParseOptions:
    """The parser chain and the reader's limits. The defaults are the reader's; tests and benchmarks pass others."""

    #: the native scanner first (where it was compiled: it is optional)
    scanner: bool = True
    #: DuckDB before pyarrow (where it is installed), for bodies of :attr:`duckdb_min_bytes` or more
    duckdb: bool = True
    duckdb_min_bytes: int = DUCKDB_MIN_BYTES
    max_line_bytes: int = MAX_LINE_BYTES
    max_field_chars: int = MAX_FIELD_CHARS
    max_text_ratio: int = MAX_TEXT_RATIO
    min_text_limit: int = MIN_TEXT_LIMIT

    @classmethod
    def from_env(cls) -> ParseOptions:
        """The defaults, with the first parser named by :data:`PARSER_ENV` where it is set."""
        first = os.environ.get(PARSER_ENV, "scan")
        return cls(scanner=first == "scan", duckdb=first != "pyarrow")

    def text_limit(self, compressed_bytes: int) -> int:
        """The most text a gzip file of ``compressed_bytes`` may decompress to (more is a gzip bomb)."""
        return max(self.min_text_limit, self.max_text_ratio * compressed_bytes)
