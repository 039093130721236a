"""``trace-merge``: merge, summarise, report, export and compare profiled runs.

Each subcommand is a ``setup_parser``/``main`` pair of functions registered in :data:`SUBCOMMANDS`.
Errors are one line ``trace-merge: error: <file>: <cause>`` on stderr with exit status 2 (a traceback only
with ``--debug``; 143 after SIGTERM, with temporary files removed); no output file is overwritten without
``--force``, and two merges of one run at once are refused.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, Sequence

from timelogger.layout import REPORT
from trace_merge import __version__, opening
from trace_merge.errors import TraceInputError
from trace_merge.outputs import input_umask, refuse_existing

if TYPE_CHECKING:
    import pandas as pd

    from trace_merge.opening import MergeOptions

logger = logging.getLogger(__name__)
PROG = "trace-merge"


#: control characters (C0 but tab and newline, DEL, C1) as visible ``\xNN`` escapes: names, files and hosts read
#: from a trace are printed, and an escape sequence in one must not retitle, recolour or clear the user's terminal
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, *range(0x80, 0xa0)) if c not in (0x09, 0x0a)}


def _printable(text: str) -> str:
    return text.translate(_CONTROLS)


def _out(text: str = "") -> None:
    sys.stdout.write(_printable(text) + "\n")


def _num(x: Optional[float]) -> str:
    return "unknown" if x is None or x != x else f"{x:.4g}"


def _open_run(path: "str | Path", args: Optional[argparse.Namespace] = None, summary_only: bool = False):
    """The run at ``path``, with ``args``' engine options; ``summary_only``: a large run's merge keeps the summary
    of ``args.layers`` and not the rows (a command that reads nothing else: no partitions written)."""
    from trace_merge.run import Run

    if args is None:  # a command without the engine options
        return Run.open(path)
    return Run.open(path, options=_merge_options(args, summary_only))


def _merge_options(args: argparse.Namespace, summary_only: bool = False) -> "MergeOptions":
    from trace_merge.opening import MergeOptions

    more = {"layers": args.layers, "keep_rows": False} if summary_only else {}
    return MergeOptions(scheduler=args.scheduler, workers=args.workers, memory_bytes=args.memory_limit, **more)


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run the merge's tasks on this Dask distributed scheduler (tcp://host:8786); workers "
                             "must see the traces (docs/partitioned.md). Default: this machine")
    parser.add_argument("--workers", metavar="N", type=_positive_int, default=None,
                        help="local worker processes for large inputs (default: one per core)")
    parser.add_argument("--memory-limit", metavar="SIZE", type=_size_arg, default=None,
                        help="memory the local workers' tasks may hold together, e.g. 1G, 512M (default: half the "
                             "memory available when the merge starts, at least 1G where there is that much)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _size_arg(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in units and t[-1:] else ""
    try:
        value = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        value = 0
    if not 1 << 20 <= value <= _MAX_MEMORY:  # NaN and infinity fail too
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size from 1M to 1024T (e.g. 512M, 2G)")
    return int(value)


#: the largest --memory-limit taken (1024T): past any machine, and far from float infinity
_MAX_MEMORY = 1 << 50


def _input(path: str) -> Path:
    """The input path; a directory holding several runs is refused here, before any output is looked at."""
    from trace_merge.sources import refuse_runs_below

    p = Path(path)
    refuse_runs_below(p)
    return p


# -- merge ---------------------------------------------------------------------------------------------


def merge_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory (manifest.json, app/, posix/, ...)")
    parser.add_argument("--force", action="store_true", help="overwrite merged.parquet etc. if present")
    _add_engine_options(parser)


def merge_main(args: argparse.Namespace) -> int:
    from trace_merge.formatting import text_width, wrap
    from trace_merge.opening import merge_and_store

    run_dir = _input(args.run_dir)
    if not run_dir.is_dir():
        raise TraceInputError(run_dir, "not a directory (merge writes merged.parquet into the run directory)")
    res, written = merge_and_store(run_dir, _merge_options(args), force=args.force)
    layers = ", ".join(f"{k}: {v:,}" for k, v in res.info.rows_per_layer.items())
    lines = [f"{run_dir}: merged {res.info.rows:,} rows ({layers or 'no intervals'}), "
             f"{len(res.counters):,} counter rows from {len(res.sources)} files, {len(res.warnings)} warnings"]
    _out(wrap([*lines, *(f"  wrote {path}" for path in written.values())], text_width()))
    return 0


# -- summary -------------------------------------------------------------------------------------------


def summary_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH",
                        help="run directory, directory of DFTracer .pfw[.gz] files, or one trace file (.darshan)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the summary as JSON")
    shown.add_argument("--brief", action="store_true",
                       help="print the first screen only: verdict, where the time goes, the top 3 findings")
    _add_layers_option(parser)
    _add_engine_options(parser)


def _add_layers_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", metavar="LIST", type=_layers_arg, default=None,
                        help="layers the breakdown is made from: comma-separated (app,framework,comm,posix,...) "
                             "or 'all' (default: app when present, else all)")


def _layers_arg(text: str) -> "str | list[str]":
    from trace_merge.schema import LAYERS

    if text == "all":
        return text
    layers = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in layers if x not in LAYERS]
    if not layers or unknown:
        raise argparse.ArgumentTypeError(f"unknown layer(s) {', '.join(unknown) or text!r}; "
                                         f"choose from {', '.join(LAYERS)} or 'all'")
    return layers


def _layered_text(layered: pd.DataFrame, width: int, top: int = 30) -> "list[str]":
    from trace_merge.analysis import COMPONENTS, epochs_as_text
    from trace_merge.formatting import frame_text

    if not len(layered):
        return ["  (no app phases)"]
    comp = [f"{c}_s" for c in COMPONENTS]
    table = epochs_as_text(layered, "none")[["rank", "epoch", "phase", "cat", "calls", "observed_calls", "time_s",
                                              *comp, "layers"]]
    table = table[table["time_s"] > 0].sort_values(["rank", "time_s"], ascending=[True, False], kind="stable")
    shown = table.groupby("rank", sort=True).head(top)
    out: list[str] = [frame_text(shown, width)]
    if len(shown) < len(table):
        out.append(f"  ({len(table) - len(shown)} shorter rows not shown: --json or the report has all)")
    return out


#: The summary's terms, explained once under the verdict (docs/metrics.md has the definitions).
GLOSSARY = (
    ("step cycle", "from one training step's start to the next one's on the same rank; input wait + compute + "
                   "waiting for other ranks (Horovod negotiation) + other = the cycle"),
    ("AU", "accelerator utilisation: compute time ÷ step-cycle time (each epoch's first step excluded, as DLIO "
           "does)"),
    ("basis", "what saw most counted cycles: 'framework' = a TF profile window (its IteratorGetNext waits), 'app' "
              "= the app layer's phases of the training loop (TimeLogger, the launcher's hooks, DLIO's events); "
              "the basis note says where the input wait came from"),
    ("input_visible", "whether any input wait could be seen on that rank; without it the verdict is 'unknown'"),
    ("exposed I/O", "input (io/wait) time of the app layer during which no other thread computed"),
    ("not observed", "time inside an app phase that no lower layer saw (outside every TF profile window)"),
)


def _glossary(parts) -> "tuple[tuple[str, str], ...]":
    """:data:`GLOSSARY` in the words of the run's framework (a PyTorch run's profile windows are PyTorch's)."""
    words = _profile_words(parts)
    if words == "TF profile":
        return GLOSSARY
    return tuple((term, meaning.replace("TF profile window (its IteratorGetNext waits)",
                                        f"{words} window (its DataLoader waits)").replace("TF profile", words))
                 for term, meaning in GLOSSARY)


