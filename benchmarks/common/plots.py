"""The sweep's figure: where the time went per point (trace_merge's breakdown plot), read bandwidth vs ranks against
ideal linear scaling from the smallest rank count (epoch 0 and later epochs apart), and the read share vs ranks."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from trace_merge.plots import CAT_COLOURS, SHUFFLE_COLOURS

#: what the bandwidth panel draws per shuffle mode: the first epoch (a cold node cache) and the later ones apart
_SERIES = (("epoch0_read_bw_MB_per_s", "epoch 0", "o"), ("later_read_bw_MB_per_s", "later epochs", "s"))


def bandwidth_vs_ranks(rows: Sequence[Mapping[str, Any]], ax: Any) -> None:
    """Aggregate read bandwidth (MB/s) per shuffle mode over ranks, epoch 0 and later epochs apart, each with its
    ideal linear line from the smallest rank count."""
    df = pd.DataFrame(rows)
    for mode, part in df.groupby("shuffle", sort=True):
        part = part.sort_values("ranks")
        for key, label, marker in _SERIES:
            have = part.dropna(subset=[key]) if key in part else part.iloc[:0]
            if not len(have):
                continue
            mbs = have[key].to_numpy(dtype=float)
            ranks = have["ranks"].to_numpy(dtype=float)
            colour = SHUFFLE_COLOURS.get(mode, CAT_COLOURS["other"])
            ax.plot(ranks, mbs, marker=marker, color=colour, label=f"{mode}, {label}")
            ax.plot(ranks, mbs[0] * ranks / ranks[0], linestyle="--", color=colour, alpha=0.5,
                    label=f"{mode}, {label}: ideal linear")
    ax.set_xlabel("ranks")
    ax.set_ylabel("aggregate read bandwidth (MB/s)")
    ax.set_title("Read bandwidth vs ranks (Σ bytes ÷ slowest rank's read time, per epoch)")
    if len(df):
        ax.set_xticks(sorted(df["ranks"].unique()))
        ax.legend(fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def read_share_vs_ranks(rows: Sequence[Mapping[str, Any]], ax: Any) -> None:
    """The study's read share (% of the training loop, mean over ranks) per shuffle mode over ranks."""
    df = pd.DataFrame(rows)
    key = "study_read_pct" if "study_read_pct" in df and df["study_read_pct"].notna().any() else "io_pct"
    df = df.dropna(subset=[key]) if key in df else df.iloc[:0]
    for mode, part in df.groupby("shuffle", sort=True):
        part = part.sort_values("ranks")
        ax.plot(part["ranks"], part[key], marker="o", color=SHUFFLE_COLOURS.get(mode, CAT_COLOURS["other"]),
                label=f"{mode} shuffle")
    ax.set_xlabel("ranks")
    ax.set_ylabel("read % of the training loop" if key == "study_read_pct" else "io % of wall time")
    ax.set_title("Read share vs ranks")
    if len(df):
        ax.set_xticks(sorted(df["ranks"].unique()))
        ax.legend(fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def sweep_figure(rows: Sequence[Mapping[str, Any]], breakdowns: Mapping[str, pd.DataFrame]) -> Any:
    """One breakdown panel per point (whole-run rows per rank), the bandwidth-vs-ranks panel (last but one) and the
    read-share-vs-ranks panel (last)."""
    from matplotlib.figure import Figure

    from trace_merge.plots import plot_breakdown

    n = len(breakdowns)
    fig = Figure(figsize=(10, 2.4 * n + 3.5 * 2), layout="constrained")
    grid = fig.add_gridspec(n + 2, 1, height_ratios=[1.0] * n + [1.6, 1.3])
    for i, (name, bd) in enumerate(breakdowns.items()):
        ax = fig.add_subplot(grid[i, 0])
        plot_breakdown(bd, ax=ax, totals=True)
        ax.set_title(f"{name}: where the time went (exclusive, per rank, whole run)", pad=22)
    bandwidth_vs_ranks(rows, fig.add_subplot(grid[n, 0]))
    read_share_vs_ranks(rows, fig.add_subplot(grid[n + 1, 0]))
    return fig
