"""Noise sensitivity: quiet runs against runs with ``timelogger run --noise`` generators beside them
(``trace-merge noise QUIET... -- NOISY...``, ``docs/noise.md``).

Every run is reduced to seconds per app phase and layered-breakdown component (``fs``, ``comm``, ``input_wait``,
``compute``, ``python``, ``not_observed``, and the phase's ``total``), summed over epochs and averaged over ranks.
Noisy runs are grouped by their manifest's noise settings (``cpu:1``, ``io:50``, ...). Per group and cell:

* ``slowdown``: noisy ÷ quiet seconds per repeat -- paired by position (round ``i`` of the noisy group against
  round ``i`` of the quiet runs, when both have as many repeats and were run interleaved), else against the quiet
  median -- given as the median and the range over repeats;
* ``quiet_lo``/``quiet_hi``: the quiet repeats' own range as a ratio to their median (the baseline's noise);
* ``call``: ``slower``/``faster`` when every noisy repeat lies beyond the quiet range (above its max, below its
  min), ``slower?``/``faster?`` when only the median slowdown lies beyond ``quiet_lo``-``quiet_hi``, empty when
  within it; ``n/a`` with one quiet
  run (no spread to compare with); ``tiny`` when the cell is under ``min_s`` seconds in both (a ratio of nothing).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from timelogger.records import Manifest
from trace_merge.attribution import COMPONENTS
from trace_merge.errors import TraceInputError

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from trace_merge.run import Run

TOTAL = "total"
CELLS = (TOTAL, *COMPONENTS)
QUIET = "quiet"
#: cells shorter than this (s, per rank, quiet and noisy medians) are not given a ratio
MIN_S = 0.002


def noise_label(manifest: Optional[Mapping[str, object]]) -> str:
    """``cpu:1``, ``io:50,net:200``, ... from ``manifest.json``'s ``layers.noise`` (``manifest``: the file's JSON
    object, read as a :class:`Manifest`); ``quiet`` without noise."""
    m = Manifest.from_json(manifest)
    specs = m.layers.noise.specs if m is not None and m.layers.noise is not None else []
    if not specs:
        return QUIET
    return ",".join(f"{s.kind}:{s.level:g}" for s in specs)


def phase_seconds(layered: pd.DataFrame, from_epoch: Optional[int] = None) -> pd.Series:
    """Seconds per (phase, cell) of one run's layered breakdown: summed over epochs (only those ``>= from_epoch``
    when given; phases outside any epoch are then left out too), mean over ranks."""
    if from_epoch is not None and len(layered):
        layered = layered[layered["epoch"].notna() & (layered["epoch"].fillna(-1) >= from_epoch)]
    if not len(layered):
        return pd.Series(dtype="float64")
    ranks = max(int(layered["rank"].nunique()), 1)
    cols = {TOTAL: "time_s", **{c: f"{c}_s" for c in COMPONENTS}}
    per = layered.groupby("phase", observed=True)[list(cols.values())].sum() / ranks
    per.columns = list(cols)
    return per.stack()


def achieved_load(frame: pd.DataFrame) -> dict[str, float]:
    """Kind -> the noise layer's time-weighted mean achieved load (in the kind's unit) of one run."""
    rows = frame[frame["layer"] == "noise"] if len(frame) else frame
    out: dict[str, list[tuple[float, float]]] = {}
    for args, dur in zip(rows["args"].astype(object), rows["dur_ns"].to_numpy()):
        try:
            a = json.loads(args) if isinstance(args, str) else {}
        except ValueError:
            continue
        if isinstance(a.get("achieved"), (int, float)) and a.get("kind"):
            out.setdefault(str(a["kind"]), []).append((float(a["achieved"]), float(dur)))
    return {k: sum(v * d for v, d in xs) / max(sum(d for _, d in xs), 1.0) for k, xs in out.items()}


#: the cpu layer's node figures a run is reduced to (summed over its nodes: :mod:`trace_merge.cpu_use`)
CPU_FIGURES = ("cores", "job_busy_cores", "node_busy_cores", "idle_cores")


@dataclass
class RunCells:
    path: str
    label: str
    seconds: pd.Series
    achieved: dict[str, float]
    #: :data:`CPU_FIGURES` of the run's nodes (empty without a cpu layer)
    cpu: dict[str, float] = field(default_factory=dict)


def run_cells(run: "Run", from_epoch: Optional[int] = None) -> RunCells:
    view = run.cpu()  # the nodes' figures need no step cycles: no second attribution of the run
    nodes = view.nodes if view is not None else None
    cpu = {k: float(nodes[k].sum()) for k in CPU_FIGURES if nodes[k].notna().any()} if nodes is not None else {}
    return RunCells(str(run.path), noise_label(run.manifest), phase_seconds(run.layered_breakdown(), from_epoch),
                    achieved_load(run.frame), cpu)


def _cpu_medians(runs: Sequence[RunCells]) -> dict[str, float]:
    """The runs' median :data:`CPU_FIGURES` (those every run has)."""
    keys = [k for k in CPU_FIGURES if runs and all(k in r.cpu for r in runs)]
    return {k: float(np.median([r.cpu[k] for r in runs])) for k in keys}


