"""Figures for the analyses in :mod:`trace_merge.analysis` (compute/plot pairs).

Each ``plot_*`` takes the DataFrame its ``*_df`` partner returns (the timeline takes the frame itself),
draws on ``ax`` when given, and returns the :class:`matplotlib.figure.Figure` (given ``ax``: the figure or
subfigure holding it). Figures are made with
:class:`~matplotlib.figure.Figure` directly, never through ``pyplot``, so library code neither opens windows
nor changes the user's backend; save them with ``fig.savefig(...)``.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.analysis import COMPONENT_LABELS, OTHER_PHASES, PRIORITY, SIZE_BINS, WHERE_SEGMENTS, component_labels
from trace_merge.attribution import step_marks_df
from trace_merge.formatting import sig3, size_text
from trace_merge.schema import STEP_PHASE, as_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

logger = logging.getLogger(__name__)

#: One colour per cat, the same in every figure.
CAT_COLOURS = {
    "io": "#d62728", "comm": "#9467bd", "checkpoint": "#8c564b", "preprocess": "#ff7f0e",
    "compute": "#2ca02c", "wait": "#1f77b4", "other": "#c7c7c7",
}

#: One colour per component, taken from the cat it corresponds to so both kinds of figure agree.
COMPONENT_COLOURS = {
    "fs": CAT_COLOURS["io"], "comm": CAT_COLOURS["comm"], "input_wait": CAT_COLOURS["wait"],
    "compute": CAT_COLOURS["compute"], "python": CAT_COLOURS["preprocess"], "not_observed": "#ffffff",
}
#: Read and write (e.g. Darshan DXT segments, per-file bytes): reads in the io colour, writes apart from every cat.
IO_COLOURS = {"read": CAT_COLOURS["io"], "write": "#e377c2"}
#: The original study's phases (:data:`trace_merge.study.ORIGINAL_STUDY`) in the colour of their cat.
STUDY_COLOURS = {"read": CAT_COLOURS["io"], "load": CAT_COLOURS["preprocess"], "training": CAT_COLOURS["compute"],
                 "checkpoint": CAT_COLOURS["checkpoint"], "other": CAT_COLOURS["other"]}
#: Local and global shuffle (the benchmarks' ``--shuffle``), in colours no cat or component uses.
SHUFFLE_COLOURS = {"local": "#17becf", "global": "#bcbd22"}

#: Components drawn hatched: time no captured layer could split (it is not known to be anything)
COMPONENT_HATCHES = {"not_observed": "///"}
#: How an app category is named in the first screen's legend and bar labels (the app layer's ``wait`` phases are
#: the loop waiting for its input)
CAT_NAMES = {"wait": "input wait", "other": "other", "": "other"}


def plot_grouped_bars(table: pd.DataFrame, colours: dict, *, labels: Optional[dict] = None,
                      ticks: Optional[list] = None, xlabel: str = "", ylabel: str = "", title: str = "") -> "Figure":
    """One group of bars per row of ``table`` (x, labelled ``ticks``), one bar per column in ``colours[column]``
    with legend label ``labels[column]`` (default: the column name); the legend outside the data, on the right."""
    fig = new_figure((8, 3.2))
    ax = fig.add_subplot()
    width = 0.8 / len(table.columns)
    for i, col in enumerate(table.columns):
        ax.bar(np.arange(len(table)) + (i - (len(table.columns) - 1) / 2) * width, table[col].to_numpy(dtype=float),
               width, color=colours[col], label=(labels or {}).get(col, str(col)))
    ax.set_xticks(np.arange(len(table)), ticks if ticks is not None else [str(x) for x in table.index])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def plot_stacked_bars(parts: "list[tuple[str, Any, str, Optional[str]]]", ticks: list, *, xlabel: str = "",
                      ylabel: str = "", title: str = "") -> "Figure":
    """One stacked bar per tick: ``parts`` are ``(label, values, colour, hatch)`` from the bottom up (``values``
    one per tick, missing as 0); the legend outside the data, on the right."""
    fig = new_figure((8, 3.4))
    ax = fig.add_subplot()
    x = np.arange(len(ticks))
    bottom = np.zeros(len(x))
    for label, values, colour, hatch in parts:
        height = np.nan_to_num(np.asarray(values, dtype=float))
        ax.bar(x, height, 0.6, bottom=bottom, color=colour, hatch=hatch, edgecolor="white", label=label)
        bottom += height
    ax.set_xticks(x, ticks)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def new_figure(size: tuple[float, float]) -> "Figure":
    """A figure of ``size`` inches, not tied to pyplot (nothing global to close), laid out to fit its labels."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - matplotlib is in the [merge] extra
        raise ImportError("plots need matplotlib: pip install .[merge]") from exc
    return Figure(figsize=size, layout="constrained")


def _figure_and_axes(ax: "Optional[Axes]", size: tuple[float, float]) -> "tuple[Figure | SubFigure, Axes]":
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(size)
    return fig, fig.add_subplot()


