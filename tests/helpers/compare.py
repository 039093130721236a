"""Two runs of the same job, merged different ways (in memory, partitioned, stored): their summaries and reports
are equal."""
from __future__ import annotations

from typing import Optional

import pandas as pd

from trace_merge.run import Run

TABLES = ("breakdown", "exposed_io", "input_bound", "steps", "layered", "bandwidth", "epoch_bandwidth",
          "epoch_bandwidth_totals", "study_view", "event_stats")


def assert_same_summary(a: Run, b: Run) -> None:
    """Every table and scalar of two runs' summaries, and what the merge found, are equal."""
    sa, sb = a.analyse(), b.analyse()
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(sa, name).reset_index(drop=True),
                                      getattr(sb, name).reset_index(drop=True), check_dtype=False,
                                      check_categorical=False, obj=name)
    assert sa.metrics == sb.metrics
    assert sa.verdict == sb.verdict
    assert sa.bandwidth_totals == sb.bandwidth_totals
    assert a.residual == b.residual
    assert a.warnings == b.warnings
    assert a.dxt_clock == b.dxt_clock
    assert a.summary(sa) | {"path": None} == b.summary(sb) | {"path": None}


def assert_same_report(memory: Run, parted: Run) -> None:
    """The report of a partitioned run is the in-memory run's, read a rank at a time: its frame is never loaded."""
    import re

    from trace_merge import plots
    from trace_merge.report import render_report

    frame = memory.frame
    assert parted.steady_state_window() == memory.steady_state_window() == plots.steady_state_window(frame)
    for layers, per_layer in ((None, False), ("all", True), ("all", False), (["posix"], True)):
        pd.testing.assert_frame_equal(parted.breakdown(layers, per_layer), memory.breakdown(layers, per_layer),
                                      check_dtype=False, check_categorical=False)
    window = memory.steady_state_window()
    cases: list[tuple[tuple[Optional[int], Optional[int]], int]] = [
        ((None, None), 50), ((None, None), 3000), ((None, None), 10 ** 9),
        (window or (None, None), 3000), (window or (None, None), 2)]
    for bounds, max_events in cases:
        rows, lo, hi, span = parted.excerpt(*bounds, max_events=max_events)
        assert (lo, hi) == memory.excerpt(*bounds, max_events)[1:3]
        if bounds == (None, None):
            assert (lo, hi) == plots._excerpt(frame, *bounds, max_events)
        elif window is not None and max_events == 2:  # a window of over 20 events is cut to about 2 from its start
            assert lo == window[0] and hi < window[1] and len(rows) < len(frame)
        assert span == (int(frame["start_ns"].min()), int(frame["end_ns"].max()))
        inside = frame[((frame["end_ns"] >= lo) & (frame["start_ns"] <= hi)).to_numpy()]
        assert sorted(rows["start_ns"]) == sorted(inside["start_ns"]) and len(rows) > 0

    def text(run: Run) -> str:  # figures and the time of writing aside
        return re.sub(r"<img [^>]*>|generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "", render_report(run))

    assert text(parted) == text(memory)
    assert parted.merge.rows_apart