def _profile_words(parts) -> str:
    from trace_merge.frameworks import words_for

    return words_for(parts.framework).profile


def _where_text(parts, width: int) -> "list[str]":
    """The first screen's breakdown (:func:`trace_merge.analysis.where_time_goes_df`) as a table and its key."""
    from trace_merge.analysis import where_time_goes_df
    from trace_merge.formatting import frame_text

    where = where_time_goes_df(parts.layered, parts.event_stats)
    if not len(where):
        return ["where the time goes: no app phases"]
    return ["where the time goes (app phases' self time, s; inclusive_s: with their nested phases; fs, comm: the "
            "file-system and communication layers, traced throughout; input_wait, compute, python: the framework "
            f"split where a {_profile_words(parts)} looked; cat_s: the rest, which only the app layer saw, known by "
            "the phase's category):", frame_text(where, width)]


def _findings_lines(found, limit: Optional[int] = None) -> "list[str]":
    return [f"  {i}. {f.text()}" for i, f in enumerate(found[:limit], 1)]


def _brief_text(run, parts, width: int) -> str:
    """``summary --brief``: the report's first screen as text -- verdict, idle line, breakdown, top findings."""
    from trace_merge.analysis import verdict_text
    from trace_merge.findings import idle_text
    from trace_merge.formatting import wrap

    found = run.findings(parts)
    lines = [f"{run.path}: verdict: {verdict_text(parts.verdict)}", *[x for x in [idle_text(parts)] if x],
             "", *_where_text(parts, width), ""]
    lines.append(f"findings (top {min(3, len(found))} of {len(found)}; all: trace-merge findings {run.path}; "
                 f"everything: trace-merge summary {run.path}):")
    lines += _findings_lines(found, 3)
    return wrap(lines, width)


