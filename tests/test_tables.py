"""Numbers in the notebooks' tables: one format per unit, never scientific notation, units in the column names."""
from __future__ import annotations

import pandas as pd

from trace_merge.formatting import number, readable


def test_seconds_keep_three_significant_digits_in_plain_notation() -> None:
    assert [number(v) for v in (0.0624187, 8.718, 1243.7, 5674849.3, 0.000012, 0)] == \
        ["0.0624", "8.72", "1,244", "5,674,849", "0.0000120", "0"]
    assert number(None) == number(float("nan")) == number(pd.NA) == "–"
    assert (number(3.4664, "pct"), number(1.0228, "ratio"), number(36.0, "int")) == ("3.5", "1.02", "36")


def test_readable_keeps_the_asked_columns_named_with_their_units() -> None:
    df = pd.DataFrame({"rank": [0, 1], "time_s": [0.5, 1234.5], "share": [2.0, None], "extra": [1, 2]})
    out = readable(df, {"rank": "rank", "time_s": ("wall time", "s"), "share": ("read", "%")})
    assert list(out.columns) == ["rank", "wall time (s)", "read (%)"]
    assert out.to_dict("list") == {"rank": [0, 1], "wall time (s)": ["0.500", "1,234"], "read (%)": ["2.0", "–"]}
