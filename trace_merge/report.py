"""Self-contained HTML report of one run: verdict, warnings, alignment residual, figures and tables.

The file has no external references: figures are PNGs embedded as base64 ``data:`` URIs and the styling is
inline, so it can be mailed or attached to a ticket as is.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pandas as pd

from trace_merge import __version__, analysis, plots
from trace_merge.explain import view_heading_html
from trace_merge.findings import findings, idle_text, next_step
from trace_merge.formatting import sig3
from trace_merge.html_parts import figure, key_values, table
from trace_merge.jobinfo import slurm_line
from trace_merge.outputs import atomic_output, refuse_existing

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure, SubFigure

    from trace_merge.align import Residual
    from trace_merge.findings import Finding
    from trace_merge.run import Run

logger = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1150px;color:#222}
h1{font-size:1.5em;margin-bottom:0} h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:28px}
.sub{color:#666;margin-top:4px} table{border-collapse:collapse;font-size:12px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right} th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.verdict{font-size:1.1em;padding:10px 14px;border-radius:6px;display:inline-block;margin:8px 0}
.v-not{background:#e6f4ea} .v-moderately{background:#fff4e5} .v-highly{background:#fdecea} \
.v-accelerator{background:#fdecea} .v-unknown{background:#eee}
.warn{color:#8a4b00} img{max-width:100%;border:1px solid #eee;margin:6px 0} details{margin:6px 0}
.kv td:first-child{font-weight:600} .scroll{overflow-x:auto}
.answer{border:1px solid #ddd;border-radius:6px;padding:4px 16px 8px;margin:10px 0}
.answer ul{margin:4px 0 6px 0;padding-left:20px;font-size:13px;color:#444}
.next{font-size:1.02em;margin:6px 0} .grid{display:flex;gap:20px;align-items:flex-start}
.grid>div{flex:1 1 0;min-width:0} .grid h2{margin-top:8px}
ol.findings{padding-left:20px;margin:4px 0;font-size:13px} ol.findings li{margin-bottom:7px}
.sev{font-size:11px;font-weight:600;padding:1px 5px;border-radius:3px;margin-right:4px}
.sev-high{background:#fdecea;color:#a12} .sev-medium{background:#fff4e5;color:#8a4b00} .sev-info{background:#eee}
.ev{color:#555} .try{color:#135} .idle{font-size:13px;margin:4px 0} .cap{font-size:12px}
"""


def _per_layer_totals(run: "Run") -> pd.DataFrame:
    per = run.breakdown("all", per_layer=True)
    per = per[per["epoch"].isna()]
    return per[["layer", "rank", "wall_s", *[f"{c}_pct" for c in analysis.PRIORITY]]]


def _timeline(run: "Run", window: "Optional[tuple[int, int]]") -> "Figure | SubFigure":
    """The timeline excerpt: only its rows are read (a large run's are never all in memory)."""
    rows, lo, hi, span = run.excerpt(*(window or (None, None)))
    return plots.plot_timeline(rows, start_ns=lo, end_ns=hi, span=span)


def _residual_ms(residual: "Residual") -> dict[str, Any]:
    """The alignment residual for people: ``*_ns`` values in ms."""
    return {(k[:-3] + "_ms" if k.endswith("_ns") else k): (v / 1e6 if k.endswith("_ns") and isinstance(v, (int, float))
                                                          else v) for k, v in residual.as_dict().items()}


#: findings shown open on the first screen; the rest are folded under them
OPEN_FINDINGS = 3


def _finding_items(found: "list[Finding]") -> str:
    return "".join(
        f'<li><span class="sev sev-{f.severity}">{f.severity}</span><b>{html.escape(f.title)}</b><br>'
        f'<span class="ev">{html.escape(f.evidence)} · layer {html.escape(f.layer)}</span><br>'
        f'<span class="try">Try: {html.escape(f.action)}</span></li>' for f in found)


