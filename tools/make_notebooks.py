"""Write the analysis notebooks in notebooks/ (without outputs) from the cell sources below.

``python tools/make_notebooks.py``: the notebooks are generated so that their code lives in one reviewable place;
they use the public API only (``trace_merge.run.Run``, ``trace_merge.plots``, ``benchmarks.common``).
"""
from __future__ import annotations

from pathlib import Path

import nbformat

OUT = Path(__file__).resolve().parents[1] / "notebooks"

PARAMS_HEAD = '''%matplotlib inline
import json
import os
from pathlib import Path

import pandas as pd

pd.set_option("display.width", 180)
pd.set_option("display.max_columns", 30)
repo = Path.cwd().parent if Path.cwd().name == "notebooks" else Path.cwd()
'''

MAKE_RUNS_PARAM = '''
# Set NOTEBOOK_MAKE_RUNS=1 to let this notebook make small real runs when it finds none (a few minutes; their
# output goes to log files beside them, one line here). Without it, missing runs are an error saying what to run.
MAKE_RUNS = os.environ.get("NOTEBOOK_MAKE_RUNS", "") not in ("", "0")
SCRATCH = Path(os.environ.get("NOTEBOOK_SCRATCH") or repo / "runs" / "notebooks")
'''

SMALL_HEPCNN = '''def small_hepcnn_runs(out: Path, points) -> dict:
    """Real HEP-CNN runs (smoke preset, POSIX layer, node-local cache emulation): {point name: run dir}. Only
    with MAKE_RUNS; their progress goes to out/<point>.log."""
    from benchmarks.common.sweep import layers_for, run_point
    from benchmarks.hepcnn.config import SMOKE_DATA
    from benchmarks.hepcnn.data import generate

    data = generate(out / "data", SMOKE_DATA, show_progress=False)
    layers = layers_for(data, posix=True, horovod_timeline=False)
    for pt in points:
        if not (out / pt.name / "merged.parquet").is_file():
            run_point(pt, data, out / pt.name, ["--smoke", "--epochs", "3", "--node-cache", "emulate"], layers,
                      quiet=True)
    print(f"made {len(points)} small HEP-CNN run(s) in {out} (their output: {out}/<run>.log)")
    return {pt.name: out / pt.name for pt in points}
'''

#: the layered breakdown's component columns, named as the figure's legend names them
#: the layered breakdown's columns, named as the run's legends name them (tf.data only where the run has it)
COMPONENT_COLUMNS = '''{f"{c}_s": (label, "s") for c, label in LABELS.items()}'''

#: a legend to the right of the axes, outside the data
LEGEND_OUTSIDE = '''loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False'''

