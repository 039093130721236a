"""Numbers for people, one rule for the CLI and the report: a fixed unit per column, never scientific notation.

A column's name says its unit: ``*_s`` seconds and other measures to 3 significant digits, ``*_pct`` percent to 0.1,
``*MB_per_s`` MB/s, ``*bytes*`` and integers as whole numbers with thousands separators; a missing number is
:data:`MISSING`.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

MISSING = "–"


def sig3(x: float) -> str:
    """3 significant digits without scientific notation (whole numbers from 100 up, thousands separated)."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{min(6, 2 - math.floor(math.log10(abs(x))))}f}"


def cell(x: Any, column: str = "") -> str:
    """One value in its column's unit (the module docstring's rule)."""
    if hasattr(x, "item") and not isinstance(x, str):
        x = x.item()
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if column.endswith("_pct"):
        return f"{x:.1f}"
    if "bytes" in column or isinstance(x, int):
        return f"{int(round(x)):,}"
    if column.endswith("MB_per_s"):
        return f"{x:,.0f}" if abs(x) >= 10 else sig3(x)
    return sig3(x)


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every cell as its text (:func:`cell`), columns in place."""
    return pd.DataFrame({c: [cell(v, str(c)) for v in df[c].tolist()] for c in df.columns}, index=df.index)


__all__ = ["MISSING", "sig3", "cell", "formatted"]
