"""Pieces shared by the benchmarks: CLI error handling, launcher commands, progress, run finalisation."""
