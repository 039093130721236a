"""Benchmarks that use timelogger (capture) and trace_merge (analysis) as an outside script would."""
