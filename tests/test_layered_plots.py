"""Layered-breakdown and step-series figures, and the steady-state timeline window, on hand-built frames."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from trace_merge import plots
from trace_merge.schema import to_frame

COMPS = ("fs", "comm", "input_wait", "compute", "python", "not_observed")


def layered(rows):
    """rows: (rank, epoch, phase, cat, component seconds in COMPS order)."""
    df = pd.DataFrame({
        "rank": pd.array([r[0] for r in rows], dtype="int64"),
        "epoch": pd.array([r[1] for r in rows], dtype="Int64"),
        "phase": [r[2] for r in rows], "cat": [r[3] for r in rows],
        "calls": pd.array([1] * len(rows), dtype="int64"), "observed_calls": pd.array([1] * len(rows), dtype="int64"),
    })
    for i, c in enumerate(COMPS):
        df[f"{c}_s"] = [float(r[4][i]) for r in rows]
    df.insert(5, "time_s", df[[f"{c}_s" for c in COMPS]].sum(axis=1))
    return df


LAYERED = layered([
    (0, 0, "Load File", "io", (3, 0, 0, 0, 1, 0)),
    (0, 1, "Load File", "io", (2, 0, 0, 0, 1, 0.5)),
    (1, 0, "Load File", "io", (4, 0, 0, 0, 0.5, 0)),
    (0, 0, "Training Iteration", "compute", (0, 1, 0.5, 4, 0.5, 0)),
    (1, None, "Training Iteration", "compute", (0, 2, 0, 3, 0, 1)),
    (0, 0, "Call to Next Batch", "wait", (0, 0, 2, 0, 0.25, 0)),
    (1, 1, "Checkpoint", "checkpoint", (0.5, 0, 0, 0, 0, 0)),
])


def bar_widths(ax):
    """Legend label -> the widths of that component's bars, top bar first."""
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    return {lab: [p.get_width() for p in c.patches] for lab, c in zip(labels, ax.containers)}


def test_layered_breakdown_one_bar_per_phase_split_by_component():
    ax = plots.plot_layered_breakdown(LAYERED).axes[0]
    widths = bar_widths(ax)
    assert list(widths) == list(plots.COMPONENT_LABELS.values())
    assert [lab.split(" [")[0] for lab in (t.get_text() for t in ax.get_yticklabels())] == [
        "Load File", "Training Iteration", "Call to Next Batch", "Checkpoint"]
    sums = LAYERED.groupby("phase").sum(numeric_only=True).loc[
        ["Load File", "Training Iteration", "Call to Next Batch", "Checkpoint"]]
    for comp, label in plots.COMPONENT_LABELS.items():
        np.testing.assert_allclose(widths[label], sums[f"{comp}_s"])
    np.testing.assert_allclose(np.sum(list(widths.values()), axis=0), sums["time_s"])
    assert ax.get_yticklabels()[0].get_text() == "Load File [io] · 12 s"
    # each bar starts where the previous component ended
    lefts = [p.get_x() for p in ax.containers[4].patches]
    np.testing.assert_allclose(lefts, sums[["fs_s", "comm_s", "input_wait_s", "compute_s"]].sum(axis=1))


def test_layered_breakdown_legend_names_only_what_the_run_has():
    """No framework input wait inside any phase: "input wait" is no legend entry, let alone "(tf.data)"; a
    component with no time gets none either."""
    no_tf = LAYERED.assign(input_wait_s=0.0, comm_s=0.0)
    labels = [t.get_text() for t in plots.plot_layered_breakdown(no_tf).axes[0].get_legend().get_texts()]
    assert not any("input wait" in x or "communication" in x for x in labels), labels
    labels = [t.get_text() for t in plots.plot_layered_breakdown(LAYERED, tfdata=False).axes[0].get_legend()
              .get_texts()]
    assert "input wait" in labels and "input wait (tf.data)" not in labels


def test_layered_breakdown_merges_phases_beyond_top():
    ax = plots.plot_layered_breakdown(LAYERED, top=2).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == 3 and labels[2] == "other phases · 2.75 s"
    widths = bar_widths(ax)
    assert widths["file system"][2] == pytest.approx(0.5) and widths["input wait (tf.data)"][2] == pytest.approx(2)
    # no merging when every phase fits
    assert len(plots.plot_layered_breakdown(LAYERED, top=4).axes[0].get_yticklabels()) == 4


