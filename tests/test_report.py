"""HTML report: self-contained, shows verdict, warnings, residual, figures and tables; renders in Chromium."""
from __future__ import annotations

import base64
import html
import re
import sys
from pathlib import Path

import pytest

from trace_merge.analysis import COMPONENT_LABELS, where_time_goes_df
from trace_merge.errors import OutputExistsError
from trace_merge.formatting import size_text
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
    for heading in ("Is it input-bound?", "Next step:", "Where the time goes", "Findings (", "Warnings",
                    "Alignment residual", "Layered breakdown",
                    "Steps: input wait per step", "Drill-down: breakdown by phase category",
                    "Whole-run breakdown of each layer",
                    "Exposed I/O", "Read bandwidth", "Access pattern", "Timeline excerpt", "Manifest"):
        assert heading in text, heading
    assert size_text(int(run.bandwidth()["read_bytes"].sum())) in text


def test_report_lists_warnings_escaped(real_run):
    run = Run.open(real_run[0])
    run.warnings[:] = ["/x/<rank-3>.pfw: truncated & skipped"]
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


def test_first_screen_of_a_run_without_a_profile_shows_what_is_known(report_file):
    """No TF profile: the layered breakdown's time is mostly "not observed"; the first screen's chart draws that time
    as each phase's category (its data holds no not-observed part), keeps the file system's seconds, and names the
    unsplit share in its caption. The CLI's line on the input phases' time is there too."""
    run, path = report_file
    text = path.read_text(encoding="utf-8")
    a = run.analyse()
    assert "framework" not in run.rows_per_layer() or not run.rows_per_layer()["framework"]
    unseen = a.layered["not_observed_s"].sum() / a.layered["time_s"].sum()
    assert unseen > 0.5  # the old chart: hatched "not observed" over most of it
    where = where_time_goes_df(a.layered, a.event_stats)
    assert "not_observed_s" not in where
    assert where["fs_s"].sum() == pytest.approx(a.layered["fs_s"].sum())
    known = where[["fs_s", "cat_s"]].sum(axis=1)  # every second is the file system's or its phase category's
    assert known.to_numpy() == pytest.approx(where["self_s"].to_numpy())
    assert all(where["cat"] != "") or "other phases" in set(where["phase"])
    assert f"{100 * where['cat_s'].sum() / where['self_s'].sum():.0f} % of the time, no framework profile split" \
        in text
    from trace_merge.findings import idle_text

    line = idle_text(a)
    assert "the input phases' time:" in line and html.escape(line[0].upper() + line[1:]) in text


def test_every_finding_is_in_the_report_the_first_three_open(real_run, monkeypatch):
    from trace_merge import report
    from trace_merge.findings import Finding

    found = [Finding(f"k{i}", "medium", f"title {i} <&>", f"evidence {i}", "app", f"action {i}") for i in range(5)]
    monkeypatch.setattr(report, "findings", lambda a: found)
    text = render_report(Run.open(real_run[0]))
    assert "Findings (5)" in text
    opened, folded = text.split("<details><summary>2 more finding(s)</summary>", 1)
    for i, f in enumerate(found):
        assert html.escape(f.title) in (opened if i < 3 else folded), i
    assert '<ol class="findings" start="4">' in folded


def test_no_tfdata_named_in_a_run_without_tfdata(report_file):
    _, path = report_file
    assert "tf.data)" not in path.read_text(encoding="utf-8")


@pytest.mark.tf
def test_tfdata_named_in_a_run_with_tfdata(tmp_path):
    """tfdata_guide's loop with a TF profile: its IteratorGetNext waits are tf.data's, and the legends say so."""
    import subprocess

    from tests.helpers.tools import REPO, clean_env
    from trace_merge.analysis import component_labels, has_tfdata

    run_dir = tmp_path / "run"
    p = subprocess.run([sys.executable, str(REPO / "tests" / "workloads" / "tfdata_guide.py"), str(run_dir),
                        "--instrument", "readme", "--profile"], env=clean_env(PYTHONPATH=str(REPO)),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    run = Run.open(run_dir)
    a = run.analyse()
    assert has_tfdata(a.event_stats)
    assert component_labels(True)["input_wait"] in render_report(run, a)


def test_units_are_one_system_in_the_cli_and_the_report(report_file, capsys):
    """Decimal MB/GB for bytes and bandwidth in both, bytes in human units: no MiB, no 13-digit byte counts."""
    from trace_merge.cli import main

    run, path = report_file
    assert main(["summary", str(run.path)]) == 0 and main(["findings", str(run.path)]) == 0
    cli = capsys.readouterr().out
    page = path.read_text(encoding="utf-8")
    read = int(run.bandwidth()["read_bytes"].sum())
    for text in (cli, page):
        assert not re.search(r"\b[KMGT]iB\b", text)
        assert "MB/s" in text and size_text(read) in text
        assert f"{read:,}" not in text and not re.search(r"\d{1,3}(,\d{3}){2,} bytes", text)
