"""The numbers of the original study (2018, NERSC Cori KNL + Lustre), to put beside a run's own.

HEP-CNN: 5 epochs, per-node read share of total time and aggregate read bandwidth, local and global shuffle.
Climate: the ablations at 64 nodes, seconds of the timer called "read" (and training per epoch in ``full``).
"""
from __future__ import annotations

import pandas as pd

#: nodes, read % of total (local, global), aggregate read bandwidth in GB/s (local, global)
HEPCNN_SCALING = pd.DataFrame(
    [(64, 3.60, 8.01, 9.9, 4.3), (128, 3.08, 7.72, 21.7, 8.8), (256, 3.17, 6.83, 44.2, 15.9),
     (512, 2.91, 6.16, 91.5, 30.9)],
    columns=["nodes", "local_read_pct", "global_read_pct", "local_bw_GB_per_s", "global_bw_GB_per_s"])

#: the climate ablations at 64 nodes: seconds of the "read" timer (None: not reported)
CLIMATE_ABLATION_64_NODES = pd.DataFrame(
    [("full", 1243.0, 4330.0), ("io-only", 199.0, None), ("no-io", 968.0, None)],
    columns=["mode", "read_s", "train_s_per_epoch"])


def hepcnn_side_by_side(ours: pd.DataFrame) -> pd.DataFrame:
    """The study's HEP-CNN table next to ours for the same columns.

    ``ours``: rows with ``ranks``, ``shuffle`` (local/global), ``study_read_pct`` and
    ``read_bandwidth_bytes_per_s`` (a sweep's ``comparison.json`` rows). Returns one row per (source, ranks or
    nodes) with ``local_read_pct``, ``global_read_pct``, ``local_bw_GB_per_s``, ``global_bw_GB_per_s``.
    """
    rows = []
    for n, part in ours.groupby("ranks", sort=True):
        row = {"source": "this run", "nodes": int(n)}
        for mode in ("local", "global"):
            one = part[part["shuffle"] == mode]
            row[f"{mode}_read_pct"] = float(one["study_read_pct"].iloc[0]) if len(one) else None
            row[f"{mode}_bw_GB_per_s"] = (float(one["read_bandwidth_bytes_per_s"].iloc[0]) / 1e9
                                         if len(one) and pd.notna(one["read_bandwidth_bytes_per_s"].iloc[0])
                                         else None)
        rows.append(row)
    study = HEPCNN_SCALING.assign(source="study (Cori, Lustre)")
    return pd.concat([study, pd.DataFrame(rows)], ignore_index=True)[
        ["source", "nodes", "local_read_pct", "global_read_pct", "local_bw_GB_per_s", "global_bw_GB_per_s"]]