def _no_data(ax: "Optional[Axes]", size: tuple[float, float], text: str) -> "Figure | SubFigure":
    fig, ax = _figure_and_axes(ax, size)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_axis_off()
    return fig


def _row_label(rank: int, epoch: object) -> str:
    return f"rank {rank} · all" if pd.isna(epoch) else f"rank {rank} · epoch {epoch}"


def plot_breakdown(df: pd.DataFrame, ax: "Optional[Axes]" = None, *, totals: bool = False) -> "Figure | SubFigure":
    """Stacked horizontal bars of the exclusive shares, one bar per rank × epoch.

    Parameters
    ----------
    df
        :func:`trace_merge.analysis.breakdown_df` output.
    ax
        Axes to draw on; a new figure when ``None``.
    totals
        Draw the whole-run rows (``epoch`` missing) instead of the per-epoch rows. Falls back to the
        whole-run rows when there are no per-epoch rows.
    """
    rows = df[df["epoch"].isna()] if totals else df[df["epoch"].notna()]
    if not len(rows):
        rows = df[df["epoch"].isna()]
    fig, ax = _figure_and_axes(ax, (9, 1.2 + 0.35 * max(len(rows), 1)))
    labels = [_row_label(r, e) for r, e in zip(rows["rank"], rows["epoch"])]
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    for cat in PRIORITY:
        width = rows[f"{cat}_pct"].to_numpy(dtype=float)
        if not np.any(width > 0):
            continue
        ax.barh(y, width, left=left, color=CAT_COLOURS[cat], label=cat, edgecolor="white", linewidth=0.5)
        left += width
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_ylabel("rank · epoch")
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of wall time (%)")
    ax.set_title("Where the time went (exclusive, per rank × epoch)", pad=22)
    if len(rows):
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(PRIORITY), frameon=False,
                  fontsize="small")
    return fig


