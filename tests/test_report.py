"""HTML report: self-contained, shows verdict, warnings, residual, figures and tables; renders in Chromium."""
from __future__ import annotations

import base64
import re
import sys
from pathlib import Path

import pytest

from trace_merge.analysis import COMPONENT_LABELS
from trace_merge.errors import OutputExistsError
from trace_merge.plots import COMPONENT_COLOURS, plot_layered_breakdown, plot_step_series
from trace_merge.report import render_report, write_report
from trace_merge.run import Run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from report_screenshot import chromium, probe  # noqa: E402

CHROMIUM = chromium()


@pytest.fixture(scope="module")
def report_file(real_run, tmp_path_factory):
    run = Run.open(real_run[0])
    return run, write_report(run, tmp_path_factory.mktemp("report") / "report.html")


def test_report_is_self_contained_and_has_every_section(report_file):
    run, path = report_file
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["'](?!data:)""", text), "external reference in a self-contained report"
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    # the first screen's top phases, layered breakdown, step series, breakdown, bandwidth, access pattern, timeline
    assert len(images) == 7
    assert all(base64.b64decode(img).startswith(b"\x89PNG") for img in images)
    for heading in ("Is it input-bound?", "Next step:", "Where the time goes", "Findings (top", "Warnings", "Alignment residual", "Layered breakdown",
                    "Steps: input wait per step", "Drill-down: breakdown by phase category",
                    "Whole-run breakdown of each layer",
                    "Exposed I/O", "Read bandwidth", "Access pattern", "Timeline excerpt", "Manifest"):
        assert heading in text, heading
    assert f"{int(run.bandwidth()['read_bytes'].sum()):,}" in text


def test_report_lists_warnings_escaped(real_run):
    run = Run.open(real_run[0])
    run.warnings = ["/x/<rank-3>.pfw: truncated & skipped"]
    text = render_report(run)
    assert "/x/&lt;rank-3&gt;.pfw: truncated &amp; skipped" in text and "Warnings (1)" in text


def test_report_refuses_to_overwrite_without_force(report_file):
    run, path = report_file
    before = path.read_bytes()
    with pytest.raises(OutputExistsError):
        write_report(run, path)
    assert path.read_bytes() == before
    write_report(run, path, force=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make browser)")
def test_first_screen_answers_in_headless_chromium(report_file, tmp_path):
    """At 1280 x 900: the verdict, its reasons, the next step and the findings end above the fold; every image
    loaded; nothing overflows sideways. The screenshot is the first screen a person sees."""
    _, path = report_file
    shot = tmp_path / "first-screen.png"
    facts = probe(path, shot)
    for part in ("verdict", "reasons", "next", "findings"):
        assert facts[part] is not None and facts[part]["bottom"] <= 900, (part, facts[part])
    assert facts["picture"] is not None and facts["picture"]["top"] < 900
    assert facts["images"] and all(img["loaded"] for img in facts["images"]), facts["images"]
    assert facts["scroll_width"] <= facts["width"], "the page overflows horizontally"
    from matplotlib.image import imread

    img = imread(shot)
    assert img.shape[:2] == (900, 1280)
    rgb = img[..., :3]
    assert (rgb.mean(axis=2) < 0.9).mean() > 0.02  # a rendered page, not a blank one


def test_step_figure_is_scaled_on_the_steady_steps(real_run):
    """The warm-up step (excluded by the verdict, often 100x longer) is drawn hatched and clipped, never the scale."""
    steps = Run.open(real_run[0]).step_series()
    steps.loc[steps["warmup"], "excluded_s"] = 50.0  # a long warm-up, as Keras' first step with graph tracing
    fig = plot_step_series(steps)
    steady = steps.loc[~steps["warmup"], "step_s"].max()
    for ax in fig.axes:
        assert ax.get_ylim()[1] == pytest.approx(1.15 * steady)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any(t.startswith("warm-up 50") for t in texts), texts


def test_every_layer_keeps_its_palette_colour(real_run):
    """One palette in one place: each component's bars are drawn in COMPONENT_COLOURS' colour."""
    from matplotlib.colors import to_hex

    a = Run.open(real_run[0]).analyse()
    fig = plot_layered_breakdown(a.layered)
    ax = fig.axes[0]
    for container in ax.containers:
        comp = next(c for c, label in COMPONENT_LABELS.items() if label == container.get_label())
        assert {to_hex(bar.get_facecolor()) for bar in container} == {COMPONENT_COLOURS[comp]}, comp
