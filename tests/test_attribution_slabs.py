"""The attribution sweeps a frame in time slabs (:func:`trace_merge.attribution._slabs`): every table must be the same,
to the last bit, however the slabs are cut -- one slab for the whole frame, or a few rows each with rows open across
every boundary."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.helpers.frames import random_job
from trace_merge import attribution as A
from trace_merge.run import Run


def tables(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {
        "breakdown": A.breakdown_df(frame), "epochs_only": A.breakdown_df(frame, include_total=False),
        "per_layer": A.breakdown_df(frame, "all", per_layer=True), "exposed": A.exposed_io_df(frame),
        "input_bound": A.input_bound_df(frame), "input_bound_all": A.input_bound_df(frame, "all"),
        "steps": A.step_series_df(frame), "marks": A.step_marks_df(frame), "layered": A.layered_breakdown_df(frame),
    }


def assert_same_in_slabs(frame: pd.DataFrame, monkeypatch, slab_rows: tuple[int, ...]) -> None:
    monkeypatch.setattr(A, "SLAB_ROWS", len(frame) + 1)
    whole = tables(frame)
    for rows in slab_rows:
        monkeypatch.setattr(A, "SLAB_ROWS", rows)
        slabs = A._slabs(frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy(), rows)
        assert len(slabs) > 2 and sum(s.halo.size for s in slabs) > 0  # cut, with rows open across the cuts
        for name, table in tables(frame).items():
            pd.testing.assert_frame_equal(table, whole[name], check_exact=True, obj=f"{name} in slabs of {rows}")


@pytest.mark.parametrize("seed", range(4))
def test_every_table_is_the_same_however_the_slabs_are_cut(seed, monkeypatch):
    frame = random_job(seed)
    assert_same_in_slabs(frame, monkeypatch, (12, 41))


def test_a_frame_out_of_time_order_is_cut_by_time(monkeypatch):
    frame = random_job(99)
    shuffled = frame.iloc[np.random.default_rng(1).permutation(len(frame))].reset_index(drop=True)
    assert_same_in_slabs(shuffled, monkeypatch, (13, 40))


def test_the_slabs_partition_the_rows_and_their_halos_are_the_rows_open_at_the_cut():
    frame = random_job(3)
    s, e = frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy()
    slabs = A._slabs(s, e, 20)
    owned = np.sort(np.concatenate([x.own for x in slabs]))
    assert np.array_equal(owned, np.arange(len(frame)))
    for x in slabs:
        assert ((s[x.own] >= x.t0) & (s[x.own] < x.t1)).all()
        assert np.array_equal(x.halo, np.flatnonzero((s < x.t0) & (e > x.t0)))


def test_a_real_run_is_the_same_in_slabs(run_copy, monkeypatch):
    frame = Run.open(run_copy).frame
    assert_same_in_slabs(frame, monkeypatch, (5, 9))


def assert_same_in_windows(frame: pd.DataFrame, monkeypatch, window_rows: tuple[int, ...]) -> None:
    """Windows of a frame in time order (:class:`trace_merge.attribution._Windows`), each with its own slabs and the
    rows of earlier windows still open at its start: every table as with the whole frame in one window."""
    monkeypatch.setattr(A, "WINDOW_ROWS", None)
    whole = tables(frame)
    for rows in window_rows:
        monkeypatch.setattr(A, "WINDOW_ROWS", rows)
        for slab_rows in (len(frame) + 1, max(2, rows // 3)):  # one slab per window, and several
            monkeypatch.setattr(A, "SLAB_ROWS", slab_rows)
            windows = list(A._Windows.of(frame, ["app", "framework", "posix", "comm"], rows))
            # cut, with rows of earlier windows open across the cuts
            assert len(windows) > 2 and any(c.position[0] < c.position[-1] - rows for c, _ in windows[1:])
            for name, table in tables(frame).items():
                pd.testing.assert_frame_equal(table, whole[name], check_exact=True,
                                              obj=f"{name} in windows of {rows} (slabs of {slab_rows})")


@pytest.mark.parametrize("seed", range(4))
def test_every_table_is_the_same_however_the_windows_are_cut(seed, monkeypatch):
    assert_same_in_windows(random_job(seed), monkeypatch, (7, 23, 60))


def test_a_real_run_is_the_same_in_windows(run_copy, monkeypatch):
    frame = Run.open(run_copy).frame
    assert_same_in_windows(frame, monkeypatch, (5, 9))