def _summary_text(run, parts, width: int) -> str:
    from trace_merge.analysis import (
        PRIORITY,
        component_labels,
        epochs_as_text,
        has_dataloader,
        has_tfdata,
        verdict_text,
    )
    from trace_merge.explain import cpu_text, view_heading
    from trace_merge.findings import idle_text, next_step
    from trace_merge.formatting import frame_text, size_text, wrap
    from trace_merge.jobinfo import slurm_line

    m, v = parts.metrics, parts.verdict
    layers = ", ".join(f"{k} {n:,}" for k, n in run.rows_per_layer().items() if n)
    lines = [f"{run.path}: {m.events:,} events, {m.ranks} rank(s), layers: {layers or 'none'}; "
             f"{len(run.counters):,} counter rows; job wall time {m.job_wall_s:.4g} s"]
    lines += [x for x in [slurm_line(run.manifest)] if x]  # job id and node list under Slurm
    if run.dropped:
        lines.append(f"app layer incomplete: {sum(run.dropped.values()):,} intervals dropped by the TimeLogger "
                     f"writer in {len(run.dropped)} file(s) (it could not keep up, or a write failed); app-layer "
                     "times below undercount")
    # first: every number below is partial
    lines += run.ended_early()
    lines.append(f"verdict: {verdict_text(v)}")
    lines += [f"  - {note}" for note in v.notes]
    lines += [f"  - why: {line}" for line in parts.explanations]
    lines += [x for x in [idle_text(parts)] if x]
    found = run.findings(parts)
    lines.append(f"next step: {next_step(found)}")
    if found:
        lines.append(f"findings (top {min(3, len(found))} of {len(found)}; all: trace-merge findings {run.path}):")
        lines += _findings_lines(found, 3)
    lines += ["terms:", *(f"  {term}: {meaning}" for term, meaning in _glossary(parts))]
    if run.warnings:
        lines.append(f"warnings ({len(run.warnings)}):")
        lines += [f"  - {w}" for w in run.warnings]
    lines.append("alignment residual: " + json.dumps(run.residual.as_dict(), default=str))
    for c in run.dxt_clock:
        lines.append(f"DXT clock: {c['source']} rank {c['rank']}: {c['offset_ns'] / 1e6:+.3f} ms from the header "
                     f"(basis {c['basis']}, confidence {c['confidence']:.2f}, {c['matched']} of {c['segments']} "
                     "segments matched)")
    labels = component_labels(has_tfdata(parts.event_stats), has_dataloader(parts.event_stats))
    legend = "; ".join(f"{c} = {label}" for c, label in labels.items())
    lines += ["", "layered breakdown: each app phase's self time (s) split by what the lower layers of its rank "
              f"did inside it ({legend}); epoch 'none' = outside any epoch; docs/metrics.md",
              *_layered_text(parts.layered, width)]
    if parts.cpu is not None:
        lines += ["", *cpu_text(parts.cpu, width)]
    bd = parts.breakdown
    shown = [*(f"{c}_pct" for c in PRIORITY), "outside_epochs_pct"]
    lines += ["", "drill-down, breakdown by phase category (% of wall time, exclusive; epoch 'all' = whole run):",
              frame_text(epochs_as_text(bd[["rank", "epoch", "wall_s", *shown]], "all") if len(bd) else bd, width)]
    lines += ["", "exposed I/O (app layer; epoch 'all' = whole run):",
              frame_text(epochs_as_text(parts.exposed_io, "all"), width)]
    lines += ["", "input wait per rank (steps counted, warm-up step excluded):",
              frame_text(parts.input_bound, width)]
    lines += ["", "read bandwidth per rank:", frame_text(parts.bandwidth, width)]
    t = parts.bandwidth_totals
    if t["read_bytes"]:
        lines.append(f"aggregate: {size_text(t['read_bytes'])} ÷ slowest rank's read time "
                     f"{_num(t['slowest_read_time_s'])} s = {_num(t['aggregate_bw_MB_per_s'])} MB/s; "
                     f"÷ job wall time = {_num(t['bw_over_job_wall_MB_per_s'])} MB/s")
    if len(parts.epoch_bandwidth):
        lines += ["", "read bandwidth per epoch (data files; aggregate = Σ bytes ÷ slowest rank's union read time):",
                  frame_text(parts.epoch_bandwidth_totals, width), "per rank:",
                  frame_text(parts.epoch_bandwidth, width)]
    if len(parts.study_view):
        lines += ["", view_heading(parts.view), frame_text(parts.study_view, width)]
    stats = parts.event_stats
    if len(stats):
        stats = stats.sort_values("sum_us", ascending=False).head(25)
    lines += ["", "events by total time (top 25):", frame_text(stats, width)]
    return wrap(lines, width)