def open_runs(paths: Sequence["str | Path"], from_epoch: Optional[int] = None) -> list[RunCells]:
    from trace_merge.run import Run

    return [run_cells(Run.open(p), from_epoch) for p in paths]


def _call(q: np.ndarray, n: np.ndarray, slowdown: float = np.nan) -> str:
    """``slower``/``faster``: every noisy repeat beyond the quiet min-max (seconds); ``slower?``/``faster?``: only
    the median slowdown beyond the quiet range as a ratio to the quiet median (the bar beyond its grey band)."""
    if len(q) < 2:
        return "n/a"  # one quiet run has no spread to be beyond
    qlo, qhi = float(np.min(q)), float(np.max(q))
    if float(np.min(n)) > qhi:
        return "slower"
    if float(np.max(n)) < qlo:
        return "faster"
    qmed = float(np.median(q))
    ratio = slowdown if slowdown == slowdown else float(np.median(n)) / qmed if qmed > 0 else np.nan
    if qmed > 0 and ratio > qhi / qmed:
        return "slower?"
    if qmed > 0 and ratio < qlo / qmed:
        return "faster?"
    return ""


def noise_table(quiet: Sequence[RunCells], noisy: Sequence[RunCells], min_s: float = MIN_S) -> pd.DataFrame:
    """One row per noise group × phase × cell (columns in the module docstring, plus ``quiet_s``/``noisy_s``
    medians, ``delta_s``, ``repeats``, ``paired`` and ``achieved``: the group's median achieved load)."""
    if not quiet:
        raise TraceInputError("QUIET", "no quiet (baseline) runs given")
    if not noisy:
        raise TraceInputError("NOISY", "no noisy runs given")
    loud = [r.path for r in quiet if r.label != QUIET]
    if loud:
        raise TraceInputError(loud[0], "given as a quiet run but its manifest lists noise generators")
    groups: dict[str, list[RunCells]] = {}
    for r in noisy:
        groups.setdefault(r.label, []).append(r)
    q = pd.concat([r.seconds for r in quiet], axis=1).fillna(0.0)
    rows = []
    for label, runs in groups.items():
        n = pd.concat([r.seconds for r in runs], axis=1).fillna(0.0)
        cells = q.index.union(n.index)
        qq, nn = q.reindex(cells, fill_value=0.0), n.reindex(cells, fill_value=0.0)
        paired = qq.shape[1] == nn.shape[1]
        kinds = sorted({k for r in runs for k in r.achieved})
        achieved = {k: float(np.median([r.achieved.get(k, np.nan) for r in runs])) for k in kinds}
        cpu = {"quiet": _cpu_medians(quiet), "noisy": _cpu_medians(runs)}
        for (phase, cell), qv, nv in zip(cells, qq.to_numpy(), nn.to_numpy()):
            qmed, nmed = float(np.median(qv)), float(np.median(nv))
            row = {"noise": label, "phase": phase, "component": cell, "quiet_s": qmed, "noisy_s": nmed,
                   "delta_s": nmed - qmed, "repeats": f"{len(qv)}/{len(nv)}", "paired": paired,
                   "slowdown": np.nan, "lo": np.nan, "hi": np.nan, "quiet_lo": np.nan, "quiet_hi": np.nan,
                   "call": "tiny", "achieved": achieved, "cpu": cpu}
            if max(qmed, nmed) >= min_s and qmed > 0:
                base = np.where(qv > 0, qv, qmed) if paired else np.full(len(nv), qmed)
                ratios = nv / base
                row.update(slowdown=float(np.median(ratios)), lo=float(np.min(ratios)), hi=float(np.max(ratios)),
                           quiet_lo=float(np.min(qv) / qmed), quiet_hi=float(np.max(qv) / qmed))
                row["call"] = _call(qv, nv, row["slowdown"])
            elif max(qmed, nmed) >= min_s:  # appears only under noise
                row.update(call=_call(qv, nv))
            rows.append(row)
    out = pd.DataFrame(rows)
    order = {c: i for i, c in enumerate(CELLS)}
    out["_c"] = out["component"].map(order)
    return out.sort_values(["noise", "phase", "_c"], kind="stable").drop(columns="_c").reset_index(drop=True)