def plot_bandwidth(df: pd.DataFrame, ax: "Optional[Axes]" = None) -> "Figure | SubFigure":
    """Read bandwidth per rank (MB/s, bars) with the bytes read written on each bar.

    Parameters
    ----------
    df
        :func:`trace_merge.analysis.bandwidth_df` output.
    """
    fig, ax = _figure_and_axes(ax, (7, 3.2))
    x = np.arange(len(df))
    bw = df["read_bw_MB_per_s"].to_numpy(dtype=float)
    bars = ax.bar(x, np.nan_to_num(bw), color="#d62728")
    for bar, nbytes, layer in zip(bars, df["read_bytes"], df["layer"]):
        ax.annotate(f"{size_text(nbytes)}\n{layer}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize="x-small")
    ax.set_xticks(x, [f"rank {r}" for r in df["rank"]])
    pad = max(0.0, (4 - len(df)) / 2)  # keep one or two bars from filling the whole width
    ax.set_xlim(-0.6 - pad, len(df) - 0.4 + pad)
    ax.set_ylabel("read bandwidth (MB/s)")
    ax.set_title("Read bandwidth per rank (bytes ÷ union of read time)")
    ax.margins(y=0.25)
    return fig


def _excerpt(frame: pd.DataFrame, start_ns: Optional[int], end_ns: Optional[int],
             max_events: int) -> tuple[int, int]:
    """The window to draw (:func:`excerpt_window` of one frame)."""
    if start_ns is not None and end_ns is not None:  # nothing to look up (``frame`` may be an excerpt's rows)
        return start_ns, end_ns
    return excerpt_window(lambda columns: [frame[list(columns)]], start_ns, end_ns, max_events)[:2]


def excerpt_window(parts: "Callable[[Sequence[str]], Iterable[pd.DataFrame]]", start_ns: Optional[int] = None,
                   end_ns: Optional[int] = None, max_events: int = 3000, cut: bool = False
                   ) -> "tuple[int, int, tuple[int, int]]":
    """The window a timeline draws: the given bounds, else the whole run when it is small, else the framework
    (TF profiler) window when there is one, else about ``max_events`` events from the first training step.

    ``parts(columns)`` yields the run's rows (those columns) a part at a time (a partitioned run: one rank after
    another), so that no more than a part and ``max_events`` starts per part are held. Returns ``(lo, hi)`` and
    the run's ``(first start, last end)``. ``cut``: a given window holding more than ten times ``max_events``
    events is cut to about ``max_events`` from its start (a report's excerpt of steps that hold a million events
    would be slow to draw and show nothing one could read)."""
    t0 = t1 = None
    n = 0
    fw_lo = fw_hi = stepped = last_start = None
    for f in parts(("layer", "start_ns", "end_ns", "step")):
        if not len(f):
            continue
        n += len(f)
        s, e = f["start_ns"].to_numpy(np.int64), f["end_ns"].to_numpy(np.int64)
        t0, t1 = _min(t0, int(s.min())), _max(t1, int(e.max()))
        last_start = _max(last_start, int(s.max()))
        fw = (f["layer"] == "framework").to_numpy()
        if fw.any():
            fw_lo, fw_hi = _min(fw_lo, int(s[fw].min())), _max(fw_hi, int(e[fw].max()))
        has_step = f["step"].notna().to_numpy()
        if has_step.any():
            stepped = _min(stepped, int(s[has_step].min()))
    if t0 is None or t1 is None or last_start is None:  # all set by the first row
        raise ValueError("no rows to draw")
    span = (t0, t1)

    def sorted_starts() -> "Iterable[np.ndarray]":
        return (np.sort(f["start_ns"].to_numpy(np.int64)) for f in parts(("start_ns",)))

    def few(lo: int, hi: int) -> bool:  # at most ten times max_events start inside
        return sum(int(np.searchsorted(st, hi) - np.searchsorted(st, lo)) for st in sorted_starts()) <= 10 * max_events

    if start_ns is not None or end_ns is not None:
        lo, hi = (t0 if start_ns is None else start_ns), (t1 if end_ns is None else end_ns)
        if not cut or few(lo, hi):
            return lo, hi, span
        anchor = lo
    elif n <= max_events:
        return t0, t1, span
    elif fw_lo is not None and fw_hi is not None:  # both set by the first framework row
        pad = (fw_hi - fw_lo) // 10
        lo, hi = fw_lo - pad, fw_hi + pad
        if few(lo, hi):
            return lo, hi, span
        anchor = lo  # a long profile: its beginning
    else:
        anchor = stepped if stepped is not None else t0
    # the start max_events after the anchor: each part's first max_events + 1 starts from the anchor hold it
    first, heads = 0, []
    for st in sorted_starts():
        k = int(np.searchsorted(st, anchor))
        first += k
        heads.append(st[k:k + max_events + 1])
    after = np.sort(np.concatenate(heads))
    at = min(max_events, n - 1 - first)
    value = int(after[at]) if 0 <= at < len(after) else last_start  # no start after the anchor: the last one
    return anchor, max(value, anchor + 1), span


def _min(a: Optional[int], b: int) -> int:
    return b if a is None else min(a, b)


def _max(a: Optional[int], b: int) -> int:
    return b if a is None else max(a, b)


def plot_timeline(frame: pd.DataFrame, ax: "Optional[Axes]" = None, *, start_ns: Optional[int] = None,
                  end_ns: Optional[int] = None, max_events: int = 3000, by: str = "cat",
                  span: Optional[tuple[int, int]] = None) -> "Figure | SubFigure":
    """Timeline of the run or an excerpt of it: one lane per rank × layer, intervals coloured by cat.

    Parameters
    ----------
    frame
        Merged frame.
    start_ns, end_ns
        Absolute epoch ns of the excerpt; by default the whole run, or a leading slice of it holding about
        ``max_events`` events when the run has more.
    by
        ``"cat"``: colour by cat (:data:`CAT_COLOURS`); ``"io"``: colour reads and writes apart by the event name
        (:data:`IO_COLOURS`; other events in the ``other`` colour), for logs whose events are all ``io``.
    span
        The run's first start and last end, when ``frame`` holds only the rows of the excerpt (a large run's
        :meth:`trace_merge.run.Run.excerpt`); default: ``frame``'s.
    """
    fig, ax = _figure_and_axes(ax, (11, 1.5 + 0.4 * max(frame.groupby(["rank", "layer"], observed=True).ngroups, 1)
                                    if len(frame) else 2))
    if not len(frame):
        ax.set_title("Timeline (no events)")
        return fig
    lo, hi = _excerpt(frame, start_ns, end_ns, max_events)
    rows = frame[((frame["end_ns"] >= lo) & (frame["start_ns"] <= hi)).to_numpy()]
    lanes = rows.groupby(["rank", "layer"], observed=True, sort=True)
    if by == "io":
        colours = {**IO_COLOURS, "other": CAT_COLOURS["other"]}
        order = ["other", *list(IO_COLOURS)[::-1]]  # the legend lists them the other way round: read first

        def keys(lane: pd.DataFrame) -> np.ndarray:
            name = as_text(lane["name"]).str.lower()
            return np.where(name.str.contains("write"), "write", np.where(name.str.contains("read"), "read",
                                                                          "other"))
    else:
        colours, order = CAT_COLOURS, list(PRIORITY[::-1])  # high-priority (usually inner) intervals drawn on top

        def keys(lane: pd.DataFrame) -> np.ndarray:
            return as_text(lane["cat"]).to_numpy()
    labels, drawn = [], set()
    for i, ((rank, layer), lane) in enumerate(lanes):
        labels.append(f"rank {rank} · {layer}")
        s = (np.maximum(lane["start_ns"].to_numpy(), lo) - lo) / 1e9
        w = (np.minimum(lane["end_ns"].to_numpy(), hi) - lo) / 1e9 - s
        kind = keys(lane)
        for key in order:
            sel = kind == key
            if sel.any():
                ax.broken_barh(list(zip(s[sel], np.maximum(w[sel], 0))), (i - 0.4, 0.8), facecolors=colours[key])
                drawn.add(key)
    ax.set_yticks(np.arange(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_ylabel("rank · layer")
    ax.set_xlim(0, (hi - lo) / 1e9)
    t0, t1 = span if span is not None else (int(frame["start_ns"].min()), int(frame["end_ns"].max()))
    whole = lo <= t0 and hi >= t1
    ax.set_xlabel("seconds since the run's first event" if whole else "seconds since excerpt start")
    ax.set_title(f"Timeline, whole run ({(hi - lo) / 1e9:.3g} s)" if whole else
                 f"Timeline excerpt ({(hi - lo) / 1e9:.3g} s)", pad=22)
    from matplotlib.patches import Patch

    shown = [k for k in order[::-1] if k in drawn]  # only what is drawn gets a legend entry
    names = {"other": "neither read nor write"} if by == "io" else {}
    ax.legend(handles=[Patch(color=colours[k], label=names.get(k, k)) for k in shown], loc="lower center",
              bbox_to_anchor=(0.5, 1.0), ncol=max(len(shown), 1), frameon=False, fontsize="small")
    return fig


def plot_access_pattern(df: pd.DataFrame, ax: "Optional[Axes]" = None) -> "Figure | SubFigure":
    """Read-size histogram (Darshan's bins) and, without ``ax``, sequential/random reads per rank.

    Parameters
    ----------
    df
        :func:`trace_merge.analysis.access_pattern_df` output.
    """
    fig: "Figure | SubFigure"
    if ax is None:
        fig = new_figure((10, 3.4))
        ax_size, ax_seq = fig.subplots(1, 2)
    else:
        fig, ax_size, ax_seq = ax.figure, ax, None
    names = [b for b, _ in SIZE_BINS]
    counts = [int(df[f"size_{b}"].sum()) if len(df) else 0 for b in names]
    ax_size.bar(np.arange(len(names)), counts, color="#1f77b4")
    ax_size.set_xticks(np.arange(len(names)), [n.replace("_", "–") for n in names], rotation=45, ha="right",
                       fontsize="small")
    ax_size.set_ylabel("reads")
    ax_size.set_title("Read sizes (bytes)")
    if ax_seq is not None:
        per_rank = df.groupby("rank")[["consecutive", "sequential", "random"]].sum() if len(df) else None
        if per_rank is not None and len(per_rank):
            x = np.arange(len(per_rank))
            seq_only = per_rank["sequential"] - per_rank["consecutive"]
            ax_seq.bar(x, per_rank["consecutive"], color="#2ca02c", label="consecutive")
            ax_seq.bar(x, seq_only, bottom=per_rank["consecutive"], color="#98df8a", label="sequential (gap)")
            ax_seq.bar(x, per_rank["random"], bottom=per_rank["sequential"], color="#d62728", label="random")
            ax_seq.set_xticks(x, [f"rank {r}" for r in per_rank.index])
            ax_seq.legend(fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        if per_rank is None or not per_rank.to_numpy().any():
            ax_seq.text(0.5, 0.5, "no read offsets recorded\n(e.g. read() calls carry none)", ha="center",
                        va="center", transform=ax_seq.transAxes, color="#666")
        ax_seq.set_ylabel("reads")
        ax_seq.set_title("Offsets after the previous read of the file")
    return fig


def _phase_rows(df: pd.DataFrame, top: int, by_rank: bool) -> pd.DataFrame:
    """Component seconds per phase (and rank), summed over epochs; the ``top`` phases by time, longest
    first, then the rest as one :data:`OTHER_PHASES` row."""
    cols = ["time_s", *(f"{c}_s" for c in COMPONENT_LABELS)]
    phase = as_text(df["phase"])
    totals = df["time_s"].groupby(phase).sum().sort_values(ascending=False, kind="stable")
    kept = list(totals.index[:top])
    order = {p: i for i, p in enumerate(kept + [OTHER_PHASES])}
    merged = phase.where(phase.isin(kept), OTHER_PHASES).rename("phase")
    cat = as_text(df["cat"]).groupby(phase).first()
    rows = df[cols].groupby([merged] + ([df["rank"]] if by_rank else [])).sum().reset_index()
    rows["cat"] = rows["phase"].map(cat).fillna("")
    return rows.sort_values(["phase"] + (["rank"] if by_rank else []), key=lambda c: c.map(order)
                            if c.name == "phase" else c, kind="stable", ignore_index=True)


def plot_layered_breakdown(df: pd.DataFrame, ax: "Optional[Axes]" = None, *, top: int = 12,
                           by_rank: bool = False, tfdata: Optional[bool] = None,
                           dataloader: bool = False) -> "Figure | SubFigure":
    """App phase → components: one horizontal bar per app phase, split by the layer below that saw the time.

    A bar's length is the phase's self time summed over ranks and epochs; its segments are the components
    (file system, communication, tf.data input wait, framework compute, and the Python / decode / IPC
    remainder no lower layer saw inside a profiled window), one colour each; time outside every profile window
    is "not observed", drawn hatched. Phases are ordered longest first; beyond ``top`` they are
    merged into one "other phases" bar.

    Parameters
    ----------
    df
        Layered breakdown: one row per rank × epoch × app phase with ``rank, epoch, phase, cat, calls,
        time_s`` and the seconds per component (``fs_s, comm_s, input_wait_s, compute_s, python_s,
        not_observed_s``; the last drawn hatched).
    ax
        Axes to draw on; a new figure when ``None``.
    top
        How many phases get a bar of their own.
    by_rank
        One bar per phase × rank (grouped by phase) instead of one per phase.
    tfdata
        Whether the run has tf.data events (:func:`trace_merge.analysis.has_tfdata`), for the input wait's legend
        entry; by default, whether any framework input wait was seen inside the phases. Components with no time
        get no bar and no legend entry.
    dataloader
        Whether the run's PyTorch profile saw its DataLoader wait (:func:`trace_merge.analysis.has_dataloader`):
        the legend says "input wait (DataLoader)".
    """
    if not len(df):
        return _no_data(ax, (9, 2), "no app phases")
    rows = _phase_rows(df, top, by_rank)
    group = rows["phase"].ne(rows["phase"].shift()).cumsum().to_numpy() - 1
    y = np.arange(len(rows)) + (0.6 * group if by_rank else 0)  # a gap between the phases' groups
    fig, ax = _figure_and_axes(ax, (10, 1.4 + 0.32 * len(rows)))
    left = np.zeros(len(rows))
    labels = component_labels(bool(df["input_wait_s"].sum() > 0) if tfdata is None else tfdata, dataloader)
    for comp, label in labels.items():
        width = rows[f"{comp}_s"].to_numpy(dtype=float)
        if not np.any(width > 0):
            continue
        hatch = COMPONENT_HATCHES.get(comp)
        ax.barh(y, width, left=left, height=0.8, color=COMPONENT_COLOURS[comp], label=label, hatch=hatch,
                edgecolor="#888888" if hatch else "white", linewidth=0.5)
        left += width
    ticks = []
    for phase, cat, t, rank in zip(rows["phase"], rows["cat"], rows["time_s"],
                                   rows["rank"] if by_rank else [None] * len(rows)):
        name = f"{phase} [{cat}]" if cat else phase
        ticks.append(f"{name}{'' if rank is None else f' · rank {rank}'} · {t:.3g} s")
    ax.set_yticks(y, ticks, fontsize="small")
    ax.invert_yaxis()
    ax.set_ylabel("app phase [cat] · self time")
    ax.set_xlabel("self time (s)")
    ax.set_title("App phases split by the layer below that saw the time"
                 + (" (per rank, summed over epochs)" if by_rank else " (summed over ranks and epochs)"), pad=34)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False, fontsize="small")
    return fig


def _light(colour: str, keep: float = 0.45) -> tuple:
    """``colour`` mixed with white (``keep`` of the colour): an app category's part of a bar, apart from the layer
    drawn in that category's full colour (io and the file system share red)."""
    from matplotlib.colors import to_rgb

    return tuple(keep * c + (1 - keep) for c in to_rgb(colour))


def plot_where_time_goes(df: pd.DataFrame, ax: "Optional[Axes]" = None, *,
                         tfdata: bool = False, dataloader: bool = False) -> "Figure | SubFigure":
    """The first screen's picture (:func:`trace_merge.analysis.where_time_goes_df`): one bar per app phase, its
    self time split into the file-system and communication layers' time, the framework split where a profile
    looked, and the rest in a light shade of the phase's category colour (what the app layer alone knows); a
    dashed outline to the phase's inclusive time where nested phases add to it. ``tfdata``: the run has tf.data
    events, ``dataloader``: a PyTorch profile saw the DataLoader wait (the input wait's legend entry)."""
    if not len(df):
        return _no_data(ax, (6.4, 2), "no app phases")
    fig, ax = _figure_and_axes(ax, (6.4, 1.4 + 0.42 * len(df)))
    y = np.arange(len(df))
    left = np.zeros(len(df))
    names = component_labels(tfdata, dataloader)
    cats = df["cat"].fillna("").to_numpy(dtype=object)
    for seg in WHERE_SEGMENTS:
        width = df[f"{seg}_s"].to_numpy(dtype=float)
        if seg != "cat":
            if np.any(width > 0):
                ax.barh(y, width, left=left, height=0.7, color=COMPONENT_COLOURS[seg], label=names[seg],
                        edgecolor="white", linewidth=0.5)
        else:  # one legend entry per category drawn
            for cat in dict.fromkeys(cats):
                sel = (cats == cat) & (width > 0)
                if sel.any():
                    ax.barh(y[sel], width[sel], left=left[sel], height=0.7,
                            color=_light(CAT_COLOURS.get(cat, CAT_COLOURS["other"])), edgecolor="white",
                            linewidth=0.5, label=f"{CAT_NAMES.get(cat, cat)} phase, not split by a profile")
        left += width
    inclusive = df["inclusive_s"].to_numpy(dtype=float)
    nested = np.nan_to_num(inclusive) > 1.05 * df["self_s"].to_numpy(dtype=float)
    if nested.any():
        ax.barh(y[nested], inclusive[nested], height=0.86, fill=False, edgecolor="#444", linestyle="--",
                linewidth=0.8, label="inclusive time (nested phases too)")
    labels = []
    for phase, cat, own, incl in zip(df["phase"], cats, df["self_s"], inclusive):
        name = phase if not cat else f"{phase} · {CAT_NAMES.get(cat, cat)}"
        both = np.isfinite(incl) and incl > 1.05 * own
        labels.append(f"{name}\nself {sig3(own)} s" + (f", inclusive {sig3(incl)} s" if both else ""))
    ax.set_yticks(y, labels, fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("self time (s), summed over ranks and epochs")
    # below the axes, outside them: constrained layout makes room, so it covers neither bars nor the axis label
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, frameon=False,
               fontsize="x-small")
    return fig


#: What the ``basis`` of a step series means, for the title.
_STEP_BASIS = {"framework": "framework profiler steps", "app": f"app '{STEP_PHASE}' phases"}
_STEP_REST_COLOUR = "#b0b0b0"


def _steady_top(rows: pd.DataFrame) -> Optional[float]:
    """The y limit of a step figure: the steady-state steps' longest, with room above. Warm-up steps (which the
    verdict excludes, often 100x longer) do not set the scale: they are drawn clipped, with their time written."""
    warm = rows["warmup"].to_numpy(dtype=bool) if "warmup" in rows else np.zeros(len(rows), dtype=bool)
    steady = rows["step_s"].to_numpy(dtype=float)[~warm]
    return float(steady.max()) * 1.15 if len(steady) and steady.max() > 0 else None


def _stairs(ax: "Axes", values: np.ndarray, edges: np.ndarray, baseline: "float | np.ndarray", **kw: Any) -> None:
    """``ax.stairs(values, edges, baseline=baseline, fill=True, **kw)``, the data limits taken from the values:
    ``stairs`` walks every vertex of the patch in Python for them (slow for a run's millions of steps)."""
    from matplotlib.patches import StepPatch

    # matplotlib's stub types baseline as a float; it takes an array too (documented, and used so here)
    patch = StepPatch(values, edges, baseline=baseline, fill=True, **kw)  # type: ignore[arg-type]
    ax.add_artist(patch)
    patch.sticky_edges.y.append(float(np.min(baseline)))
    ys = np.concatenate((np.atleast_1d(values), np.atleast_1d(baseline))).astype(float)
    ax.update_datalim([(float(edges[0]), float(np.nanmin(ys))), (float(edges[-1]), float(np.nanmax(ys)))])
    ax.autoscale_view()


def _draw_steps(ax: "Axes", steps: pd.DataFrame, x0: int, legend: bool, top: Optional[float],
                wait_label: str) -> None:
    """One rank's steps as stacked stairs from ``x0``: input wait from 0, the rest of the step above it,
    warm-up steps hatched (and, above ``top``, clipped with their time written), a dashed line where an epoch
    begins."""
    edges = x0 + np.arange(len(steps) + 1)
    wait = steps["input_wait_s"].to_numpy(dtype=float)
    step = steps["step_s"].to_numpy(dtype=float)
    _stairs(ax, wait, edges, 0.0, color=COMPONENT_COLOURS["input_wait"],
            label=wait_label if legend else None)
    _stairs(ax, step, edges, wait, color=_STEP_REST_COLOUR, label="rest of the step" if legend else None)
    warm = steps["warmup"].to_numpy(dtype=bool) if "warmup" in steps else np.zeros(len(steps), dtype=bool)
    # a warm-up step's whole length: the part the verdict excluded (graph tracing, first fill) included
    whole = step + (steps["excluded_s"].to_numpy(dtype=float) if "excluded_s" in steps else 0.0)
    for i in np.flatnonzero(warm):
        ax.bar(edges[i] + 0.5, whole[i] if top is None else min(whole[i], top), width=1.0, fill=False,
               hatch="xx", edgecolor="#666", linewidth=0.5, label="warm-up (not counted)" if legend else None)
        legend = False
        if top is not None and whole[i] > top:
            ax.annotate(f"warm-up {whole[i]:.3g} s ↑", (edges[i] + 0.5, top), xytext=(3, -14),
                        textcoords="offset points", va="top", fontsize="x-small", color="#444")
    epoch = steps["epoch"].astype("float64").to_numpy()
    begins = np.flatnonzero(np.r_[True, ~((epoch[1:] == epoch[:-1]) | (np.isnan(epoch[1:]) & np.isnan(epoch[:-1])))])
    for i in begins:
        if i:
            ax.axvline(edges[i], color="#444", linestyle="--", linewidth=0.7)
        if not np.isnan(epoch[i]):
            ax.annotate(f"epoch {int(epoch[i])}", (edges[i], 1.0), xycoords=ax.get_xaxis_transform(),
                        xytext=(2, -2), textcoords="offset points", va="top", fontsize="x-small", color="#444")


def plot_step_series(df: pd.DataFrame, ax: "Optional[Axes]" = None, *, tfdata: bool = False,
                     dataloader: bool = False) -> "Figure | SubFigure":
    """Step time per rank over the steps in time order, input wait stacked at the bottom.

    Each step is one unit on x (its position in the rank's time order; epochs start at the dashed lines); the
    blue part of the column is the step's input wait, the grey part the rest of the step. Without ``ax``
    there is one subplot per rank, sharing both axes; with ``ax`` the ranks follow one another along x.

    Parameters
    ----------
    df
        Per-step series: one row per rank × step with ``rank, epoch, step, start_ns, end_ns, step_s,
        input_wait_s, basis`` (``"framework"`` or ``"app"``: where the step boundaries came from).
    ax
        Axes to draw on; a new figure when ``None``.
    tfdata
        The run has tf.data events (:func:`trace_merge.analysis.has_tfdata`): the wait is named "input wait
        (tf.data)", else "input wait" ("input wait (DataLoader)" with ``dataloader``: a PyTorch profile saw it).
    """
    if not len(df):
        return _no_data(ax, (9, 2), "no training steps")
    wait_label = component_labels(tfdata, dataloader)["input_wait"]
    rows = df.sort_values(["rank", "start_ns"], kind="stable")
    per_rank = list(rows.groupby("rank", sort=True))
    bases = [_STEP_BASIS.get(b, str(b)) for b in sorted(as_text(rows["basis"]).unique())]
    title = f"Step time per rank, input wait at the bottom (steps: {', '.join(bases)})"
    top = _steady_top(rows)
    fig: "Figure | SubFigure"
    if ax is None:
        fig = new_figure((10, 1.2 + 1.5 * len(per_rank)))
        axes = fig.subplots(len(per_rank), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
        for i, (a, (rank, steps)) in enumerate(zip(axes, per_rank)):
            _draw_steps(a, steps, 0, legend=not i, top=top, wait_label=wait_label)
            a.set_ylabel(f"rank {rank}\nstep (s)")
        fig.suptitle(title)
        axes[0].legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, frameon=False, fontsize="small")
        axes[-1].set_xlabel("step (position in time order)")
        axes[0].set_ylim(0, top)
        return fig
    fig, x0 = ax.figure, 0
    for i, (rank, steps) in enumerate(per_rank):
        _draw_steps(ax, steps, x0, legend=not i, top=top, wait_label=wait_label)
        ax.annotate(f"rank {rank}", (x0, 0), xycoords=ax.get_xaxis_transform(), xytext=(2, -24),
                    textcoords="offset points", fontsize="small")
        x0 += len(steps) + max(1, len(rows) // 50)
    ax.set_ylim(0, top)
    ax.set_ylabel("step (s)")
    ax.set_xlabel("step (position in time order, ranks one after another)")
    ax.set_title(title)
    ax.legend(frameon=False, fontsize="small")
    return fig


def steady_state_window(frame: pd.DataFrame, steps: int = 4) -> Optional[tuple[int, int]]:
    """``(start_ns, end_ns)`` of a few consecutive training steps in steady state, for a timeline excerpt
    (``plot_timeline(frame, start_ns=..., end_ns=...)``) that shows every layer rather than the start-up.

    The rule:

    1. Steps are taken from the **lowest rank** that has any, as the step series marks them
       (:func:`~trace_merge.attribution.step_marks_df`): its app-layer ``Training Iteration`` rows, else its
       step-tagged compute rows (DLIO's ``TFFramework.compute``), else its rows with a step; a run of consecutive
       marking rows with the same epoch and step is one step (validation steps reusing the training steps'
       numbers at an epoch's end are steps of their own), its span ``[min start, max end]`` of those rows.
    2. Each epoch's **first step is skipped** (it pays for warm-up and the input pipeline's first fill);
       a candidate stretch is ``steps`` consecutive steps after it, from an epoch with at least ``steps + 1``
       steps.
    3. The stretch during which the most of its steps overlap **framework-layer** rows wins (a TF profile
       window may cover only some steps); on a tie (always so without a framework layer) the **last such
       epoch**, and within it the **earliest** stretch, i.e. the steps right after the skipped one.
    4. When no epoch has ``steps + 1`` steps, the epoch with the most steps gives its steps after the first
       (all of them when it has only one), at most ``steps``.

    Returns ``None`` when the frame has no steps.
    """
    if steps < 1 or not len(frame):
        return None
    return window_of_steps(step_marks_df(frame), frame[(frame["layer"] == "framework").to_numpy()], steps)


def window_of_steps(marks: pd.DataFrame, fw: pd.DataFrame, steps: int = 4) -> Optional[tuple[int, int]]:
    """:func:`steady_state_window` from the steps (:func:`~trace_merge.attribution.step_marks_df` of the ranks,
    the lowest one's are used) and the framework rows (``start_ns``, ``end_ns``)."""
    if steps < 1 or not len(marks):
        return None
    marks = marks[(marks["rank"] == marks["rank"].min()).to_numpy()]
    spans = pd.DataFrame({"epoch": marks["epoch"].astype("float64").to_numpy(),
                          "start_ns": marks["start_ns"].to_numpy(np.int64),
                          "end_ns": marks["end_ns"].to_numpy(np.int64)}).sort_values("start_ns", kind="stable",
                                                                                     ignore_index=True)
    fw_starts = fw["start_ns"].to_numpy(np.int64)
    by_start = np.argsort(fw_starts, kind="stable")
    # reach[k]: the latest end among the k framework rows that start first (k = 0: none, so never)
    reach = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(fw["end_ns"].to_numpy(np.int64)[by_start])]
    # a step overlaps the framework layer when some framework row starting before its end ends after its start
    before_end = np.searchsorted(fw_starts[by_start], spans["end_ns"].to_numpy(np.int64), side="left")
    spans["fw"] = reach[before_end] > spans["start_ns"].to_numpy(np.int64)
    epochs = list(spans.groupby("epoch", dropna=False, sort=False))  # in time order of their first step
    if not any(len(e) > steps for _, e in epochs):  # rule 4
        _, e = max(epochs, key=lambda item: len(item[1]))
        e = e.iloc[1:] if len(e) > 1 else e
        return int(e["start_ns"].iloc[0]), int(e["end_ns"].iloc[:steps].max())
    best = None
    for order, (_, e) in enumerate(epochs):
        if len(e) <= steps:
            continue
        fw_steps = np.convolve(e["fw"].to_numpy(int)[1:], np.ones(steps, dtype=int), mode="valid")
        first = int(np.argmax(fw_steps))  # the earliest of the stretches with the most framework steps
        score = (int(fw_steps[first]), order)
        if best is None or score > best[0]:
            best = (score, e.iloc[1 + first: 1 + first + steps])
    assert best is not None  # rule 4 returned unless some epoch has more than ``steps`` steps
    window = best[1]
    return int(window["start_ns"].iloc[0]), int(window["end_ns"].max())


def timeline_interactive(frame: pd.DataFrame, *, start_ns: Optional[int] = None, end_ns: Optional[int] = None,
                         max_events: int = 20000) -> Any:
    """A zoomable timeline (plotly; ``pip install .[notebooks]``): one lane per rank × layer, intervals coloured by
    cat as in :func:`plot_timeline`, hover showing name, duration, bytes and file. Pass the window of
    :func:`steady_state_window` for the steady state; drag to zoom, double-click to reset.
    """
    try:
        import plotly.graph_objects as go
    except ImportError as err:
        raise ImportError("timeline_interactive needs plotly: pip install .[notebooks]") from err
    fig = go.Figure()
    if not len(frame):
        return fig.update_layout(title="Timeline (no events)")
    lo, hi = _excerpt(frame, start_ns, end_ns, max_events)
    rows = frame[((frame["end_ns"] >= lo) & (frame["start_ns"] <= hi)).to_numpy()]
    lanes = [f"rank {r} · {layer}" for r, layer in zip(rows["rank"], as_text(rows["layer"]))]
    rows = rows.assign(_lane=lanes, _s=(np.maximum(rows["start_ns"].to_numpy(), lo) - lo) / 1e9,
                       _w=(np.minimum(rows["end_ns"].to_numpy(), hi) - np.maximum(rows["start_ns"].to_numpy(), lo))
                       / 1e9)
    order = sorted(set(lanes), key=lambda x: (int(x.split()[1]), x))
    for cat in PRIORITY[::-1]:
        part = rows[(as_text(rows["cat"]) == cat).to_numpy()]
        if not len(part):
            continue
        hover = [f"{n}<br>{d / 1e6:.3f} ms" + (f"<br>{int(b)} B" if pd.notna(b) else "") +
                 (f"<br>{f}" if pd.notna(f) else "")
                 for n, d, b, f in zip(as_text(part["name"]), part["dur_ns"], part["bytes"], part["file"])]
        fig.add_trace(go.Bar(x=part["_w"], base=part["_s"], y=part["_lane"], orientation="h", name=cat,
                             marker_color=CAT_COLOURS[cat], hovertext=hover, hoverinfo="text"))
    fig.update_layout(barmode="overlay", title=f"Timeline ({(hi - lo) / 1e9:.3g} s from the excerpt start)",
                      xaxis_title="seconds since excerpt start", yaxis_title="rank · layer",
                      height=200 + 28 * len(order),
                      yaxis={"categoryorder": "array", "categoryarray": order[::-1]})
    return fig