def findings_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="run directory (or any input `summary` accepts)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    _add_layers_option(parser)
    _add_engine_options(parser)


def findings_main(args: argparse.Namespace) -> int:
    from trace_merge.findings import next_step
    from trace_merge.formatting import text_width, wrap

    run = _open_run(args.path, args, summary_only=True)
    found = run.findings(run.analyse(args.layers))
    if args.json:
        _out(json.dumps({"findings": [f.as_dict() for f in found], "next_step": next_step(found)}, indent=1))
        return 0
    lines = [f"{run.path}: {len(found)} finding(s), most important first (rules: docs/findings.md)"]
    for i, f in enumerate(found, 1):
        lines += [f"{i}. [{f.severity}] {f.title}", f"   evidence: {f.evidence} (layer: {f.layer})",
                  f"   try: {f.action}"]
    lines.append(f"next step: {next_step(found)}")
    _out(wrap(lines, text_width()))
    return 0


def summary_main(args: argparse.Namespace) -> int:
    from trace_merge import darshan_view
    from trace_merge.formatting import json_indented, text_width

    run = _open_run(args.path, args, summary_only=True)
    view = darshan_view.darshan_view(run)
    # a plain Darshan log: its own view, no training sections
    if view is not None and not args.json and not darshan_view.has_training(run):
        _out(darshan_view.summary_text(run, view, text_width()))
        return 0
    parts = run.analyse(args.layers)
    if args.json:
        doc = run.summary(parts)
        if view is not None:
            doc["darshan"] = view.as_dict()
        _out(json_indented(doc))
    elif args.brief:
        _out(_brief_text(run, parts, text_width()))
    else:
        _out(_summary_text(run, parts, text_width()))
        if view is not None:  # training and a Darshan log: the log's view as a drill-down
            _out("\ndrill-down, the Darshan log:\n" + darshan_view.view_text(view, text_width(), aligned=True))
    return 0


# -- report --------------------------------------------------------------------------------------------


def report_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory (or any input `summary` accepts)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="HTML file to write (default: RUN_DIR/report.html; for a single trace file "
                             "./<name>.report.html)")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    _add_layers_option(parser)


def report_main(args: argparse.Namespace) -> int:
    from trace_merge.report import write_report

    src = _input(args.run_dir)
    # a single trace file may live somewhere read-only (a shared log directory): its report goes to the cwd
    out = Path(args.output) if args.output else (
        src / REPORT if src.is_dir() else Path.cwd() / (src.name + ".report.html"))
    refuse_existing(out, force=args.force)
    run = _open_run(src)
    write_report(run, out, force=args.force, parts=run.analyse(args.layers))
    _out(f"wrote {out}")
    return 0