def format_noise(table: pd.DataFrame, phases: Optional[Sequence[str]] = None, show_tiny: bool = False) -> str:
    """The table as text: per noise group, phase and cell the medians, slowdown [range] and the call."""
    lines = []
    for label, grp in table.groupby("noise", sort=False):
        ach = grp["achieved"].iloc[0]
        got = ", ".join(f"{k} {v:.3g}" for k, v in ach.items()) if ach else "no noise layer found"
        lines.append(f"== noise {label} (achieved, median over repeats: {got}; repeats quiet/noisy "
                     f"{grp['repeats'].iloc[0]}, {'paired by round' if grp['paired'].iloc[0] else 'vs quiet median'})")
        cpu = grp["cpu"].iloc[0] if "cpu" in grp else {}
        if cpu and cpu.get("quiet") and cpu.get("noisy"):
            q, n = cpu["quiet"], cpu["noisy"]
            lines.append("  CPU (cpu layer, median over repeats, the job's nodes): " + "; ".join(
                f"{name} {w.get('job_busy_cores', float('nan')):.2f} cores busy with the job's threads, "
                f"{w.get('node_busy_cores', float('nan')):.2f} with every process, of {w.get('cores', float('nan')):g}"
                for name, w in (("quiet", q), (str(label), n))))
        lines.append(f"  {'phase':<26} {'component':<13} {'quiet s':>9} {'noisy s':>9} {'slowdown [range]':>22} "
                     f"{'quiet range':>13}  call")
        for row in grp.itertuples():
            if phases is not None and row.phase not in phases:
                continue
            if row.call == "tiny" and not show_tiny:
                continue
            sd = "-" if row.slowdown != row.slowdown else f"{row.slowdown:.2f} [{row.lo:.2f}-{row.hi:.2f}]"
            qr = "-" if row.quiet_lo != row.quiet_lo else f"{row.quiet_lo:.2f}-{row.quiet_hi:.2f}"
            lines.append(f"  {str(row.phase)[:26]:<26} {row.component:<13} {row.quiet_s:9.4f} {row.noisy_s:9.4f} "
                         f"{sd:>22} {qr:>13}  {row.call}")
    lines.append("slowdown = noisy ÷ quiet seconds per rank (summed over epochs), median [min-max] over repeats; "
                 "quiet range = the baseline repeats' min-max ÷ their median; call: slower/faster = every noisy "
                 "repeat beyond the quiet range, '?' = only the median slowdown beyond it; cells under "
                 f"{MIN_S * 1e3:g} ms left out (docs/noise.md)")
    return "\n".join(lines)


