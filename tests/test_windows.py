"""Ranks too big to hold whole, merged and summarised window by window (``partitioned._merge_rank_in_windows``):
step propagation, the tables of rows and the whole merge equal to the whole rank's, however the windows are cut.

The thresholds are lowered here (``engines.Windows``) so that the real runs'
ranks of a few thousand rows take the windowed path with tens of windows; ``benchmarks/perf/merge_scale.py`` runs it
at the size it is for (6.2 M-row ranks).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers.frames import random_job
from tests.helpers.runs import make_dftracer_set
from tests.helpers.traces import app_file, shift_file
from trace_merge import align as A
from trace_merge import engines, kernels, partitioned, store
from trace_merge.intervals import time_windows
from trace_merge.merge import merge_path


def windows_of(frame: pd.DataFrame, rows: int):
    """``windows(columns)`` of a rank's frame in time order, cut by :func:`time_windows`."""
    frame = frame.reset_index(drop=True)
    cuts = time_windows(frame["start_ns"].to_numpy(), rows)
    assert len(cuts) - 1 >= min(3, len(frame) // rows)  # cut, where there are rows enough

    def windows(columns):
        cols = list(frame.columns) if columns is None else [c for c in columns if c in frame.columns]
        return (frame.iloc[a:b][cols].reset_index(drop=True) for a, b in zip(cuts, cuts[1:]))
    return windows


def ranks_of(frame: pd.DataFrame):
    return [frame[frame["rank"] == r].reset_index(drop=True) for r in sorted(frame["rank"].unique())]


def assert_propagated_alike(rank: pd.DataFrame, rows: int) -> None:
    whole = A.propagate_steps(rank.copy(deep=True))
    got = pd.concat(list(A.propagate_windows(windows_of(rank, rows))), ignore_index=True)
    for col in ("step", "epoch"):
        pd.testing.assert_series_equal(got[col], whole[col].reset_index(drop=True), check_names=False,
                                       obj=f"{col} in windows of {rows}")


@pytest.mark.parametrize("seed", range(6))
def test_steps_propagated_window_by_window_are_the_whole_ranks(seed: int) -> None:
    for rank in ranks_of(random_job(seed)):
        for rows in (3, 7, 20):
            assert_propagated_alike(rank, rows)


def test_steps_propagated_window_by_window_on_a_real_run(real_run) -> None:
    for rank in ranks_of(merge_path(real_run[0]).frame):
        for rows in (5, 50, 500):
            assert_propagated_alike(rank, rows)


def job_of(frame: pd.DataFrame) -> kernels.JobFacts:
    return kernels.JobFacts.of([kernels.rank_facts(rank, int(rank["rank"].iloc[0])) for rank in ranks_of(frame)])


def assert_parts_alike(rank: pd.DataFrame, rows: int, job: kernels.JobFacts) -> None:
    whole = kernels.rank_parts(rank.copy(), job)
    got = kernels.rank_parts_of_windows(windows_of(rank, rows), job)
    for f in dataclasses.fields(kernels.RankParts):
        a, b = getattr(whole, f.name), getattr(got, f.name)
        if not isinstance(a, pd.DataFrame):
            assert a == b, (f.name, rows)
            continue
        if f.name == "event_stats":  # a sum of windows is in another row order
            a, b = (t.sort_values(["layer", "cat", "name"]) for t in (a, b))
        if f.name == "bandwidth" and not len(a) and not len(b):
            continue
        pd.testing.assert_frame_equal(b.reset_index(drop=True), a.reset_index(drop=True), check_exact=True,
                                      obj=f"{f.name} in windows of {rows}")


@pytest.mark.parametrize("seed", range(4))
def test_the_tables_of_rows_summed_window_by_window_are_the_whole_ranks(seed: int) -> None:
    frame = random_job(seed)
    read = (frame["name"].astype(str) == "read").to_numpy()
    frame["bytes"] = pd.array(np.where(read, 4096, None), dtype="Int64")
    frame["file"] = pd.Categorical(np.where(read, "/data/x.h5", None))
    job = job_of(frame)
    for rank in ranks_of(frame):
        for rows in (5, 17, 60):
            assert_parts_alike(rank, rows, job)


def test_the_tables_of_rows_summed_window_by_window_on_a_real_run(real_run) -> None:
    frame = merge_path(real_run[0]).frame
    job = job_of(frame)
    for rank in ranks_of(frame):
        for rows in (7, 300):
            assert_parts_alike(rank, rows, job)


def merged(run: Path, above: int, rows: int) -> tuple:
    """Everything a partitioned merge gives (summary, residual, warnings, layer rows, rows, DXT, the kept rows)."""
    pm = partitioned.merge_partitioned(run, engine=engines.Inline(), analysis=kernels.SummaryHook(), keep_rows=True,
                                       windows=engines.Windows(above, rows))
    try:
        return (pm.summary, pm.residual, sorted(pm.warnings), pm.info.rows_per_layer, pm.rank_rows, pm.dxt_segments,
                pm.load())
    finally:
        pm.cleanup()


def assert_merged_alike(run: Path, monkeypatch, calls: list) -> None:
    whole = merged(run, 1 << 40, 1 << 17)
    assert not calls
    for rows in (13, 400):
        got = merged(run, 0, rows)
        assert calls, "the windowed path ran"
        calls.clear()
        for f in dataclasses.fields(kernels.Summary):
            a, b = getattr(got[0], f.name), getattr(whole[0], f.name)
            if isinstance(a, pd.DataFrame):
                pd.testing.assert_frame_equal(a, b, check_exact=True, obj=f"{f.name} in windows of {rows}")
            else:
                assert repr(a) == repr(b), (f.name, rows)
        for i, what in enumerate(("residual", "warnings", "layer rows", "rows", "DXT segments"), start=1):
            assert repr(got[i]) == repr(whole[i]), (what, rows)
        pd.testing.assert_frame_equal(got[6], whole[6], check_exact=True, obj=f"kept rows in windows of {rows}")


@pytest.fixture()
def windowed_calls(monkeypatch) -> list:
    calls: list = []
    real = partitioned._merge_rank_in_windows

    def counted(task):
        calls.append(task.rank)
        return real(task)
    monkeypatch.setattr(partitioned, "_merge_rank_in_windows", counted)
    return calls


def test_a_real_run_merged_window_by_window_is_the_whole_ranks(real_run, monkeypatch, windowed_calls) -> None:
    assert_merged_alike(real_run[0], monkeypatch, windowed_calls)


def test_a_generated_set_merged_window_by_window_is_the_whole_ranks(tmp_path: Path, monkeypatch,
                                                                     windowed_calls) -> None:
    assert_merged_alike(make_dftracer_set(tmp_path / "gen", ranks=3, epochs=2, steps=8), monkeypatch,
                        windowed_calls)


def test_a_shifted_layer_is_flagged_alike_window_by_window(run_copy: Path, monkeypatch, windowed_calls) -> None:
    run = run_copy
    shift_file(app_file(run), 30_000_000)
    assert_merged_alike(run, monkeypatch, windowed_calls)
    got = merged(run, 0, 50)
    assert any(w.startswith("rank 0: 100 % of its posix rows lie outside its app layer's") for w in got[2]), got[2]


def test_a_windowed_ranks_estimate_is_its_order_and_one_window() -> None:
    big = engines.WINDOW_ABOVE_ROWS + 1
    assert engines.task_bytes(big) < engines.task_bytes(engines.WINDOW_ABOVE_ROWS) / 2
    assert engines.task_bytes(4 * big) - engines.task_bytes(big) == 3 * big * engines.ORDER_BYTES_PER_ROW


def test_a_stored_merge_is_written_a_row_group_at_a_time(tmp_path: Path) -> None:
    """``merged.parquet`` from partitions written window by window (a batch per window): the same rows whatever the
    row groups' size, each row group of one rank and at most that size."""
    import pyarrow.parquet as pq

    traces = make_dftracer_set(tmp_path / "gen", ranks=2, epochs=2, steps=8)
    pm = partitioned.merge_partitioned(traces, engine=engines.Inline(), analysis=kernels.SummaryHook(), keep_rows=True,
                                       windows=engines.Windows(0, 40))
    try:
        whole = store.write_parquet(pm, tmp_path / "whole.parquet")
        small = store.write_parquet(pm, tmp_path / "small.parquet", row_group_rows=64)
    finally:
        pm.cleanup()
    assert [(p["rank"], p["rows"]) for p in small] == [(p["rank"], p["rows"]) for p in whole]
    assert all(len(p["row_groups"]) == 1 for p in whole)
    assert all(len(p["row_groups"]) > 3 for p in small), small
    meta = pq.ParquetFile(tmp_path / "small.parquet").metadata
    rank_column = pq.read_schema(tmp_path / "small.parquet").names.index("rank")
    for part in small:
        for g in part["row_groups"]:
            group = meta.row_group(g)
            assert 0 < group.num_rows <= 64
            assert group.column(rank_column).statistics.min == group.column(rank_column).statistics.max == part["rank"]
    assert pq.read_table(tmp_path / "small.parquet").equals(pq.read_table(tmp_path / "whole.parquet"))


def test_a_windowed_ranks_summary_halves_run_as_tasks_of_their_own_alike(tmp_path: Path, caplog) -> None:
    """The two halves of a windowed rank's summary (its tables of rows, its attribution) run as tasks of a wave of
    their own, side by side on a pool: the same summary as one after the other inline, and the partition they read
    (rows not kept) is gone after them."""
    traces = make_dftracer_set(tmp_path / "gen", ranks=1, epochs=2, steps=8)

    def summary(engine):
        pm = partitioned.merge_partitioned(traces, engine=engine, analysis=kernels.SummaryHook(), keep_rows=False,
                                           windows=engines.Windows(0, 40))
        try:
            assert pm.spill is not None and not list(pm.spill.rglob("*.arrow"))
            return pm.summary
        finally:
            pm.cleanup()

    pool = engines.LocalPool(workers=2)
    try:
        with caplog.at_level("DEBUG", logger="trace_merge.partitioned"):
            got = summary(pool)
    finally:
        pool.close()
    assert any("halves of ranks summarised window by window, 2 tasks" in r.getMessage() for r in caplog.records)
    whole = summary(engines.Inline())
    for f in dataclasses.fields(kernels.Summary):
        a, b = getattr(got, f.name), getattr(whole, f.name)
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b, check_exact=True, obj=f.name)
        else:
            assert repr(a) == repr(b), f.name