# -- export --------------------------------------------------------------------------------------------


def export_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory (or any input `summary` accepts)")
    parser.add_argument("--perfetto", metavar="OUT", required=True,
                        help="Chrome-trace JSON for ui.perfetto.dev (.json or .json.gz)")
    parser.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    parser.add_argument("--keep-polling", action="store_true",
                        help="keep every process-control poll (waitpid/poll loops of a reader pool's parent) "
                             "instead of folding each burst into one slice")


def export_main(args: argparse.Namespace) -> int:
    from trace_merge.perfetto import export_perfetto

    src = _input(args.run_dir)
    out = Path(args.perfetto)
    if not out.name.endswith((".json", ".json.gz")):
        raise TraceInputError(out, "output must end in .json or .json.gz")
    refuse_existing(out, force=args.force)
    run = _open_run(src)
    done = export_perfetto(run.frame, out, force=args.force, keep_polling=args.keep_polling,
                           meta={"run": str(run.path), "warnings": run.warnings})
    folded = done.polling_folded
    note = (f"; {folded['calls']:,} polls ({', '.join(folded['by_name'])}) folded into {folded['slices']:,} "
            "slices, --keep-polling keeps them" if folded["calls"] else "")
    _out(f"wrote {out} ({done.events:,} events{note})")
    return 0


# -- compare -------------------------------------------------------------------------------------------


def compare_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", metavar="RUN", nargs="+", help="two or more runs (any input `summary` accepts)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def compare_main(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise TraceInputError(args.runs[0], "compare needs at least two runs")
    runs = [_open_run(p) for p in args.runs]
    table = runs[0].compare(*runs[1:])
    if args.json:
        from trace_merge.formatting import json_plain as _plain

        _out(json.dumps({str(c): _plain(table[c].to_dict()) for c in table.columns}, indent=1))
    else:
        from numbers import Real

        from trace_merge.formatting import frame_text, size_text, text_width, wrap

        def text(x, row: str, column: str) -> str:
            if x is None:
                return "-"
            if "bytes" in row and not column.startswith("ratio ") and isinstance(x, Real):
                return size_text(float(x))
            return f"{x:.4g}" if isinstance(x, float) else str(x)

        shown = table.apply(lambda col: [text(x, row, str(col.name)) for row, x in col.items()])
        width = text_width()  # the runs' columns in blocks as wide as the terminal, each with the row names
        labels, key = [str(c) for c in table.columns[:len(runs)]], []
        if max(len(str(c)) for c in shown.columns) > width - max(len(str(i)) for i in shown.index) - 2:
            # labels too long to head a column beside the row names (paths of runs of one name): numbers, keyed
            names = {label: f"run {i}" for i, label in enumerate(labels, 1)}
            key = [f"{name}: {label}" for label, name in names.items()]
            shown = shown.rename(columns={**names, **{f"{op} {label}": f"{op} {name}" for label, name in names.items()
                                                      for op in ("delta", "ratio")}})
            labels = list(names.values())
        note = (f"delta = run − {labels[0]}, ratio = run ÷ {labels[0]} ('-': not a number, missing, or divided "
                "by 0)")
        _out(wrap([*key, frame_text(shown, width, index=True), note], width))
    return 0


# -- noise ---------------------------------------------------------------------------------------------


def noise_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", metavar="QUIET", nargs="+",
                        help="quiet (baseline) runs, then `--` (or --noisy), then runs with `timelogger run --noise`; "
                             "noisy runs are grouped by their manifest's noise settings (docs/noise.md)")
    parser.add_argument("--noisy", metavar="NOISY", nargs="+", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--from-epoch", type=int, default=None, metavar="E",
                        help="only epochs >= E (leave out a warm-up epoch's graph building); default: all")
    parser.add_argument("--all-phases", action="store_true", help="every phase, not the 8 longest")
    parser.add_argument("--plot", metavar="PNG", default=None, help="write the slowdown figure here")
    parser.add_argument("--json", action="store_true", help="print the table as JSON records")
    parser.add_argument("--force", action="store_true", help="replace an existing --plot file")


