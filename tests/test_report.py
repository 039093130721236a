"""HTML report: self-contained, shows verdict, warnings, residual, figures and tables; renders in Chromium."""
from __future__ import annotations

import base64
import re
import shutil
import subprocess

import pytest

from trace_merge.errors import OutputExistsError
from trace_merge.report import render_report, write_report
from trace_merge.run import Run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


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


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(report_file, tmp_path):
    _, path = report_file
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2000",
                    path.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    from matplotlib.image import imread

    img = imread(shot)
    assert img.shape[:2] == (2000, 1200)
    # a rendered page, not a blank one: plenty of non-white pixels, and the breakdown's io red is on screen
    rgb = img[..., :3]
    assert (rgb.mean(axis=2) < 0.9).mean() > 0.02
    red = (rgb[..., 0] > 0.75) & (rgb[..., 1] < 0.25) & (rgb[..., 2] < 0.25)
    assert red.sum() > 500
