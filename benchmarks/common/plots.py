"""The sweep's figure: where the time went per point (trace_merge's breakdown plot) and read bandwidth vs ranks
against ideal linear scaling from the smallest rank count."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd


def bandwidth_vs_ranks(rows: Sequence[Mapping[str, Any]], ax: Any) -> None:
    """Aggregate read bandwidth (MB/s) per shuffle mode over ranks, with the ideal line of each mode."""
    df = pd.DataFrame(rows).dropna(subset=["read_bandwidth_bytes_per_s"])
    for mode, part in df.groupby("shuffle", sort=True):
        part = part.sort_values("ranks")
        mbs = part["read_bandwidth_bytes_per_s"].to_numpy(dtype=float) / 1e6
        ranks = part["ranks"].to_numpy(dtype=float)
        line = ax.plot(ranks, mbs, marker="o", label=f"{mode} shuffle")[0]
        ideal = mbs[0] * ranks / ranks[0]
        ax.plot(ranks, ideal, linestyle="--", color=line.get_color(), alpha=0.6, label=f"{mode}: ideal linear")
    ax.set_xlabel("ranks")
    ax.set_ylabel("aggregate read bandwidth (MB/s)")
    ax.set_title("Read bandwidth vs ranks")
    if len(df):
        ax.set_xticks(sorted(df["ranks"].unique()))
        ax.legend(fontsize="small", frameon=False)


def sweep_figure(rows: Sequence[Mapping[str, Any]], breakdowns: Mapping[str, pd.DataFrame]) -> Any:
    """One breakdown panel per point (whole-run rows per rank) and the bandwidth-vs-ranks panel."""
    from matplotlib.figure import Figure

    from trace_merge.plots import plot_breakdown

    n = len(breakdowns)
    fig = Figure(figsize=(10, 2.4 * n + 3.5), layout="constrained")
    grid = fig.add_gridspec(n + 1, 1, height_ratios=[1.0] * n + [1.6])
    for i, (name, bd) in enumerate(breakdowns.items()):
        ax = fig.add_subplot(grid[i, 0])
        plot_breakdown(bd, ax=ax, totals=True)
        ax.set_title(f"{name}: where the time went (exclusive, per rank, whole run)", pad=22)
    bandwidth_vs_ranks(rows, fig.add_subplot(grid[n, 0]))
    return fig
