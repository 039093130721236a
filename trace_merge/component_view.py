"""Component views: a fixed table of named components of app phases as shares of a total phase, per rank (and
epoch) -- a study's own phase taxonomy (:class:`ComponentView`), given to the summary by whoever knows the phase
names. :func:`component_view_df` is the kernel; :func:`view_df` the rows of the ranks that have the total phase.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.intervals import intersect_intervals, merge_intervals, subtract_intervals, union_of
from trace_merge.schema import as_text

_I8 = np.int64
_EMPTY = np.zeros(0, dtype=_I8)


@dataclass(frozen=True)
class ComponentView:
    """A phase taxonomy's table (:func:`component_view_df`): ``components`` in order, each ``(label, phases)`` and
    each minus the ones before it, as shares of the ``total`` phase; and how the outputs name it.

    Attributes
    ----------
    title
        What the view is ("the original study's view").
    legend
        What its components are, for the text outputs' heading ("Read = HDF5 File Read, ...").
    labels
        Their short names, for the report's heading ("Read, Load − Read, ...").
    headline
        The component whose mean share over ranks the run's metrics show (``study_read_pct``).
    """

    components: tuple[tuple[str, tuple[str, ...]], ...]
    total: str
    title: str
    legend: str
    labels: str
    headline: str

    def phases(self) -> list[str]:
        """The phases the view reads: the total, then every component's."""
        return [self.total, *(name for _, names in self.components for name in names)]


def view_df(frame: pd.DataFrame, view: Optional[ComponentView], per_epoch: bool = False) -> pd.DataFrame:
    """:func:`component_view_df` of ``view`` per rank (and epoch) over the ranks with a ``view.total`` phase (no
    rows without one, nor without a view)."""
    if view is None:
        return component_view_df(frame.iloc[:0], (), "", per_epoch)
    if not len(frame):
        return component_view_df(frame, view.components, view.total, per_epoch)
    # masks first, one selection of the rows wanted (usually none): copying every app row out cost more
    app = (frame["layer"] == "app").to_numpy()
    rank = frame["rank"].to_numpy()
    with_total = np.unique(rank[app & (frame["name"] == view.total).to_numpy()])
    return component_view_df(frame[app & np.isin(rank, with_total)], view.components, view.total, per_epoch)


def component_view_df(frame: pd.DataFrame, components: "Sequence[tuple[str, Sequence[str]]]",
                      total_phase: str, per_epoch: bool = False) -> pd.DataFrame:
    """Seconds and shares of named components of app phases per rank (and epoch), against a total phase.

    Each component is the union of its phases' intervals on the rank minus everything the components before it
    took, so ``[("read", ["Read"]), ("load", ["Load"])]`` gives load = Load − Read (a load phase that holds the
    read, as the original study computed its table). ``other`` is the total phase's union minus all components.
    Components are clipped to the total phase; with ``per_epoch`` rows are per epoch and clipped to that epoch's part
    of it.
    A kernel: one rank's rows or many, rows per (rank[, epoch]).

    Returns
    -------
    pandas.DataFrame
        ``rank`` (, ``epoch``), ``total_s``, ``<component>_s`` for each component and ``other_s``, and
        ``<component>_pct`` / ``other_pct`` (% of ``total_s``, summing to 100).
    """
    labels = [label for label, _ in components]
    keys = ["rank", "epoch"] if per_epoch else ["rank"]
    app = frame[frame["layer"] == "app"] if len(frame) else frame
    rows = []
    if len(app):
        names = as_text(app["name"]).to_numpy()
        s, e = app["start_ns"].to_numpy(dtype=_I8), app["end_ns"].to_numpy(dtype=_I8)
        rank = app["rank"].to_numpy(dtype=_I8)
        epoch = app["epoch"].to_numpy(dtype=_I8, na_value=-1)
        is_total = names == total_phase
        of_component = [np.isin(names, list(phases)) for _, phases in components]
        for r in np.unique(rank):
            on_rank = rank == r
            total = merge_intervals(s[on_rank & is_total], e[on_rank & is_total])
            # each component's merged list once per rank; the windows below only clip it
            merged = [merge_intervals(s[on_rank & m], e[on_rank & m]) for m in of_component]
            windows: list[tuple[Optional[int], tuple[np.ndarray, np.ndarray]]] = [(None, total)]
            if per_epoch:
                tagged = on_rank & (epoch >= 0)
                windows = []
                for ep in np.unique(epoch[tagged]):
                    m = tagged & (epoch == ep)
                    span = merge_intervals([s[m].min()], [e[m].max()])
                    windows.append((int(ep), intersect_intervals(*total, *span)))
            for ep, window in windows:
                taken = (_EMPTY, _EMPTY)
                row: dict = {"rank": int(r), **({"epoch": ep} if per_epoch else {}),
                             "total_s": float((window[1] - window[0]).sum()) / 1e9}
                for label, component in zip(labels, merged):
                    mine = subtract_intervals(*intersect_intervals(*component, *window), *taken)
                    row[f"{label}_s"] = float((mine[1] - mine[0]).sum()) / 1e9
                    taken = union_of(taken, mine)
                row["other_s"] = row["total_s"] - sum(row[f"{x}_s"] for x in labels)
                rows.append(row)
    cols = [*keys, "total_s", *(f"{x}_s" for x in labels), "other_s"]
    out = pd.DataFrame(rows, columns=cols)
    for x in [*labels, "other"]:
        t = out["total_s"].to_numpy(dtype=np.float64)
        out[f"{x}_pct"] = np.where(t > 0, 100.0 * out[f"{x}_s"].to_numpy(dtype=np.float64) / np.where(t > 0, t, 1),
                                   np.nan)
    return out