def test_layered_breakdown_by_rank_groups_ranks_under_each_phase():
    ax = plots.plot_layered_breakdown(LAYERED, by_rank=True).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert [lab.split(" · ")[0].split(" [")[0] + " " + lab.split(" · ")[1] for lab in labels] == [
        "Load File rank 0", "Load File rank 1", "Training Iteration rank 0", "Training Iteration rank 1",
        "Call to Next Batch rank 0", "Checkpoint rank 1"]
    widths = bar_widths(ax)
    np.testing.assert_allclose(widths["file system"][:2], [5, 4])  # rank 0 summed over its two epochs
    np.testing.assert_allclose(widths["framework compute"][2:4], [4, 3])  # the epoch-less row counts too
    ys = [t for t in ax.get_yticks()]
    assert ys[2] - ys[1] > ys[1] - ys[0]  # a gap between phase groups


def test_layered_breakdown_empty_and_given_axes():
    fig = plots.plot_layered_breakdown(LAYERED.iloc[:0])
    assert "no app phases" in [t.get_text() for t in fig.axes[0].texts]
    own = Figure()
    ax = own.add_subplot()
    assert plots.plot_layered_breakdown(LAYERED, ax=ax) is own and len(ax.containers) == len(COMPS)


def step_series(per_rank, basis="framework"):
    """per_rank: {rank: [(epoch, step, step_s, input_wait_s), ...]} in time order."""
    rows = []
    for rank, steps in per_rank.items():
        t = 1_000_000_000 * (rank + 1)
        for epoch, step, step_s, wait in steps:
            rows.append((rank, epoch, step, t, t + int(step_s * 1e9), step_s, wait, basis))
            t += int(step_s * 1e9) + 1000
    df = pd.DataFrame(rows, columns=["rank", "epoch", "step", "start_ns", "end_ns", "step_s", "input_wait_s",
                                     "basis"])
    return df.astype({"rank": "int64", "epoch": "Int64", "step": "Int64", "start_ns": "int64", "end_ns": "int64"})


STEPS = step_series({
    0: [(0, 0, 1.0, 0.5), (0, 1, 0.4, 0.1), (1, 2, 0.3, 0.0), (1, 3, 0.35, 0.05)],
    1: [(0, 0, 1.2, 0.8), (0, 1, 0.5, 0.2), (1, 2, 0.3, 0.1)],
})


def test_step_series_stacks_input_wait_under_the_step_per_rank():
    fig = plots.plot_step_series(STEPS.sample(frac=1, random_state=1))  # order restored by start time
    assert len(fig.axes) == 2 and "framework" in fig.get_suptitle()
    for ax, rank in zip(fig.axes, (0, 1)):
        mine = STEPS[STEPS["rank"] == rank]
        wait, step = [p.get_data() for p in ax.patches[:2]]
        np.testing.assert_allclose(wait.values, mine["input_wait_s"])
        np.testing.assert_allclose(wait.baseline, 0)
        np.testing.assert_allclose(step.values, mine["step_s"])  # the top of the column is the step time
        np.testing.assert_allclose(step.baseline, mine["input_wait_s"])  # ... stacked on the wait
        np.testing.assert_array_equal(step.edges, np.arange(len(mine) + 1))
        assert ax.get_ylabel().startswith(f"rank {rank}")
    assert fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
    # named for what the run has: tf.data only where its events are
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["input wait", "rest of the step"]
    fig = plots.plot_step_series(STEPS, tfdata=True)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["input wait (tf.data)",
                                                                            "rest of the step"]
    assert [t.get_text() for t in fig.axes[0].texts] == ["epoch 0", "epoch 1"]