def top_phases(table: pd.DataFrame, top: int = 6) -> list[str]:
    """The ``top`` phases with the most quiet time (their ``total`` cell)."""
    tot = table[table["component"] == TOTAL].groupby("phase")["quiet_s"].max().sort_values(ascending=False)
    return list(tot.index[:top])


def plot_noise(table: pd.DataFrame, phases: Optional[Sequence[str]] = None, title: str = "") -> "Figure":
    """Slowdown per phase × component, one panel per noise group: bars = median ratio − 1 (%, symmetric-log axis
    beyond ±100 %), whiskers = the range over repeats, grey band per bar = the quiet repeats' range; ``*`` =
    called slower/faster, ``?`` = only the median beyond the quiet range."""
    from matplotlib.figure import Figure

    from trace_merge.plots import COMPONENT_COLOURS

    colours = {TOTAL: "#444444", **COMPONENT_COLOURS}
    groups = list(dict.fromkeys(table["noise"]))
    phases = list(phases) if phases is not None else top_phases(table)
    fig = Figure(figsize=(max(7.0, 1.6 * len(phases) + 2), 3.2 * max(len(groups), 1)), layout="constrained")
    axes = fig.subplots(max(len(groups), 1), 1, squeeze=False)[:, 0]
    width = 0.8 / len(CELLS)
    for ax, label in zip(axes, groups):
        grp = table[table["noise"] == label].set_index(["phase", "component"])
        for k, cell in enumerate(CELLS):
            xs, ys, err, band = [], [], [], []
            for i, phase in enumerate(phases):
                if (phase, cell) not in grp.index:
                    continue
                r = grp.loc[(phase, cell)]
                if r["slowdown"] != r["slowdown"]:
                    continue
                x = i + (k - len(CELLS) / 2 + 0.5) * width
                xs.append(x)
                ys.append(100 * (r["slowdown"] - 1))
                err.append((100 * (r["slowdown"] - r["lo"]), 100 * (r["hi"] - r["slowdown"])))
                band.append((x, 100 * (r["quiet_lo"] - 1), 100 * (r["quiet_hi"] - 1)))
                if str(r["call"]).rstrip("?") in ("slower", "faster"):
                    ax.text(x, 100 * (r["hi"] - 1) if r["slowdown"] >= 1 else 100 * (r["lo"] - 1),
                            "*" if not str(r["call"]).endswith("?") else "?", ha="center",
                            va="bottom" if r["slowdown"] >= 1 else "top", fontsize=8)
            for x, lo, hi in band:
                ax.add_patch(_band(x, lo, hi, width))
            if xs:
                ax.bar(xs, ys, width=width * 0.9, color=colours[cell], edgecolor="#888888", linewidth=0.4,
                       yerr=np.array(err).T, capsize=1.5, error_kw={"linewidth": 0.6},
                       label=cell if ax is axes[0] else None, hatch="///" if cell == "not_observed" else None)
        ach = grp["achieved"].iloc[0] if len(grp) else {}
        got = ", ".join(f"{k} {v:.3g}" for k, v in ach.items())
        ax.set_title(f"noise {label}" + (f" (achieved {got})" if got else ""), fontsize=9)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(phases)))
        ax.set_xticklabels([p[:18] for p in phases], fontsize=8)
        ax.set_ylabel("slowdown vs quiet (%)", fontsize=8)
        # a few cells of milliseconds slow down by 10x; linear up to +-100 % keeps the rest readable
        ax.set_yscale("symlog", linthresh=100)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(CELLS), fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _band(x: float, lo: float, hi: float, width: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x - width / 2, lo), width, max(hi - lo, 0.3), color="#bbbbbb", alpha=0.5, linewidth=0,
                     zorder=0)
