"""Per-epoch read bandwidth and the fixed component view (the original study's table), on a real run and on a
hand-made frame whose answer is known."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trace_merge.bandwidth import epoch_bandwidth_df, epoch_bandwidth_totals
from trace_merge.component_view import component_view_df
from trace_merge.intervals import union_ns
from trace_merge.run import Run
from trace_merge.schema import to_frame


def test_epoch_bandwidth_of_a_real_run(real_run) -> None:
    run_dir, files = real_run
    frame = Run.open(run_dir).frame
    per = epoch_bandwidth_df(frame)
    assert list(per["epoch"]) == [0, 1] and (per["rank"] == 0).all()
    assert (per["files"] == len(files)).all() and (per["layer"] == "posix").all()
    total = sum(p.stat().st_size for p in files)
    assert (per["read_bytes"] == total).all()  # each epoch reads every file once
    for _, row in per.iterrows():  # the union of that epoch's POSIX reads
        reads = frame[(frame["layer"] == "posix") & frame["bytes"].notna() & (frame["epoch"] == row["epoch"])
                      & frame["name"].astype(str).str.contains("read")]
        union = union_ns(reads["start_ns"], reads["end_ns"])
        assert row["read_time_s"] == pytest.approx(union / 1e9)
        assert row["read_bw_MB_per_s"] == pytest.approx(total / 1e6 / (union / 1e9))
    totals = epoch_bandwidth_totals(per)
    assert list(totals["ranks"]) == [1, 1] and list(totals["read_bytes"]) == [total, total]


def test_epoch_bandwidth_totals_reduce_ranks_exactly() -> None:
    per = pd.DataFrame({"rank": [0, 1, 0, 1], "epoch": [0, 0, 1, 1], "files": 1, "reads": 1,
                        "read_bytes": [100, 300, 100, 300], "read_time_s": [1.0, 2.0, 0.5, 0.25],
                        "read_bw_MB_per_s": 0.0, "layer": "posix"})
    out = epoch_bandwidth_totals(per)
    assert list(out["slowest_read_time_s"]) == [2.0, 0.5]
    assert list(out["aggregate_bw_MB_per_s"]) == pytest.approx([400 / 1e6 / 2.0, 400 / 1e6 / 0.5])
    assert epoch_bandwidth_totals(per.iloc[:0]).empty


def _frame(rows: list[tuple]) -> pd.DataFrame:
    cols = ["name", "start_ns", "end_ns", "epoch"]
    df = pd.DataFrame(rows, columns=cols)
    n = len(df)
    return to_frame({"layer": ["app"] * n, "cat": ["other"] * n, "name": df["name"], "rank": np.zeros(n, int),
                     "pid": np.ones(n, int), "tid": np.ones(n, int), "start_ns": df["start_ns"],
                     "dur_ns": df["end_ns"] - df["start_ns"], "epoch": pd.array(df["epoch"], dtype="Int64")})


STUDY = [("read", ["HDF5 File Read"]), ("load", ["Load File"]), ("training", ["Train Step"]),
         ("checkpoint", ["Checkpoint"])]


def test_component_view_takes_load_minus_read_and_sums_to_100() -> None:
    frame = _frame([("Train Loop", 0, 100, None),
                    ("Load File", 0, 10, 0), ("HDF5 File Read", 2, 8, 0), ("Train Step", 10, 40, 0),
                    ("Load File", 50, 60, 1), ("HDF5 File Read", 50, 59, 1), ("Train Step", 60, 90, 1),
                    ("Checkpoint", 90, 95, 1), ("Train Step", 95, 120, 1)])  # the last runs past the loop
    whole = component_view_df(frame, STUDY, "Train Loop").iloc[0]
    assert whole["total_s"] * 1e9 == pytest.approx(100)
    assert [whole[f"{c}_s"] * 1e9 for c in ("read", "load", "training", "checkpoint", "other")] == \
        pytest.approx([15, 5, 65, 5, 10])
    assert sum(whole[f"{c}_pct"] for c in ("read", "load", "training", "checkpoint", "other")) == pytest.approx(100)
    per = component_view_df(frame, STUDY, "Train Loop", per_epoch=True)
    assert list(per["epoch"]) == [0, 1]
    assert per["read_s"].to_numpy() * 1e9 == pytest.approx([6, 9])
    assert per["load_s"].to_numpy() * 1e9 == pytest.approx([4, 1])
    assert per["total_s"].to_numpy() * 1e9 == pytest.approx([40, 50])  # epoch 1: 50..100, clipped to the loop


def test_component_view_of_a_real_run(real_run) -> None:
    frame = Run.open(real_run[0]).frame
    view = component_view_df(frame, [("load", ["Load File"]), ("training", ["Training Iteration"])],
                             "Training Iteration")
    assert view["load_pct"].iloc[0] + view["training_pct"].iloc[0] == pytest.approx(100)
    assert 0 < view["load_pct"].iloc[0] < 100


def test_epoch_bandwidth_by_rank_and_epoch_against_its_definition() -> None:
    """Several ranks, epochs out of order, two layers of one rank's reads (a group names both), reads without a file
    (not of a data file: left out) and outside every epoch (left out): each (rank, epoch) as the definition says."""
    rng = np.random.default_rng(3)
    n = 4000
    rank = rng.integers(0, 3, n)
    start = np.sort(rng.integers(0, 10**9, n))
    end = start + rng.integers(1, 10**6, n)
    epoch = pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(-1, 4, n)), dtype="Int64")
    layer = np.where((rank == 2) & (rng.random(n) < 0.5), "stdio", "posix")
    file = np.where(rng.random(n) < 0.05, None, np.array([f"/data/f{i}.h5" for i in range(7)])[rng.integers(0, 7, n)])
    frame = to_frame({"layer": layer, "cat": ["io"] * n, "name": np.where(rng.random(n) < 0.5, "read", "pread64"),
                      "rank": rank, "pid": rank + 10, "tid": rank + 10, "start_ns": start, "dur_ns": end - start,
                      "bytes": pd.array(rng.integers(1, 1 << 20, n), dtype="Int64"), "file": file, "epoch": epoch})
    got = epoch_bandwidth_df(frame)
    keys = sorted({(int(r), int(e)) for r, e, f in zip(rank, epoch, file) if e is not pd.NA and f is not None})
    assert list(zip(got["rank"], got["epoch"])) == keys
    for (r, e), row in zip(keys, got.itertuples()):
        sel = (rank == r) & np.asarray(epoch.fillna(-99) == e) & (file != None)  # noqa: E711 (elementwise)
        assert row.reads == sel.sum()
        assert row.read_bytes == int(frame["bytes"][sel].sum())
        assert row.files == len(set(file[sel]))
        assert row.layer == ",".join(sorted(set(layer[sel])))
        assert row.read_time_s == union_ns(start[sel], end[sel]) / 1e9
    assert got.dtypes.astype(str).to_dict() == {"rank": "int64", "epoch": "int64", "files": "int64", "reads": "int64",
                                                "read_bytes": "int64", "read_time_s": "float64",
                                                "read_bw_MB_per_s": "float64", "layer": "object"}


def test_read_rows_leave_the_frame_index_unmaterialised() -> None:
    """Selecting the reads does not build (and cache on the frame) every label of its RangeIndex: on a 6.2 M-row
    rank that was 47 MiB held as long as the frame."""
    from trace_merge.bandwidth import read_rows

    frame = _frame([("HDF5 File Read", i, i + 1, 0) for i in range(100)]).assign(bytes=pd.array([8] * 100, "Int64"))
    frame.index = pd.RangeIndex(1000, 1200, 2)
    rows = read_rows(frame)
    assert list(rows.index) == list(range(1000, 1200, 2))
    assert "_data" not in frame.index._cache