def findings_html(found: "list[Finding]") -> str:
    """Every finding: the first :data:`OPEN_FINDINGS` open, the rest in a ``<details>`` that continues the list."""
    html_ = f'<ol class="findings">{_finding_items(found[:OPEN_FINDINGS])}</ol>'
    if len(found) > OPEN_FINDINGS:
        html_ += (f"<details><summary>{len(found) - OPEN_FINDINGS} more finding(s)</summary>"
                  f'<ol class="findings" start="{OPEN_FINDINGS + 1}">{_finding_items(found[OPEN_FINDINGS:])}</ol>'
                  "</details>")
    return html_


def where_caption(where: pd.DataFrame) -> str:
    """What the first screen's bars are, with the share of their time no framework profile split."""
    total = float(where["self_s"].sum())
    unsplit = 100 * float(where["cat_s"].sum()) / total if total else 0.0
    return ("Bars: each app phase's self time (nested phases' time is theirs), summed over ranks and epochs; dashed "
            "outline: its inclusive time. The file-system and communication layers are traced over the whole run; "
            "the framework split (compute, Python, input wait) only where a TF profile looked. "
            + (f"The light part of each bar, {unsplit:.0f} % of the time, no framework profile split (“not "
               "observed” in the layered breakdown): it is drawn as the phase's own category."
               if unsplit >= 0.5 else "Every phase was split by a profile."))


def _first_screen(run: "Run", a: "analysis.Summary", found: "list[Finding]") -> str:
    """Is this job input-bound, where does the time go, why, and what to try next: one screen."""
    v = a.verdict
    css_class = "v-" + (v.label.split()[0] if v.label != "unknown" else "unknown")
    reasons = [*v.notes, *a.explanations][:4]
    reason_html = "".join(f"<li>{html.escape(r)}</li>" for r in reasons)
    early_html = "".join(f'<p class="warn"><b>{html.escape(w)}</b></p>' for w in run.ended_early())
    idle = idle_text(a)
    idle_html = f'<p class="idle">{html.escape(idle[0].upper() + idle[1:])}</p>' if idle else ""
    where = analysis.where_time_goes_df(a.layered, a.event_stats)
    tfdata, dataloader = analysis.has_tfdata(a.event_stats), analysis.has_dataloader(a.event_stats)
    picture = (figure("where the time goes", lambda: plots.plot_where_time_goes(where, tfdata=tfdata,
                                                                                dataloader=dataloader))
               + f'<p class="sub cap">{html.escape(where_caption(where))} Full table under “Layered breakdown”.</p>'
               if len(where) else "<p><i>no app phases</i></p>")
    return (
        f'<div class="answer">{early_html}<div class="verdict {css_class}"><b>Is it input-bound?</b> '
        f"{html.escape(analysis.verdict_text(v))}</div><ul>{reason_html}</ul>{idle_html}"
        f'<p class="next"><b>Next step:</b> {html.escape(next_step(found))}</p></div>'
        f'<div class="grid"><div><h2>Where the time goes</h2>{picture}</div>'
        f'<div><h2>Findings ({len(found)})</h2>{findings_html(found)}'
        '<p class="sub">Rules: docs/findings.md; the same list: <code>trace-merge findings RUN</code>.</p></div></div>')