def noise_main(args: argparse.Namespace) -> int:
    from trace_merge import noise

    quiet, noisy = args.runs, args.noisy
    if not noisy:
        raise TraceInputError("noise", "expected QUIET... -- NOISY... (no noisy runs after `--`)")
    if args.plot:
        refuse_existing(Path(args.plot), force=args.force)
    table = noise.noise_table(noise.open_runs(quiet, args.from_epoch), noise.open_runs(noisy, args.from_epoch))
    phases = None if args.all_phases else noise.top_phases(table, 8)
    if args.json:
        from trace_merge.formatting import json_plain as _plain

        _out(json.dumps(_plain(table.to_dict(orient="records")), indent=1))
    else:
        _out(noise.format_noise(table, phases))
    if args.plot:
        noise.plot_noise(table, phases).savefig(args.plot, dpi=110)
        if not args.json:
            _out(f"wrote {args.plot}")
    return 0


# -- advise --------------------------------------------------------------------------------------------


def advise_setup_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="directory for the runs (design/, verify/, sweep/) and advise.txt, advise.json")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="a knob and its values (repeatable): readers, prefetch, batch, ranks; the command uses "
                             "it as {NAME}; one value = a fixed setting the model uses (readers=4)")
    parser.add_argument("--default", action="append", default=[], metavar="NAME=V",
                        help="the setting run today (repeatable; default: each knob's lowest value)")
    parser.add_argument("--repeats", type=_positive_int, default=2, help="runs per measured setting (2)")
    parser.add_argument("--full-sweep", type=int, default=0, metavar="N",
                        help="also run every setting of the grid N times and compare (default 0: no)")
    parser.add_argument("--target-au", type=float, default=None, metavar="PCT",
                        help="with a ranks knob: the accelerator utilisation a batch size should keep (80)")
    parser.add_argument("--samples-per-step", type=_positive_int, default=1, metavar="N",
                        help="samples per rank and step when batch is no knob (1: throughput in steps/s)")
    parser.add_argument("--input-phase", default=None, metavar="NAME",
                        help="the app phase that reads one sample or file (default: the io/preprocess phase with "
                             "the most time)")
    parser.set_defaults(cmd=[])  # the words after `--` (main)


def advise_main(args: argparse.Namespace) -> int:
    from trace_merge import advise

    knobs = dict(advise.parse_knob(k) for k in args.knob)
    if not knobs:
        raise TraceInputError("--knob", "give at least one knob, e.g. --knob readers=1,2,4")
    advise.check_command(args.cmd, knobs)
    default = {k: v[0] for k, v in knobs.items()}
    for text in args.default:
        name, values = advise.parse_knob(text)
        if len(values) != 1 or name not in knobs or values[0] not in knobs[name]:
            raise TraceInputError("--default", f"{text!r}: one value of a --knob's list")
        default[name] = values[0]
    runner = advise.Runner(tuple(args.cmd), args.samples_per_step, args.input_phase, echo=_out)
    found = advise.advise(runner, knobs, default, args.out, args.repeats, args.full_sweep)
    _out(advise.write_advice(found, args.out, f"{PROG} advise: {' '.join(args.cmd)}",
                                 advise.TARGET_AU_PCT if args.target_au is None else args.target_au))
    _out(f"wrote {args.out / 'advise.txt'}, {args.out / 'advise.json'}")
    return 0


# -- registry and entry point -------------------------------------------------------------------------


