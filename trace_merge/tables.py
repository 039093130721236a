"""Tables for people: the analyses' DataFrames with human column names and one fixed format per unit.

The analyses return raw floats (``0.0624187``, ``5674849343.159``); a notebook or a report shows them through
:func:`readable`, which keeps the columns asked for, names each with its unit and writes every value of a column
the same way (never a mix of plain and scientific notation).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd

#: unit -> how one value is written (:func:`number`); values are already in that unit
UNITS = {"s": "sig3", "ms": "sig3", "MB/s": "sig3", "GB/s": "sig3", "MB": "sig3", "%": "pct", "×": "ratio",
         "count": "int", "": "sig3"}


def number(value: Any, style: str = "sig3") -> str:
    """One value as text: ``sig3`` 3 significant digits in plain notation (``0.0624``, ``8.72``, ``1240``),
    ``pct`` one decimal, ``ratio`` two decimals, ``int`` a whole number; missing values as ``–``."""
    if value is None or pd.isna(value):
        return "–"
    v = float(value)
    if style == "int":
        return f"{v:.0f}"
    if style == "pct":
        return f"{v:.1f}"
    if style == "ratio":
        return f"{v:.2f}"
    if v == 0:
        return "0"
    exp = int(math.floor(math.log10(abs(v))))
    if exp >= 2:  # 1243 -> "1240": no decimals, no exponent
        return f"{round(v, 2 - exp):.0f}"
    return f"{v:.{2 - exp}f}"


def readable(df: pd.DataFrame, columns: Mapping[str, "tuple[str, str] | str"], index: bool = False) -> pd.DataFrame:
    """``df`` with only ``columns``, renamed and written as text.

    ``columns`` maps a column name to ``(label, unit)`` -- the label gets `` (unit)`` appended and every value is
    written in the unit's format (:data:`UNITS`) -- or to a plain label for a column shown as it is (names,
    ranks). With ``index`` the index is kept (its values as they are), else it is reset.
    """
    out = pd.DataFrame(index=df.index)
    for col, spec in columns.items():
        if isinstance(spec, str):
            out[spec] = ["–" if not isinstance(v, str) and pd.isna(v) else v for v in df[col]]
            continue
        label, unit = spec
        out[f"{label} ({unit})" if unit else label] = [number(v, UNITS[unit]) for v in df[col]]
    return out if index else out.reset_index(drop=True)