def test_step_series_on_given_axes_and_empty():
    own = Figure()
    ax = own.add_subplot()
    assert plots.plot_step_series(step_series({0: [(None, 0, 1.0, 0.2)]}, basis="app"), ax=ax) is own
    assert len(ax.patches) == 2 and "Training Iteration" in ax.get_title()
    own = Figure()
    ax = own.add_subplot()
    plots.plot_step_series(STEPS, ax=ax)
    assert len(ax.patches) == 4 and ax.patches[2].get_data().edges[0] > 4  # rank 1 follows rank 0
    fig = plots.plot_step_series(STEPS.iloc[:0])
    assert "no training steps" in [t.get_text() for t in fig.axes[0].texts]


def training_frame(fw_steps=(), ranks=(0, 1), epochs=2, per_epoch=6):
    """Training Iterations of 1 s with 0.1 s gaps; framework rows inside the steps (epoch, step) in fw_steps
    of every rank; steps numbered within the epoch. Returns the frame and rank 0's step spans."""
    cols = {k: [] for k in ("layer", "cat", "name", "rank", "start_ns", "end_ns", "epoch", "step")}
    spans = {}

    def add(layer, cat, name, rank, s, e, epoch, step):
        for k, v in zip(cols, (layer, cat, name, rank, s, e, epoch, step)):
            cols[k].append(v)

    for rank in ranks:
        t = 10_000_000_000 + 7 * rank
        for epoch in range(epochs):
            for step in range(per_epoch):
                s, e = t, t + 1_000_000_000
                add("app", "compute", "Training Iteration", rank, s, e, epoch, step)
                add("app", "wait", "Call to Next Batch", rank, s + 10, s + 100_000_000, epoch, step)
                add("posix", "io", "read", rank, s + 20, s + 50, None, None)
                if (epoch, step) in fw_steps:
                    add("framework", "compute", "train", rank, s + 1000, e - 1000, None, None)
                if rank == ranks[0]:
                    spans[epoch, step] = (s, e)
                t = e + 100_000_000
    return to_frame(cols), spans


def test_steady_state_window_prefers_the_framework_profiled_steps():
    frame, spans = training_frame(fw_steps={(1, 3), (1, 4), (1, 5)})
    assert plots.steady_state_window(frame) == (spans[1, 2][0], spans[1, 5][1])
    # two steps: the earliest stretch with the most framework steps
    assert plots.steady_state_window(frame, steps=2) == (spans[1, 3][0], spans[1, 4][1])


def test_steady_state_window_rule_without_framework_rows():
    frame, spans = training_frame()
    # the last epoch, after its first step; on the lowest rank
    assert plots.steady_state_window(frame) == (spans[1, 1][0], spans[1, 4][1])
    assert plots.steady_state_window(frame[frame["rank"] == 1]) == (spans[1, 1][0] + 7, spans[1, 4][1] + 7)
    # the framework profile covered epoch 0 only: that wins over the last epoch
    frame, spans = training_frame(fw_steps={(0, 2), (0, 3)})
    assert plots.steady_state_window(frame, steps=3) == (spans[0, 1][0], spans[0, 3][1])
    # too few steps per epoch for 4 + 1: the longest epoch's steps after the first
    frame, spans = training_frame(per_epoch=3)
    assert plots.steady_state_window(frame) == (spans[0, 1][0], spans[0, 2][1])


def test_steady_state_window_falls_back_to_app_rows_with_a_step_and_none_without_steps():
    frame, spans = training_frame(ranks=(0,))
    no_iters = frame[frame["name"] != "Training Iteration"]
    # Call to Next Batch rows carry the steps; their spans are the windows
    assert plots.steady_state_window(no_iters) == (spans[1, 1][0] + 10, spans[1, 4][0] + 100_000_000)
    assert plots.steady_state_window(frame[frame["layer"] != "app"]) is None
    assert plots.steady_state_window(frame.iloc[:0]) is None


