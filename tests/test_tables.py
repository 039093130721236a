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


def test_ranks_tables_are_concatenated_in_rank_order_whatever_order_they_come_in():
    """The reduction's concatenation: in rank order, each rank's own order kept; parts already in rank order are
    left as they are (no sort), others sorted (stable), and keys that do not compare or are missing still sort."""
    from trace_merge.kernels import concat_tables

    one = pd.DataFrame({"rank": [1, 1], "x": [2, 1]})
    zero = pd.DataFrame({"rank": [0], "x": [9]})
    for parts in ([zero, one], [one, zero]):
        out = concat_tables(parts)
        assert out.to_dict("list") == {"rank": [0, 1, 1], "x": [9, 2, 1]}
        assert list(out.index) == [0, 1, 2]
    missing = pd.DataFrame({"rank": pd.array([None], dtype="Int64"), "x": [5]})
    assert concat_tables([missing, zero.astype({"rank": "Int64"})])["x"].tolist() == [9, 5]  # missing last, as sorted
    epochs = [pd.DataFrame({"rank": [0, 0], "epoch": [2, 1]}), pd.DataFrame({"rank": [1], "epoch": [0]})]
    assert concat_tables(epochs, ("rank", "epoch"))["epoch"].tolist() == [1, 2, 0]


def test_json_indented_writes_what_json_dumps_writes() -> None:
    """The summary's JSON writer gives json.dumps(indent=..., default=str)'s text: tables of records (the fast
    path, a column at a time) and everything else, numpy scalars, NaN, odd keys and strings included."""
    import enum
    import json
    import random

    import numpy as np

    from trace_merge.formatting import json_indented

    class Small(enum.IntEnum):
        A = 3

    scalars = [1.5, float("nan"), float("inf"), -float("inf"), -0.0, 1e300, 5e-324, np.float64(2.5), np.int64(7),
               np.bool_(True), True, False, None, Small.A, "x\u00e9\n\x00\"\\", "\U0001f600", "a,b", "%s %", 10**30]
    rng = random.Random(1)

    def value(depth: int = 0):
        c = rng.random()
        if depth > 3 or c < 0.4:
            return rng.choice(scalars)
        if c < 0.6:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        if c < 0.8:  # records: same keys, scalar values; now and then one that leaves the fast path
            keys = rng.sample(["k", "%k", "1.5", '"q"', "\u00e9"], rng.randint(1, 4))
            rows = [{k: rng.choice(scalars) for k in keys} for _ in range(rng.randint(1, 5))]
            if rng.random() < 0.2:
                rows.append({k: value(depth + 1) for k in keys})
            if rng.random() < 0.1:
                rows.append({k: 1 for k in reversed(keys)})
            return rows
        return {rng.choice(["k", 3, 2.5, None, True, "\u00e9"]): value(depth + 1) for _ in range(rng.randint(0, 4))}

    for _ in range(3000):
        doc = value()
        assert json_indented(doc) == json.dumps(doc, indent=1, default=str)
    assert json_indented({}) == "{}" and json_indented([]) == "[]"