class Subcommand(NamedTuple):
    name: str
    help: str
    setup_parser: Callable[[argparse.ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("merge", "read, align and store a run directory (merged.parquet)", merge_setup_parser, merge_main),
    Subcommand("summary", "breakdown, bandwidth and verdict of a run or trace set", summary_setup_parser,
               summary_main),
    Subcommand("findings", "what to change: findings with evidence and a recommendation each",
               findings_setup_parser, findings_main),
    Subcommand("report", "write a self-contained HTML report", report_setup_parser, report_main),
    Subcommand("export", "export to Chrome-trace JSON for Perfetto", export_setup_parser, export_main),
    Subcommand("compare", "runs side by side", compare_setup_parser, compare_main),
    Subcommand("advise", "loader-knob advisor: measure a few settings of a command, fit a throughput model, predict "
               "and verify the best (docs/advise.md)", advise_setup_parser, advise_main),
    Subcommand("noise", "slowdown per phase and component: quiet runs against runs with noise generators",
               noise_setup_parser, noise_main),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Merge, summarise, report, export and compare "
                                     "profiled training runs (TimeLogger, TF profiler, Horovod, DFTracer, Darshan).")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in SUBCOMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.setup_parser(p)
        p.set_defaults(func=cmd.main)
    return parser


def _start_pool_early(args: argparse.Namespace) -> None:
    """A command that merges (it has the engine options) starts the local pool's fork server early
    (:func:`trace_merge.opening.start_pool_early`)."""
    if hasattr(args, "scheduler"):
        opening.start_pool_early(getattr(args, "path", None) or getattr(args, "run_dir", None), args.scheduler,
                                 args.workers)


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{PROG}: {record.levelname.lower()}: {_printable(record.getMessage())}"


def _configure_logging(debug: bool) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s") if debug else _OneLine())
    root = logging.getLogger("trace_merge")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    return handler


def _error(message: str, status: int = 2) -> int:
    sys.stderr.write(f"{PROG}: error: {_printable(message)}\n")
    return status


class _Terminated(BaseException):
    """SIGTERM turned into an exception, so that ``finally`` blocks remove temporary outputs and the lock."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 error, 143 terminated by SIGTERM)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = next((a for a in argv if not a.startswith("-")), None)  # the subcommand (global options are flags)
    at = argv.index("--") if "--" in argv else -1
    command: list[str] = []
    if name == "noise" and at >= 0:  # QUIET... -- NOISY...: argparse drops a bare --
        argv[at] = "--noisy"
    elif name == "advise" and at >= 0:  # advise [options] -- CMD ...: CMD is kept whole
        argv, command = argv[:at], argv[at + 1:]
    args = build_parser().parse_args(argv)
    if args.command == "advise":
        args.cmd = command
    # outputs (merged.parquet, report.html, ...) no more readable than the inputs they hold data of: a run of
    # 0700/0600 files must not give world-readable outputs in shared scratch; restored when the command ends
    inputs = [getattr(args, a) for a in ("run_dir", "path") if getattr(args, a, None)]
    inputs += list(getattr(args, "runs", None) or []) + list(getattr(args, "noisy", None) or [])
    umask = os.umask(0)
    os.umask(umask | input_umask(inputs))
    try:
        return _main(args)
    finally:
        os.umask(umask)


def _main(args: argparse.Namespace) -> int:
    _start_pool_early(args)
    with opening.one_blas_thread():
        import numpy  # noqa: F401  (every command's analysis imports it: loaded here with one BLAS thread)
    handler = _configure_logging(args.debug)
    # SIGTERM (``kill``, Slurm at the time limit) would end the process before any ``finally``, leaving
    # ``.<name>.tmp-<pid>`` files and the merge lock behind; only the main thread may install a handler
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    try:
        return args.func(args)
    except TraceInputError as exc:  # includes OutputExistsError
        if args.debug:
            raise
        return _error(str(exc))
    except OSError as exc:
        if args.debug:
            raise
        where = exc.filename if exc.filename is not None else "i/o"
        return _error(f"{where}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return _error("interrupted")
    except _Terminated:
        return _error("terminated (SIGTERM); no output was left half-written", 128 + signal.SIGTERM)
    except MemoryError:
        if args.debug:
            raise
        where = getattr(args, "run_dir", None) or getattr(args, "path", None) or "trace-merge"
        return _error(f"{where}: out of memory (the inputs' limits are in docs/frame.md; a large run merges "
                      "in bounded memory with --memory-limit, docs/partitioned.md)")
    except Exception as exc:  # a bug: still one line for users, the traceback with --debug
        if args.debug:
            raise
        return _error(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)")
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        logging.getLogger("trace_merge").removeHandler(handler)


def run() -> int:
    """The ``trace-merge`` program (its console script, ``python -m trace_merge``): :func:`main`, then the objects
    left are frozen (``gc.freeze``), so that the interpreter's exit does not walk them all once more for garbage
    (docs/measurements.md#cli). The process is ending: the system frees its memory. Not in :func:`main`, which a
    program embedding the CLI may call many times."""
    status = main()
    gc.freeze()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