def test_steady_state_window_steps_are_the_step_series_steps_not_every_row_with_a_tag():
    """DFTracer's generated traces (and DLIO) run validation steps at an epoch's end that reuse the training steps'
    numbers: grouped by tag, each "step" spanned the whole epoch (a 306 s "4-step" window on
    dftracer_gen_fake_trace's set). As the step series marks them, they are steps of their own."""
    from trace_merge.schema import concat_frames

    frame, spans = training_frame(ranks=(0,))
    steps = frame[(frame["name"] != "Training Iteration").to_numpy()]  # the steps are the tagged rows
    end = int(frame["end_ns"].max())
    val = to_frame({"layer": "app", "cat": "other", "name": "val_step", "rank": 0,
                    "start_ns": [end + 10 ** 9 * (k + 1) for k in range(6)],
                    "end_ns": [end + 10 ** 9 * (k + 1) + 10 ** 8 for k in range(6)], "epoch": [1] * 6,
                    "step": list(range(6))})
    with_val = concat_frames([steps, val])
    assert plots.steady_state_window(with_val) == (spans[1, 1][0] + 10, spans[1, 4][0] + 100_000_000)
    assert plots.steady_state_window(concat_frames([frame, val])) == (spans[1, 1][0], spans[1, 4][1])


def event_stats(inclusive):
    """App-layer event statistics: phase -> Σ duration (s)."""
    return pd.DataFrame({"layer": "app", "cat": "other", "name": list(inclusive),
                         "count": 1, "sum_us": [v * 1e6 for v in inclusive.values()]})


#: no framework profile anywhere: every second the file system did not see is "not observed"; the input wait
#: ("Call to Next Batch") holds the reads ("Load File"), so its own self time is short
UNPROFILED = layered([
    (0, 0, "Start-up", "other", (0, 0, 0, 0, 0, 6)),
    (0, 0, "Training Iteration", "compute", (0, 0, 0, 0, 0, 9)),
    (0, 0, "Load File", "io", (2, 0, 0, 0, 0, 1)),
    (0, 0, "Call to Next Batch", "wait", (0, 0, 0, 0, 0, 0.01)),
    (0, 0, "Checkpoint", "checkpoint", (0.5, 0, 0, 0, 0, 0.5)),
])


def test_where_time_goes_shows_what_is_known_for_every_phase():
    """The first screen's data: the layered breakdown is 87 % "not observed", the chart's is 0 %: that time is
    drawn as its phase's category; the file system's seconds stay the file system's; the input wait keeps a bar of
    its own with its inclusive time, not folded into "other phases"."""
    from trace_merge.analysis import WHERE_SEGMENTS, where_time_goes_df

    assert UNPROFILED["not_observed_s"].sum() / UNPROFILED["time_s"].sum() > 0.85
    where = where_time_goes_df(UNPROFILED, event_stats({"Call to Next Batch": 3.01, "Load File": 3}), top=2)
    assert list(where["phase"]) == ["Training Iteration", "Start-up", "Call to Next Batch", "other phases"]
    assert "not_observed_s" not in where
    segments = where[[f"{c}_s" for c in WHERE_SEGMENTS]]
    np.testing.assert_allclose(segments.sum(axis=1), where["self_s"])  # the segments are the bar
    wait = where.set_index("phase").loc["Call to Next Batch"]
    assert (wait["cat"] == "wait" and wait["self_s"] == pytest.approx(0.01)
            and wait["inclusive_s"] == pytest.approx(3.01))
    other = where.set_index("phase").loc["other phases"]
    assert other["fs_s"] == pytest.approx(2.5) and other["cat_s"] == pytest.approx(1.5)
    # what the chart draws: no segment is "not observed"; each category's part is labelled with the category
    fig = plots.plot_where_time_goes(where)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any("not observed" in x for x in labels), labels
    assert "input wait phase, not split by a profile" in labels and "file system" in labels
    assert "inclusive time (nested phases too)" in labels
    assert not any("tf.data" in x for x in labels)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ticks[2] == "Call to Next Batch · input wait\nself 0.0100 s, inclusive 3.01 s"


def test_where_time_goes_names_tfdata_only_when_told():
    from trace_merge.analysis import where_time_goes_df

    profiled = UNPROFILED.assign(input_wait_s=UNPROFILED["not_observed_s"], not_observed_s=0.0)
    where = where_time_goes_df(profiled, event_stats({}))
    for tfdata, label in ((True, "input wait (tf.data)"), (False, "input wait")):
        labels = [t.get_text() for t in plots.plot_where_time_goes(where, tfdata=tfdata).legends[0].get_texts()]
        assert label in labels and not any(x.startswith("input wait (") for x in labels if x != label), labels
