"""Render a run's HTML report in headless Chromium: a screenshot of its first screen and the page's layout facts.

``python tools/report_screenshot.py RUN_DIR OUT.png [--width 1280 --height 900]`` writes the report (to a temporary
file, the run directory is not touched), screenshots the first ``height`` pixels and prints, as JSON, where the
verdict, its reasons, the next step and the findings end on the page, whether every image loaded and whether the
page overflows horizontally. The test suite uses :func:`probe` (tests/test_report.py).
"""
from __future__ import annotations

import argparse
import html
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: appended to a copy of the report: after load, the layout facts as JSON in <pre id="probe">
PROBE_SCRIPT = """<script>
window.addEventListener('load', () => {
  const box = s => { const e = document.querySelector(s); if (!e) return null;
                     const b = e.getBoundingClientRect(); return {top: b.top, bottom: b.bottom}; };
  const out = {verdict: box('.verdict'), reasons: box('.answer ul'), next: box('.next'), findings: box('ol.findings'),
               picture: box('.grid img'),
               images: [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0})),
               scroll_width: document.documentElement.scrollWidth, width: window.innerWidth};
  const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> "str | None":
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _chromium(args: list[str], profile: Path) -> str:
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed (make browser)")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout


def probe(report: Path, screenshot: Path, width: int = 1280, height: int = 900) -> dict:
    """Layout facts of ``report`` rendered at ``width`` x ``height``, and a screenshot of its first screen."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / "report.html"
        probed.write_text(report.read_text(encoding="utf-8").replace("</body>", PROBE_SCRIPT + "</body>"),
                          encoding="utf-8")
        size = f"--window-size={width},{height}"
        _chromium([size, f"--screenshot={screenshot}", report.resolve().as_uri()], Path(tmp) / "p1")
        dom = _chromium([size, "--virtual-time-budget=5000", "--dump-dom", probed.resolve().as_uri()],
                        Path(tmp) / "p2")
    start = dom.index('<pre id="probe">') + len('<pre id="probe">')
    return json.loads(html.unescape(dom[start:dom.index("</pre>", start)]))


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path, help="PNG of the first screen")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)
    from trace_merge.report import write_report
    from trace_merge.run import Run

    with tempfile.TemporaryDirectory() as tmp:
        report = write_report(Run.open(args.run_dir), Path(tmp) / "report.html")
        facts = probe(report, args.out, args.width, args.height)
    print(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
