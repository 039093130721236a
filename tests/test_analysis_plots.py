"""plots: each figure checked through its axes (bars, labels, lanes), drawn from real-run analyses."""
from __future__ import annotations

import numpy as np
import pytest

from trace_merge import analysis as A
from trace_merge import plots
from trace_merge.run import Run


@pytest.fixture(scope="module")
def run(real_run):
    return Run.open(real_run[0])


def test_plot_breakdown_stacks_shares_per_rank_epoch(run):
    bd = run.breakdown()
    fig = plots.plot_breakdown(bd)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0 · epoch 0", "rank 0 · epoch 1"]
    widths = {}
    for container, label in zip(ax.containers, [t.get_text() for t in ax.get_legend().get_texts()]):
        widths[label] = [p.get_width() for p in container.patches]
    per_epoch = bd[bd["epoch"].notna()]
    for cat, w in widths.items():
        np.testing.assert_allclose(w, per_epoch[f"{cat}_pct"])
    np.testing.assert_allclose(np.sum(list(widths.values()), axis=0), 100.0)


def test_plot_bandwidth_bar_heights(run):
    bw = run.bandwidth()
    ax = plots.plot_bandwidth(bw).axes[0]
    np.testing.assert_allclose([p.get_height() for p in ax.patches], bw["read_bw_MB_per_s"])


def test_plot_timeline_lanes_per_rank_and_layer(run):
    ax = plots.plot_timeline(run.frame).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0 · app", "rank 0 · posix"]
    assert ax.get_xlim()[1] == pytest.approx(A.job_wall_ns(run.frame) / 1e9)


def test_plot_access_pattern_histogram_and_draws_on_given_axes(run):
    ap = run.access_pattern()
    fig = plots.plot_access_pattern(ap)
    counts = [p.get_height() for p in fig.axes[0].patches]
    assert sum(counts) == ap["reads"].sum()
    from matplotlib.figure import Figure

    own = Figure()
    ax = own.add_subplot()
    assert plots.plot_access_pattern(ap, ax=ax) is own and len(ax.patches) == len(A.SIZE_BINS)


def test_plot_timeline_excerpt_of_a_large_trace_starts_at_the_first_step(dftracer_set):
    frame = Run.open(dftracer_set).frame
    ax = plots.plot_timeline(frame, max_events=50).axes[0]
    stepped = frame[frame["step"].notna()]
    first_step = int(stepped["start_ns"].min())
    later = np.sort(frame["start_ns"].to_numpy())
    later = later[later >= first_step]
    assert ax.get_xlim()[1] == pytest.approx((later[50] - first_step) / 1e9)
    assert "Timeline excerpt" in ax.get_title()


@pytest.mark.parametrize("n", [1, 5, 300])
def test_step_stairs_are_matplotlibs_without_its_vertex_walk(n):
    """The step series draws its stairs as ``Axes.stairs`` would (same data limits, margins, legend), taking the
    limits from the values: ``stairs`` walks every vertex in Python (minutes for a million steps)."""
    from matplotlib.figure import Figure

    rng = np.random.default_rng(n)
    wait = rng.random(n)
    step = wait + rng.random(n)
    edges = np.arange(n + 1) + 3
    ours, theirs = Figure().add_subplot(), Figure().add_subplot()
    theirs.stairs(wait, edges, baseline=0, fill=True, label="wait")
    theirs.stairs(step, edges, baseline=wait, fill=True, label="rest")
    plots._stairs(ours, wait, edges, 0.0, label="wait")
    plots._stairs(ours, step, edges, wait, label="rest")
    for ax in (ours, theirs):
        ax.bar(edges[0] + 0.5, 2.5, width=1.0, fill=False)  # what is drawn after them still rescales
        ax.figure.canvas.draw()
    assert ours.get_xlim() == theirs.get_xlim() and ours.get_ylim() == theirs.get_ylim()
    assert ours.get_legend_handles_labels()[1] == theirs.get_legend_handles_labels()[1] == ["wait", "rest"]
    np.testing.assert_array_equal(ours.patches[1].get_data().values, theirs.patches[1].get_data().values)
