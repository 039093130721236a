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

SMALL_HEPCNN = '''def small_hepcnn_runs(out: Path, points) -> dict:
    """Real HEP-CNN runs (smoke preset, POSIX layer, node-local cache emulation): {point name: run dir}."""
    from benchmarks.common.sweep import layers_for, run_point
    from benchmarks.hepcnn.config import SMOKE_DATA
    from benchmarks.hepcnn.data import generate

    data = generate(out / "data", SMOKE_DATA, show_progress=False)
    layers = layers_for(data, posix=True, horovod_timeline=False)
    for pt in points:
        if not (out / pt.name / "merged.parquet").is_file():
            run_point(pt, data, out / pt.name, ["--smoke", "--epochs", "3", "--node-cache", "emulate"], layers)
    return {pt.name: out / pt.name for pt in points}
'''

NOTEBOOKS = {
    "breakdown.ipynb": [
        ("md", """# One run: where each rank's time went, layer by layer

The layered breakdown per rank × epoch (each app phase split by what the file system, Horovod, the `tf.data`
runtime and the framework did inside it), the spread between ranks, exposed input time, the input-bound verdict,
and a zoomable timeline of every layer in steady state. Definitions: `docs/metrics.md`."""),
        ("code", PARAMS_HEAD + '''
# Parameters: the run directory to read. Default: the newest `make demo` run (local shuffle); when there is
# none, a small real 2-rank HEP-CNN run is made below.
RUN = os.environ.get("NOTEBOOK_RUN") or str(repo / "runs" / "demo" / "latest" / "local")
SCRATCH = Path(os.environ.get("NOTEBOOK_SCRATCH") or repo / "runs" / "notebooks")
'''),
        ("code", SMALL_HEPCNN + '''
if not (Path(RUN) / "app").is_dir():
    from benchmarks.common.sweep import Point

    RUN = str(small_hepcnn_runs(SCRATCH / "breakdown", [Point(2, "local")])["n2-local"])
RUN'''),
        ("code", '''from trace_merge import plots
from trace_merge.run import Run

run = Run.open(RUN)
run.verdict()'''),
        ("md", "## The layered breakdown, per rank × epoch (seconds; each bar is an app phase)"),
        ("code", '''layered = run.layered_breakdown()
layered.head(20)'''),
        ("code", '''plots.plot_layered_breakdown(layered)'''),
        ("md", "## Spread between ranks: each epoch's wall time and io share per rank"),
        ("code", '''bd = run.breakdown()
epochs = bd[bd["epoch"].notna()]
spread = epochs.pivot(index="epoch", columns="rank", values="wall_s")
spread["max / min"] = spread.max(axis=1) / spread.min(axis=1)
spread'''),
        ("code", '''plots.plot_breakdown(bd)'''),
        ("md", "## Exposed input time (input phases not hidden behind compute on another thread)"),
        ("code", '''run.exposed_io()'''),
        ("md", """## Steady state, every layer on one clock

Drag to zoom, double-click to reset (plotly). The static excerpt below it is the same window."""),
        ("code", '''window = plots.steady_state_window(run.frame)
plots.timeline_interactive(run.frame, start_ns=window[0], end_ns=window[1])'''),
        ("code", '''plots.plot_timeline(run.frame, start_ns=window[0], end_ns=window[1])'''),
    ],
    "shuffle_and_scaling.ipynb": [
        ("md", """# Local vs global shuffle, and scaling with ranks

Read share, read bandwidth per epoch and files per rank per epoch for the two shuffle modes; aggregate read
bandwidth against the ideal line over rank counts; and the original study's table beside ours. Runs with
`--node-cache emulate` show what a cluster's node-local page caches do (`docs/metrics.md`)."""),
        ("code", PARAMS_HEAD + '''
# Parameters: a sweep directory (`python -m benchmarks.hepcnn sweep --ranks 1,2 --shuffle local,global
# --node-cache emulate --out DIR`), whose n<N>-<shuffle> run directories and comparison.json are read.
# Default: runs/sweep; when there is none, a small real sweep (1 and 2 ranks) is made below.
SWEEP = Path(os.environ.get("NOTEBOOK_SWEEP") or repo / "runs" / "sweep")
SCRATCH = Path(os.environ.get("NOTEBOOK_SCRATCH") or repo / "runs" / "notebooks")
'''),
        ("code", SMALL_HEPCNN + '''
if not (SWEEP / "comparison.json").is_file():
    from benchmarks.common.sweep import Point, comparison_rows
    from benchmarks.common.runs import finalize_run

    points = [Point(n, mode) for n in (1, 2) for mode in ("local", "global")]
    SWEEP = SCRATCH / "sweep"
    dirs = small_hepcnn_runs(SWEEP, points)
    rows = comparison_rows(points, [finalize_run(dirs[pt.name]) for pt in points])
    (SWEEP / "comparison.json").write_text(json.dumps(rows, indent=1))
rows = json.loads((SWEEP / "comparison.json").read_text())
pd.DataFrame(rows)[["point", "ranks", "shuffle", "read_bytes", "read_bandwidth_bytes_per_s", "study_read_pct",
                    "epoch0_read_bw_MB_per_s", "later_read_bw_MB_per_s", "node_cache"]]'''),
        ("code", '''from trace_merge.analysis import epoch_bandwidth_totals
from trace_merge.run import Run

biggest = max(r["ranks"] for r in rows)
runs = {mode: Run.open(SWEEP / f"n{biggest}-{mode}") for mode in ("local", "global")}
runs["local"].compare(runs["global"])'''),
        ("md", "## Read share: the original study's view (% of the training loop)"),
        ("code", '''study = pd.concat({mode: r.study_view() for mode, r in runs.items()}, names=["shuffle"])
study'''),
        ("code", '''ax = study[["read_pct", "load_pct", "checkpoint_pct"]].groupby(level="shuffle").mean().plot.bar(
    title="read, load and checkpoint share of the training loop (%, mean over ranks)")
ax.figure'''),
        ("md", "## Read bandwidth per epoch (epoch 0 reads from storage; later epochs may hit the node cache)"),
        ("code", '''per_epoch = pd.concat({mode: epoch_bandwidth_totals(r.epoch_bandwidth()) for mode, r in runs.items()},
                      names=["shuffle"])
per_epoch'''),
        ("code", '''ax = per_epoch["aggregate_bw_MB_per_s"].unstack("shuffle").plot.bar(
    title="aggregate read bandwidth per epoch (MB/s)")
ax.figure'''),
        ("md", "## Files per rank per epoch (global shuffle moves files between ranks)"),
        ("code", '''files = pd.concat({mode: r.access_pattern()[["rank", "epoch", "files", "read_bytes"]]
                   for mode, r in runs.items()}, names=["shuffle"])
files'''),
        ("md", "## Bandwidth and read share against ranks (dashed: ideal linear scaling from the smallest count)"),
        ("code", '''from matplotlib.figure import Figure

from benchmarks.common.plots import bandwidth_vs_ranks, read_share_vs_ranks

fig = Figure(figsize=(10, 7), layout="constrained")
bandwidth_vs_ranks(rows, fig.add_subplot(2, 1, 1))
read_share_vs_ranks(rows, fig.add_subplot(2, 1, 2))
fig'''),
        ("md", """## The study's table beside ours

The study: HEP-CNN on Cori KNL with Lustre, 64-512 nodes. Ours: ranks on one machine with the node-cache
emulation -- the *shape* (global reads more from storage, has a higher read share and a lower bandwidth) is what
compares, not the magnitudes."""),
        ("code", '''from benchmarks.common.study import hepcnn_side_by_side

hepcnn_side_by_side(pd.DataFrame(rows))'''),
    ],
    "climate_ablation.ipynb": [
        ("md", """# Climate ablations: what the "read" timer measured

The original study switched the climate benchmark's file I/O off and its "read" timer still showed 968 s of
1,243 s: Python, inter-process communication and normalisation in the worker pool. Here the four modes
(`full`, `io-only`, `no-io`, `metadata-only`) side by side, each read phase split into file-system time and the
rest by the layered breakdown."""),
        ("code", PARAMS_HEAD + '''
# Parameters: a directory of ablation runs (`python -m benchmarks.climate ablate --out DIR`, or the climate part
# of `make demo`). Default: the newest climate demo; when there is none, a small real ablation is made below.
ABLATION = Path(os.environ.get("NOTEBOOK_ABLATION") or repo / "runs" / "demo-climate" / "latest")
SCRATCH = Path(os.environ.get("NOTEBOOK_SCRATCH") or repo / "runs" / "notebooks")
'''),
        ("code", '''from benchmarks.common.ablate import ablation_of_runs, find_modes, format_ablation
from benchmarks.climate.sweep import ABLATION_ROWS

if not ABLATION.is_dir() or not find_modes(ABLATION):
    from benchmarks.climate.data import SMOKE_DATA, generate
    from benchmarks.common.sweep import Point, layers_for, run_point

    ABLATION = SCRATCH / "ablation"
    data = generate(ABLATION / "data", SMOKE_DATA, show_progress=False)
    for mode in ("full", "no-io"):
        run_point(Point(2, "local", mode), data, ABLATION / mode, ["--smoke"],
                  layers_for(data, posix=True, horovod_timeline=False), benchmark="climate")
modes = find_modes(ABLATION)
modes'''),
        ("code", '''table = ablation_of_runs(modes, ABLATION_ROWS)
table'''),
        ("code", '''print(format_ablation(table))'''),
        ("md", "## The read phase: file system against everything else"),
        ("code", '''split = table.loc[["  Parallel Read Images: file system",
                   "  Parallel Read Images: outside the file system"]].T
split.columns = ["file system", "Python / IPC / normalisation"]
ax = split.plot.bar(stacked=True, title="Parallel Read Images per rank, all epochs (s)")
ax.figure'''),
        ("md", "## Inside the reader: read, normalise, weights"),
        ("code", '''reader = table.loc[["Read Image (reader)", "Normalise (reader)", "Per-pixel Weights (reader)"]].T
ax = reader.plot.bar(stacked=True, title="reader sub-phases per rank, all epochs (s)")
ax.figure'''),
        ("md", "## The study's numbers (64 nodes) beside ours"),
        ("code", '''from benchmarks.common.study import CLIMATE_ABLATION_64_NODES

ours = table.loc["Parallel Read Images"].rename("our read phase, s per rank").to_frame()
CLIMATE_ABLATION_64_NODES.set_index("mode").join(ours, how="outer")'''),
    ],
    "darshan_logs.ipynb": [
        ("md", """# A cluster user's view of a Darshan log

Per-file bytes and time from the counters, the DXT timeline, Lustre stripe settings, and the log merged with an
application trace on one clock. The default logs are the real ones shipped in the `darshan` wheel."""),
        ("code", PARAMS_HEAD + '''import darshan

# Parameters: a Darshan log with DXT (per-call segments) and, for the stripe settings, the Lustre module; the
# default, IOR writing and reading an HDF5 file on 4 ranks at NERSC, has both.
EXAMPLES = Path(darshan.__file__).parent / "examples" / "example_logs"
LOG = Path(os.environ.get("NOTEBOOK_DARSHAN_LOG") or EXAMPLES / "ior_hdf5_example.darshan")
LUSTRE_LOG = os.environ.get("NOTEBOOK_LUSTRE_LOG") or LOG
SCRATCH = Path(os.environ.get("NOTEBOOK_SCRATCH") or repo / "runs" / "notebooks")
LOG, LUSTRE_LOG'''),
        ("code", '''from trace_merge import plots
from trace_merge.run import Run

log = Run.open(LOG)
counters = log.counters
counters.head()'''),
        ("md", "## Per file: bytes and time (POSIX counters, summed over ranks)"),
        ("code", '''wanted = ["POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN", "POSIX_F_READ_TIME", "POSIX_F_WRITE_TIME",
          "POSIX_F_META_TIME", "POSIX_READS", "POSIX_WRITES"]
per_file = (counters[counters["counter"].isin(wanted)]
            .pivot_table(index="file", columns="counter", values="value", aggfunc="sum", observed=True))
per_file'''),
        ("code", '''ax = (per_file[["POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN"]] / 2**20).plot.barh(
    title="MiB per file")
ax.figure'''),
        ("md", "## The DXT timeline (every read and write segment, per rank)"),
        ("code", '''log.frame.groupby(["layer", "rank"], observed=True).size()'''),
        ("code", '''plots.plot_timeline(log.frame)'''),
        ("md", "## Lustre stripe settings"),
        ("code", '''if LUSTRE_LOG:
    lustre = Run.open(LUSTRE_LOG).counters
    stripes = lustre[lustre["counter"].astype(str).str.startswith("LUSTRE_")].pivot_table(
        index="file", columns="counter", values="value", aggfunc="first", observed=True)
else:
    stripes = pd.DataFrame({"note": ["no log with the Lustre module given"]})
stripes'''),
        ("md", """## The log merged with an application trace

A stand-in for the application that wrote the log: one TimeLogger `Read File` phase per rank and file around the
rank's segments, timed 5 ms off (`TimeLogger.record` takes another clock's timestamps). The merge places the DXT
segments on the app clock by content and reports the offset it found."""),
        ("code", '''import shutil

from timelogger import TimeLogger

merged_dir = SCRATCH / "darshan-merged"
shutil.rmtree(merged_dir, ignore_errors=True)
(merged_dir / "darshan").mkdir(parents=True)
shutil.copy(LOG, merged_dir / "darshan" / Path(LOG).name)
posix = log.frame[log.frame["layer"] == "posix"]
for rank, rows in posix.groupby("rank"):
    tl = TimeLogger(merged_dir, rank=int(rank), world_size=int(posix["rank"].nunique()))
    for path, seg in rows.groupby("file", observed=True):
        tl.record("Read File", int(seg["start_ns"].min()) + 5_000_000 - 100_000,
                  int(seg["end_ns"].max()) + 5_000_000 + 100_000, cat="io", file=str(path),
                  bytes=int(seg["bytes"].sum()))
    tl.close()
merged = Run.open(merged_dir)
pd.DataFrame(merged.dxt_clock)'''),
        ("code", '''merged.layered_breakdown()'''),
        ("code", '''plots.plot_timeline(merged.frame)'''),
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
