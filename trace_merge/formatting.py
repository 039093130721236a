"""Numbers for people, one rule for the CLI, the report and the notebooks: a fixed format per unit, never
scientific notation, a missing number as :data:`MISSING`.

- :func:`cell` / :func:`formatted` (CLI and report): a column's name says its unit: ``*_s`` seconds and other
  measures to 3 significant digits, ``*_pct`` percent to 0.1, ``*MB_per_s`` MB/s, ``*bytes*`` and integers as whole
  numbers with thousands separators.
- :func:`readable` / :func:`number` (notebooks): the caller names each column and its unit; the label gets the unit.
"""
from __future__ import annotations

import json
import math
from typing import Any, Mapping

import pandas as pd

MISSING = "–"


def sig3(x: float) -> str:
    """3 significant digits without scientific notation (whole numbers from 100 up, thousands separated)."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{2 - math.floor(math.log10(abs(x)))}f}"


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


#: unit -> how one value is written (:func:`number`); values are already in that unit
UNITS = {"s": "sig3", "ms": "sig3", "MB/s": "sig3", "GB/s": "sig3", "MB": "sig3", "%": "pct", "×": "ratio",
         "count": "int", "": "sig3"}


def number(value: Any, style: str = "sig3") -> str:
    """One value as text: ``sig3`` (:func:`sig3`), ``pct`` one decimal, ``ratio`` two decimals, ``int`` a whole
    number with thousands separators; a missing value is :data:`MISSING`."""
    if value is None or pd.isna(value):
        return MISSING
    v = float(value)
    if style == "int":
        return f"{v:,.0f}"
    if style == "pct":
        return f"{v:.1f}"
    if style == "ratio":
        return f"{v:.2f}"
    return sig3(v)


def readable(df: pd.DataFrame, columns: Mapping[str, "tuple[str, str] | str"], index: bool = False) -> pd.DataFrame:
    """``df`` with only ``columns``, renamed and written as text.

    ``columns`` maps a column name to ``(label, unit)`` -- the label gets `` (unit)`` appended and every value is
    written in the unit's format (:data:`UNITS`) -- or to a plain label for a column shown as it is (names,
    ranks). With ``index`` the index is kept (its values as they are), else it is reset.
    """
    out = pd.DataFrame(index=df.index)
    for col, spec in columns.items():
        if isinstance(spec, str):
            out[spec] = [MISSING if not isinstance(v, str) and pd.isna(v) else v for v in df[col]]
            continue
        label, unit = spec
        out[f"{label} ({unit})" if unit else label] = [number(v, UNITS[unit]) for v in df[col]]
    return out if index else out.reset_index(drop=True)


__all__ = ["MISSING", "sig3", "cell", "formatted", "UNITS", "number", "readable"]


def frame_text(df: pd.DataFrame) -> str:
    """A table as text for the terminal (:func:`formatted` cells, no index); ``(none)`` when empty."""
    if not len(df):
        return "  (none)"
    return formatted(df).to_string(index=False)


def json_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-able records (missing values become ``None``, numpy scalars plain numbers)."""
    return json.loads(df.to_json(orient="records", double_precision=10)) if len(df) else []
