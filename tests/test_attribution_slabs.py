"""The attribution sweeps a frame in time slabs (:func:`trace_merge.attribution_engine.time_slabs`): every table must
be the same, to the last bit, however the slabs are cut (:class:`~trace_merge.attribution_engine.SweepCuts`) -- one
slab for the whole frame, or a few rows each with rows open across every boundary."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.helpers.frames import random_job
from trace_merge import attribution as A
from trace_merge.attribution_engine import SweepCuts, Windows, time_slabs
from trace_merge.run import Run


def tables(frame: pd.DataFrame, cuts: SweepCuts) -> dict[str, pd.DataFrame]:
    return {
        "breakdown": A.breakdown_df(frame, cuts=cuts),
        "epochs_only": A.breakdown_df(frame, include_total=False, cuts=cuts),
        "per_layer": A.breakdown_df(frame, "all", per_layer=True, cuts=cuts),
        "exposed": A.exposed_io_df(frame, cuts=cuts),
        "input_bound": A.input_bound_df(frame, cuts=cuts), "input_bound_all": A.input_bound_df(frame, "all", cuts=cuts),
        "steps": A.step_series_df(frame, cuts=cuts), "marks": A.step_marks_df(frame, cuts=cuts),
        "layered": A.layered_breakdown_df(frame, cuts=cuts),
    }


def assert_same_in_slabs(frame: pd.DataFrame, slab_rows: tuple[int, ...]) -> None:
    whole = tables(frame, SweepCuts(slab_rows=len(frame) + 1))
    for rows in slab_rows:
        slabs = time_slabs(frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy(), rows)
        assert len(slabs) > 2 and sum(s.halo.size for s in slabs) > 0  # cut, with rows open across the cuts
        for name, table in tables(frame, SweepCuts(slab_rows=rows)).items():
            pd.testing.assert_frame_equal(table, whole[name], check_exact=True, obj=f"{name} in slabs of {rows}")


@pytest.mark.parametrize("seed", range(4))
def test_every_table_is_the_same_however_the_slabs_are_cut(seed):
    frame = random_job(seed)
    assert_same_in_slabs(frame, (12, 41))


def test_a_frame_out_of_time_order_is_cut_by_time():
    frame = random_job(99)
    shuffled = frame.iloc[np.random.default_rng(1).permutation(len(frame))].reset_index(drop=True)
    assert_same_in_slabs(shuffled, (13, 40))


def test_the_slabs_partition_the_rows_and_their_halos_are_the_rows_open_at_the_cut():
    frame = random_job(3)
    s, e = frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy()
    slabs = time_slabs(s, e, 20)
    owned = np.sort(np.concatenate([x.own for x in slabs]))
    assert np.array_equal(owned, np.arange(len(frame)))
    for x in slabs:
        assert ((s[x.own] >= x.t0) & (s[x.own] < x.t1)).all()
        assert np.array_equal(x.halo, np.flatnonzero((s < x.t0) & (e > x.t0)))


def test_a_real_run_is_the_same_in_slabs(run_copy):
    frame = Run.open(run_copy).frame
    assert_same_in_slabs(frame, (5, 9))


def assert_same_in_windows(frame: pd.DataFrame, window_rows: tuple[int, ...]) -> None:
    """Windows of a frame in time order (:class:`trace_merge.attribution_engine.Windows`), each with its own slabs and
    the rows of earlier windows still open at its start: every table as with the whole frame in one window."""
    whole = tables(frame, SweepCuts(window_rows=None))
    for rows in window_rows:
        for slab_rows in (len(frame) + 1, max(2, rows // 3)):  # one slab per window, and several
            cuts = SweepCuts(slab_rows=slab_rows, window_rows=rows)
            windows = list(Windows.of(frame, ["app", "framework", "posix", "comm"], cuts))
            # cut, with rows of earlier windows open across the cuts
            assert len(windows) > 2 and any(c.position[0] < c.position[-1] - rows for c, _ in windows[1:])
            for name, table in tables(frame, cuts).items():
                pd.testing.assert_frame_equal(table, whole[name], check_exact=True,
                                              obj=f"{name} in windows of {rows} (slabs of {slab_rows})")


@pytest.mark.parametrize("seed", range(4))
def test_every_table_is_the_same_however_the_windows_are_cut(seed):
    assert_same_in_windows(random_job(seed), (7, 23, 60))


def test_a_real_run_is_the_same_in_windows(run_copy):
    frame = Run.open(run_copy).frame
    assert_same_in_windows(frame, (5, 9))