def render_report(run: "Run", parts: "Optional[analysis.Summary]" = None) -> str:
    """The report of ``run`` as one HTML string.

    Parameters
    ----------
    run
        An opened :class:`trace_merge.run.Run`.
    parts
        A result of ``run.analyse()`` to reuse.
    """
    from trace_merge import darshan_view

    view = darshan_view.darshan_view(run)
    if view is not None and not darshan_view.has_training(run):  # a plain Darshan log: no training sections
        found = run.findings()
        found_html = (f"<h2>Findings ({len(found)})</h2>{findings_html(found)}<p class=\"sub\">Rules: docs/findings.md "
                      "(file-system findings); the same list: <code>trace-merge findings RUN</code>.</p>")
        return _page(run, darshan_view.report_sections(run, view, found_html))
    a = parts if parts is not None else run.analyse()
    v = a.verdict
    m = a.metrics
    access = run.access_pattern()
    found = findings(a)
    tfdata, dataloader = analysis.has_tfdata(a.event_stats), analysis.has_dataloader(a.event_stats)
    labels = analysis.component_labels(tfdata, dataloader)
    facts = {
        "path": str(run.path),
        "events": m.events,
        "ranks": m.ranks,
        "rows per layer": ", ".join(f"{k}: {n:,}" for k, n in run.rows_per_layer().items() if n),
        "counter rows": len(run.counters),
        "source files": len(run.sources),
        "job wall time (s)": m.job_wall_s,
        "read bytes": m.read_bytes,
        "aggregate read bandwidth (MB/s)": m.aggregate_bw_MB_per_s,
        "bytes ÷ job wall time (MB/s)": m.bw_over_job_wall_MB_per_s,
        "exposed I/O (% of wall)": m.exposed_io_pct,
    }
    warnings = "".join(f"<li>{html.escape(w)}</li>" for w in run.warnings) or "<li>none</li>"
    breakdown = a.breakdown
    pct_cols = ["rank", "epoch", "wall_s", *[f"{c}_pct" for c in analysis.PRIORITY], "outside_epochs_pct"]
    union_cols = ["rank", "epoch", "wall_s", *[f"{c}_s" for c in analysis.PRIORITY]]
    window = run.steady_state_window()
    excerpt_text = ("A few consecutive training steps in steady state (first step of an epoch skipped), every "
                    "layer on one clock." if window else "The first seconds of the run (no training steps tagged).")
    empty_bins = [c for c in access.columns if c.startswith("size_") and not access[c].any()]
    stats = a.event_stats.sort_values("sum_us", ascending=False) if len(a.event_stats) else a.event_stats
    sections = [
        f"<h1>trace-merge report — {html.escape(run.label)}</h1>",
        f'<p class="sub">{html.escape(str(run.path))} · {m.ranks} rank(s) · job wall time '
        f'{sig3(m.job_wall_s or 0)} s · {len(run.warnings)} warning(s) · generated '
        f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC} by trace_merge {__version__}</p>",
        *([f'<p class="sub">{html.escape(job)}</p>'] if (job := slurm_line(run.manifest)) else []),
        _first_screen(run, a, found),
        "<h2>Run</h2>", key_values(facts),
        f"<h2>Warnings ({len(run.warnings)})</h2><ul class='warn'>{warnings}</ul>",
        "<h2>Alignment residual</h2>",
        "<details><summary>Framework events of a training step must fall inside the app interval of that step "
        f"after alignment: {run.residual.outside} of {run.residual.checked} checked fall "
        "outside (times in ms)</summary>", key_values(_residual_ms(run.residual)), "</details>",
        *(["<h3>Darshan DXT placement per rank</h3>", "<p>Offset added to the job-header placement, found from "
           "the segments' content (docs/frame.md, clocks).</p>", table(pd.DataFrame(run.dxt_clock))]
          if run.dxt_clock else []),
        "<h2>Layered breakdown: what the lower layers did inside each app phase</h2>",
        "<p>Each app phase's self time (innermost phase per thread), split by what the lower layers of the same "
        "rank were doing inside it; where they overlap the first of "
        f"{' &gt; '.join(html.escape(labels[c]) for c in analysis.COMPONENTS)} wins, so "
        "each row sums to the phase's time. Epoch “none”: the phase ran outside every epoch. Definitions: "
        "docs/metrics.md in the toolkit's repository.</p>",
        (figure("layered breakdown",
                lambda: plots.plot_layered_breakdown(a.layered, tfdata=tfdata, dataloader=dataloader))
         if len(a.layered) else ""),
        table(analysis.epochs_as_text(a.layered, "none")),
        "<h2>Steps: input wait per step</h2>",
        "<p>" + "<br>".join(html.escape(n) for n in [*v.notes, *a.explanations]) + "</p>",
        figure("step series", lambda: plots.plot_step_series(a.steps, tfdata=tfdata, dataloader=dataloader))
        if len(a.steps) else "",
        "<h2>Drill-down: breakdown by phase category, app layer</h2>",
        "<p>Exclusive share of each epoch's wall time: the innermost phase on each thread, then priority "
        f"{' &gt; '.join(analysis.PRIORITY)} across threads; time outside every epoch has its own column; rows "
        "sum to 100 %. Epoch “all”: the rank's whole traced time. An app phase's category is a hint only "
        "(a Keras batch contains the wait for its batch): the layered breakdown above says what happened.</p>",
        figure("breakdown", lambda: plots.plot_breakdown(breakdown)) if len(breakdown) else "",
        table(analysis.epochs_as_text(breakdown[pct_cols], "all")) if len(breakdown) else table(breakdown),
        "<details><summary>Union time per category (seconds, overlapping phases counted in each)</summary>",
        table(analysis.epochs_as_text(breakdown[union_cols], "all")) if len(breakdown) else "", "</details>",
        "<details><summary>Whole-run breakdown of each layer on its own (drill-down)</summary>",
        table(_per_layer_totals(run)), "</details>",
        "<h2>Exposed I/O and overlap</h2>", "<p>Epoch “all”: the rank's whole traced time.</p>",
        table(analysis.epochs_as_text(a.exposed_io, "all")),
        "<h2>Steps: input wait and accelerator utilisation</h2>", table(a.input_bound),
        "<h2>Read bandwidth</h2>",
        figure("bandwidth", lambda: plots.plot_bandwidth(a.bandwidth)) if len(a.bandwidth) else "",
        table(a.bandwidth), key_values(a.bandwidth_totals),
        "<h2>Read bandwidth per epoch (data files)</h2>", table(a.epoch_bandwidth_totals),
        table(a.epoch_bandwidth),
        *([f"<h2>{view_heading_html(a.view)}</h2>", table(a.study_view)]
          if a.view is not None and len(a.study_view) else []),
        "<h2>Access pattern</h2>",
        figure("access pattern", lambda: plots.plot_access_pattern(access)) if len(access) else "",
        "<p>Epoch “none”: reads outside every epoch.</p>" if len(access) and access["epoch"].isna().any() else "",
        table(analysis.epochs_as_text(access.drop(columns=empty_bins), "none")),
        "<h2>Timeline excerpt</h2>",
        f"<p>{html.escape(excerpt_text)}</p>",
        figure("timeline", lambda: _timeline(run, window)) if m.events else "<p><i>no events</i></p>",
        "<h2>Events per layer, category and name (top 50 by total time)</h2>", table(stats, 50),
    ]
    if view is not None:
        sections += darshan_view.html_sections(run, view, aligned=True)
    if run.manifest:
        sections.append("<h2>Manifest</h2><details><summary>manifest.json</summary><pre>"
                        + html.escape(json.dumps(run.manifest, indent=2, default=str)) + "</pre></details>")
    return _page(run, sections)


def _page(run: "Run", sections: list[str]) -> str:
    body = "\n".join(sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>trace-merge report — {html.escape(run.label)}</title><style>{_CSS}</style></head>"
            f"<body>\n{body}\n</body></html>\n")


def write_report(run: "Run", path: "str | os.PathLike[str]", force: bool = False,
                 parts: "Optional[analysis.Summary]" = None) -> Path:
    """Write the HTML report of ``run`` to ``path``.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is False.
    """
    path = Path(path)
    refuse_existing(path, force=force)  # before the (slow) rendering
    text = render_report(run, parts)
    with atomic_output(path, force) as tmp:
        tmp.write_text(text, encoding="utf-8")
    logger.info("wrote %s", path)
    return path