NOTEBOOKS = {
    "breakdown.ipynb": [
        ("md", """# One run: where each rank's time went, layer by layer

The input-bound verdict; each app phase split by what the layers below saw inside it (file system, Horovod, the
`tf.data` runtime, the framework); each epoch's wall time per rank; exposed input time; and a zoomable timeline
of every layer over a few steady-state steps. Definitions: `docs/metrics.md`."""),
        ("code", PARAMS_HEAD + '''
# Parameters: the run directory to read. Default: the newest `make demo` run (local shuffle).
RUN = os.environ.get("NOTEBOOK_RUN") or str(repo / "runs" / "demo" / "latest" / "local")
''' + MAKE_RUNS_PARAM),
        ("code", SMALL_HEPCNN + '''
if not (Path(RUN) / "app").is_dir():
    if not MAKE_RUNS:
        raise FileNotFoundError(f"no run in {RUN}: run `make demo`, or set NOTEBOOK_RUN to a run directory, or "
                                "NOTEBOOK_MAKE_RUNS=1 to make a small one here")
    from benchmarks.common.sweep import Point

    RUN = str(small_hepcnn_runs(SCRATCH / "breakdown", [Point(2, "local")])["n2-local"])
print(f"run: {RUN}")'''),
        ("md", "## The input-bound verdict"),
        ("code", '''from trace_merge import plots
from trace_merge.analysis import component_labels, has_tfdata, verdict_text
from trace_merge.run import Run
from trace_merge.formatting import readable

run = Run.open(RUN)
tfdata = has_tfdata(run.event_stats())
LABELS = component_labels(tfdata)
verdict = run.verdict()
print("verdict:", verdict_text(verdict))
for note in verdict.notes:
    print("  -", note)'''),
        ("md", """## Each app phase split by the layer below that saw the time

The table: the 15 longest app phases per rank × epoch (epoch `–`: outside the epochs). The figure: every phase
summed over ranks and epochs."""),
        ("code", '''layered = run.layered_breakdown()
readable(layered.sort_values("time_s", ascending=False).head(15),
         {"rank": "rank", "epoch": "epoch", "phase": "app phase", "cat": "cat", "time_s": ("self time", "s"),
          **''' + COMPONENT_COLUMNS + '''})'''),
        ("code", '''plots.plot_layered_breakdown(layered, tfdata=tfdata)'''),
        ("md", "## Each epoch's wall time per rank, and the slowest rank against the fastest"),
        ("code", '''bd = run.breakdown()
spread = bd[bd["epoch"].notna()].pivot(index="epoch", columns="rank", values="wall_s")
spread.columns = [f"rank {r}" for r in spread.columns]
spread["slowest / fastest"] = spread.max(axis=1) / spread.min(axis=1)
readable(spread.reset_index(), {"epoch": "epoch", **{c: (f"{c} wall time", "s") for c in spread.columns[:-1]},
                                "slowest / fastest": ("slowest / fastest rank", "×")})'''),
        ("md", "## Where each rank's epoch time went: exclusive share per category, one bar per rank × epoch"),
        ("code", '''plots.plot_breakdown(bd)'''),
        ("md", """## Exposed input time per rank × epoch

Input phases not hidden behind compute on another thread; epoch `all` is the whole run."""),
        ("code", '''exposed = run.exposed_io()
exposed["epoch"] = exposed["epoch"].astype("object").where(exposed["epoch"].notna(), "all")
readable(exposed, {"rank": "rank", "epoch": "epoch", "wall_s": ("wall time", "s"), "input_s": ("input", "s"),
                   "compute_s": ("compute", "s"), "overlap_s": ("input under compute", "s"),
                   "exposed_s": ("exposed input", "s"), "exposed_pct": ("exposed input", "%")})'''),
        ("md", """## Steady state, every layer on one clock

A few training steps after an epoch's first (`plots.steady_state_window`). Drag to zoom, double-click to reset; the
plotly figure carries its JavaScript, so it shows in an HTML export too. Below it, the same window as an image."""),
        ("code", '''import plotly.io as pio

# JupyterLab draws the plotly mimetype; "notebook" adds an HTML version with plotly.js embedded (not fetched from a
# CDN), which `jupyter nbconvert --to html` keeps, so the exported page draws the timeline offline.
pio.renderers.default = "plotly_mimetype+notebook"
start_ns, end_ns = plots.steady_state_window(run.frame) or (None, None)
plots.timeline_interactive(run.frame, start_ns=start_ns, end_ns=end_ns)'''),
        ("code", '''plots.plot_timeline(run.frame, start_ns=start_ns, end_ns=end_ns)'''),
    ],
    "shuffle_and_scaling.ipynb": [
        ("md", """# Local vs global shuffle, and scaling with ranks

For the largest rank count in the directory: the two shuffle modes' read share (the original study's view), read
bandwidth per epoch and files per rank per epoch, then which mode read more from storage *in this run* against
the study's finding. When the directory holds more than one rank count (a sweep), read bandwidth and read share
against ranks. Runs with `--node-cache emulate` show what a cluster's node-local page caches do
(`docs/metrics.md`)."""),
        ("code", PARAMS_HEAD + '''
# Parameters: a directory with comparison.json and its runs: `make demo`'s runs/demo/latest (local/, global/) or a
# sweep (`python -m benchmarks.hepcnn sweep --ranks 1,2 --shuffle local,global --node-cache emulate --out DIR`:
# n<N>-<shuffle>/). Default: runs/sweep when there is one, else the newest `make demo`.
_sweep = repo / "runs" / "sweep"
SWEEP = Path(os.environ.get("NOTEBOOK_SWEEP") or (_sweep if (_sweep / "comparison.json").is_file()
                                                   else repo / "runs" / "demo" / "latest"))
''' + MAKE_RUNS_PARAM),
        ("code", SMALL_HEPCNN + '''
from benchmarks.common.sweep import point_dirs
from trace_merge.formatting import number, readable

if not (SWEEP / "comparison.json").is_file():
    if not MAKE_RUNS:
        raise FileNotFoundError(f"no comparison.json in {SWEEP}: run `make demo`, or set NOTEBOOK_SWEEP to a sweep, "
                                "or NOTEBOOK_MAKE_RUNS=1 to make a small sweep here (4 runs)")
    from benchmarks.common.sweep import Point, comparison_rows
    from benchmarks.common.runs import finalize_run

    points = [Point(n, mode) for n in (1, 2) for mode in ("local", "global")]
    SWEEP = SCRATCH / "sweep"
    made = small_hepcnn_runs(SWEEP, points)
    rows = comparison_rows(points, [finalize_run(made[pt.name]) for pt in points])
    (SWEEP / "comparison.json").write_text(json.dumps(rows, indent=1))
rows = json.loads((SWEEP / "comparison.json").read_text())
dirs = point_dirs(SWEEP, rows)
comparison = pd.DataFrame(rows)
readable(comparison.assign(read_MB=comparison["read_bytes"] / 1e6, storage_MB=comparison["storage_read_bytes"] / 1e6,
                           read_bw=comparison["read_bandwidth_bytes_per_s"] / 1e6),
         {"point": "point", "ranks": "ranks", "shuffle": "shuffle", "read_MB": ("read", "MB"),
          "storage_MB": ("read from storage", "MB"), "read_bw": ("read bandwidth", "MB/s"),
          "epoch0_read_bw_MB_per_s": ("epoch 0 read bandwidth", "MB/s"),
          "later_read_bw_MB_per_s": ("later epochs' read bandwidth", "MB/s"),
          "study_read_pct": ("read share of the training loop", "%"), "node_cache": "node cache"})'''),
        ("code", '''import numpy as np
from matplotlib.figure import Figure

from trace_merge import plots
from trace_merge.analysis import epoch_bandwidth_totals
from trace_merge.run import Run

biggest = max(r["ranks"] for r in rows)
at_biggest = {r["shuffle"]: r for r in rows if r["ranks"] == biggest}
runs = {mode: Run.open(dirs[r["point"]]) for mode, r in at_biggest.items()}
for mode, r in at_biggest.items():
    print(f"{mode} shuffle, {biggest} ranks: {dirs[r['point']]}")'''),
        ("md", "## Read share per rank, the original study's view (% of the `Train Loop` phase)"),
        ("code", '''study = pd.concat({mode: r.study_view() for mode, r in runs.items()}, names=["shuffle"]).reset_index(level=0)
readable(study, {"shuffle": "shuffle", "rank": "rank", "read_pct": ("read", "%"), "load_pct": ("load − read", "%"),
                 "training_pct": ("training", "%"), "checkpoint_pct": ("checkpoint", "%"), "other_pct": ("other", "%")})'''),
        ("code", '''phases = {"read": "read", "load": "load − read", "checkpoint": "checkpoint"}
share = study.groupby("shuffle", sort=False)[[f"{p}_pct" for p in phases]].mean()
plots.plot_grouped_bars(share.set_axis(list(phases), axis=1), plots.STUDY_COLOURS, labels=phases,
                        ticks=[f"{mode} shuffle" for mode in share.index], xlabel="shuffle mode",
                        ylabel="share of the training loop (%)",
                        title=f"Read, load and checkpoint share of the training loop, mean over {biggest} ranks")'''),
        ("md", """## Aggregate read bandwidth per epoch

Σ bytes of the epoch ÷ the slowest rank's read time. Under the node-cache emulation epoch 0 reads every file from
storage; later epochs read from storage only the files a rank has not read before."""),
        ("code", '''per_epoch = pd.concat({mode: epoch_bandwidth_totals(r.epoch_bandwidth()) for mode, r in runs.items()},
                      names=["shuffle"]).reset_index(level=0)
readable(per_epoch.assign(read_MB=per_epoch["read_bytes"] / 1e6),
         {"shuffle": "shuffle", "epoch": "epoch", "ranks": "ranks", "read_MB": ("read", "MB"),
          "slowest_read_time_s": ("slowest rank's read time", "s"),
          "aggregate_bw_MB_per_s": ("aggregate read bandwidth", "MB/s")})'''),
        ("code", '''bw = per_epoch.pivot(index="epoch", columns="shuffle", values="aggregate_bw_MB_per_s")[list(runs)]
plots.plot_grouped_bars(bw, plots.SHUFFLE_COLOURS, labels={mode: f"{mode} shuffle" for mode in bw.columns},
                        ticks=[f"epoch {int(e)}" for e in bw.index], xlabel="epoch",
                        ylabel="aggregate read bandwidth (MB/s)",
                        title=f"Aggregate read bandwidth per epoch, {biggest} ranks")'''),
        ("md", "## Files read per rank per epoch (global shuffle moves files between ranks)"),
        ("code", '''files = pd.concat({mode: r.access_pattern() for mode, r in runs.items()}, names=["shuffle"]).reset_index(level=0)
readable(files.assign(read_MB=files["read_bytes"] / 1e6),
         {"shuffle": "shuffle", "rank": "rank", "epoch": "epoch", "files": ("files", "count"),
          "read_MB": ("read", "MB")})'''),
        ("md", """## This run against the study's finding

The study (Cori, Lustre, 64–512 nodes) found that global shuffle reads more from storage than local shuffle, so its
read share is higher and its aggregate read bandwidth lower. The text below is computed from this run's numbers."""),
        ("code", '''from IPython.display import Markdown

for r in at_biggest.values():
    r["storage_MB"] = None if r.get("storage_read_bytes") is None else r["storage_read_bytes"] / 1e6
    r["read_MB_per_s"] = (None if r.get("read_bandwidth_bytes_per_s") is None
                          else r["read_bandwidth_bytes_per_s"] / 1e6)


def against_study(key: str, what: str, unit: str, study_higher: str) -> tuple[str, bool]:
    """One line saying which mode is higher in this run and whether that is the study's direction."""
    loc, glo = at_biggest["local"].get(key), at_biggest["global"].get(key)
    if loc is None or glo is None:
        return f"- {what}: not measured in this run", True
    higher = "global" if glo > loc else "local" if loc > glo else None
    if higher is None:
        return f"- {what}: the same in both modes ({number(loc)} {unit}) — the study has {study_higher} higher", False
    agrees = higher == study_higher
    return (f"- {what}: **{higher} shuffle is higher** ({number(glo)} {unit} global, {number(loc)} {unit} local) — "
            + ("as in the study" if agrees else f"**not** the study's direction ({study_higher} higher there)")), agrees


checks = [against_study("storage_MB", "bytes read from storage", "MB", "global"),
          against_study("study_read_pct", "read share of the training loop", "%", "global"),
          against_study("read_MB_per_s", "aggregate read bandwidth", "MB/s", "local")]
lines = [line for line, _ in checks]
if all(ok for _, ok in checks):
    lines.append("\\nThis run has the study's shape in all three numbers.")
else:
    reasons = []
    epoch_mb = per_epoch["read_bytes"].max() / 1e6
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    cache = at_biggest["local"].get("node_cache")
    if cache != "emulate":
        reasons.append(f"node cache `{cache}`: all ranks share this machine's page cache, so after epoch 0 a "
                       "global shuffle's files are as warm as a local shuffle's (`--node-cache emulate` models "
                       "a cluster's per-node caches)")
    if epoch_mb * 1e-3 < memory_gb / 4:
        reasons.append(f"the data set ({epoch_mb:.0f} MB per epoch) fits in this machine's memory "
                       f"({memory_gb:.0f} GB) many times over: the page cache serves reads in milliseconds, so "
                       "share and bandwidth move with scheduling noise more than with the shuffle")
    if all((r.get("later_read_bw_MB_per_s") or 0) > 2 * (r.get("epoch0_read_bw_MB_per_s") or float("inf"))
           for r in at_biggest.values()):
        reasons.append("in both modes later epochs read more than twice as fast as epoch 0: a cache, not storage, "
                       "served most of their reads")
    share = max(r.get("study_read_pct") or 0 for r in at_biggest.values())
    if share < 5:
        reasons.append(f"reading is at most {share:.1f} % of the training loop here, so small absolute "
                       "differences decide the direction")
    lines.append("\\nThis run does not have the study's shape in every number. Likely reasons, from its data:\\n\\n"
                 + "\\n".join(f"- {r}" for r in reasons or ["none of the usual ones (shared page cache, data set "
                                                            "in memory, tiny read share) applies"]))
Markdown(f"**{biggest} ranks, local against global shuffle:**\\n\\n" + "\\n".join(lines))'''),
        ("md", """## Read bandwidth and read share against ranks

Drawn when the directory holds more than one rank count (a sweep; `make demo` runs one). Colour: shuffle mode;
marker: epoch 0 or later epochs; dashed: ideal linear scaling from the smallest rank count."""),
        ("code", '''from benchmarks.common.plots import bandwidth_vs_ranks, read_share_vs_ranks

if comparison["ranks"].nunique() > 1:
    fig = Figure(figsize=(10, 7), layout="constrained")
    bandwidth_vs_ranks(rows, fig.add_subplot(2, 1, 1))
    read_share_vs_ranks(rows, fig.add_subplot(2, 1, 2))
    display(fig)
else:
    print(f"one rank count ({biggest}) in {SWEEP}: nothing to scale over; a sweep over --ranks 1,2,4 draws it")'''),
        ("md", """## The study's table beside ours

The study: HEP-CNN on Cori KNL with Lustre, 64–512 nodes. Ours: ranks on one machine (`nodes` = ranks). Only the
direction of the differences can compare, not the magnitudes; the section above says which way this run went."""),
        ("code", '''from benchmarks.common.study import hepcnn_side_by_side

readable(hepcnn_side_by_side(comparison),
         {"source": "source", "nodes": "nodes", "local_read_pct": ("local shuffle read share", "%"),
          "global_read_pct": ("global shuffle read share", "%"),
          "local_bw_GB_per_s": ("local shuffle bandwidth", "GB/s"),
          "global_bw_GB_per_s": ("global shuffle bandwidth", "GB/s")})'''),
    ],
    "climate_ablation.ipynb": [
        ("md", """# Climate ablations: what the "read" timer measured

The original study switched the climate benchmark's file I/O off and its "read" timer still showed 968 s of
1,243 s: Python, inter-process communication and normalisation in the worker pool. Here the ablation modes the
directory holds side by side (`make demo` runs `full` and `no-io`; `python -m benchmarks.climate ablate --modes
full,io-only,no-io,metadata-only` runs all four), each read phase split into file-system time and the rest by the
layered breakdown."""),
        ("code", PARAMS_HEAD + '''
# Parameters: a directory of ablation runs (`python -m benchmarks.climate ablate --out DIR`, or the climate part
# of `make demo`). Default: the newest climate demo.
ABLATION = Path(os.environ.get("NOTEBOOK_ABLATION") or repo / "runs" / "demo-climate" / "latest")
''' + MAKE_RUNS_PARAM),
        ("code", '''from benchmarks.common.ablate import ablation_of_runs, find_modes
from benchmarks.climate.sweep import ABLATION_ROWS
from trace_merge.formatting import number, readable

if not ABLATION.is_dir() or not find_modes(ABLATION):
    if not MAKE_RUNS:
        raise FileNotFoundError(f"no ablation runs in {ABLATION}: run `make demo`, or set NOTEBOOK_ABLATION to an "
                                "`ablate --out` directory, or NOTEBOOK_MAKE_RUNS=1 to make a small ablation here")
    from benchmarks.climate.data import SMOKE_DATA, generate
    from benchmarks.common.sweep import Point, layers_for, run_point

    ABLATION = SCRATCH / "ablation"
    data = generate(ABLATION / "data", SMOKE_DATA, show_progress=False)
    for mode in ("full", "no-io"):
        run_point(Point(2, "local", mode), data, ABLATION / mode, ["--smoke"],
                  layers_for(data, posix=True, horovod_timeline=False), benchmark="climate", quiet=True)
    print(f"made a small climate ablation (full, no-io) in {ABLATION} (their output: {ABLATION}/<mode>.log)")
modes = find_modes(ABLATION)
for mode, path in modes.items():
    print(f"{mode}: {path}")'''),
        ("md", "## Each phase per rank, all epochs, in every mode (s; `–`: the phase did not run)"),
        ("code", '''table = ablation_of_runs(modes, ABLATION_ROWS)
table.map(number).rename(columns=lambda mode: f"{mode} (s per rank)")'''),
        ("md", "## The read phase: file system against everything else"),
        ("code", '''import numpy as np
from matplotlib.figure import Figure

from trace_merge import plots
from trace_merge.analysis import COMPONENT_LABELS

plots.plot_stacked_bars(
    [(COMPONENT_LABELS["fs"], table.loc["  Parallel Read Images: file system"], plots.COMPONENT_COLOURS["fs"], None),
     ("Python / IPC / normalisation", table.loc["  Parallel Read Images: outside the file system"],
      plots.COMPONENT_COLOURS["python"], None)],
    list(table.columns), xlabel="ablation mode", ylabel="time per rank, all epochs (s)",
    title="Parallel Read Images: file system and the rest")'''),
        ("md", """## Inside the reader: read, normalise, weights

Colour: what the time is (file system, or Python work of the reader); hatching tells the reader's phases apart."""),
        ("code", '''parts = [("  Read Image: file system", "Read Image: file system", plots.COMPONENT_COLOURS["fs"], None),
         ("  Read Image: outside the file system", "Read Image: the rest", plots.COMPONENT_COLOURS["python"], None),
         ("Normalise (reader)", "Normalise", plots.COMPONENT_COLOURS["python"], "//"),
         ("Per-pixel Weights (reader)", "Per-pixel Weights", plots.COMPONENT_COLOURS["python"], "..")]
plots.plot_stacked_bars([(label, table.loc[row], colour, hatch) for row, label, colour, hatch in parts],
                        list(table.columns), xlabel="ablation mode", ylabel="time per rank, all epochs (s)",
                        title="The reader's phases per rank")'''),
        ("md", "## The study's numbers (64 nodes, s) beside ours (s per rank)"),
        ("code", '''from benchmarks.common.study import CLIMATE_ABLATION_64_NODES

ours = table.loc["Parallel Read Images"].rename("ours_read_s").rename_axis("mode").reset_index()
both = CLIMATE_ABLATION_64_NODES.merge(ours, on="mode", how="outer")
readable(both, {"mode": "mode", "read_s": ("study: read timer", "s"),
                "train_s_per_epoch": ("study: training per epoch", "s"),
                "ours_read_s": ("ours: Parallel Read Images per rank", "s")})'''),
    ],
    "darshan_logs.ipynb": [
        ("md", """# A cluster user's view of a Darshan log

Per-file bytes and time from the counters, the DXT timeline (when the log has DXT segments), the Lustre stripe
settings (when it has the Lustre module), and the log merged with a stand-in application trace on one clock. The
default log is a real one shipped in the `darshan` wheel."""),
        ("code", PARAMS_HEAD + '''import darshan

# Parameters: a Darshan log and, for the stripe settings, a log with the Lustre module (default: the same log).
# The default, IOR writing and reading an HDF5 file on 4 ranks at NERSC, has DXT and Lustre; a log without them
# (e.g. example.darshan beside it) skips those sections.
EXAMPLES = Path(darshan.__file__).parent / "examples" / "example_logs"
LOG = Path(os.environ.get("NOTEBOOK_DARSHAN_LOG") or EXAMPLES / "ior_hdf5_example.darshan")
LUSTRE_LOG = os.environ.get("NOTEBOOK_LUSTRE_LOG") or LOG
SCRATCH = Path(os.environ.get("NOTEBOOK_SCRATCH") or repo / "runs" / "notebooks")
print(f"log: {LOG}\\nLustre settings from: {LUSTRE_LOG}")'''),
        ("code", '''from trace_merge import plots
from trace_merge.run import Run
from trace_merge.formatting import readable

log = Run.open(LOG)
counters = log.counters
counters.head()'''),
        ("md", "## Per file: bytes and time (POSIX counters, summed over ranks)"),
        ("code", '''wanted = ["POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN", "POSIX_F_READ_TIME", "POSIX_F_WRITE_TIME",
          "POSIX_F_META_TIME", "POSIX_READS", "POSIX_WRITES"]
per_file = (counters[counters["counter"].isin(wanted)]
            .pivot_table(index="file", columns="counter", values="value", aggfunc="sum", observed=True)
            .reindex(columns=wanted).fillna(0).sort_values("POSIX_BYTES_READ", ascending=False))
readable(per_file.reset_index().assign(read_MB=lambda d: d["POSIX_BYTES_READ"] / 1e6,
                                       written_MB=lambda d: d["POSIX_BYTES_WRITTEN"] / 1e6),
         {"file": "file", "read_MB": ("read", "MB"), "written_MB": ("written", "MB"),
          "POSIX_F_READ_TIME": ("read time", "s"), "POSIX_F_WRITE_TIME": ("write time", "s"),
          "POSIX_F_META_TIME": ("metadata time", "s"), "POSIX_READS": ("reads", "count"),
          "POSIX_WRITES": ("writes", "count")})'''),
        ("code", '''import numpy as np
from matplotlib.figure import Figure

shown = per_file.head(20)  # the 20 files that read the most
series = {"read": ("POSIX_BYTES_READ", "read"), "write": ("POSIX_BYTES_WRITTEN", "written")}
series = {k: v for k, v in series.items() if shown[v[0]].sum() > 0}  # no legend entry for what is not drawn
biggest = float(shown[[col for col, _ in series.values()]].max().max()) if series else 0.0
scale, unit = next((f, u) for f, u in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB")) if biggest >= f or u == "MB")
y = np.arange(len(shown))
height = 0.8 / max(len(series), 1)
fig = Figure(figsize=(9, 1.4 + 0.35 * max(len(shown), 1)), layout="constrained")
ax = fig.add_subplot()
for i, (kind, (col, label)) in enumerate(series.items()):
    ax.barh(y + (i - (len(series) - 1) / 2) * height, shown[col] / scale, height, color=plots.IO_COLOURS[kind],
            label=label)
ax.set_yticks(y, [Path(str(f)).name for f in shown.index], fontsize="small")
ax.invert_yaxis()
ax.set_xlabel(f"data ({unit})")
ax.set_ylabel("file")
ax.set_title(f"Bytes read and written per file ({len(shown)} of {len(per_file)} files)")
ax.legend(''' + LEGEND_OUTSIDE + ''')
fig'''),
        ("md", "## The DXT timeline: every read and write segment per rank, the whole log"),
        ("code", '''if len(log.frame):
    segments = log.frame.groupby(["rank", "layer"], observed=True).size().unstack("layer", fill_value=0)
    display(segments.rename(columns=lambda layer: f"{layer} segments"))
    display(plots.plot_timeline(log.frame, by="io"))
else:
    print(f"{Path(LOG).name} has no DXT segments (Darshan ran without DXT tracing): no timeline")'''),
        ("md", "## Lustre stripe settings (when the log has the Lustre module)"),
        ("code", '''lustre = Run.open(LUSTRE_LOG).counters
stripes = lustre[lustre["counter"].astype(str).str.startswith("LUSTRE_")]
if len(stripes):
    stripes = stripes.pivot_table(index="file", columns="counter", values="value", aggfunc="first", observed=True)
    display(stripes.astype("int64"))
else:
    print(f"{Path(LUSTRE_LOG).name} has no Lustre module: no stripe settings")'''),
        ("md", """## The log merged with an application trace

A stand-in for the application that wrote the log: one TimeLogger `File I/O` phase per rank and file around the
rank's read and write segments, timed 5 ms off (`TimeLogger.record` takes another clock's timestamps). The merge
places the DXT segments on the app clock by content and reports the offset it found. Needs DXT segments."""),
        ("code", '''import shutil

from timelogger import TimeLogger

posix = log.frame[log.frame["layer"] == "posix"]
merged = None
if len(posix):
    merged_dir = SCRATCH / "darshan-merged"
    shutil.rmtree(merged_dir, ignore_errors=True)
    (merged_dir / "darshan").mkdir(parents=True)
    shutil.copy(LOG, merged_dir / "darshan" / Path(LOG).name)
    for rank, rows in posix.groupby("rank"):
        tl = TimeLogger(merged_dir, rank=int(rank), world_size=int(posix["rank"].nunique()))
        for path, seg in rows.groupby("file", observed=True):
            tl.record("File I/O", int(seg["start_ns"].min()) + 5_000_000 - 100_000,
                      int(seg["end_ns"].max()) + 5_000_000 + 100_000, cat="io", file=str(path),
                      bytes=int(seg["bytes"].sum()))
        tl.close()
    merged = Run.open(merged_dir)
    clock = pd.DataFrame(merged.dxt_clock)
    display(readable(clock.assign(source=clock["source"].map(lambda p: Path(str(p)).name),
                                  offset_ms=clock["offset_ns"] / 1e6, uncertainty_ms=clock["uncertainty_ns"] / 1e6),
                     {"source": "log", "rank": "rank", "offset_ms": ("offset found", "ms"),
                      "uncertainty_ms": ("uncertainty", "ms"), "confidence": ("confidence", ""),
                      "basis": "basis", "matched": ("matched phases", "count"),
                      "segments": ("segments", "count")}))
else:
    print(f"{Path(LOG).name} has no POSIX DXT segments to place: nothing to merge")'''),
        ("md", "## The stand-in app phases split by the layer below (s, per rank)"),
        ("code", '''if merged is not None:
    from trace_merge.analysis import component_labels, has_tfdata

    LABELS = component_labels(has_tfdata(merged.event_stats()))
    display(readable(merged.layered_breakdown(),
                     {"rank": "rank", "phase": "app phase", "time_s": ("self time", "s"),
                      **''' + COMPONENT_COLUMNS + '''}))
    display(plots.plot_timeline(merged.frame, by="io"))
else:
    print("nothing merged (no DXT segments): no phases to split")'''),
    ],
}

def main() -> None:
    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
                    for kind, src in cells]
        nbformat.write(nb, OUT / name)
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
